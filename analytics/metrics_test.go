package analytics_test

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/rollup"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := analytics.NewMetrics(reg)
	rec := analytics.NewRecorder(10, m)
	st := newMemStore()
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: func() time.Time { return monday.Add(time.Second) }}, m, nil)
	rec.Record("a", monday, false)
	rec.Record("a", monday, true)
	rec.Record("b", monday, false)
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	// a, b and all links: a count of the minute and an Active entry each.
	if got := testkit.Metric(t, reg, "linkgate_analytics_flush_counts"); got != 6 {
		t.Errorf("flush counts = %v, want 6", got)
	}
	if got := testkit.Metric(t, reg, "linkgate_visits_recorded_total", "kind", "human"); got != 2 {
		t.Errorf("human visits = %v, want 2", got)
	}
	if got := testkit.Metric(t, reg, "linkgate_visits_recorded_total", "kind", "bot"); got != 1 {
		t.Errorf("bot visits = %v, want 1", got)
	}
	if got := testkit.Metric(t, reg, "linkgate_analytics_flush_duration_seconds"); got != 1 {
		t.Errorf("%v flush durations observed, want 1", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// Gauges and counters without labels are gathered even at zero, the
	// analytics state's three series, and the classes' series (made for
	// every reason up front).
	if len(mfs) != 18 {
		t.Errorf("%d metric families, want 18", len(mfs))
	}
}

// TestRollupMetrics runs a rollup worker with the metrics: runs by result,
// rows and marks written, and each queue's lag.
func TestRollupMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := analytics.NewMetrics(reg)
	st := analyticstest.NewMemory(analyticstest.DefaultPlan)
	rec := analytics.NewRecorder(10, m)
	now := monday.Add(31 * time.Minute) // the flush just after the visit
	clock := func() time.Time { return now }
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: clock}, m, nil)
	rec.Record("a", monday.Add(30*time.Minute), false)
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	now = monday.Add(2 * time.Hour)
	plan, err := rollup.NewPlan(defTiers, rollup.DefaultGrace)
	if err != nil {
		t.Fatal(err)
	}
	w := rollup.NewWorker(st, plan, rollup.WorkerOptions{Now: clock, Metrics: m})
	if _, err := w.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := testkit.Metric(t, reg, "linkgate_rollup_runs_total", "result", "ok"); got != 1 {
		t.Errorf("ok runs = %v, want 1", got)
	}
	// a and all links: one 5-minute bucket each.
	if got := testkit.Metric(t, reg, "linkgate_rollup_rows_total"); got != 2 {
		t.Errorf("rows = %v, want 2", got)
	}
	// The 5-minute tier has rolled the hour before 01:00 and waits for
	// the 01:00 hour to end plus the grace: 1 h behind now (02:00).
	if got := testkit.Metric(t, reg, "linkgate_rollup_lag_seconds", "queue", "5m"); got != 3600 {
		t.Errorf("5m lag = %vs, want 3600", got)
	}
	if got := testkit.Metric(t, reg, "linkgate_rollup_last_success_timestamp_seconds"); got == 0 {
		t.Error("no last success time after a successful run")
	}
	st.Fail = func(string) error { return errors.New("down") }
	now = now.Add(time.Hour)
	if _, err := w.RunOnce(t.Context()); err == nil {
		t.Fatal("a run with the store down succeeded")
	}
	if got := testkit.Metric(t, reg, "linkgate_rollup_runs_total", "result", "error"); got != 1 {
		t.Errorf("failed runs = %v, want 1", got)
	}
}

func TestNilMetrics(t *testing.T) {
	rec := analytics.NewRecorder(1, nil)
	f := analytics.NewFlusher(rec, newMemStore(), analyticstest.DefaultPlan, analytics.FlusherOptions{}, nil, nil)
	rec.Record("a", monday, false)
	rec.Record("b", monday, false) // overflow, no metric to count it in
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	analytics.NewMetrics(nil) // registers nothing, works
}

// TestStoredUntil: linkgate_analytics_stored_until_seconds is the time of
// the newest batch the store took whole; a failed write leaves it, and the
// write that takes the kept batch and a newer one moves it to the newer.
func TestStoredUntil(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := analytics.NewMetrics(reg)
	rec := analytics.NewRecorder(10, m)
	st := newMemStore()
	now := monday.Add(time.Second)
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: func() time.Time { return now }}, m, nil)
	until := func() time.Time {
		return time.Unix(0, int64(testkit.Metric(t, reg, "linkgate_analytics_stored_until_seconds")*1e9)).Round(time.Millisecond)
	}
	if got := testkit.Metric(t, reg, "linkgate_analytics_stored_until_seconds"); got != 0 {
		t.Fatalf("stored until %v before any flush, want 0", got)
	}
	rec.Record("a", monday, false)
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	first := st.batches[0].At
	if got := until(); !got.Equal(first.Round(time.Millisecond)) {
		t.Errorf("stored until %v after the first flush, want its batch's time %v", got, first)
	}
	st.setFail(func(int) bool { return true })
	now = now.Add(10 * time.Second)
	rec.Record("a", now, false)
	if err := f.Flush(t.Context()); err == nil {
		t.Fatal("a flush to a failing store succeeded")
	}
	if got := until(); !got.Equal(first.Round(time.Millisecond)) {
		t.Errorf("stored until %v after a failed flush, want still %v", got, first)
	}
	st.setFail(nil)
	now = now.Add(10 * time.Second)
	rec.Record("b", now, false)
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := len(st.batches); n != 3 {
		t.Fatalf("%d batches stored, want 3 (the kept one and a new one)", n)
	}
	last := st.batches[2].At
	if !last.After(st.batches[1].At) || !st.batches[1].At.After(first) {
		t.Fatalf("batch times %v, %v, %v: want them in order", first, st.batches[1].At, last)
	}
	if got := until(); !got.Equal(last.Round(time.Millisecond)) {
		t.Errorf("stored until %v after the store came back, want the newest batch's time %v", got, last)
	}
}
