// Package header reads request and response header maps on the hot path.
package header

import "net/http"

// First is h.Get(name) for a name in canonical form ("User-Agent"),
// without Get's canonicalization of it on every call.
func First(h http.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}
