// Package bearer checks the bearer tokens of the admin API and the stats
// API: one check for both listeners, so that they cannot drift apart.
package bearer

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"
)

// Match reports whether r's Authorization header carries token as a
// bearer token. The scheme is case-insensitive (RFC 9110 §11.1: "bearer"
// is "Bearer"), one or more spaces may follow it, and the tokens are
// compared in constant time on their digests, so that neither how much of
// the token matched nor its length leaks. An empty token never matches.
func Match(r *http.Request, token string) bool {
	if token == "" {
		return false
	}
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	a, b := sha256.Sum256([]byte(strings.TrimSpace(got))), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// Challenge sets the RFC 6750 WWW-Authenticate challenge of a 401 answer
// for realm, with error="invalid_token" when r carried credentials.
func Challenge(w http.ResponseWriter, r *http.Request, realm string) {
	c := `Bearer realm="` + realm + `"`
	if r.Header.Get("Authorization") != "" {
		c += `, error="invalid_token"`
	}
	w.Header().Set("WWW-Authenticate", c)
}
