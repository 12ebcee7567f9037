package edge

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/internal/metric"
)

// Metrics are the edge's Prometheus collectors. The gateway registers them
// once, whether TLS is on or not, so that its metrics are the same set in
// every config; the edge it builds reports through them.
type Metrics = metrics

// metrics are the edge's Prometheus collectors.
type metrics struct {
	edge       atomic.Pointer[Edge]   // whose certificates the expiry gauge reports
	handshakes *prometheus.CounterVec // result: ok, failed, timeout
	decisions  *prometheus.CounterVec // decision: allowed, denied, limited, boxed, stored, ask_failed, unavailable
	asks       *prometheus.CounterVec // answer: allow, deny, error
	issuance   *prometheus.CounterVec // kind: obtain, renew; result: started, ok, failed, capped
	reloads    *prometheus.CounterVec // result: ok, failed (static certificate files)
}

// NewMetrics returns the edge's collectors, registered with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	s := metric.With(reg)
	m := &metrics{
		handshakes: s.CounterVec("linkgate_tls_handshakes_total", "TLS handshakes on the client listener, over TCP and QUIC (HTTP/3), by result (ok, failed, timeout).", "result"),
		decisions:  s.CounterVec("linkgate_tls_on_demand_decisions_total", "On-demand decisions for names without a certificate in memory: allowed, denied, limited (over handshakes_per_client), boxed (the client in the penalty box of a rule marked edge), stored (ask failed, a valid stored certificate served), ask_failed, unavailable (the certificate storage not connected yet).", "decision"),
		asks:       s.CounterVec("linkgate_tls_ask_requests_total", "Requests to server.tls.on_demand.ask, by answer (allow, deny, error).", "answer"),
		issuance:   s.CounterVec("linkgate_tls_issuance_total", "ACME certificate issuance, by kind (obtain, renew) and result (started, ok, failed, capped by orders_per_hour or its share of a client or registered domain).", "kind", "result"),
		reloads:    s.CounterVec("linkgate_tls_certificate_reloads_total", "Reloads of the static certificate files after a change, by result.", "result"),
	}
	expiry := prometheus.NewDesc("linkgate_tls_certificate_expiry_timestamp_seconds",
		"When each certificate the gateway serves expires (Unix time), by name and source (static, acme).", []string{"name", "source"}, nil)
	if reg != nil {
		reg.MustRegister(&expiryCollector{desc: expiry, m: m})
	}
	return m
}

// Handshake counts a TLS handshake made outside the edge's listener
// (HTTP/3's, in QUIC) by its result: ok, failed or timeout.
func (m *Metrics) Handshake(result string) { m.handshakes.WithLabelValues(result).Inc() }

// expiryCollector reports the expiry of every certificate listed by
// Certificates, at scrape time.
type expiryCollector struct {
	desc *prometheus.Desc
	m    *metrics
}

func (c *expiryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *expiryCollector) Collect(ch chan<- prometheus.Metric) {
	e := c.m.edge.Load()
	if e == nil {
		return
	}
	seen := map[[2]string]bool{}
	for _, ci := range e.Certificates() {
		if ci.NotAfter.IsZero() {
			continue
		}
		for _, n := range ci.Names {
			k := [2]string{n, ci.Source}
			if seen[k] {
				continue
			}
			seen[k] = true
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(ci.NotAfter.Unix()), n, ci.Source)
		}
	}
}
