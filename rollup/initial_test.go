package rollup_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/rollup"
)

// TestWorkerFreshStore: on a store that holds nothing yet (a new install, a
// new Cassandra keyspace) with the default tiers, the first run starts each
// queue where data can start, not a retention ago: it stores each queue's
// progress once, every lag is within its normal value (the batch period
// plus the grace), and nothing is logged as far behind. The progress once
// started two days back for 5m and five years back for 52w, and the worker
// walked through the empty periods one progress write at a time (about
// 170), far behind for anyone reading the store meanwhile: minutes on
// Cassandra.
func TestWorkerFreshStore(t *testing.T) {
	plan, err := rollup.NewPlan(rollup.DefaultTiers(), rollup.DefaultGrace)
	if err != nil {
		t.Fatal(err)
	}
	st := &advances{Memory: analyticstest.NewMemory(plan)}
	now := time.Date(2026, 11, 26, 10, 17, 42, 0, time.UTC)
	m := &metrics{}
	var logs bytes.Buffer
	w := rollup.NewWorker(st, plan, rollup.WorkerOptions{Now: func() time.Time { return now }, Metrics: m, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if _, err := w.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	// One Advance per queue: where it starts. Each stored progress is what
	// other gateways (standing by on a shared store) read and report.
	if len(st.calls) != len(plan.Tiers()) {
		t.Errorf("%d progress writes on a fresh store, want one per queue (%d): %v", len(st.calls), len(plan.Tiers()), st.calls)
	}
	prog, _ := st.Progress(context.Background())
	hour := rollup.Align(now.Add(-rollup.DefaultGrace), time.Hour) // 10:00
	want := map[time.Duration]time.Time{
		rollup.MarksQueue: hour,
		5 * time.Minute:   hour,
		time.Hour:         rollup.Align(hour, rollup.Day),
		rollup.Day:        rollup.Align(hour, rollup.Week),
		rollup.Week:       rollup.Align(hour, rollup.Week),
		52 * rollup.Week:  rollup.Align(hour, 52*rollup.Week),
	}
	for q, w := range want {
		if !prog.Done(q).Equal(w) {
			t.Errorf("queue %s starts at %v, want %v", rollup.QueueName(q), prog.Done(q), w)
		}
	}
	for i, tr := range plan.Tiers()[1:] {
		normal := plan.Batch(i+1) + rollup.DefaultGrace
		if lag := m.lag[tr.Step]; lag <= 0 || lag > normal {
			t.Errorf("lag of %s on a fresh store: %v, want at most %v (its batch period plus the grace)", rollup.QueueName(tr.Step), lag, normal)
		}
	}
	if lag := m.lag[rollup.MarksQueue]; lag > plan.MarkPeriod()+rollup.DefaultGrace {
		t.Errorf("lag of marks on a fresh store: %v", lag)
	}
	if bytes.Contains(logs.Bytes(), []byte("far behind")) {
		t.Errorf("a fresh store logged as far behind:\n%s", logs.String())
	}
}

// advances is a store that records every progress write.
type advances struct {
	*analyticstest.Memory
	calls []string
}

func (a *advances) Advance(ctx context.Context, step time.Duration, done time.Time) error {
	a.calls = append(a.calls, rollup.QueueName(step)+" "+done.Format(time.RFC3339))
	return a.Memory.Advance(ctx, step, done)
}

// TestWorkerStartsWhereDataStarts: a store that visits were flushed into
// for six hours before any worker ran on it (its runs failed meanwhile, or
// the store was filled from a journal) is rolled from where its data
// starts: the first run finds the first period announced, and every tier
// ends equal to the brute-force count.
func TestWorkerStartsWhereDataStarts(t *testing.T) {
	f := newFixtureStarted(t, t0.Add(6*time.Hour))
	drain(t, rollup.NewWorker(f.st, f.plan, rollup.WorkerOptions{Now: func() time.Time { return f.end }}))
	f.check(t)
}

// TestWorkerAddedTier: a tier added to the retention of a store the worker
// has run on starts as far back as the tier below it keeps data, since
// that tier may hold rolled values from before: its first progress is the
// lower tier's retention ago, not now.
func TestWorkerAddedTier(t *testing.T) {
	before := smallTiers[:3] // 1m:1d, 5m:2d, 1h:4d
	planA, err := rollup.NewPlan(before, grace)
	if err != nil {
		t.Fatal(err)
	}
	planB, err := rollup.NewPlan(smallTiers, grace) // and 6h:8d
	if err != nil {
		t.Fatal(err)
	}
	st := &advances{Memory: analyticstest.NewMemory(planA)}
	now := t0.Add(10 * time.Hour)
	if _, err := rollup.NewWorker(st, planA, rollup.WorkerOptions{Now: func() time.Time { return now }}).RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	st.calls = nil
	if _, err := rollup.NewWorker(st, planB, rollup.WorkerOptions{Now: func() time.Time { return now }}).RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := "6h " + rollup.Align(now.Add(-4*rollup.Day), planB.Batch(3)).Format(time.RFC3339)
	if len(st.calls) == 0 || st.calls[0] != want {
		t.Errorf("progress writes with the tier added: %v, want the 6h queue started at %s first", st.calls, want)
	}
}
