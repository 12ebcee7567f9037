package cache

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/internal/metric"
)

// Metrics are the cache's Prometheus collectors. Create them once per
// process with NewMetrics. A nil *Metrics records nothing. Safe for
// concurrent use.
type Metrics struct {
	requests  *prometheus.CounterVec // result
	results   [numResults]prometheus.Counter
	evictions prometheus.Counter
	purges    *prometheus.CounterVec // source
	fleetErrs prometheus.Counter
	store     atomic.Pointer[Store]
}

// NewMetrics creates the collectors and registers them with reg; a nil
// reg leaves them unregistered.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	s := metric.With(reg)
	m := &Metrics{
		requests:  s.CounterVec("linkgate_cache_requests_total", "Requests that reached the cache, by result: hit, miss, stale (served past freshness: the upstream failing, or renewing in the background), coalesced (waited for another request's answer of the same key), bypass (not cacheable: method, credentials, body).", "result"),
		evictions: s.Counter("linkgate_cache_evictions_total", "Entries evicted to keep the cache within cache.max_bytes."),
		purges:    s.CounterVec("linkgate_cache_purges_total", "Purges applied, by source: admin (the admin API), header (the upstream's Linkgate-Purge field), fleet (another gateway's, through memcached).", "source"),
		fleetErrs: s.Counter("linkgate_cache_fleet_errors_total", "Purges that could not be sent to or read from the fleet's memcached."),
	}
	for r := Result(1); r < numResults; r++ {
		m.results[r] = m.requests.WithLabelValues(r.String())
	}
	for _, src := range []string{"admin", "header", "fleet"} {
		m.purges.WithLabelValues(src)
	}
	s.GaugeFunc("linkgate_cache_entries", "Entries in the cache.", func() float64 {
		if st := m.store.Load(); st != nil {
			return float64(st.Len())
		}
		return 0
	})
	s.GaugeFunc("linkgate_cache_bytes", "Bytes the cache's entries take, as counted against cache.max_bytes.", func() float64 {
		if st := m.store.Load(); st != nil {
			return float64(st.Bytes())
		}
		return 0
	})
	return m
}

func (m *Metrics) result(r Result) {
	if m != nil && r > 0 && r < numResults {
		m.results[r].Inc()
	}
}

func (m *Metrics) evicted() {
	if m != nil {
		m.evictions.Inc()
	}
}

func (m *Metrics) purged(source string) {
	if m != nil && source != "" {
		m.purges.WithLabelValues(source).Inc()
	}
}

// FleetError counts a purge that could not reach the fleet or be read
// from it.
func (m *Metrics) FleetError() {
	if m != nil {
		m.fleetErrs.Inc()
	}
}

func (m *Metrics) watch(s *Store) {
	if m != nil {
		m.store.Store(s)
	}
}
