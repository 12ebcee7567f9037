package analytics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the Prometheus collectors of recording and flushing visits.
// Create them once per process with NewMetrics and pass them to what is
// rebuilt on a reload. A nil *Metrics records nothing. Safe for concurrent use.
type Metrics struct {
	visits        *prometheus.CounterVec
	flushDuration prometheus.Histogram
	flushCounts   prometheus.Gauge
	storeErrors   prometheus.Counter
	buffered      prometheus.Gauge
	overflow      prometheus.Counter
	spilled       prometheus.Gauge
	tooLong       prometheus.Counter
}

// NewMetrics creates the collectors and registers them with reg; a nil reg
// registers nothing.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		visits: f.NewCounterVec(prometheus.CounterOpts{
			Name: "linkgate_visits_recorded_total",
			Help: "Visits recorded in memory, by kind (human or bot). Added when the flusher takes them, every flush_interval.",
		}, []string{"kind"}),
		flushDuration: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "linkgate_analytics_flush_duration_seconds",
			Help:    "Time taken by one write of a batch of counts to the analytics store, failed ones included.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 9), // 1ms … 65s
		}),
		flushCounts: f.NewGauge(prometheus.GaugeOpts{
			Name: "linkgate_analytics_flush_counts",
			Help: "Entries (counts plus totals) in the last batch written to the analytics store.",
		}),
		storeErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "linkgate_analytics_store_errors_total",
			Help: "Failed writes to the analytics store; their counts are kept and sent again.",
		}),
		buffered: f.NewGauge(prometheus.GaugeOpts{
			Name: "linkgate_analytics_buffered_keys",
			Help: "Entries ((link, tier, bucket) counts plus link totals) held in memory by the flusher, not yet written.",
		}),
		overflow: f.NewCounter(prometheus.CounterOpts{
			Name: "linkgate_analytics_overflow_total",
			Help: "Visits to links beyond max_keys or max_buffer_bytes between two flushes: counted in the all-links total only.",
		}),
		spilled: f.NewGauge(prometheus.GaugeOpts{
			Name: "linkgate_analytics_spilled_counts",
			Help: "Entries waiting in spill files on local disk for the analytics store to come back.",
		}),
		tooLong: f.NewCounter(prometheus.CounterOpts{
			Name: "linkgate_analytics_keys_too_long_total",
			Help: "Requests to the analytics route whose short key is longer than max_key_bytes: proxied, never counted as visits.",
		}),
	}
}

func (m *Metrics) keyTooLong() {
	if m != nil {
		m.tooLong.Inc()
	}
}

func (m *Metrics) recorded(human, bot int64) {
	if m == nil {
		return
	}
	if human > 0 {
		m.visits.WithLabelValues("human").Add(float64(human))
	}
	if bot > 0 {
		m.visits.WithLabelValues("bot").Add(float64(bot))
	}
}

func (m *Metrics) overflowed() {
	if m != nil {
		m.overflow.Inc()
	}
}

func (m *Metrics) wrote(d time.Duration, n int, err error) {
	if m == nil {
		return
	}
	m.flushDuration.Observe(d.Seconds())
	if err != nil {
		m.storeErrors.Inc()
		return
	}
	m.flushCounts.Set(float64(n))
}

func (m *Metrics) setBuffered(n int) {
	if m != nil {
		m.buffered.Set(float64(n))
	}
}

func (m *Metrics) setSpilled(n int) {
	if m != nil {
		m.spilled.Set(float64(n))
	}
}
