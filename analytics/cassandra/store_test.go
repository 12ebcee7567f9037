package cassandra

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/go-cmp/cmp"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
)

// onFake returns a connected Store on db whose clock (read ranges, TTLs of
// rolled rows) is *clock.
func onFake(t *testing.T, db *fakeDB, clock *time.Time) *Store {
	t.Helper()
	s := newStore(analyticstest.DefaultPlan, nil)
	s.be = db
	s.now = func() time.Time { return *clock }
	return s
}

// proc is one simulated gateway process on the model: the real recorder,
// flusher and rollup worker on a Store, with a clock of its own.
type proc struct {
	s                         *Store
	rec                       *analytics.Recorder
	fl                        *analytics.Flusher
	worker                    *rollup.Worker
	flushes, failed, restarts int
}

func newProc(t *testing.T, db *fakeDB, clock *time.Time, plan *rollup.Plan) *proc {
	p := &proc{}
	p.start(t, db, clock, plan)
	return p
}

func (p *proc) start(t *testing.T, db *fakeDB, clock *time.Time, plan *rollup.Plan) {
	p.s = onFake(t, db, clock)
	now := func() time.Time { return *clock }
	p.rec = analytics.NewRecorder(1000, nil)
	p.fl = analytics.NewFlusher(p.rec, p.s, plan, analytics.FlusherOptions{Now: now}, nil, nil)
	p.worker = rollup.NewWorker(p.s, plan, rollup.WorkerOptions{Now: now, MaxJobs: 40, Page: 8, Parallel: 4, LeaseTTL: 2 * time.Minute})
}

// TestModelFaults runs two gateway processes against the model of the
// cluster for simulated hours with the real Recorder, Flusher and rollup
// Worker: visits to a few links (some minutes to hours late, as after an
// outage), a share of all statements failing before or after being
// applied, or applied once more later; processes restarting; the cluster's
// clock running behind the gateways'. At the end, with the faults gone and
// the workers caught up, every tier read exactly (analytics.NewReader) and
// every coarse tier as stored must equal a count of every visit, and every
// total too.
func TestModelFaults(t *testing.T) {
	for seed := range uint64(3) {
		// The cluster's clock runs behind the gateways' by up to half an
		// hour: marks must still be deleted by their deletes.
		skew := -time.Duration(seed) * 15 * time.Minute
		t.Run(fmt.Sprint("seed", seed, "skew", skew), func(t *testing.T) { modelFaults(t, seed, skew) })
	}
}

type truthKey struct {
	key   string
	step  time.Duration
	start time.Time
}

func modelFaults(t *testing.T, seed uint64, skew time.Duration) {
	rng := rand.New(rand.NewPCG(seed, 42))
	t0 := time.Date(2026, 3, 1, 19, 40, 0, 0, time.UTC) // crosses a day
	clock := t0
	db := newFakeDB(clock)
	plan, err := rollup.NewPlan(rollup.DefaultTiers(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// rate is the share of statements that fail: low, except for outages
	// (40 rounds of 100) when it is a half.
	rate := 0.01
	db.fault = func(string) fault {
		switch r := rng.Float64() / rate; {
		case r < 1.0/3:
			return failBefore
		case r < 2.0/3:
			return failAfter
		case r < 1:
			return dupLate
		}
		return ok
	}
	keys := []string{"a", "b", "ключ", "rare"}
	truth := map[truthKey]analytics.Visits{}
	totals := map[string]analytics.Visits{}
	procs := []*proc{newProc(t, db, &clock, plan), newProc(t, db, &clock, plan)}
	rolled := 0
	for round := range 500 {
		switch r := rng.Float64(); {
		case r < 0.005:
			clock = clock.Add(3 * time.Hour)
		case r < 0.05:
			clock = clock.Add(7 * time.Minute)
		default:
			clock = clock.Add(10 * time.Second)
		}
		db.setNow(clock.Add(skew))
		for _, p := range procs {
			for range rng.IntN(4) {
				k := keys[rng.IntN(len(keys)-1)]
				if rng.IntN(20) == 0 {
					k = "rare"
				}
				at := clock.Add(-time.Duration(rng.IntN(150)) * time.Second)
				if rng.IntN(20) == 0 {
					at = clock.Add(-time.Duration(rng.IntN(180)) * time.Minute) // late: after an outage
				}
				bot := rng.IntN(3) == 0
				p.rec.Record(k, at, bot)
				v := analytics.Visits{Human: 1}
				if bot {
					v = analytics.Visits{Bot: 1}
				}
				for _, key := range []string{k, analytics.AllLinks} {
					for _, tr := range plan.Tiers() {
						tk := truthKey{key, tr.Step, rollup.Align(at, tr.Step)}
						truth[tk] = truth[tk].Add(v)
					}
					totals[key] = totals[key].Add(v)
				}
			}
			p.flushes++
			if err := p.fl.Flush(context.Background()); err != nil {
				p.failed++
			}
			if rng.IntN(3) == 0 {
				if rep, err := p.worker.RunOnce(context.Background()); err == nil {
					rolled += rep.Rows
				}
			}
			if p.rec.Keys() == 0 && rng.IntN(60) == 0 {
				// A restart: only once the flusher holds nothing.
				if err := p.fl.Flush(context.Background()); err == nil {
					p.s.Close()
					p.start(t, db, &clock, plan)
					p.restarts++
				}
			}
		}
		if rng.IntN(5) == 0 {
			db.applyLate(func(fs []func()) { rng.Shuffle(len(fs), func(i, j int) { fs[i], fs[j] = fs[j], fs[i] }) })
		}
		if round%100 < 40 { // outages of many intervals: batches queue up and are resent in order
			rate = 0.5
		} else {
			rate = 0.01
		}
	}
	db.mu.Lock()
	db.fault = nil
	db.mu.Unlock()
	for i, p := range procs {
		clock = clock.Add(time.Second)
		db.setNow(clock.Add(skew))
		if err := p.fl.Flush(context.Background()); err != nil {
			t.Fatalf("process %d: final flush without faults: %v", i, err)
		}
		t.Logf("process %d: %d flushes, %d failed, %d restarts", i, p.flushes, p.failed, p.restarts)
		if p.failed == 0 || p.failed == p.flushes {
			t.Errorf("process %d: %d of %d flushes failed: the faults did not exercise both paths", i, p.failed, p.flushes)
		}
	}
	db.applyLate(nil)
	// Time on past every period with a visit, then the workers until done;
	// the lease passes when its holder stops renewing it.
	clock = rollup.Align(clock, rollup.Day).Add(rollup.Day + time.Hour)
	db.setNow(clock.Add(skew))
	for caughtUp, n := false, 0; !caughtUp; n++ {
		if n == 200 {
			t.Fatal("the workers did not catch up in 200 runs")
		}
		for _, p := range procs {
			rep, err := p.worker.RunOnce(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			rolled += rep.Rows
			if !rep.Standby && !rep.More {
				caughtUp = true
				break
			}
		}
	}
	t.Logf("%d rolled rows, end at %v", rolled, clock.Sub(t0))

	s := procs[0].s
	r := rollup.NewReader(s, analyticstest.DefaultPlan)
	ctx := context.Background()
	prog, err := s.Progress(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range append(keys, analytics.AllLinks) {
		if ms, _ := s.Marks(ctx, k); len(ms) != 0 {
			t.Errorf("%q: %d marks left after the workers caught up", k, len(ms))
		}
		for i, tr := range plan.Tiers()[:len(plan.Tiers())-1] {
			var want []analytics.Point
			for tk, v := range truth {
				if tk.key == k && tk.step == tr.Step && v != (analytics.Visits{}) {
					want = append(want, analytics.Point{Start: tk.start, Visits: v})
				}
			}
			slices.SortFunc(want, func(a, b analytics.Point) int { return a.Start.Compare(b.Start) })
			from, to := t0.Add(-2*rollup.Week), clock.Add(time.Hour)
			got, err := r.Points(ctx, k, tr.Step, from, to)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("exact Points(%q, %v) (-want +got):\n%s", k, tr, diff)
			}
			if i == 0 {
				continue
			}
			// As stored: the worker wrote every bucket it has got past.
			done := prog.Done(tr.Step)
			want = slices.DeleteFunc(want, func(p analytics.Point) bool { return !p.Start.Before(done) })
			stored, err := s.Points(ctx, k, tr.Step, from, done)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, stored); diff != "" {
				t.Errorf("stored Points(%q, %v) before %v (-want +got):\n%s", k, tr, done, diff)
			}
		}
		got, err := r.Total(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if got != totals[k] {
			t.Errorf("Total(%q) = %+v, want %+v", k, got, totals[k])
		}
	}
	if rolled == 0 {
		t.Error("no row was ever rolled")
	}
}

// TestFailedWriteAppliedThenResent is the core case by hand: a Write fails
// after the cluster applied it and is sent again, by the same process and
// by another one replaying the journal; a gocql retry of an applied write
// arrives after a later batch. Every batch counts once.
func TestFailedWriteAppliedThenResent(t *testing.T) {
	clock := time.Date(2026, 5, 4, 12, 0, 30, 0, time.UTC)
	db := newFakeDB(clock)
	s := onFake(t, db, &clock)
	minute := rollup.Align(clock, time.Minute)
	ctx := context.Background()
	batch := func(seq uint64, h int64) analytics.Batch {
		return analytics.Batch{Writer: "w1", Seq: seq, At: clock.Add(time.Duration(seq) * time.Second),
			Counts: []analytics.Count{{Key: "k", Step: time.Minute, Start: minute, Visits: analytics.Visits{Human: h}}}}
	}
	if err := s.Write(ctx, batch(1, 1)); err != nil {
		t.Fatal(err)
	}
	db.fault = func(string) fault { return dupLate } // applied, and applied again later
	if err := s.Write(ctx, batch(2, 2)); err != nil {
		t.Fatal(err)
	}
	db.fault = func(string) fault { return failAfter } // applied, answer lost
	if err := s.Write(ctx, batch(3, 4)); !errors.Is(err, errFault) {
		t.Fatalf("Write = %v, want the injected fault", err)
	}
	db.fault = nil
	if err := s.Write(ctx, batch(3, 4)); err != nil { // the flusher's resend
		t.Fatal(err)
	}
	if err := s.Write(ctx, batch(4, 8)); err != nil {
		t.Fatal(err)
	}
	db.applyLate(nil) // the retry of the second write lands now
	// Another process replays the journal of the first, which crashed
	// before it knew the fate of batches 3 and 4.
	other := onFake(t, db, &clock)
	for _, b := range []analytics.Batch{batch(3, 4), batch(4, 8)} {
		if err := other.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Points(ctx, "k", time.Minute, minute, minute.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := []analytics.Point{{Start: minute, Visits: analytics.Visits{Human: 1 + 2 + 4 + 8}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Points (-want +got):\n%s", diff)
	}
	// Batches without an identity are applied every time.
	anon := batch(0, 16)
	anon.Writer = ""
	for range 2 {
		if err := s.Write(ctx, anon); err != nil {
			t.Fatal(err)
		}
	}
	got, _ = s.Points(ctx, "k", time.Minute, minute, minute.Add(time.Minute))
	if len(got) != 1 || got[0].Human != 15+32 {
		t.Errorf("after two anonymous batches of 16: %+v, want 47 visits", got)
	}
}

// TestAnnouncedBeforeCounts: a Write whose Active entries or marks fail
// writes no count, so the worker is never left unaware of stored counts.
func TestAnnouncedBeforeCounts(t *testing.T) {
	clock := time.Date(2026, 5, 4, 12, 0, 30, 0, time.UTC)
	db := newFakeDB(clock)
	s := onFake(t, db, &clock)
	minute := rollup.Align(clock, time.Minute)
	b := analytics.Batch{At: clock,
		Counts: []analytics.Count{{Key: "k", Step: time.Minute, Start: minute, Visits: analytics.Visits{Human: 1}}},
		Active: []rollup.Active{{Step: 5 * time.Minute, Period: rollup.Align(clock, time.Hour), Key: "k"}},
		Marks:  []rollup.Mark{{Key: "k", Step: 5 * time.Minute, Start: rollup.Align(clock, 5*time.Minute).Add(-time.Hour), At: clock, ID: 1}},
	}
	for _, op := range []string{"active", "mark"} {
		db.fault = func(o string) fault {
			if o == op {
				return failBefore
			}
			return ok
		}
		if err := s.Write(context.Background(), b); err == nil {
			t.Fatalf("%s failing: Write succeeded", op)
		}
		if len(db.points) != 0 {
			t.Errorf("%s failing: counts were written", op)
		}
	}
}

// TestBatchRows checks the rows of a batch: one per bucket under a writer
// id derived from the batch's identity alone (the same in every process,
// another for every Seq and Writer), written at the batch's At.
func TestBatchRows(t *testing.T) {
	clock := time.Date(2026, 5, 4, 12, 0, 30, 0, time.UTC)
	db := newFakeDB(clock)
	s := onFake(t, db, &clock)
	minute := rollup.Align(clock, time.Minute)
	write := func(writer string, seq uint64) {
		t.Helper()
		err := s.Write(context.Background(), analytics.Batch{Writer: writer, Seq: seq, At: clock, Counts: []analytics.Count{
			{Key: "k", Step: time.Minute, Start: minute, Visits: analytics.Visits{Human: 1}},
			{Key: "k", Step: time.Minute, Start: minute, Visits: analytics.Visits{Bot: 1}}, // the same bucket: one row
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	write("a", 1)
	write("a", 2)
	write("b", 1)
	rows := map[gocql.UUID]fakeCell{}
	for _, p := range db.points {
		for r, c := range p {
			rows[r.writer] = c
		}
	}
	want := map[gocql.UUID]fakeCell{}
	for _, id := range []struct {
		w string
		s uint64
	}{{"a", 1}, {"a", 2}, {"b", 1}} {
		want[batchWriter(id.w, id.s, id.s)] = fakeCell{v: analytics.Visits{Human: 1, Bot: 1}, ts: clock.UnixMicro(), expires: minute.Add(time.Minute + 2*rollup.Day)}
	}
	if diff := cmp.Diff(want, rows, cmp.AllowUnexported(fakeCell{})); diff != "" {
		t.Errorf("rows by writer id (-want +got):\n%s", diff)
	}
	if u := batchWriter("a", 1, 1); u.Version() != 5 || u == rollupWriter {
		t.Errorf("batch writer id %v: version %d, want a version 5 UUID", u, u.Version())
	}
}

// TestRolledRowsLargerWins applies rolled values of one bucket through two
// stores in every order, duplicated late as gocql retries would be: the
// value with more visits stays, because its write timestamp is the bucket's
// end plus its visits.
func TestRolledRowsLargerWins(t *testing.T) {
	clock := time.Date(2026, 5, 4, 12, 0, 30, 0, time.UTC)
	h0 := rollup.Align(clock, time.Hour).Add(-2 * time.Hour)
	row := func(h int64) rollup.Update {
		return rollup.Update{Rows: []rollup.Row{{Key: "k", Step: time.Hour, Start: h0, Visits: analytics.Visits{Human: h, Bot: 1}}}}
	}
	for _, order := range [][]int64{{3, 5, 4}, {5, 3, 4}, {4, 3, 5}} {
		db := newFakeDB(clock)
		a, b := onFake(t, db, &clock), onFake(t, db, &clock)
		db.fault = func(string) fault { return dupLate }
		for i, v := range order {
			if err := []*Store{a, b}[i%2].Apply(context.Background(), row(v)); err != nil {
				t.Fatal(err)
			}
		}
		db.applyLate(func(fs []func()) { slices.Reverse(fs) })
		db.fault = nil
		got, err := a.Points(context.Background(), "k", time.Hour, h0, h0.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if want := []analytics.Point{{Start: h0, Visits: analytics.Visits{Human: 5, Bot: 1}}}; !cmp.Equal(got, want) {
			t.Errorf("applied %v: Points = %v, want %v", order, got, want)
		}
		for _, p := range db.points {
			for w, c := range p {
				if want := h0.Add(time.Hour).UnixMicro() + 6; w.writer == rollupWriter && c.ts != want {
					t.Errorf("rolled row timestamp %d, want the bucket's end %d plus 6 visits", c.ts, want)
				}
			}
		}
	}
}

// TestMarkDeleteWhateverClock deletes a processed mark while the cluster's
// clock is far from the gateway's, either way: the delete carries the
// mark's own timestamp, so it shadows the mark, and a mark of the same
// bucket made meanwhile stays.
func TestMarkDeleteWhateverClock(t *testing.T) {
	at := time.Date(2026, 5, 4, 12, 0, 30, 0, time.UTC)
	start := rollup.Align(at, 5*time.Minute).Add(-time.Hour)
	for _, skew := range []time.Duration{-time.Hour, 0, time.Hour} {
		clock := at
		db := newFakeDB(at.Add(skew))
		s := onFake(t, db, &clock)
		m1 := rollup.Mark{Key: "k", Step: 5 * time.Minute, Start: start, At: at, ID: 1}
		m2 := rollup.Mark{Key: "k", Step: 5 * time.Minute, Start: start, At: at.Add(time.Second), ID: 2}
		if err := s.Write(context.Background(), analytics.Batch{At: at, Marks: []rollup.Mark{m1, m2}}); err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(context.Background(), rollup.Update{Done: []rollup.Mark{m1}}); err != nil {
			t.Fatal(err)
		}
		ms, err := s.Marks(context.Background(), "k")
		if err != nil || len(ms) != 1 || ms[0] != m2 {
			t.Errorf("clock %v off: marks after deleting one = %+v, %v; want [%+v]", skew, ms, err, m2)
		}
	}
}

// TestLease: one of two stores holds the lease and renews it; the other
// gets it once the holder stopped renewing for the TTL.
func TestLease(t *testing.T) {
	clock := time.Date(2026, 5, 4, 12, 0, 30, 0, time.UTC)
	db := newFakeDB(clock)
	a, b := onFake(t, db, &clock), onFake(t, db, &clock)
	ctx := context.Background()
	lease := func(s *Store) bool {
		t.Helper()
		held, err := s.Lease(ctx, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return held
	}
	if !lease(a) || lease(b) {
		t.Fatal("a fresh lease: want a to get it and b not")
	}
	for range 3 {
		db.setNow(db.now.Add(50 * time.Second))
		if !lease(a) || lease(b) {
			t.Fatal("a renewing within the TTL: want a to keep it")
		}
	}
	db.setNow(db.now.Add(61 * time.Second))
	if !lease(b) || lease(a) {
		t.Error("a stopped renewing: want b to take it over")
	}
}

func TestWriteRejectsBadCounts(t *testing.T) {
	clock := time.Date(2026, 5, 4, 12, 0, 30, 0, time.UTC)
	s := onFake(t, newFakeDB(clock), &clock)
	for name, b := range map[string]analytics.Batch{
		"unknown step":              {At: clock, Counts: []analytics.Count{{Key: "k", Step: 2 * time.Minute, Start: rollup.Align(clock, time.Minute), Visits: analytics.Visits{Human: 1}}}},
		"not aligned":               {At: clock, Counts: []analytics.Count{{Key: "k", Step: time.Hour, Start: rollup.Align(clock, time.Minute).Add(time.Minute), Visits: analytics.Visits{Human: 1}}}},
		"active of the finest tier": {At: clock, Active: []rollup.Active{{Step: time.Minute, Period: clock, Key: "k"}}},
		"mark of the marks queue":   {At: clock, Marks: []rollup.Mark{{Key: "k", Step: rollup.MarksQueue, Start: clock, At: clock}}},
		"no At":                     {Counts: []analytics.Count{{Key: "k", Step: time.Minute, Start: rollup.Align(clock, time.Minute), Visits: analytics.Visits{Human: 1}}}},
	} {
		if err := s.Write(context.Background(), b); err == nil {
			t.Errorf("%s: Write succeeded", name)
		}
	}
	if _, err := s.Points(context.Background(), "k", 2*time.Minute, clock, clock.Add(time.Hour)); err == nil {
		t.Error("Points for an unknown step succeeded")
	}
	if err := s.Apply(context.Background(), rollup.Update{Rows: []rollup.Row{{Key: "k", Step: time.Minute, Start: rollup.Align(clock, time.Minute)}}}); err == nil {
		t.Error("Apply of a row of the finest tier succeeded")
	}
}

func TestTTL(t *testing.T) {
	tr := rollup.Tier{Step: time.Hour, Retention: 40 * rollup.Day}
	start := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		at   time.Time
		want int
	}{
		{start, int((time.Hour + 40*rollup.Day) / time.Second)},
		{start.Add(30 * time.Minute).Add(time.Millisecond), int((30*time.Minute + 40*rollup.Day) / time.Second)}, // rounded up
		{start.Add(40*rollup.Day + time.Hour - time.Second), 1},
		{start.Add(40*rollup.Day + time.Hour), 0},
		{start.Add(50 * rollup.Day), 0},
	} {
		if got, keep := ttlSeconds(tr, start, c.at); got != c.want || keep != (c.want > 0) {
			t.Errorf("ttlSeconds(%v, %v, %v) = %d, %v; want %d", tr, start, c.at, got, keep, c.want)
		}
	}
	// Past 2038-01-18 (Cassandra 4.0 refuses any later expiry), or over
	// 20 years: the TTL Cassandra takes now.
	before := ttlLimit(time.Now())
	got, _ := ttlSeconds(rollup.Tier{Step: rollup.Week, Retention: 30 * rollup.Year}, start, start)
	if after := ttlLimit(time.Now()); int64(got) != before && int64(got) != after || before > maxTTL {
		t.Errorf("a 30-year retention: TTL %d, want the largest Cassandra takes now, %d", got, before)
	}
	if end := time.Now().Add(time.Duration(got) * time.Second); !end.Before(maxExpiry.Add(-23 * time.Hour)) {
		t.Errorf("a 30-year retention: expires at %v, want a day before %v", end, maxExpiry)
	}
	if got, keep := ttlSeconds(rollup.Tier{Step: 52 * rollup.Week, Retention: rollup.Forever}, start, start.Add(100*rollup.Year)); got != 0 || !keep {
		t.Errorf("the all-time tier: TTL %d, keep %v; want no TTL, kept", got, keep)
	}
	// An expired bucket is not written at all.
	clock := start.Add(3 * rollup.Day)
	db := newFakeDB(clock)
	s := onFake(t, db, &clock)
	err := s.Write(context.Background(), analytics.Batch{At: clock, Counts: []analytics.Count{{Key: "k", Step: time.Minute, Start: start, Visits: analytics.Visits{Human: 1}}}})
	if err != nil || len(db.points) != 0 {
		t.Errorf("writing a minute 3 days old: %v, %d rows; want no error, no row", err, len(db.points))
	}
}

// TestWriteCanceled checks that a canceled context writes nothing and that
// runAll reports calls it did not make.
func TestWriteCanceled(t *testing.T) {
	clock := time.Date(2026, 5, 4, 12, 0, 30, 0, time.UTC)
	db := newFakeDB(clock)
	s := onFake(t, db, &clock)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Write(ctx, analytics.Batch{At: clock, Counts: []analytics.Count{{Key: "k", Step: time.Minute, Start: rollup.Align(clock, time.Minute), Visits: analytics.Visits{Human: 1}}}})
	if !errors.Is(err, context.Canceled) || len(db.points) != 0 {
		t.Errorf("Write(canceled) = %v with %d partitions written", err, len(db.points))
	}
	calls := 0
	err = runAll(ctx, 100, func(context.Context, int) error { calls++; return nil })
	if err == nil {
		t.Errorf("runAll with a canceled context made %d of 100 calls and returned nil", calls)
	}
}

// TestWriteRefusesBadBreakdown: a breakdown the store cannot write fails
// the Write with its reason (the links' statements are prepared while the
// counts are sent) and writes none of the links' rows.
func TestWriteRefusesBadBreakdown(t *testing.T) {
	clock := time.Date(2026, 5, 4, 12, 0, 30, 0, time.UTC)
	db := newFakeDB(clock)
	s := onFake(t, db, &clock)
	minute := rollup.Align(clock, time.Minute)
	err := s.Write(context.Background(), analytics.Batch{Writer: "w", Seq: 1, At: clock,
		Counts: []analytics.Count{{Key: "k", Step: time.Minute, Start: minute, Visits: analytics.Visits{Human: 1}}},
		Dims: []analytics.DimCount{
			{Key: "k", Day: rollup.Align(clock, rollup.Day), Dim: visitor.Country, Value: "DE", N: 1, Cum: 1},
			{Key: "k", Day: minute, Dim: visitor.Device, Value: "mobile", N: 1, Cum: 1},
		}})
	if err == nil || !strings.Contains(err.Error(), "is not the start of a UTC day") {
		t.Fatalf("Write of a breakdown in the middle of a day: %v, want its reason", err)
	}
	if len(db.dims) != 0 {
		t.Errorf("link rows written: %v", db.dims)
	}
}
