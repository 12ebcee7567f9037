package testkit

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Sample is one series of a gathered metric.
type Sample struct {
	Type   string            // counter, gauge, histogram, summary or untyped
	Labels map[string]string // the series' labels, by name
	Value  float64           // a counter's or gauge's value; a histogram's or summary's sample count
}

// Samples gathers g and returns every series by metric name. A gather
// error fails t.
func Samples(t testing.TB, g prometheus.Gatherer) map[string][]Sample {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	out := map[string][]Sample{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			s := Sample{Type: strings.ToLower(mf.GetType().String()), Labels: map[string]string{}}
			for _, lp := range m.GetLabel() {
				s.Labels[lp.GetName()] = lp.GetValue()
			}
			s.Value = m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue() +
				float64(m.GetHistogram().GetSampleCount()) + float64(m.GetSummary().GetSampleCount())
			out[mf.GetName()] = append(out[mf.GetName()], s)
		}
	}
	return out
}

// Metric returns the sum of the values (see Sample) of the series of name
// in g that have every label pair given (name, value, ...): the value of
// one series when the pairs name it, the total over a label otherwise. It
// is 0 when no series matches; HasMetric tells 0 from absent.
func Metric(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	var v float64
	for _, s := range Samples(t, g)[name] {
		if s.has(labels) {
			v += s.Value
		}
	}
	return v
}

// HasMetric reports whether g has a series of name with every label pair
// given (name, value, ...).
func HasMetric(t testing.TB, g prometheus.Gatherer, name string, labels ...string) bool {
	t.Helper()
	for _, s := range Samples(t, g)[name] {
		if s.has(labels) {
			return true
		}
	}
	return false
}

func (s Sample) has(pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		if v, ok := s.Labels[pairs[i]]; !ok || v != pairs[i+1] {
			return false
		}
	}
	return true
}
