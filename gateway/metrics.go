package gateway

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/ongoing"
)

// metrics are the gateway's own: requests, reloads, config generation.
type metrics struct {
	requests   *prometheus.CounterVec
	duration   prometheus.Histogram
	reloads    *prometheus.CounterVec
	generation prometheus.Gauge
	upgrades   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "linkgate_requests_total", Help: "Client requests answered, by status class.",
		}, []string{"class"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "linkgate_request_duration_seconds", Help: "Time to answer a client request.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "linkgate_config_reloads_total", Help: "Config reloads, by result (ok or failed).",
		}, []string{"result"}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "linkgate_config_generation", Help: "Generation of the running config: 1 at start, +1 per successful reload.",
		}),
		upgrades: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "linkgate_upgrades_total", Help: "Binary upgrades (SIGUSR2) this process started, by result (ok: the new process serves; failed: this one serves on).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.requests, m.duration, m.reloads, m.generation, m.upgrades)
	for _, c := range []string{"1xx", "2xx", "3xx", "4xx", "5xx"} {
		m.requests.WithLabelValues(c)
	}
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("failed")
	m.upgrades.WithLabelValues("ok")
	m.upgrades.WithLabelValues("failed")
	return m
}

var classes = [...]string{"1xx", "1xx", "2xx", "3xx", "4xx", "5xx"}

// middleware counts every answer by status class and, when access is not
// nil, writes its access log line: with the status ongoing.Recorder.Final
// gives, 499 (4xx) for a request whose client left before its answer. It is the outermost middleware but the
// request id's: it makes the request's one ongoing.StatusWriter, which the
// limiter and the visit counter reuse.
func (m *metrics) middleware(access *accessLog) func(http.Handler) http.Handler {
	counters := [len(classes)]prometheus.Counter{}
	for i, c := range classes {
		counters[i] = m.requests.WithLabelValues(c)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			ww := ongoing.StatusWriter(w)
			var rec *accessRecord
			if access != nil {
				r, rec = access.begin(r)
			}
			next.ServeHTTP(ww, r)
			status := ww.Final(r)
			if c := status / 100; c >= 1 && c <= 5 {
				counters[c].Inc()
			}
			d := time.Since(start)
			m.duration.Observe(d.Seconds())
			if access != nil {
				access.write(r, rec, status, ww.BytesWritten(), d)
			}
		})
	}
}
