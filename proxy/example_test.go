package proxy_test

import (
	"log/slog"
	"net/http"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/proxy"
)

// The gateway creates the Metrics once, builds a Proxy per upstream config
// (again on each reload that changes it, closing the old one after the swap),
// mounts it as the fallback handler and asks it for readiness.
func ExampleNew() {
	m := proxy.NewMetrics(prometheus.DefaultRegisterer)
	cfg := proxy.DefaultConfig()
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	p, err := proxy.New(cfg, trusted, m, slog.Default())
	if err != nil {
		panic(err)
	}
	defer p.Close()

	mux := http.NewServeMux()
	mux.Handle("/", p)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !p.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	_ = mux
}
