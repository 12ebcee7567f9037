package analyticstest

import (
	"context"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitclass"
	"github.com/linkgate/linkgate/visitor"
)

// eraseEnv is the Erase subtest's clock, visits and checks.
type eraseEnv struct {
	t      *testing.T
	e      *env
	tenant string
	clock  atomic.Pointer[time.Time]
	uniq   atomic.Uint64
}

func (x *eraseEnv) now() time.Time { return *x.clock.Load() }

func (x *eraseEnv) advance(d time.Duration) {
	t := x.now().Add(d)
	x.clock.Store(&t)
}

// visit records n human visits of the link short of tenant in rec, each
// of a visitor of its own, referred by news.example.
func (x *eraseEnv) visit(rec *analytics.Recorder, tenant, short string, n int) {
	for range n {
		fe := visitor.Features{visitor.Referrer: "news.example"}
		rec.RecordTenantVisit(tenant, short, x.now(), visitclass.Human, &fe, x.uniq.Add(1)*0x9e3779b97f4a7c15)
	}
}

// flusher returns a flusher of rec to w, journaling in dir, on the
// subtest's clock.
func (x *eraseEnv) flusher(rec *analytics.Recorder, w analytics.Writer, dir string) *analytics.Flusher {
	return analytics.NewFlusher(rec, w, DefaultPlan, analytics.FlusherOptions{JournalPath: dir, Now: x.now}, nil, nil)
}

func (x *eraseEnv) flush(f *analytics.Flusher) {
	x.t.Helper()
	if err := f.Flush(context.Background()); err != nil {
		x.t.Fatal(err)
	}
}

// roll moves the clock two days on, runs the rollup on s until it has
// nothing left to do (rolling every tier but the weeks') and returns the
// rows it wrote.
func (x *eraseEnv) roll(s Store) (rows int) {
	x.t.Helper()
	x.advance(2 * rollup.Day)
	// The store without its lease (rollup.Leaser): the subtest's stores
	// are one gateway's, one after the other.
	w := rollup.NewWorker(struct{ rollup.Store }{s}, DefaultPlan, rollup.WorkerOptions{Now: x.now, MaxJobs: 1 << 20})
	for range 20 {
		rep, err := w.RunOnce(context.Background())
		if err != nil {
			x.t.Fatal(err)
		}
		rows += rep.Rows
		if !rep.More {
			return rows
		}
	}
	x.t.Fatal("the rollup had more to do after 20 runs")
	return rows
}

// check checks that s holds nothing of the keys gone (every tier and the
// total, the breakdowns, the unique visitors, the top lists of the
// service and of the subtest's tenant) and exactly kept of the others.
// One function over 80 lines: the expected counts of every key, gone and
// kept, then a read of each kind for each key, against them.
func (x *eraseEnv) check(s Store, gone []string, kept map[string]analytics.Visits) {
	t := x.t
	t.Helper()
	ctx := context.Background()
	want := map[string]analytics.Visits{}
	for _, k := range gone {
		want[k] = analytics.Visits{}
	}
	for k, v := range kept {
		want[k] = v
	}
	r := rollup.NewReader(s, DefaultPlan)
	from, to := x.e.now.Add(-rollup.Week), x.now().Add(rollup.Week)
	days, daysTo := rollup.Align(x.e.now, rollup.Day), rollup.Align(x.now(), rollup.Day).Add(rollup.Day)
	top, err := s.Top(ctx, days, daysTo, 100)
	if err != nil {
		t.Fatal(err)
	}
	ttop, err := s.TenantTop(ctx, x.tenant, days, daysTo, 100)
	if err != nil {
		t.Fatal(err)
	}
	for k, w := range want {
		if got, err := r.Total(ctx, k); err != nil || got != w {
			t.Errorf("Total(%q) = %+v, %v; want %+v", k, got, err, w)
		}
		for _, tier := range DefaultPlan.Retention() {
			if x.now().Sub(x.e.now) > tier.Retention-time.Hour {
				continue // expired, as a store that expires by its clock has it (Clock)
			}
			pts, err := r.Points(ctx, k, tier.Step, rollup.Align(from, tier.Step), to)
			if err != nil {
				t.Fatal(err)
			}
			var sum analytics.Visits
			for _, p := range pts {
				sum = sum.Add(p.Visits)
			}
			if sum != w {
				t.Errorf("%q, tier %v: %+v, want %+v", k, rollup.FormatDuration(tier.Step), sum, w)
			}
		}
		dims, err := s.Dims(ctx, k, visitor.Referrer, days, daysTo)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, d := range dims {
			n += d.Count
		}
		if n != w.Human {
			t.Errorf("%q: a breakdown of %d visits, want %d", k, n, w.Human)
		}
		sk, err := s.Uniques(ctx, k, days, daysTo)
		if err != nil {
			t.Fatal(err)
		}
		if u := sk.Estimate(); (u == 0) != (w.Human == 0) {
			t.Errorf("%q: %d unique visitors, with %d visits", k, u, w.Human)
		}
		if k == analytics.TenantAll(x.tenant) {
			continue
		}
		inTop := func(list []analytics.TopLink) int64 {
			if i := slices.IndexFunc(list, func(l analytics.TopLink) bool { return l.Key == k }); i >= 0 {
				return list[i].Visits
			}
			return 0
		}
		if got := inTop(top); got != w.Human {
			t.Errorf("%q: %d visits in the top list, want %d; list %v", k, got, w.Human, top)
		}
		if tn, _ := analytics.SplitKey(k); tn == x.tenant {
			if got := inTop(ttop); got != w.Human {
				t.Errorf("%q: %d visits in %s's top list, want %d; list %v", k, got, x.tenant, w.Human, ttop)
			}
		}
		counts, err := s.TopCounts(ctx, []string{k}, days, daysTo)
		if err != nil {
			t.Fatal(err)
		}
		if counts[k] != w.Human {
			t.Errorf("TopCounts(%q) = %d, want %d", k, counts[k], w.Human)
		}
	}
}

// testErase erases one link, then one tenant, with counts of them
// everywhere a count can be: stored and rolled, queued in the flusher
// with the store down, in the recorder, and journaled by the process's
// final flush. Every tier, breakdown, unique count and top list of what
// was erased reads nothing, and stays so after a restart that replays
// the journal and after the rollup runs; visits after the erasure count,
// and the other links keep theirs. With a second store on the same data
// (Another), a link erased through one, whose visits the other had
// written before (cumulative breakdown and top-list counts of its writer
// generation), does not come back with the other's next flush.
//
// One function over 80 lines: the steps are one story in order, on one
// store, clock, journal and set of expected counts, which a split would
// pass from step to step.
func testErase(t *testing.T, e *env) {
	er, ok := e.s.(analytics.Eraser)
	if !ok {
		t.Skip("the store cannot erase")
	}
	if e.h.Reopen == nil {
		t.Skip("the store cannot be reopened")
	}
	x := &eraseEnv{t: t, e: e, tenant: "er-" + token()}
	start := e.now
	x.clock.Store(&start)
	if e.h.Clock != nil {
		e.h.Clock(x.now)
	}
	ctx := context.Background()
	dir := t.TempDir()
	tn, def := x.tenant, e.key("go")
	goKey, xKey := analytics.TenantKey(tn, "go"), analytics.TenantKey(tn, "x")

	// Stored, rolled, queued, in memory.
	st := e.s
	w := flaky{Store: st, down: new(atomic.Bool)}
	rec := analytics.NewRecorder(1000, nil)
	rec.SetMaxValues(50)
	f := x.flusher(rec, w, filepath.Join(dir, "journal"))
	x.visit(rec, tn, "go", 3)
	x.visit(rec, tn, "x", 2)
	x.visit(rec, "", def, 4)
	x.flush(f)
	if x.roll(st) == 0 {
		t.Fatal("the rollup wrote nothing")
	}
	x.visit(rec, tn, "go", 2)
	w.down.Store(true)
	if err := f.Flush(ctx); err == nil {
		t.Fatal("a flush to a store that is down passed")
	}
	x.visit(rec, tn, "go", 1)
	x.advance(time.Minute)
	erased, err := f.Erase(ctx, er, tn, "go")
	if err != nil {
		t.Fatal(err)
	}
	if erased.Tenant != tn || erased.Key != "go" || erased.At.Before(x.now()) {
		t.Fatalf("erasure %+v", erased)
	}
	kept := map[string]analytics.Visits{xKey: {Human: 2}, def: {Human: 4}}
	x.check(st, []string{goKey}, kept)
	if err := f.Close(ctx); err != nil { // journals what waits
		t.Fatal(err)
	}

	// A restart replays the journal: what it holds of the link was placed
	// before the erasure.
	st = e.h.Reopen()
	er = st.(analytics.Eraser)
	rec = analytics.NewRecorder(1000, nil)
	rec.SetMaxValues(50)
	f = x.flusher(rec, st, filepath.Join(dir, "journal"))
	x.flush(f)
	x.check(st, []string{goKey}, kept)
	x.roll(st)
	x.check(st, []string{goKey}, kept)

	// Visits after the erasure count.
	x.visit(rec, tn, "go", 1)
	x.flush(f)
	x.roll(st)
	kept[goKey] = analytics.Visits{Human: 1}
	x.check(st, nil, kept)

	// The whole tenant, with counts of it journaled again.
	x.visit(rec, tn, "x", 5)
	w = flaky{Store: st, down: new(atomic.Bool)}
	w.down.Store(true)
	f2 := x.flusher(rec, w, filepath.Join(dir, "journal2"))
	if err := f2.Flush(ctx); err == nil {
		t.Fatal("a flush to a store that is down passed")
	}
	if _, err := f2.Erase(ctx, er, tn, ""); err != nil {
		t.Fatal(err)
	}
	if err := f2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	gone := []string{goKey, xKey, analytics.TenantAll(tn)}
	kept = map[string]analytics.Visits{def: {Human: 4}}
	x.check(st, gone, kept)
	f2 = x.flusher(analytics.NewRecorder(10, nil), st, filepath.Join(dir, "journal2"))
	x.flush(f2)
	x.roll(st)
	x.check(st, gone, kept)
	if err := f2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f2.Erase(ctx, er, "", ""); err == nil {
		t.Error("the default tenant was erased whole")
	}
	if e.h.Another == nil {
		return
	}

	// Two gateways: B wrote the link's visits before A erased it; B's
	// next flush brings back none of them, and counts its new visits.
	b := e.h.Another()
	recA, recB := analytics.NewRecorder(1000, nil), analytics.NewRecorder(1000, nil)
	recA.SetMaxValues(50)
	recB.SetMaxValues(50)
	fA, fB := x.flusher(recA, st, filepath.Join(dir, "a")), x.flusher(recB, b, filepath.Join(dir, "b"))
	two := analytics.TenantKey(tn, "two")
	x.visit(recA, tn, "two", 2)
	x.visit(recB, tn, "two", 3)
	x.flush(fA)
	x.flush(fB)
	x.check(st, nil, map[string]analytics.Visits{two: {Human: 5}})
	x.advance(time.Minute)
	if _, err := fA.Erase(ctx, er, tn, "two"); err != nil {
		t.Fatal(err)
	}
	x.advance(time.Minute)
	x.visit(recB, tn, "two", 1)
	x.flush(fB)
	x.flush(fA)
	want := map[string]analytics.Visits{two: {Human: 1}}
	x.check(st, nil, want)
	x.check(b, nil, want)
	x.roll(st)
	x.check(b, nil, want)
	for _, f := range []*analytics.Flusher{fA, fB} {
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// testEraseBeforeApply: a rollup that read a link's minutes before its
// erasure and writes the rolled bucket after it (the bucket holds the
// erasure's time: a worker whose clock runs ahead of the eraser's, or a
// long run) brings none of the erased visits back; the visit counted
// after the erasure stays.
func testEraseBeforeApply(t *testing.T, e *env) {
	er, ok := e.s.(analytics.Eraser)
	if !ok {
		t.Skip("the store cannot erase")
	}
	ctx := context.Background()
	tn := "er-" + token()
	key := analytics.TenantKey(tn, "race")
	five := rollup.Align(e.now, 5*time.Minute)
	minute := func(at time.Time, n int64, seq uint64) analytics.Batch {
		start := rollup.Align(at, time.Minute)
		return analytics.Batch{Writer: "w-" + tn, Seq: seq, At: at.Add(time.Second),
			Counts: []analytics.Count{{Key: key, Step: time.Minute, Start: start, Visits: analytics.Visits{Human: n}}},
			Active: []rollup.Active{{Step: 5 * time.Minute, Period: DefaultPlan.Period(1, start), Key: key}}}
	}
	write(t, e.s, minute(five, 3, 1))
	// The worker reads the minutes: 3 visits in the 5-minute bucket.
	stale := rollup.Row{Key: key, Step: 5 * time.Minute, Start: five, Visits: analytics.Visits{Human: 3}}
	if err := er.Erase(ctx, analytics.Erasure{Tenant: tn, Key: "race", At: five.Add(2 * time.Minute)}); err != nil {
		t.Fatal(err)
	}
	write(t, e.s, minute(five.Add(3*time.Minute), 1, 2))
	if err := e.s.Apply(ctx, rollup.Update{Rows: []rollup.Row{stale}}); err != nil {
		t.Fatal(err)
	}
	if got := sum(t, e.s, key, 5*time.Minute, five, five.Add(5*time.Minute)); got.Human > 1 {
		t.Errorf("the 5-minute bucket rolled before the erasure and written after it reads %d visits, want at most the 1 after it", got.Human)
	}
	if got := sum(t, e.s, key, time.Minute, five, five.Add(5*time.Minute)); got.Human != 1 {
		t.Errorf("the minutes read %d visits, want the 1 after the erasure", got.Human)
	}
}
