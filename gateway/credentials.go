package gateway

import (
	"net/http"
	"strings"
	"time"

	"github.com/linkgate/linkgate/problem"
)

// refuseDoubleAuthorization answers 400 to a request with more than one
// Authorization field. It is a singleton field (RFC 9110 section 11.6.2),
// and two of them leave who the client is to whoever reads them: the
// gateway's token check reads the first, an upstream may read the last,
// or join them. One map lookup a request.
func refuseDoubleAuthorization(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.Header["Authorization"]) > 1 {
			problem.Write(w, http.StatusBadRequest, "the request has more than one Authorization field; it may have one (RFC 9110 section 11.6.2)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// withhold removes from a request on its way upstream an Authorization
// field that holds the stats token or the admin token, as the bearer
// token or as the whole field: the gateway's own credentials never reach
// an upstream (a route's pool may be a customer's server), whoever sent
// them and wherever (a dashboard's script that adds the token to every
// request of the stats host, a request under stats.prefix on a host that
// is not stats.host). The request is proxied without it rather than
// refused: it is otherwise the upstream's to answer, and a refusal would
// tell anyone guessing at tokens, on every proxied path, that a guess was
// right. The common request, without Authorization, costs one map lookup;
// one with it, a comparison of its length with the tokens', and of its
// bytes in time that does not depend on where they differ.
func (g *Gateway) withhold(statsToken, adminToken string, next http.Handler) http.Handler {
	if statsToken == "" && adminToken == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header["Authorization"]; len(v) == 1 {
			if which := gatewayToken(v[0], statsToken, adminToken); which != "" {
				delete(r.Header, "Authorization")
				if n, ok := g.withheld.Allow(which, time.Now()); ok {
					g.log.Warn("an Authorization field holding the "+which+" was removed before proxying: the gateway's tokens never go upstream", "host", r.Host, "path", r.URL.Path, "suppressed", n)
				}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// gatewayToken says which of the gateway's tokens the Authorization value
// v holds ("stats token", "admin token"), "" for neither: as its
// credentials after a scheme (Bearer, in any case, or another), or as the
// whole value.
func gatewayToken(v, statsToken, adminToken string) string {
	v = strings.TrimSpace(v)
	cred := v
	if _, c, ok := strings.Cut(v, " "); ok {
		cred = strings.TrimSpace(c)
	}
	for _, s := range [...]string{v, cred} {
		switch {
		case sameToken(s, statsToken):
			return "stats token"
		case sameToken(s, adminToken):
			return "admin token"
		}
	}
	return ""
}

// sameToken reports whether got is want, a token that is not empty,
// comparing their bytes in time that does not depend on where they
// differ (crypto/subtle's, without converting the strings to slices).
func sameToken(got, want string) bool {
	if want == "" || len(got) != len(want) {
		return false
	}
	var d byte
	for i := range len(want) {
		d |= got[i] ^ want[i]
	}
	return d == 0
}
