package proxy

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the proxy's Prometheus collectors. Create them once per process
// with NewMetrics and pass the same *Metrics to every Proxy built on config
// reload. A nil *Metrics records nothing. Safe for concurrent use.
//
// Per-target series are labelled with the target URL as configured, so the
// label cardinality is the number of targets. A target's series are deleted
// when the last Proxy using it is closed.
type Metrics struct {
	duration *prometheus.HistogramVec // target
	healthy  *prometheus.GaugeVec     // target
	opened   prometheus.Counter
	retries  prometheus.Counter
	errors   *prometheus.CounterVec // reason

	mu   sync.Mutex
	refs map[string]int // target -> live proxies using it
}

// Reasons a proxied request failed, the "reason" label of
// linkgate_upstream_errors_total.
const (
	reasonUnreachable = "unreachable" // no healthy target, or connecting failed
	reasonTimeout     = "timeout"     // no response headers in time
	reasonFailed      = "failed"      // the connection broke after the request was sent
	reasonBusy        = "busy"        // every connection the target may have was in use (503)
)

// NewMetrics creates the collectors and registers them with reg; a nil reg
// leaves them unregistered.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "linkgate_upstream_duration_seconds",
			Help:    "Time from sending a request upstream to receiving its response headers, per target.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"target"}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "linkgate_upstream_healthy",
			Help: "1 when the upstream target is in the balancing pool, 0 when it is taken out.",
		}, []string{"target"}),
		opened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "linkgate_upstream_connections_opened_total",
			Help: "Upstream TCP connections opened, by requests and health checks; stays near the client concurrency when keep-alive pooling works.",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "linkgate_upstream_retries_total",
			Help: "Requests sent to another target after connecting to the first one failed.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "linkgate_upstream_errors_total",
			Help: "Proxied requests answered by the gateway itself (502/503/504), by reason.",
		}, []string{"reason"}),
		refs: map[string]int{},
	}
	for _, r := range []string{reasonUnreachable, reasonTimeout, reasonFailed, reasonBusy} {
		m.errors.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.duration, m.healthy, m.opened, m.retries, m.errors)
	}
	return m
}

// acquire returns the series of target, counting one more proxy using it.
func (m *Metrics) acquire(target string) (prometheus.Observer, prometheus.Gauge) {
	if m == nil {
		return nil, nil
	}
	m.mu.Lock()
	m.refs[target]++
	m.mu.Unlock()
	return m.duration.WithLabelValues(target), m.healthy.WithLabelValues(target)
}

// release drops target's series once no proxy uses it.
func (m *Metrics) release(target string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.refs[target]--; m.refs[target] > 0 {
		return
	}
	delete(m.refs, target)
	m.duration.DeleteLabelValues(target)
	m.healthy.DeleteLabelValues(target)
}

func (m *Metrics) connOpened() {
	if m != nil {
		m.opened.Inc()
	}
}

func (m *Metrics) retried() {
	if m != nil {
		m.retries.Inc()
	}
}

func (m *Metrics) failed(reason string) {
	if m != nil {
		m.errors.WithLabelValues(reason).Inc()
	}
}
