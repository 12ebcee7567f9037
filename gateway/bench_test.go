package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/gateway"
)

// BenchmarkServeVisit is one redirect through the whole gateway, as every
// visit to a link goes: the metrics middleware, a rule with count_status
// (the limiter waits for the upstream's status), the visit counter and the
// proxy, to an upstream in the same process. Allocations include the
// proxy's round trip and the upstream's handling.
func BenchmarkServeVisit(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		w.Header().Set("Location", "https://example.com/some/long/url")
		w.WriteHeader(http.StatusFound)
	}))
	defer up.Close()
	cfg, err := config.Parse(fmt.Appendf(nil, `server: {listen: 127.0.0.1:0}
admin: {listen: ""}
upstream: {targets: [%s]}
rules:
  - {name: visits, match: {path: "/{short_key}"}, key: ip, limits: [1000000000/s], count_status: [302]}
analytics:
  embedded: {path: %s}
`, up.URL, filepath.Join(b.TempDir(), "analytics")))
	if err != nil {
		b.Fatal(err)
	}
	plan, err := gateway.Compile(cfg, getenv)
	if err != nil {
		b.Fatal(err)
	}
	g, err := gateway.New(plan, gateway.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close(context.Background())
	req := httptest.NewRequest("GET", "/abc123", nil)
	w := &headerWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		w.status = 0
		g.ServeHTTP(w, req)
		if w.status != http.StatusFound {
			b.Fatalf("status %d, want 302", w.status)
		}
	}
}

// headerWriter is a ResponseWriter that keeps the status and drops the body.
type headerWriter struct {
	h      http.Header
	status int
}

func (w *headerWriter) Header() http.Header { return w.h }
func (w *headerWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(p), nil
}
func (w *headerWriter) WriteHeader(s int) {
	if w.status == 0 {
		w.status = s
	}
}
