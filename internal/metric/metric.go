// Package metric declares the gateway's Prometheus collectors one line
// each: a name, its help and its labels (or a histogram's buckets), made
// and registered by one Set. Every package that counts something declares
// its collectors through it, so that they are made and registered one way.
package metric

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Set makes collectors and registers each with its registerer as it makes
// it; a Set of a nil registerer registers nothing (a package's tests, or
// a second set of collectors no one scrapes). Registering a name twice
// panics, as prometheus.Registerer.MustRegister does.
type Set struct{ f promauto.Factory }

// With returns the Set that registers with reg (nil: with none).
func With(reg prometheus.Registerer) Set { return Set{promauto.With(reg)} }

// Counter is a counter with no labels.
func (s Set) Counter(name, help string) prometheus.Counter {
	return s.f.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// CounterVec is a counter by labels.
func (s Set) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return s.f.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// Gauge is a gauge with no labels.
func (s Set) Gauge(name, help string) prometheus.Gauge {
	return s.f.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// GaugeVec is a gauge by labels.
func (s Set) GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return s.f.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
}

// GaugeFunc is a gauge whose value is read from value at each scrape.
func (s Set) GaugeFunc(name, help string, value func() float64) prometheus.GaugeFunc {
	return s.f.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, value)
}

// Histogram is a histogram with no labels, of the upper bounds buckets.
func (s Set) Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return s.f.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}

// HistogramVec is a histogram by labels, of the upper bounds buckets.
func (s Set) HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return s.f.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}
