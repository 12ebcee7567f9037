package gateway

import (
	"crypto/rand"
	"net/http"
	"strings"

	"github.com/linkgate/linkgate/problem"
)

// loopHeader carries the mark a gateway sets on every request it proxies:
// "Linkgate-Loop: <token>", the token its own, so that a request that
// comes back to it (a target that is the gateway itself, behind a
// balancer, a DNS name or another gateway that leads back) is recognized
// and refused with 508 instead of being proxied again, and again, until
// the process runs out of connections. Marks of other hops are kept, so
// a loop through several gateways is recognized by the first one too.
//
// Not Via (RFC 9110 section 7.6.3), which the gateway could be expected
// to send: an upstream's behaviour depends on it (nginx's gzip_proxied,
// off by default, stops compressing the answers to any request with a Via).
const loopHeader = "Linkgate-Loop"

// loopMark is a gateway's mark: a token of 128 random bits, made anew for
// every Gateway (so for every process), never written to a client. What a
// client could do with it, had it learned it from an upstream that echoes
// request headers, is get 508s for its own requests: the mark refuses
// only the requests that carry it, costs the gateway one header lookup,
// and nothing a client sends can put it on another client's request. A
// client sending marks of its own, or a false one, gets them passed on as
// any header, and its request is served.
type loopMark struct {
	token string
	vals  []string // {token}: the header's value when the request has none
}

func newLoopMark() loopMark {
	t := rand.Text() // 26 characters of base32, 130 bits
	return loopMark{token: t, vals: []string{t}}
}

// cameBack reports whether r carries m: the gateway proxied it itself.
func (m loopMark) cameBack(r *http.Request) bool {
	for _, v := range r.Header[loopHeader] {
		if strings.Contains(v, m.token) {
			return true
		}
	}
	return false
}

// refuse answers 508 Loop Detected (RFC 5842 section 7.2) to a request that
// carries m: the gateway sent it, and it came back. Nothing is proxied,
// limited or counted.
func (m loopMark) refuse(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m.cameBack(r) {
			w.Header().Set("Cache-Control", "no-store")
			problem.Write(w, http.StatusLoopDetected, "this request came back to the gateway that proxied it: an upstream target leads back to the gateway (upstream.targets, routes[].upstream.targets)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// set puts m on the request going to next, the proxy, after the marks r
// came with; r's header is as it was when next returns. The header map is
// the request's own (the request id is set in it the same way), and a
// request without marks gets m's value slice, shared and never written:
// no allocation.
func (m loopMark) set(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		prior, had := r.Header[loopHeader]
		if had {
			r.Header[loopHeader] = append(prior[:len(prior):len(prior)], m.token)
		} else {
			r.Header[loopHeader] = m.vals
		}
		defer func() {
			if had {
				r.Header[loopHeader] = prior
			} else {
				delete(r.Header, loopHeader)
			}
		}()
		next.ServeHTTP(w, r)
	})
}
