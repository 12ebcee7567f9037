package rollup_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/rollup"
)

// smallTiers roll every tier within a few simulated days.
var smallTiers = []rollup.Tier{
	{Step: time.Minute, Retention: rollup.Day},
	{Step: 5 * time.Minute, Retention: 2 * rollup.Day},
	{Step: time.Hour, Retention: 4 * rollup.Day},
	{Step: 6 * time.Hour, Retention: 8 * rollup.Day},
}

const grace = time.Minute

var t0 = time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC) // a Monday

// fixture is a store with a day of visits flushed into it as a gateway
// does, and the brute-force count of them.
type fixture struct {
	st    *analyticstest.Memory
	plan  *rollup.Plan
	start rollup.Progress        // the progress when the gateway started
	truth map[string][]time.Time // visit times by key
	end   time.Time              // when every period holding a visit is closed
}

func newFixture(t *testing.T) *fixture { return newFixtureStarted(t, t0) }

// newFixtureStarted is newFixture with the worker's first run at firstRun
// (t0: before any flush) instead.
func newFixtureStarted(t *testing.T, firstRun time.Time) *fixture {
	t.Helper()
	plan, err := rollup.NewPlan(smallTiers, grace)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{st: analyticstest.NewMemory(plan), plan: plan, truth: map[string][]time.Time{}}
	rng := rand.New(rand.NewPCG(3, 4))
	clock := t0
	rec := analytics.NewRecorder(100, nil)
	fl := analytics.NewFlusher(rec, f.st, plan, analytics.FlusherOptions{Now: func() time.Time { return clock }}, nil, nil)
	keys := []string{"a", "b", "c", "d", "e"}
	started := false
	for clock.Before(t0.Add(rollup.Day)) {
		// The gateway's worker's first run starts the progress.
		if !started && !clock.Before(firstRun) {
			started = true
			if _, err := rollup.NewWorker(f.st, plan, rollup.WorkerOptions{Now: func() time.Time { return clock }}).RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			f.start, _ = f.st.Progress(context.Background())
		}
		next := clock.Add(time.Duration(1+rng.IntN(20)) * time.Minute)
		for range rng.IntN(5) {
			k := keys[rng.IntN(len(keys))]
			at := clock.Add(time.Duration(rng.Int64N(int64(next.Sub(clock)))))
			rec.Record(k, at, false)
			f.truth[k] = append(f.truth[k], at)
			f.truth[analytics.AllLinks] = append(f.truth[analytics.AllLinks], at)
		}
		clock = next
		if err := fl.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// The all-time tier's (1d) period holding the last visit, plus grace.
	f.end = rollup.Align(clock, rollup.Day).Add(rollup.Day + grace)
	return f
}

// want returns the brute-force buckets of key in the tier of step.
func (f *fixture) want(key string, step time.Duration) []analytics.Point {
	var out []analytics.Point
	for _, at := range f.truth[key] {
		s := rollup.Align(at, step)
		i := len(out)
		for j, p := range out {
			if p.Start.Equal(s) {
				i = j
			}
		}
		if i == len(out) {
			out = append(out, analytics.Point{Start: s})
		}
		out[i].Human++
	}
	sortPoints(out)
	return out
}

func sortPoints(ps []analytics.Point) {
	for i := range ps {
		for j := i + 1; j < len(ps); j++ {
			if ps[j].Start.Before(ps[i].Start) {
				ps[i], ps[j] = ps[j], ps[i]
			}
		}
	}
}

// stored returns what the store holds for key in every coarse tier.
func (f *fixture) stored(t *testing.T) map[string][]analytics.Point {
	t.Helper()
	out := map[string][]analytics.Point{}
	for key := range f.truth {
		for _, tr := range f.plan.Tiers()[1:] {
			ps, err := f.st.Points(context.Background(), key, tr.Step, t0.Add(-rollup.Week), t0.Add(rollup.Week))
			if err != nil {
				t.Fatal(err)
			}
			out[key+" "+rollup.FormatDuration(tr.Step)] = ps
		}
	}
	return out
}

// check checks that every coarse tier as stored equals the brute force.
func (f *fixture) check(t *testing.T) {
	t.Helper()
	got := f.stored(t)
	for key := range f.truth {
		for _, tr := range f.plan.Tiers()[1:] {
			name := key + " " + rollup.FormatDuration(tr.Step)
			if diff := cmp.Diff(f.want(key, tr.Step), got[name]); diff != "" {
				t.Errorf("%s (-want +got):\n%s", name, diff)
			}
		}
	}
}

// drain runs w until a run reports nothing left, and returns the runs.
func drain(t *testing.T, w *rollup.Worker) []rollup.Report {
	t.Helper()
	var reps []rollup.Report
	for range 1000 {
		rep, err := w.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, rep)
		if !rep.More {
			return reps
		}
	}
	t.Fatal("the worker never finished")
	return nil
}

// TestWorkerRollsEveryTier rolls a day of visits through every tier, up
// to the all-time one, and checks each against the brute force.
func TestWorkerRollsEveryTier(t *testing.T) {
	f := newFixture(t)
	w := rollup.NewWorker(f.st, f.plan, rollup.WorkerOptions{Now: func() time.Time { return f.end }})
	reps := drain(t, w)
	f.check(t)
	prog, _ := f.st.Progress(context.Background())
	for i, tr := range f.plan.Tiers()[1:] {
		if want := rollup.Align(f.end.Add(-grace), f.plan.Batch(i+1)); !prog.Done(tr.Step).Equal(want) {
			t.Errorf("%v rolled up to %v, want %v", tr, prog.Done(tr.Step), want)
		}
	}
	if reps[0].Rows == 0 || reps[0].Periods == 0 {
		t.Errorf("first run: %+v, want rows written and periods completed", reps[0])
	}
	// Nothing left: a second run does nothing.
	ops := f.st.Ops()
	if rep, err := w.RunOnce(context.Background()); err != nil || rep.Jobs != 0 || f.st.Ops().Rows != ops.Rows {
		t.Errorf("a run with nothing to do: %+v, %v, %d rows written", rep, err, f.st.Ops().Rows-ops.Rows)
	}
}

// rewound is a store whose progress reads as when the gateway started: a
// worker on it rolls everything again.
type rewound struct {
	*analyticstest.Memory
	start rollup.Progress
}

func (r rewound) Progress(context.Context) (rollup.Progress, error) { return r.start, nil }
func (rewound) Advance(context.Context, time.Duration, time.Time) error {
	return nil
}

// TestWorkerTwiceSameValues rolls everything, then rolls it all again with a
// worker that knows nothing of the first: the stored values do not change.
func TestWorkerTwiceSameValues(t *testing.T) {
	f := newFixture(t)
	now := func() time.Time { return f.end }
	drain(t, rollup.NewWorker(f.st, f.plan, rollup.WorkerOptions{Now: now}))
	first, rows := f.stored(t), f.st.Ops().Rows
	again := rollup.NewWorker(rewound{f.st, f.start}, f.plan, rollup.WorkerOptions{Now: now, MaxJobs: 1 << 30})
	if _, err := again.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.st.Ops().Rows == rows {
		t.Fatal("the second worker wrote nothing: it did not roll again")
	}
	if diff := cmp.Diff(first, f.stored(t)); diff != "" {
		t.Errorf("rolling again changed the stored values (-first +again):\n%s", diff)
	}
}

// TestWorkerBoundedRuns: with MaxJobs 3, no run does more than 3 jobs, each
// run goes on where the last stopped, and the result is the same.
func TestWorkerBoundedRuns(t *testing.T) {
	f := newFixture(t)
	w := rollup.NewWorker(f.st, f.plan, rollup.WorkerOptions{Now: func() time.Time { return f.end }, MaxJobs: 3, Page: 2})
	reps := drain(t, w)
	jobs := 0
	for i, r := range reps {
		if r.Jobs > 3 {
			t.Fatalf("run %d did %d jobs, more than MaxJobs 3", i, r.Jobs)
		}
		jobs += r.Jobs
	}
	if len(reps) < 10 {
		t.Errorf("%d runs for %d jobs: the budget did not bound them", len(reps), jobs)
	}
	f.check(t)
}

// TestWorkersConcurrently runs two workers on one store at once, as two
// gateways would without a lease: the values are the same.
func TestWorkersConcurrently(t *testing.T) {
	f := newFixture(t)
	now := func() time.Time { return f.end }
	var wg sync.WaitGroup
	for range 2 {
		w := rollup.NewWorker(f.st, f.plan, rollup.WorkerOptions{Now: now, MaxJobs: 5, Page: 2})
		wg.Go(func() {
			for range 500 {
				rep, err := w.RunOnce(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				if !rep.More {
					return
				}
			}
		})
	}
	wg.Wait()
	drain(t, rollup.NewWorker(f.st, f.plan, rollup.WorkerOptions{Now: now}))
	f.check(t)
}

// leased is a store whose lease another gateway holds.
type leased struct{ *analyticstest.Memory }

func (leased) Lease(context.Context, time.Duration) (bool, error) { return false, nil }

// metrics records what a worker reports.
type metrics struct {
	mu   sync.Mutex
	runs []error
	lag  map[time.Duration]time.Duration
}

func (m *metrics) RollupRun(_ time.Duration, _ rollup.Report, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.runs = append(m.runs, err)
}

func (m *metrics) RollupLag(step, lag time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lag == nil {
		m.lag = map[time.Duration]time.Duration{}
	}
	m.lag[step] = lag
}

// TestWorkerStandsBy: without the lease a run writes nothing but still
// reports the lag.
func TestWorkerStandsBy(t *testing.T) {
	f := newFixture(t)
	m := &metrics{}
	w := rollup.NewWorker(leased{f.st}, f.plan, rollup.WorkerOptions{Now: func() time.Time { return f.end }, Metrics: m})
	before := f.st.Ops()
	rep, err := w.RunOnce(context.Background())
	if err != nil || !rep.Standby || rep.Jobs != 0 {
		t.Errorf("RunOnce without the lease = %+v, %v; want standby, nothing done", rep, err)
	}
	if f.st.Ops() != before {
		t.Errorf("a standby run wrote: %+v then %+v", before, f.st.Ops())
	}
	if len(m.runs) != 1 || m.runs[0] != nil {
		t.Errorf("runs reported %v, want one without error", m.runs)
	}
}

// connecting is a store still connecting: not ready, its reason the
// Cassandra store's.
type connecting struct {
	*analyticstest.Memory
	ready error
}

func (c *connecting) Ready() error { return c.ready }

// TestWorkerWaitsForTheStore: while the store is not ready (a gateway's
// start, Cassandra still connecting), a run does nothing and is neither a
// run nor an error in the metrics; once it is, the worker runs.
func TestWorkerWaitsForTheStore(t *testing.T) {
	f := newFixture(t)
	m := &metrics{}
	st := &connecting{Memory: f.st, ready: errors.New("cassandra: not connected: connecting")}
	w := rollup.NewWorker(st, f.plan, rollup.WorkerOptions{Now: func() time.Time { return f.end }, Metrics: m})
	before := f.st.Ops()
	rep, err := w.RunOnce(context.Background())
	if err != nil || !rep.Waiting || rep.Jobs != 0 || f.st.Ops() != before {
		t.Errorf("RunOnce on a store not ready = %+v, %v (ops %+v then %+v); want waiting, nothing done", rep, err, before, f.st.Ops())
	}
	if len(m.runs) != 0 {
		t.Errorf("runs reported %v while the store was not ready, want none", m.runs)
	}
	st.ready = nil
	if rep, err := w.RunOnce(context.Background()); err != nil || rep.Waiting || rep.Jobs == 0 {
		t.Errorf("RunOnce once ready = %+v, %v; want a run that rolls", rep, err)
	}
	if len(m.runs) != 1 || m.runs[0] != nil {
		t.Errorf("runs reported %v, want one without error", m.runs)
	}
}

// TestStalledWorkerVisible: while the store refuses the worker's writes,
// every run fails, the lag it reports grows with the clock, and once the
// lag passes half the source's retention it is logged.
func TestStalledWorkerVisible(t *testing.T) {
	f := newFixture(t)
	m := &metrics{}
	var logs bytes.Buffer
	now := f.end
	w := rollup.NewWorker(f.st, f.plan, rollup.WorkerOptions{
		Now: func() time.Time { return now }, Metrics: m, Log: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if _, err := w.RunOnce(context.Background()); err != nil { // progress starts
		t.Fatal(err)
	}
	f.st.Fail = func(op string) error {
		if op == "apply" || op == "advance" {
			return errors.New("disk full")
		}
		return nil
	}
	lag := m.lag[5*time.Minute]
	for range 3 {
		now = now.Add(6 * time.Hour)
		if _, err := w.RunOnce(context.Background()); err == nil {
			t.Fatal("a run with the store refusing writes succeeded")
		}
		if got := m.lag[5*time.Minute]; got < lag+6*time.Hour {
			t.Fatalf("5m lag went from %v to %v over 6 hours of a stalled worker", lag, got)
		}
		lag = m.lag[5*time.Minute]
	}
	if !bytes.Contains(logs.Bytes(), []byte("far behind")) || !bytes.Contains(logs.Bytes(), []byte("queue=5m")) {
		t.Errorf("no warning logged with the 5m tier 18 hours behind (source kept 1d):\n%s", logs.String())
	}
	if n := len(m.runs); n != 4 || m.runs[3] == nil {
		t.Errorf("runs reported %v, want the last three failed", m.runs)
	}
}

// TestRunLoop drives Run under synctest: a run every interval, sooner while
// a backlog is worked off, and Run returns once its context is done.
func TestRunLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		m := &metrics{}
		w := rollup.NewWorker(f.st, f.plan, rollup.WorkerOptions{
			Now: func() time.Time { return f.end }, Interval: time.Minute, MaxJobs: 1, Metrics: m,
		})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { w.Run(ctx); close(done) }()
		time.Sleep(59 * time.Second)
		synctest.Wait()
		// A backlog: a run every 6 s, so about ten in 59 s.
		m.mu.Lock()
		n := len(m.runs)
		m.mu.Unlock()
		if n != 10 {
			t.Errorf("%d runs in 59 s with a backlog, want 10 (one every tenth of the interval)", n)
		}
		cancel()
		<-done
	})
}

// TestWorkerTraced: with a tracer, each run is a span that says what the
// run did.
func TestWorkerTraced(t *testing.T) {
	f := newFixture(t)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	w := rollup.NewWorker(f.st, f.plan, rollup.WorkerOptions{Now: func() time.Time { return f.end }, Tracer: tp.Tracer("test")})
	rep, err := w.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	spans := sr.Ended()
	if len(spans) != 1 || spans[0].Name() != "rollup.run" {
		t.Fatalf("spans %v, want one rollup.run", spans)
	}
	attrs := map[string]int64{}
	for _, kv := range spans[0].Attributes() {
		attrs[string(kv.Key)] = kv.Value.AsInt64()
	}
	if rep.Rows == 0 || attrs["linkgate.rollup.rows"] != int64(rep.Rows) || attrs["linkgate.rollup.jobs"] != int64(rep.Jobs) {
		t.Errorf("the span says %v of a run that did %+v", attrs, rep)
	}
}
