package tracing_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/tracing"
)

// BenchmarkStartRequest is what tracing adds to a request that does not
// reach the upstream, by the sample: its span started and ended, its
// traceparent set for the upstream, an untrusted client's removed. With
// sample 1 the span is also queued for export to a collector on loopback
// that takes every batch (the attributes the gateway sets are not
// included: see BenchmarkServeVisitTracing for the whole request).
func BenchmarkStartRequest(b *testing.B) {
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(collector.Close)
	for _, bc := range []struct {
		name   string
		sample float64
	}{{"sample=0", 0}, {"sample=0.01", 0.01}, {"sample=1", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			c := tracing.DefaultConfig()
			c.OTLPEndpoint, c.Sample = collector.URL, bc.sample
			p, err := tracing.Compile(c, func(string) string { return "" })
			if err != nil {
				b.Fatal(err)
			}
			tr, err := tracing.Start(p, "bench", tracing.NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { tr.Shutdown(context.Background()) })
			r := httptest.NewRequest("GET", "/abc123", nil)
			r.Header.Set("Traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
			b.ReportAllocs()
			for b.Loop() {
				_, span := tr.StartRequest(r, false)
				span.End()
			}
		})
	}
}
