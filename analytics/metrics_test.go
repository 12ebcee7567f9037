package analytics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/analytics"
)

// labelValue returns the value of the counter name{label=value}.
func labelValue(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := analytics.NewMetrics(reg)
	rec := analytics.NewRecorder(10, m)
	st := newMemStore()
	f := analytics.NewFlusher(rec, st, defTiers, analytics.FlusherOptions{}, m, nil)
	rec.Record("a", monday, false)
	rec.Record("a", monday, true)
	rec.Record("b", monday, false)
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	// a, b and all links: 5 tiers and a total each.
	if got := metricValue(t, reg, "linkgate_analytics_flush_counts"); got != 18 {
		t.Errorf("flush counts = %v, want 18", got)
	}
	if got := labelValue(t, reg, "linkgate_visits_recorded_total", "kind", "human"); got != 2 {
		t.Errorf("human visits = %v, want 2", got)
	}
	if got := labelValue(t, reg, "linkgate_visits_recorded_total", "kind", "bot"); got != 1 {
		t.Errorf("bot visits = %v, want 1", got)
	}
	if got := metricValue(t, reg, "linkgate_analytics_flush_duration_seconds"); got != 1 {
		t.Errorf("%v flush durations observed, want 1", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// Gauges and counters without labels are gathered even at zero.
	if len(mfs) != 8 {
		t.Errorf("%d metric families, want 8", len(mfs))
	}
}

func TestNilMetrics(t *testing.T) {
	rec := analytics.NewRecorder(1, nil)
	f := analytics.NewFlusher(rec, newMemStore(), defTiers, analytics.FlusherOptions{}, nil, nil)
	rec.Record("a", monday, false)
	rec.Record("b", monday, false) // overflow, no metric to count it in
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	analytics.NewMetrics(nil) // registers nothing, works
}
