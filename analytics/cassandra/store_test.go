package cassandra

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// onFake returns a connected Store on db whose reads clamp ranges with
// *clock.
func onFake(t *testing.T, db *fakeDB, clock *time.Time) *Store {
	t.Helper()
	s, err := newStore(rollup.DefaultTiers(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.be, s.connErr = db, nil
	s.now = func() time.Time { return *clock }
	return s
}

type bucketKey struct {
	key   string
	step  time.Duration
	start time.Time
}

// flusherSim plays the flusher for one store: counts not yet acknowledged
// are kept and sent again merged into the next batch.
type flusherSim struct {
	s       *Store
	counts  map[bucketKey]analytics.Visits
	totals  map[string]analytics.Visits
	writes  int
	failed  int
	restart int
}

func newFlusherSim(s *Store) *flusherSim {
	return &flusherSim{s: s, counts: make(map[bucketKey]analytics.Visits), totals: make(map[string]analytics.Visits)}
}

func add(v *analytics.Visits, d analytics.Visits) { v.Human += d.Human; v.Bot += d.Bot }

func (f *flusherSim) visit(key string, at time.Time, d analytics.Visits) {
	for _, tr := range rollup.DefaultTiers() {
		k := bucketKey{key, tr.Step, rollup.Align(at, tr.Step)}
		v := f.counts[k]
		add(&v, d)
		f.counts[k] = v
	}
	v := f.totals[key]
	add(&v, d)
	f.totals[key] = v
}

// batch returns what the next flush sends: everything kept, or when keep
// is set only some of it (the real flusher writes spilled counts back in
// later batches), which flush then removes on success.
func (f *flusherSim) batch(at time.Time, keep func() bool) (analytics.Batch, func()) {
	b := analytics.Batch{At: at}
	var sentC []bucketKey
	var sentT []string
	for k, v := range f.counts {
		if keep == nil || !keep() {
			b.Counts = append(b.Counts, analytics.Count{Key: k.key, Step: k.step, Start: k.start, Visits: v})
			sentC = append(sentC, k)
		}
	}
	for k, v := range f.totals {
		if keep == nil || !keep() {
			b.Totals = append(b.Totals, analytics.Total{Key: k, Visits: v})
			sentT = append(sentT, k)
		}
	}
	return b, func() {
		for _, k := range sentC {
			delete(f.counts, k)
		}
		for _, k := range sentT {
			delete(f.totals, k)
		}
	}
}

func (f *flusherSim) flush(at time.Time, keep func() bool) error {
	f.writes++
	b, sent := f.batch(at, keep)
	if err := f.s.Write(context.Background(), b); err != nil {
		f.failed++
		return err
	}
	sent()
	return nil
}

// TestModelFaults runs two gateway processes against the model of the
// cluster for simulated hours: visits to a few links (some for minutes long
// past, as after an outage), a third of all statements failing before or
// after being applied or applied once more later, processes restarting, the
// clock jumping. At the end every tier and every total must be exact.
func TestModelFaults(t *testing.T) {
	for seed := range uint64(3) {
		// The cluster's clock runs behind the gateways' by up to half an
		// hour: folds must still delete what they fold.
		skew := -time.Duration(seed) * 15 * time.Minute
		t.Run(fmt.Sprint("seed", seed, "skew", skew), func(t *testing.T) { modelFaults(t, seed, skew) })
	}
}

func modelFaults(t *testing.T, seed uint64, skew time.Duration) {
	rng := rand.New(rand.NewPCG(seed, 42))
	t0 := time.Date(2026, 3, 1, 23, 40, 0, 0, time.UTC) // crosses a day and a week
	clock := t0
	db := newFakeDB(clock)
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
	keys := []string{"a", "b", "ключ", analytics.AllLinks, "rare"}
	truthP := make(map[bucketKey]analytics.Visits)
	truthT := make(map[string]analytics.Visits)
	procs := []*flusherSim{newFlusherSim(onFake(t, db, &clock)), newFlusherSim(onFake(t, db, &clock))}
	writers := map[string]bool{}
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
		for i, p := range procs {
			for range rng.IntN(4) {
				k := keys[rng.IntN(len(keys)-1)]
				if rng.IntN(20) == 0 {
					k = "rare"
				}
				at := clock.Add(-time.Duration(rng.IntN(150)) * time.Second)
				if rng.IntN(20) == 0 {
					at = clock.Add(-time.Duration(rng.IntN(180)) * time.Minute) // late: after an outage
				}
				d := analytics.Visits{Human: int64(rng.IntN(5)), Bot: int64(rng.IntN(2))}
				p.visit(k, at, d)
				for _, tr := range rollup.DefaultTiers() {
					bk := bucketKey{k, tr.Step, rollup.Align(at, tr.Step)}
					v := truthP[bk]
					add(&v, d)
					truthP[bk] = v
				}
				v := truthT[k]
				add(&v, d)
				truthT[k] = v
			}
			var keep func() bool
			if rng.IntN(4) == 0 {
				keep = func() bool { return rng.IntN(3) == 0 } // hold a third back for a later batch
			}
			_ = p.flush(clock.Add(time.Duration(i)*time.Microsecond), keep)
			writers[p.s.writer.String()] = true
			if len(p.counts) == 0 && len(p.totals) == 0 && rng.IntN(60) == 0 {
				p.s.Close()
				p.s = onFake(t, db, &clock)
				p.restart++
			}
		}
		if rng.IntN(5) == 0 {
			db.applyLate(func(fs []func()) { rng.Shuffle(len(fs), func(i, j int) { fs[i], fs[j] = fs[j], fs[i] }) })
		}
		if round%100 < 40 { // longer than pointGrace: entries of failed writes must survive it
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
		if err := p.flush(clock, nil); err != nil {
			t.Fatalf("process %d: final flush without faults: %v", i, err)
		}
		t.Logf("process %d: %d writes, %d failed, %d restarts, %d point entries, %d totals entries, %d rows to fold",
			i, p.writes, p.failed, p.restart, len(p.s.points), len(p.s.totals), len(p.s.pending))
		if p.failed == 0 || p.failed == p.writes {
			t.Errorf("process %d: %d of %d writes failed: the faults did not exercise both paths", i, p.failed, p.writes)
		}
		if n := len(p.s.points); n > 300 {
			t.Errorf("process %d remembers %d buckets: state is not collected", i, n)
		}
	}
	db.applyLate(nil)
	t.Logf("%d writer ids, end at %v", len(writers), clock.Sub(t0))
	if len(writers) < 10 {
		t.Errorf("only %d writer ids were used: entries were never dropped", len(writers))
	}

	s := procs[0].s
	ctx := context.Background()
	for _, k := range keys {
		for _, tr := range rollup.DefaultTiers() {
			var want []analytics.Point
			for bk, v := range truthP {
				if bk.key == k && bk.step == tr.Step && v != (analytics.Visits{}) {
					want = append(want, analytics.Point{Start: bk.start, Visits: v})
				}
			}
			slices.SortFunc(want, func(a, b analytics.Point) int { return a.Start.Compare(b.Start) })
			got, err := s.Points(ctx, k, tr.Step, t0.Add(-2*rollup.Week), clock.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Points(%q, %v) (-want +got):\n%s", k, tr, diff)
			}
		}
		got, err := s.Total(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if got != truthT[k] {
			t.Errorf("Total(%q) = %+v, want %+v", k, got, truthT[k])
		}
	}
	folded := 0
	for _, k := range keys {
		if db.totals[k] != nil && db.totals[k].version > 0 {
			folded++
		}
		t.Logf("totals %q: base version %d, %d rows", k, db.totals[k].version, db.liveTotalsRows(k))
	}
	if folded == 0 {
		t.Error("no totals row was ever folded")
	}
}

// TestFailedWriteAppliedThenResent is the core case by hand: a Write fails
// after the cluster applied it, its counts are resent merged with new ones,
// and a gocql retry of the failed write arrives after the resend.
func TestFailedWriteAppliedThenResent(t *testing.T) {
	clock := time.Date(2026, 5, 4, 12, 0, 30, 0, time.UTC)
	db := newFakeDB(clock)
	s := onFake(t, db, &clock)
	minute := rollup.Align(clock, time.Minute)
	ctx := context.Background()
	batch := func(at time.Time, h int64) analytics.Batch {
		return analytics.Batch{At: at,
			Counts: []analytics.Count{{Key: "k", Step: time.Minute, Start: minute, Visits: analytics.Visits{Human: h}}},
			Totals: []analytics.Total{{Key: "k", Visits: analytics.Visits{Human: h}}}}
	}
	if err := s.Write(ctx, batch(clock, 1)); err != nil {
		t.Fatal(err)
	}
	db.fault = func(string) fault { return dupLate } // applied, and applied again later
	if err := s.Write(ctx, batch(clock.Add(time.Second), 2)); err != nil {
		t.Fatal(err)
	}
	db.fault = func(string) fault { return failAfter } // applied, answer lost
	if err := s.Write(ctx, batch(clock.Add(2*time.Second), 4)); !errors.Is(err, errFault) {
		t.Fatalf("Write = %v, want the injected fault", err)
	}
	db.fault = nil
	// The flusher resends the 4 with 8 new visits.
	if err := s.Write(ctx, batch(clock.Add(3*time.Second), 4+8)); err != nil {
		t.Fatal(err)
	}
	db.applyLate(nil) // the retry of the second write lands now, with its older timestamp
	got, err := s.Points(ctx, "k", time.Minute, minute, minute.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	want := []analytics.Point{{Start: minute, Visits: analytics.Visits{Human: 1 + 2 + 4 + 8}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Points (-want +got):\n%s", diff)
	}
	if v, err := s.Total(ctx, "k"); err != nil || v.Human != 15 {
		t.Errorf("Total = %+v, %v; want 15 human visits", v, err)
	}
}

// TestTimestampsIncrease checks that point write timestamps are Batch.At in
// microseconds, forced to increase when the clock goes back, and totals
// write timestamps a sequence number.
func TestTimestampsIncrease(t *testing.T) {
	clock := time.Date(2026, 5, 4, 12, 0, 30, 0, time.UTC)
	db := newFakeDB(clock)
	s := onFake(t, db, &clock)
	minute := rollup.Align(clock, time.Minute)
	write := func(at time.Time, h int64) {
		t.Helper()
		err := s.Write(context.Background(), analytics.Batch{At: at, Counts: []analytics.Count{{Key: "k", Step: time.Minute, Start: minute, Visits: analytics.Visits{Human: h}}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	write(clock, 1)
	write(clock.Add(-time.Hour), 2) // the clock stepped back
	var ts []int64
	var got analytics.Visits
	for _, p := range db.points {
		for _, c := range p {
			ts = append(ts, c.ts)
			got = c.v
		}
	}
	if len(ts) != 1 || ts[0] != clock.UnixMicro()+1 || got.Human != 3 {
		t.Errorf("row timestamps %v holding %+v, want [%d] holding 3", ts, got, clock.UnixMicro()+1)
	}
	// Totals rows take the Write's sequence number: 3 for the third Write.
	if err := s.Write(context.Background(), analytics.Batch{At: clock, Totals: []analytics.Total{{Key: "k", Visits: analytics.Visits{Human: 1}}}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range db.totals["k"].rows {
		if c.ts != 3 {
			t.Errorf("totals row timestamp %d, want 3", c.ts)
		}
	}
}

// TestCollect checks the state kept per writer: entries of ended buckets are
// dropped after pointGrace, those whose write failed are kept, a fresh
// writer id takes over, and a count that comes after its bucket's entry was
// dropped adds up rather than overwrites.
func TestCollect(t *testing.T) {
	clock := time.Date(2026, 5, 4, 12, 0, 30, 0, time.UTC)
	db := newFakeDB(clock)
	s := onFake(t, db, &clock)
	ctx := context.Background()
	m0 := rollup.Align(clock, time.Minute)
	one := analytics.Visits{Human: 1}
	write := func(key string, start time.Time) error {
		return s.Write(ctx, analytics.Batch{At: clock, Counts: []analytics.Count{{Key: key, Step: time.Minute, Start: start, Visits: one}},
			Totals: []analytics.Total{{Key: key, Visits: one}}})
	}
	if err := write("ok", m0); err != nil {
		t.Fatal(err)
	}
	db.fault = func(string) fault { return failAfter }
	if err := write("failed", m0); err == nil {
		t.Fatal("Write succeeded despite the fault")
	}
	db.fault = nil
	w0 := s.writer
	clock = m0.Add(time.Minute + pointGrace) // m0 ended pointGrace ago
	if err := write("other", rollup.Align(clock, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.points[pointKey{"ok", time.Minute, m0.UnixMicro()}]; ok {
		t.Error("the entry of an ended bucket was kept")
	}
	if e := s.points[pointKey{"failed", time.Minute, m0.UnixMicro()}]; e == nil || e.writer != w0 {
		t.Error("the entry of a failed write was dropped or changed writer")
	}
	if s.writer == w0 {
		t.Error("the writer id did not change after entries were dropped")
	}
	// A late count for m0: a new row under the new writer id.
	if err := write("ok", m0); err != nil {
		t.Fatal(err)
	}
	// The failed one resent with one more visit, as the flusher does: the
	// same row, overwritten.
	if err := s.Write(ctx, analytics.Batch{At: clock, Counts: []analytics.Count{{Key: "failed", Step: time.Minute, Start: m0, Visits: analytics.Visits{Human: 2}}},
		Totals: []analytics.Total{{Key: "failed", Visits: analytics.Visits{Human: 2}}}}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ok", "failed"} {
		got, err := s.Points(ctx, k, time.Minute, m0, m0.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if want := []analytics.Point{{Start: m0, Visits: analytics.Visits{Human: 2}}}; !cmp.Equal(got, want) {
			t.Errorf("Points(%q) = %v, want %v", k, got, want)
		}
	}
	// Totals: idle links' rows are folded into the base.
	clock = clock.Add(totalsIdle + gcEvery)
	db.setNow(clock)
	if err := write("other", rollup.Align(clock, time.Minute)); err != nil {
		t.Fatal(err)
	}
	if n := db.liveTotalsRows("ok"); n != 0 {
		t.Errorf("%q has %d totals rows after being idle, want 0 (folded)", "ok", n)
	}
	for k, want := range map[string]int64{"ok": 2, "failed": 2, "other": 2} {
		if v, err := s.Total(ctx, k); err != nil || v.Human != want {
			t.Errorf("Total(%q) = %+v, %v; want %d", k, v, err, want)
		}
	}
}

// TestFoldLostAnswer folds with the answer lost once and with another
// process folding the same link, when idle and at Close.
func TestFoldLostAnswer(t *testing.T) {
	clock := time.Date(2026, 5, 4, 12, 0, 30, 0, time.UTC)
	db := newFakeDB(clock)
	a, b := onFake(t, db, &clock), onFake(t, db, &clock)
	ctx := context.Background()
	for i, s := range []*Store{a, b, a} {
		if err := s.Write(ctx, analytics.Batch{At: clock.Add(time.Duration(i) * time.Second), Totals: []analytics.Total{{Key: "k", Visits: analytics.Visits{Human: int64(i + 1), Bot: 1}}}}); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	db.fault = func(op string) fault {
		if op == "fold" {
			n++
			if n == 1 {
				return failAfter
			}
		}
		return ok
	}
	// The link goes idle; the next writes (of another link) fold its rows.
	clock = clock.Add(totalsIdle + gcEvery)
	db.setNow(clock)
	for i, s := range []*Store{a, b} {
		if err := s.Write(ctx, analytics.Batch{At: clock.Add(time.Duration(i) * time.Second), Totals: []analytics.Total{{Key: "other", Visits: analytics.Visits{Human: 1}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if db.liveTotalsRows("k") != 0 || db.totals["k"].version != 2 {
		t.Errorf("after idling: %d rows, base version %d; want 0 rows, version 2", db.liveTotalsRows("k"), db.totals["k"].version)
	}
	a.Close()
	b.Close()
	if n := db.liveTotalsRows("other"); n != 0 || db.totals["other"].version != 2 {
		t.Errorf("after Close: %d rows, base version %d; want 0 rows, version 2", n, db.totals["other"].version)
	}
	c := onFake(t, db, &clock)
	if v, err := c.Total(ctx, "k"); err != nil || v != (analytics.Visits{Human: 6, Bot: 3}) {
		t.Errorf("Total = %+v, %v; want {6 3}", v, err)
	}
}

func TestWriteRejectsBadCounts(t *testing.T) {
	clock := time.Date(2026, 5, 4, 12, 0, 30, 0, time.UTC)
	s := onFake(t, newFakeDB(clock), &clock)
	for name, c := range map[string]analytics.Count{
		"unknown step": {Key: "k", Step: 2 * time.Minute, Start: rollup.Align(clock, time.Minute), Visits: analytics.Visits{Human: 1}},
		"not aligned":  {Key: "k", Step: time.Hour, Start: rollup.Align(clock, time.Minute).Add(time.Minute), Visits: analytics.Visits{Human: 1}},
	} {
		if err := s.Write(context.Background(), analytics.Batch{At: clock, Counts: []analytics.Count{c}}); err == nil {
			t.Errorf("%s: Write succeeded", name)
		}
	}
	if err := s.Write(context.Background(), analytics.Batch{Totals: []analytics.Total{{Key: "k", Visits: analytics.Visits{Human: 1}}}}); err == nil {
		t.Error("a batch without At: Write succeeded")
	}
	if _, err := s.Points(context.Background(), "k", 2*time.Minute, clock, clock.Add(time.Hour)); err == nil {
		t.Error("Points for an unknown step succeeded")
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
		if got := ttlSeconds(tr, start, c.at); got != c.want {
			t.Errorf("ttlSeconds(%v, %v, %v) = %d, want %d", tr, start, c.at, got, c.want)
		}
	}
	if got := ttlSeconds(rollup.Tier{Step: rollup.Week, Retention: 30 * rollup.Year}, start, start); got != maxTTL {
		t.Errorf("a 30-year retention: TTL %d, want the maximum %d", got, maxTTL)
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
	err := s.Write(ctx, analytics.Batch{At: clock, Totals: []analytics.Total{{Key: "k", Visits: analytics.Visits{Human: 1}}}})
	if !errors.Is(err, context.Canceled) || len(db.totals) != 0 {
		t.Errorf("Write(canceled) = %v with %d partitions written", err, len(db.totals))
	}
	calls := 0
	err = runAll(ctx, 100, func(context.Context, int) error { calls++; return nil })
	if err == nil {
		t.Errorf("runAll with a canceled context made %d of 100 calls and returned nil", calls)
	}
}

// TestFoldsKeptWhenCanceled checks that folds a canceled context prevented
// stay queued.
func TestFoldsKeptWhenCanceled(t *testing.T) {
	clock := time.Date(2026, 5, 4, 12, 0, 30, 0, time.UTC)
	s := onFake(t, newFakeDB(clock), &clock)
	for i := range 100 {
		s.pending = append(s.pending, fold{key: fmt.Sprint(i), v: analytics.Visits{Human: 1}})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if n := s.foldSome(ctx, s.be, 50); n != 100 {
		t.Errorf("%d folds queued after a canceled foldSome, want 100", n)
	}
	if n := s.foldSome(context.Background(), s.be, 50); n != 50 {
		t.Errorf("%d folds queued after folding 50 (rows gone count as folded), want 50", n)
	}
}
