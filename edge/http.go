package edge

import (
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/linkgate/linkgate/problem"
)

// RedirectHandler serves the plain HTTP listener (server.http_listen): ACME
// HTTP-01 challenges under /.well-known/acme-challenge/, and for anything
// else a 308 to the same host, path and query on https:// (the TLS
// listener's port when it is not 443). 308, not 301, so that a POST stays a
// POST (RFC 9110 section 15.4.9). tlsPort is the TLS listener's port.
func (e *Edge) RedirectHandler(tlsPort int) http.Handler {
	redirect := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if host == "" || strings.ContainsAny(host, "/\\@ ") {
			problem.Write(w, http.StatusBadRequest, "the request has no valid Host to redirect to https://")
			return
		}
		if strings.Contains(host, ":") {
			host = "[" + host + "]" // IPv6 literal
		}
		if tlsPort != 443 && tlsPort != 0 {
			host += ":" + strconv.Itoa(tlsPort)
		}
		target := "https://" + host + r.URL.RequestURI()
		if r.URL.IsAbs() || !strings.HasPrefix(r.URL.RequestURI(), "/") {
			target = "https://" + host + "/"
		}
		w.Header().Set("Location", target)
		w.WriteHeader(http.StatusPermanentRedirect)
	})
	if e.issuer == nil {
		return redirect
	}
	return e.issuer.HTTPChallengeHandler(redirect)
}

// HSTS adds Strict-Transport-Security to responses on TLS connections for
// the hosts server.tls.hsts names (RFC 6797 section 7.2: never on plain
// HTTP). It reads the current settings on every request.
func (e *Edge) HSTS(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil {
			if rules := e.plan.Load().hsts; len(rules) > 0 {
				host := strings.ToLower(strings.TrimSuffix(hostOnly(r.Host), "."))
				for _, rule := range rules {
					if matchHost(rule.hosts, host) {
						w.Header().Set("Strict-Transport-Security", rule.header)
						break
					}
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

func hostOnly(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		return host
	}
	return h
}
