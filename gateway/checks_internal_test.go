package gateway

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/linkgate/linkgate/forwarded"
)

// BenchmarkRequestChecks is what the checks every request passes cost
// together, apart from the round trip BenchmarkServeVisit measures: the
// loop mark refused and set, one Authorization field, a client a trusted
// proxy names, the gateway's tokens withheld; for a request from the
// internet without credentials, one with a user's bearer token, and one
// from a trusted proxy. "map" is a baseline on the same machine: a lookup
// of one header, set and deleted.
func BenchmarkRequestChecks(b *testing.B) {
	trust, err := forwarded.Parse([]string{"10.0.0.0/8"})
	if err != nil {
		b.Fatal(err)
	}
	g := &Gateway{log: slog.New(slog.DiscardHandler), loop: newLoopMark()}
	end := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	h := g.loop.refuse(refuseDoubleAuthorization(refuseUnknownClient(trust)(g.withhold("stats-s3cret-token", "admin-s3cret-token", g.loop.set(end)))))
	b.Run("map", func(b *testing.B) {
		r := httptest.NewRequest("GET", "/abc123", nil)
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := r.Header["Authorization"]; !ok {
				r.Header["X"] = nil
				delete(r.Header, "X")
			}
		}
	})
	for _, c := range []struct {
		name   string
		remote string
		hdr    []string
	}{
		{"plain", "203.0.113.5:1234", nil},
		{"user token", "203.0.113.5:1234", []string{"Authorization", "Bearer user-token-0123456789abcdef"}},
		{"trusted proxy", "10.1.1.1:80", []string{"X-Forwarded-For", "198.51.100.1, 10.2.2.2"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := httptest.NewRequest("GET", "/abc123", nil)
			r.RemoteAddr = c.remote
			for i := 0; i+1 < len(c.hdr); i += 2 {
				r.Header.Set(c.hdr[i], c.hdr[i+1])
			}
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		})
	}
}
