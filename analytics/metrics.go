package analytics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/internal/metric"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitclass"
)

// Metrics are the Prometheus collectors of recording, flushing and rolling
// up visits. Create them once per process with NewMetrics and pass them to
// what is rebuilt on a reload, and to the rollup worker
// (rollup.WorkerOptions.Metrics). A nil *Metrics records nothing. Safe for
// concurrent use.
type Metrics struct {
	visits        *prometheus.CounterVec
	flushDuration prometheus.Histogram
	flushCounts   prometheus.Gauge
	storedUntil   prometheus.Gauge
	storeErrors   prometheus.Counter
	buffered      prometheus.Gauge
	overflow      prometheus.Counter
	journalBytes  prometheus.Gauge
	journalRecs   prometheus.Gauge
	replayedN     prometheus.Counter
	dropped       prometheus.Counter
	tooLong       prometheus.Counter
	// tenants counts visits per tenant (tenant_metrics.go).
	tenants *tenantVisits
	// classes counts visits by the signal that decided their class.
	classes [visitclass.NumReasons]prometheus.Counter

	rollupRuns     *prometheus.CounterVec
	rollupDuration prometheus.Histogram
	rollupRows     prometheus.Counter
	rollupMarks    prometheus.Counter
	rollupLag      *prometheus.GaugeVec
	rollupLastRun  prometheus.Gauge

	// state returns the state of the pipeline the metrics belong to (see
	// watch); nil before it, and without analytics.
	state atomic.Pointer[func() string]
}

var _ rollup.Metrics = (*Metrics)(nil)

// timeBuckets are the upper bounds of the flush and rollup durations: 1ms … 65s.
var timeBuckets = prometheus.ExponentialBuckets(0.001, 4, 9)

// NewMetrics creates the collectors and registers them with reg; a nil reg
// registers nothing. It lists every collector with its name and help, read
// (and checked against docs/operations.md) in one place.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	s := metric.With(reg)
	m := &Metrics{
		tenants:        newTenantVisits(s),
		visits:         s.CounterVec("linkgate_visits_recorded_total", "Visits recorded in memory, by kind (human or bot). Added when the flusher takes them, every flush_interval.", "kind"),
		flushDuration:  s.Histogram("linkgate_analytics_flush_duration_seconds", "Time taken by one write of a batch of counts to the analytics store, failed ones included.", timeBuckets),
		flushCounts:    s.Gauge("linkgate_analytics_flush_counts", "Entries (finest-tier counts, rollup Active entries and marks) in the last batch written to the analytics store."),
		storedUntil:    s.Gauge("linkgate_analytics_stored_until_seconds", "Unix time of the newest batch the analytics store took: every visit recorded before it is stored (batches are written oldest first), but those of a journal record dropped at max_bytes. now minus it is how far the store lags."),
		storeErrors:    s.Counter("linkgate_analytics_store_errors_total", "Failed writes to the analytics store; their batches are kept (journaled while the store fails) and sent again."),
		buffered:       s.Gauge("linkgate_analytics_buffered_keys", "Entries ((link, bucket) counts) of batches held in memory by the flusher, neither written nor journaled."),
		overflow:       s.Counter("linkgate_analytics_overflow_total", "Visits to links beyond max_keys or max_buffer_bytes between two flushes: counted in the all-links total only."),
		journalBytes:   s.Gauge("linkgate_analytics_journal_bytes", "Bytes on disk of the analytics journal: batches the store refused, kept until it takes them (cap: analytics.journal.max_bytes)."),
		journalRecs:    s.Gauge("linkgate_analytics_journal_records", "Records (flush intervals' batches, or folds of several) in the analytics journal waiting for the store."),
		replayedN:      s.Counter("linkgate_analytics_journal_written_batches_total", "Batches written from the analytics journal to the store, those an earlier run left included."),
		dropped:        s.Counter("linkgate_analytics_dropped_visits_total", "Visits dropped because neither the store nor the journal could keep them (journal at max_bytes after folding, or unwritable with memory full, or a shutdown that could save nothing). Each is logged with numbers."),
		tooLong:        s.Counter("linkgate_analytics_keys_too_long_total", "Requests to the analytics route whose short key is longer than max_key_bytes: proxied, never counted as visits."),
		rollupRuns:     s.CounterVec("linkgate_rollup_runs_total", "Runs of the rollup worker, by result: ok, error, or standby (another gateway holds the lease).", "result"),
		rollupDuration: s.Histogram("linkgate_rollup_run_duration_seconds", "Time taken by one run of the rollup worker, failed ones included.", timeBuckets),
		rollupRows:     s.Counter("linkgate_rollup_rows_total", "Rolled values (coarse-tier buckets) written by the rollup worker."),
		rollupMarks:    s.Counter("linkgate_rollup_marks_total", "Marks (buckets made stale by late counts) processed by the rollup worker."),
		rollupLag:      s.GaugeVec("linkgate_rollup_lag_seconds", "How far behind now the rollup's progress is, by queue (a tier's step, or marks). Normal: up to the queue's batch period plus the grace plus a run interval; growing without bound: the worker is stalled.", "queue"),
		rollupLastRun:  s.Gauge("linkgate_rollup_last_success_timestamp_seconds", "Unix time of the last rollup run of this gateway that succeeded (or found another gateway holding the lease)."),
	}
	if reg != nil {
		reg.MustRegister(stateCollector{m})
	}
	classes := s.CounterVec("linkgate_analytics_visits_classified_total", "Visits counted, by their class (human, bot, preview, scanner, prefetch, internal) and the signal that decided it (none for a human).", "class", "reason")
	for r := range visitclass.NumReasons {
		m.classes[r] = classes.WithLabelValues(r.Class().String(), r.String())
	}
	return m
}

// stateDesc describes linkgate_analytics_state.
var stateDesc = prometheus.NewDesc("linkgate_analytics_state",
	"State of link analytics: 1 for the current one of ok, starting (the store is opening or connecting) and degraded (it cannot be opened or reached, has failed, or the last write failed; the reason is on the admin listener's /admin/health). All 0 without analytics.",
	[]string{"state"}, nil)

// stateCollector reports the state when scraped, so that it is never
// stale: one series per state, 1 for the current one.
type stateCollector struct{ m *Metrics }

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- stateDesc }

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	cur := ""
	if f := c.m.state.Load(); f != nil {
		cur = (*f)()
	}
	for _, st := range states {
		v := 0.0
		if st == cur {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(stateDesc, prometheus.GaugeValue, v, st)
	}
}

// watch makes the state metric report what state returns. A Pipeline
// calls it when it starts.
func (m *Metrics) watch(state func() string) {
	if m != nil {
		m.state.Store(&state)
	}
}

// classified counts a visit whose class reason decided.
func (m *Metrics) classified(reason visitclass.Reason) {
	if m != nil && reason < visitclass.NumReasons {
		m.classes[reason].Inc()
	}
}

func (m *Metrics) keyTooLong() {
	if m != nil {
		m.tooLong.Inc()
	}
}

// RollupRun implements rollup.Metrics.
func (m *Metrics) RollupRun(took time.Duration, r rollup.Report, err error) {
	if m == nil {
		return
	}
	m.rollupDuration.Observe(took.Seconds())
	result := "ok"
	switch {
	case err != nil:
		result = "error"
	case r.Standby:
		result = "standby"
	}
	m.rollupRuns.WithLabelValues(result).Inc()
	m.rollupRows.Add(float64(r.Rows))
	m.rollupMarks.Add(float64(r.Marks))
	if err == nil {
		m.rollupLastRun.Set(float64(time.Now().UnixNano()) / 1e9)
	}
}

// RollupLag implements rollup.Metrics.
func (m *Metrics) RollupLag(step, lag time.Duration) {
	if m != nil {
		m.rollupLag.WithLabelValues(rollup.QueueName(step)).Set(lag.Seconds())
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

// stored notes the time of the newest batch the store took whole.
func (m *Metrics) stored(at time.Time) {
	if m != nil {
		m.storedUntil.Set(float64(at.UnixNano()) / 1e9)
	}
}

func (m *Metrics) setBuffered(n int) {
	if m != nil {
		m.buffered.Set(float64(n))
	}
}

func (m *Metrics) setJournal(bytes int64, records int) {
	if m != nil {
		m.journalBytes.Set(float64(bytes))
		m.journalRecs.Set(float64(records))
	}
}

func (m *Metrics) replayed(batches int) {
	if m != nil {
		m.replayedN.Add(float64(batches))
	}
}

func (m *Metrics) droppedVisits(n int64) {
	if m != nil && n > 0 {
		m.dropped.Add(float64(n))
	}
}
