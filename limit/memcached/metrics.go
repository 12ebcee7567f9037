package memcached

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/internal/metric"
)

// Metrics are the collectors of the memcached store. Create them once per
// process with NewMetrics and pass them to every Store built on reload. A nil
// *Metrics records nothing. Metrics is safe for concurrent use.
type Metrics struct {
	breakerOpen *prometheus.GaugeVec   // server
	errors      *prometheus.CounterVec // server, op
	ops         *prometheus.CounterVec // op
	pending     prometheus.Gauge
	dropped     prometheus.Counter
	dials       *prometheus.CounterVec // server
}

// The kinds of memcached operation, the "op" label.
const (
	opGet    = "get"
	opIncr   = "incr"
	opAdd    = "add"
	opDelete = "delete"
	opProbe  = "probe"
	opSet    = "set" // a penalty box put (box.go)
)

// NewMetrics creates the collectors and registers them with reg (none if reg
// is nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	s := metric.With(reg)
	m := &Metrics{
		breakerOpen: s.GaugeVec("linkgate_memcached_breaker_open", "1 while the circuit breaker of a memcached server is open: operations on it fail at once.", "server"),
		errors:      s.CounterVec("linkgate_memcached_errors_total", "Failed memcached operations (timeouts, refused or broken connections, server errors), by server and operation.", "server", "op"),
		ops:         s.CounterVec("linkgate_memcached_ops_total", "memcached operations sent, by kind (a get reads all buckets of a check).", "op"),
		pending:     s.Gauge("linkgate_memcached_pending_deltas", "Bucket increments counted locally and not yet acknowledged by memcached."),
		dropped:     s.Counter("linkgate_memcached_dropped_deltas_total", "Pending bucket increments dropped, oldest first, because memcached was unavailable and the buffer was full."),
		dials:       s.CounterVec("linkgate_memcached_dials_total", "Connections dialed to a memcached server, those dialed ahead of need at start and after an outage included. Growing under steady load: max_idle_conns is below the checks in flight.", "server"),
	}
	return m
}

// counter returns the ops counter of kind op, or nil.
func (m *Metrics) opCounter(op string) prometheus.Counter {
	if m == nil {
		return nil
	}
	return m.ops.WithLabelValues(op)
}

// dialCounter returns the dials counter of server, or nil.
func (m *Metrics) dialCounter(server string) prometheus.Counter {
	if m == nil {
		return nil
	}
	return m.dials.WithLabelValues(server)
}

func (m *Metrics) errorCounter(server, op string) {
	if m != nil {
		m.errors.WithLabelValues(server, op).Inc()
	}
}

func (m *Metrics) setBreaker(server string, delta float64) {
	if m != nil {
		m.breakerOpen.WithLabelValues(server).Add(delta)
	}
}

func (m *Metrics) addPending(n int) {
	if m != nil && n != 0 {
		m.pending.Add(float64(n))
	}
}

func (m *Metrics) addDropped(n int) {
	if m != nil && n != 0 {
		m.dropped.Add(float64(n))
	}
}
