package limit

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a rule's decision, the "outcome" label of
// linkgate_limit_decisions_total.
const (
	OutcomeAllowed       = "allowed"
	OutcomeLimited       = "limited"
	OutcomeShadowLimited = "shadow_limited"
	OutcomeSkipped       = "skipped" // the request lacks the rule's feature (no email in the query string or body, no trusted user)
	OutcomeStoreError    = "store_error"
	// OutcomeUnreadable: an email rule could not tell the request's email
	// and on_unreadable (reject or skip) refused it or let it through
	// uncounted. Under key_by_ip the outcome is that of the address's check.
	OutcomeUnreadable = "unreadable"
)

var outcomes = [...]string{OutcomeAllowed, OutcomeLimited, OutcomeShadowLimited, OutcomeSkipped, OutcomeStoreError, OutcomeUnreadable}

type outcome uint8

const (
	allowed outcome = iota
	limited
	shadowLimited
	skipped
	storeError
	unreadableEmail
)

// Metrics are the limiter's Prometheus collectors. Create them once per
// process with NewMetrics and pass them to every Limiter built on reload. A
// nil *Metrics records nothing. Safe for concurrent use.
type Metrics struct {
	decisions     *prometheus.CounterVec
	storeDuration prometheus.Histogram
}

// NewMetrics creates and registers linkgate_limit_decisions_total{rule,outcome}
// and linkgate_limit_store_duration_seconds on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "linkgate_limit_decisions_total",
			Help: "Limiter decisions by rule and outcome (allowed, limited, shadow_limited, skipped, store_error, unreadable).",
		}, []string{"rule", "outcome"}),
		storeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "linkgate_limit_store_duration_seconds",
			Help:    "Time the limiter's store took to load a check's buckets.",
			Buckets: []float64{.00001, .00005, .0001, .0005, .001, .0025, .005, .01, .025, .05, .1, .25},
		}),
	}
	if reg != nil {
		reg.MustRegister(m.decisions, m.storeDuration)
	}
	return m
}

// ruleMetrics are one rule's counters, looked up once when the rule is
// compiled so that a decision does no label lookup.
type ruleMetrics struct {
	c [len(outcomes)]prometheus.Counter
	h prometheus.Histogram
}

func (m *Metrics) forRule(name string) *ruleMetrics {
	if m == nil {
		return nil
	}
	rm := &ruleMetrics{h: m.storeDuration}
	for i, o := range outcomes {
		rm.c[i] = m.decisions.WithLabelValues(name, o)
	}
	return rm
}

func (rm *ruleMetrics) inc(o outcome) {
	if rm != nil {
		rm.c[o].Inc()
	}
}

func (rm *ruleMetrics) observe(d time.Duration) {
	if rm != nil {
		rm.h.Observe(d.Seconds())
	}
}
