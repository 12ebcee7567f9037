package gateway

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/cidroute"
	"github.com/linkgate/linkgate/internal/metric"
	"github.com/linkgate/linkgate/ongoing"
)

// metrics are the gateway's own: requests, reloads, config generation.
type metrics struct {
	requests   *prometheus.CounterVec
	duration   prometheus.Histogram
	reloads    *prometheus.CounterVec
	generation prometheus.Gauge
	upgrades   *prometheus.CounterVec
	relay      *relayCollector
}

// relayCollector reports the QUIC datagrams of the process this one
// replaced that this one read, once conn is set (package cidroute).
type relayCollector struct {
	desc *prometheus.Desc
	conn atomic.Pointer[cidroute.Conn]
}

func (c *relayCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *relayCollector) Collect(ch chan<- prometheus.Metric) {
	var relayed, dropped uint64
	if conn := c.conn.Load(); conn != nil {
		relayed, dropped = conn.Relayed(), conn.Dropped()
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(relayed), "relayed")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(dropped), "dropped")
}

func newMetrics(reg prometheus.Registerer) *metrics {
	s := metric.With(reg)
	m := &metrics{
		requests:   s.CounterVec("linkgate_requests_total", "Client requests answered, by status class.", "class"),
		duration:   s.Histogram("linkgate_request_duration_seconds", "Time to answer a client request.", []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}),
		reloads:    s.CounterVec("linkgate_config_reloads_total", "Config reloads, by result (ok or failed).", "result"),
		generation: s.Gauge("linkgate_config_generation", "Generation of the running config: 1 at start, +1 per successful reload."),
		upgrades:   s.CounterVec("linkgate_upgrades_total", "Binary upgrades (SIGUSR2) this process started, by result (ok: the new process serves; failed: this one serves on).", "result"),
		relay: &relayCollector{desc: prometheus.NewDesc("linkgate_http3_relayed_packets_total",
			"QUIC datagrams of the process this one replaced in a binary upgrade, read while that one finished its connections: relayed to it, or dropped (the relay full).",
			[]string{"result"}, nil)},
	}
	reg.MustRegister(m.relay)
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
			start := ongoing.Start(r.Context())
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
