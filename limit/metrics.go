package limit

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/internal/metric"
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
	// OutcomeBoxed: the client is in the rule's penalty box (the request
	// that put it there is limited).
	OutcomeBoxed = "boxed"
)

var outcomes = [...]string{OutcomeAllowed, OutcomeLimited, OutcomeShadowLimited, OutcomeSkipped, OutcomeStoreError, OutcomeUnreadable, OutcomeBoxed}

type outcome uint8

const (
	allowed outcome = iota
	limited
	shadowLimited
	skipped
	storeError
	unreadableEmail
	boxed
)

// Metrics are the limiter's Prometheus collectors. Create them once per
// process with NewMetrics and pass them to every Limiter built on reload. A
// nil *Metrics records nothing. Safe for concurrent use.
type Metrics struct {
	decisions     *prometheus.CounterVec
	storeDuration prometheus.Histogram
	trips         *prometheus.CounterVec
	escalations   *prometheus.CounterVec
	// serving is the Limiter whose boxes linkgate_limit_boxed counts
	// (Serve).
	serving atomic.Pointer[Limiter]
}

// NewMetrics creates and registers linkgate_limit_decisions_total{rule,outcome},
// linkgate_limit_store_duration_seconds, linkgate_limit_trips_total{rule},
// linkgate_limit_escalations_total{rule} and linkgate_limit_boxed{rule}
// on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	s := metric.With(reg)
	m := &Metrics{
		decisions:     s.CounterVec("linkgate_limit_decisions_total", "Limiter decisions by rule and outcome (allowed, limited, shadow_limited, skipped, store_error, unreadable, boxed).", "rule", "outcome"),
		storeDuration: s.Histogram("linkgate_limit_store_duration_seconds", "Time the limiter's store took to load a check's buckets.", []float64{.00001, .00005, .0001, .0005, .001, .0025, .005, .01, .025, .05, .1, .25}),
		trips:         s.CounterVec("linkgate_limit_trips_total", "Clients put in a rule's penalty box (requests over a limit of a rule with a penalty), by rule.", "rule"),
		escalations:   s.CounterVec("linkgate_limit_escalations_total", "Trips within penalty.forget_after of the one before, whose box was multiplied by penalty.factor, by rule.", "rule"),
	}
	if reg != nil {
		boxedNow := &boxedCollector{m: m, desc: prometheus.NewDesc("linkgate_limit_boxed",
			"Clients in a rule's penalty box now that this gateway knows of (memcached: those it put or read), by rule.", []string{"rule"}, nil)}
		reg.MustRegister(boxedNow)
	}
	return m
}

// Serve makes l the Limiter whose boxes linkgate_limit_boxed reports: the
// one serving requests. Call it whenever a new Limiter is swapped in.
func (m *Metrics) Serve(l *Limiter) {
	if m != nil {
		m.serving.Store(l)
	}
}

// boxedCollector reports the boxes of the serving Limiter's rules at
// scrape time, 0 for a rule with a penalty and nobody in its box.
type boxedCollector struct {
	m    *Metrics
	desc *prometheus.Desc
}

func (c *boxedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *boxedCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.m.serving.Load()
	if l == nil {
		return
	}
	n, err := l.countBoxes(context.Background())
	if err != nil {
		return // a store that cannot answer: no sample rather than a wrong one
	}
	for _, r := range l.rules {
		if r.pen != nil {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n[r.Name]), r.Name)
		}
	}
}

// ruleMetrics are one rule's counters, looked up once when the rule is
// compiled so that a decision does no label lookup.
type ruleMetrics struct {
	c                  [len(outcomes)]prometheus.Counter
	h                  prometheus.Histogram
	trips, escalations prometheus.Counter
}

func (m *Metrics) forRule(name string, pen bool) *ruleMetrics {
	if m == nil {
		return nil
	}
	rm := &ruleMetrics{h: m.storeDuration}
	if pen {
		rm.trips, rm.escalations = m.trips.WithLabelValues(name), m.escalations.WithLabelValues(name)
	}
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

// trip counts a trip, escalated when it came within forget_after of the
// one before.
func (rm *ruleMetrics) trip(escalated bool) {
	if rm == nil || rm.trips == nil {
		return
	}
	rm.trips.Inc()
	if escalated {
		rm.escalations.Inc()
	}
}

func (rm *ruleMetrics) observe(d time.Duration) {
	if rm != nil {
		rm.h.Observe(d.Seconds())
	}
}
