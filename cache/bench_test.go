package cache_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/linkgate/linkgate/cache"
)

// headerWriter is a ResponseWriter that keeps the status and fields and
// drops the body: what a hit costs, without a connection.
type headerWriter struct {
	h      http.Header
	status int
}

func (w *headerWriter) Header() http.Header         { return w.h }
func (w *headerWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *headerWriter) WriteHeader(s int)           { w.status = s }

// BenchmarkHit is a redirect answered from the cache: the lookup, the
// answer's fields copied to the client's with its Age, the result noted
// for the access log and /metrics. "nvs" is a hit through a path's
// No-Vary-Search note (three lookups, the query read as a form).
func BenchmarkHit(b *testing.B) {
	for _, bc := range []struct{ name, path, nvs string }{
		{"plain", "/abc123", ""},
		{"nvs", "/abc123?utm_source=news&id=7", `params=("utm_source")`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p, err := cache.Compile("cache", cache.DefaultConfig())
			if err != nil {
				b.Fatal(err)
			}
			st := cache.NewStore(64<<20, cache.NewMetrics(nil), nil)
			h := st.Handler(p, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("CDN-Cache-Control", "max-age=3600")
				w.Header().Set("Cache-Control", "no-store")
				w.Header().Set("Location", "https://example.com/some/long/destination")
				if bc.nvs != "" {
					w.Header().Set("No-Vary-Search", bc.nvs)
				}
				w.Header().Set("Content-Length", "0")
				w.WriteHeader(http.StatusFound)
			}))
			req := httptest.NewRequest(http.MethodGet, "http://sho.rt"+bc.path, nil)
			var res cache.Result
			req = req.WithContext(cache.WithResult(req.Context(), &res))
			w := &headerWriter{h: http.Header{}}
			h.ServeHTTP(w, req)
			b.ReportAllocs()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, req)
				if res != cache.Hit {
					b.Fatalf("result %v, want hit", res)
				}
			}
		})
	}
}
