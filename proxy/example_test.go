package proxy_test

import (
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/proxy"
)

// The gateway creates the Metrics once, builds a Proxy per upstream config
// (again on each reload that changes it, closing the old one after the swap),
// mounts it as the fallback handler and asks it for readiness.
func ExampleNew() {
	m := proxy.NewMetrics(prometheus.DefaultRegisterer)
	cfg := proxy.DefaultConfig()
	cfg.Targets = []string{"http://127.0.0.1:8081"}
	trust, err := forwarded.Parse([]string{"127.0.0.1/32"})
	if err != nil {
		panic(err)
	}
	// Compile decides; New cannot refuse what Compile accepted.
	plan, err := proxy.Compile(cfg, trust, forwarded.NewPolicy([]string{"X-User-ID"}, false))
	if err != nil {
		panic(err)
	}
	p := proxy.New(plan, m, slog.Default())
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
