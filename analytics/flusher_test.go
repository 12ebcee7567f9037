package analytics_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/rollup"
)

// memStore is a Writer and Reader in memory that records every Write. It
// adds what it is given, as the Writer contract asks of a store. fail, when
// set, decides whether a Write fails (before applying anything).
type memStore struct {
	mu      sync.Mutex
	buckets map[bucketID]analytics.Visits
	batches []analytics.Batch // successful writes
	tries   []time.Time       // every Write, by the time it was called
	fail    func(try int) bool
	applied func() // called after a Write applied its batch, before it returns
}

type bucketID struct {
	key   string
	step  time.Duration
	start int64
}

var errDown = errors.New("store down")

func newMemStore() *memStore {
	return &memStore{buckets: map[bucketID]analytics.Visits{}}
}

func (s *memStore) Write(ctx context.Context, b analytics.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tries = append(s.tries, time.Now())
	if s.fail != nil && s.fail(len(s.tries)) {
		return errDown
	}
	for _, c := range b.Counts {
		id := bucketID{c.Key, c.Step, c.Start.Unix()}
		s.buckets[id] = sumVisits(s.buckets[id], c.Visits)
	}
	s.batches = append(s.batches, b)
	if s.applied != nil {
		s.mu.Unlock() // let reads see the batch while Write has not returned
		s.applied()
		s.mu.Lock()
	}
	return nil
}

func (s *memStore) setFail(f func(int) bool) {
	s.mu.Lock()
	s.fail = f
	s.mu.Unlock()
}

func (s *memStore) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]analytics.Point, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var pts []analytics.Point
	for id, v := range s.buckets {
		st := time.Unix(id.start, 0).UTC()
		if id.key == key && id.step == step && !st.Before(from) && st.Before(to) {
			pts = append(pts, analytics.Point{Start: st, Visits: v})
		}
	}
	slices.SortFunc(pts, func(a, b analytics.Point) int { return a.Start.Compare(b.Start) })
	return pts, nil
}

// Progress and Marks: nothing is ever rolled, so readers answer every tier
// from the finest.
func (s *memStore) Progress(context.Context) (rollup.Progress, error) { return nil, nil }

func (s *memStore) Marks(context.Context, string) ([]rollup.Mark, error) { return nil, nil }

// reader is what the stats API reads (stats.Reader): a rollup.Reader on a
// store, or a Flusher's Reader.
type reader interface {
	Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]analytics.Point, error)
	Total(ctx context.Context, key string) (analytics.Visits, error)
}

// exact returns the Reader that answers exactly from s alone.
func exact(s rollup.Source) *rollup.Reader { return rollup.NewReader(s, analyticstest.DefaultPlan) }

func (s *memStore) numTries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tries)
}

func sumVisits(a, b analytics.Visits) analytics.Visits {
	return analytics.Visits{Human: a.Human + b.Human, Bot: a.Bot + b.Bot}
}

// checkStored checks that r holds exactly want for every tier of every key:
// each tier's buckets over all time add up to the key's total.
func checkStored(t *testing.T, r reader, defTiers []rollup.Tier, want map[string]analytics.Visits) {
	t.Helper()
	ctx := context.Background()
	from, to := time.Unix(0, 0), time.Now().Add(rollup.Year)
	for key, w := range want {
		got, err := r.Total(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if got != w {
			t.Errorf("Total(%q) = %+v, want %+v", key, got, w)
		}
		for _, tier := range defTiers {
			pts, err := r.Points(ctx, key, tier.Step, from, to)
			if err != nil {
				t.Fatal(err)
			}
			var sum analytics.Visits
			for i, p := range pts {
				sum = sumVisits(sum, p.Visits)
				if !p.Start.Equal(rollup.Align(p.Start, tier.Step)) {
					t.Errorf("%q tier %v: point %v not aligned", key, tier, p.Start)
				}
				if i > 0 && !pts[i-1].Start.Before(p.Start) {
					t.Errorf("%q tier %v: points out of order at %d", key, tier, i)
				}
			}
			if sum != w {
				t.Errorf("%q tier %v: points add up to %+v, want %+v", key, tier, sum, w)
			}
		}
	}
}

var defTiers = rollup.DefaultTiers()

// monday is a Monday 00:00 UTC, so the buckets of every tier start there:
// the coming one, so that tests that read with the real clock never find
// its minutes past the finest tier's retention (a fixed date would expire
// two days after it was written).
var monday = rollup.Align(time.Now(), rollup.Week).Add(rollup.Week)

func TestFlushAfterOneInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := analytics.NewRecorder(100, nil)
		st := newMemStore()
		f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Interval: 10 * time.Second}, nil, nil)
		ctx, cancel := context.WithCancel(t.Context())
		go f.Run(ctx)

		now := time.Now()
		rec.Record("abc", now, false)
		rec.Record("abc", now, true)
		rec.Record("xyz", now.Add(-time.Minute), false)
		time.Sleep(9 * time.Second)
		synctest.Wait()
		if n := st.numTries(); n != 0 {
			t.Fatalf("%d writes before the interval ended", n)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := st.numTries(); n != 1 {
			t.Fatalf("%d writes after one interval, want 1", n)
		}
		b := st.batches[0]
		if !b.At.Equal(time.Now()) {
			t.Errorf("batch At = %v, want the flush time %v", b.At, time.Now())
		}
		// One count per (link, minute): abc's minute, xyz's, and both for
		// all links; all of the finest tier. One Active entry per (link,
		// hour) for the 5-minute tier's roll.
		want := []analytics.Count{
			{Key: "/", Step: time.Minute, Start: rollup.Align(now.Add(-time.Minute), time.Minute), Visits: analytics.Visits{Human: 1}},
			{Key: "/", Step: time.Minute, Start: rollup.Align(now, time.Minute), Visits: analytics.Visits{Human: 1, Bot: 1}},
			{Key: "abc", Step: time.Minute, Start: rollup.Align(now, time.Minute), Visits: analytics.Visits{Human: 1, Bot: 1}},
			{Key: "xyz", Step: time.Minute, Start: rollup.Align(now.Add(-time.Minute), time.Minute), Visits: analytics.Visits{Human: 1}},
		}
		if diff := cmp.Diff(want, b.Counts); diff != "" {
			t.Errorf("counts (-want +got):\n%s", diff)
		}
		if len(b.Active) < 3 || len(b.Marks) != 0 {
			t.Errorf("%d Active entries and %d marks, want one entry per link and hour, no mark", len(b.Active), len(b.Marks))
		}
		checkStored(t, exact(st), defTiers, map[string]analytics.Visits{
			"abc": {Human: 1, Bot: 1}, "xyz": {Human: 1}, analytics.AllLinks: {Human: 2, Bot: 1},
		})
		// Nothing new: no write.
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := st.numTries(); n != 1 {
			t.Errorf("%d writes after an idle interval, want still 1", n)
		}
		cancel()
	})
}

// TestBatchHoldsVisitsBeforeItsTime: a visit recorded before a batch's
// time (Batch.At) is in that batch, not a later one, so that a journal's
// newest batch time bounds what a crash loses (JournalNewest). Here the
// visit is recorded while the flusher reads the clock for the batch.
func TestBatchHoldsVisitsBeforeItsTime(t *testing.T) {
	rec := analytics.NewRecorder(100, nil)
	st := newMemStore()
	at := monday.Add(time.Hour)
	var reads int
	now := func() time.Time {
		if reads++; reads == 1 {
			rec.Record("stamped", at, false)
		}
		return at
	}
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: now}, nil, nil)
	rec.Record("before", at, false)
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(st.batches) != 1 {
		t.Fatalf("%d batches written, want 1", len(st.batches))
	}
	var keys []string
	for _, c := range st.batches[0].Counts {
		keys = append(keys, c.Key)
	}
	if !slices.Contains(keys, "stamped") {
		t.Errorf("the batch of time %v holds %v: the visit recorded before that time is missing", st.batches[0].At, keys)
	}
}

func TestBatchCoalesces(t *testing.T) {
	rec := analytics.NewRecorder(100, nil)
	st := newMemStore()
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: func() time.Time { return monday.Add(2 * time.Minute) }}, nil, nil)
	t0 := monday.Add(30 * time.Second)
	for i := range 1000 {
		rec.Record("k", t0.Add(time.Duration(i)*40*time.Millisecond), i%10 == 0) // 40 s: two minutes
	}
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	b := st.batches[0]
	// Minutes 0 and 1 in the finest tier, for k and for all links: no
	// coarser tier, no total.
	want := []analytics.Count{
		{Key: "/", Step: time.Minute, Start: monday, Visits: analytics.Visits{Human: 675, Bot: 75}},
		{Key: "/", Step: time.Minute, Start: monday.Add(time.Minute), Visits: analytics.Visits{Human: 225, Bot: 25}},
	}
	for _, c := range slices.Clone(want) {
		c.Key = "k"
		want = append(want, c)
	}
	if diff := cmp.Diff(want, b.Counts); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	// Each link announced once for the hour's roll into 5 minutes.
	wantActive := []rollup.Active{{Step: 5 * time.Minute, Period: monday, Key: "/"}, {Step: 5 * time.Minute, Period: monday, Key: "k"}}
	if diff := cmp.Diff(wantActive, b.Active); diff != "" {
		t.Errorf("Active entries (-want +got):\n%s", diff)
	}
	// The next flush of the hour announces nothing again.
	rec.Record("k", t0.Add(time.Minute), false)
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if b := st.batches[1]; len(b.Counts) != 2 || len(b.Active) != 0 {
		t.Errorf("second flush of the hour: %d counts, %d Active entries; want 2 and none", len(b.Counts), len(b.Active))
	}
}

func TestFailingStoreLosesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := analytics.NewRecorder(1000, nil)
		st := newMemStore()
		st.setFail(func(int) bool { return true })
		reg := prometheus.NewRegistry()
		m := analytics.NewMetrics(reg)
		const interval = 10 * time.Second
		f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Interval: interval}, m, nil)
		ctx, cancel := context.WithCancel(t.Context())
		go f.Run(ctx)
		start := time.Now()
		want := map[string]analytics.Visits{}
		rng := rand.New(rand.NewPCG(1, 2))
		visit := func() {
			key := fmt.Sprintf("k%d", rng.IntN(20))
			bot := rng.IntN(4) == 0
			rec.Record(key, time.Now(), bot)
			for _, k := range []string{key, analytics.AllLinks} {
				v := want[k]
				if bot {
					v.Bot++
				} else {
					v.Human++
				}
				want[k] = v
			}
		}
		// 200 s of an outage, a visit every second.
		for range 200 {
			visit()
			time.Sleep(time.Second)
		}
		synctest.Wait()
		var tries []time.Duration
		for _, at := range st.tries {
			tries = append(tries, at.Sub(start))
		}
		// Backoff: one interval, then 2, 4, and at most 6 intervals.
		s := time.Second
		wantTries := []time.Duration{10 * s, 20 * s, 40 * s, 80 * s, 140 * s, 200 * s}
		if diff := cmp.Diff(wantTries, tries); diff != "" {
			t.Errorf("write attempts after start (-want +got):\n%s", diff)
		}
		if got := testkit.Metric(t, reg, "linkgate_analytics_store_errors_total"); got != 6 {
			t.Errorf("store errors = %v, want 6", got)
		}
		if got := testkit.Metric(t, reg, "linkgate_analytics_buffered_keys"); got == 0 {
			t.Errorf("buffered keys = 0 during an outage")
		}
		// Memory merge: the visits show up while the store is down.
		checkStored(t, f.Reader(st), defTiers, want)

		// The store comes back; the next attempt (at 260 s) writes all:
		// each interval's batch on its own, oldest first, each with its
		// own identity.
		st.setFail(nil)
		for range 60 {
			visit()
			time.Sleep(time.Second)
		}
		synctest.Wait()
		if n := len(st.batches); n != 26 {
			t.Fatalf("%d successful writes, want 26 (one per interval)", n)
		}
		for i, b := range st.batches {
			if b.Writer == "" || b.Writer != st.batches[0].Writer || b.Seq != uint64(i+1) {
				t.Fatalf("batch %d has identity (%q, %d), want the same writer and Seq %d", i, b.Writer, b.Seq, i+1)
			}
		}
		if got := testkit.Metric(t, reg, "linkgate_analytics_buffered_keys"); got != 0 {
			t.Errorf("buffered keys = %v after recovery, want 0", got)
		}
		// Then back to one write an interval.
		visit()
		time.Sleep(interval)
		synctest.Wait()
		if n := len(st.batches); n != 27 {
			t.Fatalf("%d successful writes, want 27", n)
		}
		checkStored(t, exact(st), defTiers, want)
		checkStored(t, f.Reader(st), defTiers, want)
		cancel()
	})
}

// TestJournalAndRecover: with the store down, every interval's batch goes
// to the journal, not memory; the final flush journals the last one and
// loses nothing; a new process on the journal writes it all, in the
// background, each batch once.
func TestJournalAndRecover(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	synctest.Test(t, func(t *testing.T) {
		rec := analytics.NewRecorder(1000, nil)
		st := newMemStore()
		st.setFail(func(int) bool { return true })
		reg := prometheus.NewRegistry()
		opts := analytics.FlusherOptions{Interval: 10 * time.Second, JournalPath: dir}
		f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, opts, analytics.NewMetrics(reg), nil)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { f.Run(ctx); close(done) }()
		want := map[string]analytics.Visits{}
		for i := range 50 { // 50 links over 5 intervals
			key := fmt.Sprintf("k%d", i)
			rec.Record(key, time.Now(), false)
			want[key] = analytics.Visits{Human: 1}
			want[analytics.AllLinks] = analytics.Visits{Human: int64(i + 1)}
			if i%10 == 9 {
				time.Sleep(10 * time.Second)
				synctest.Wait()
			}
			if b := testkit.Metric(t, reg, "linkgate_analytics_buffered_keys"); b != 0 {
				t.Fatalf("%v entries in memory after a tick: the journal should hold them", b)
			}
		}
		checkStored(t, f.Reader(st), defTiers, want) // read back from the journal
		cancel()
		<-done
		if n := testkit.Metric(t, reg, "linkgate_analytics_journal_records"); n != 5 {
			t.Errorf("journal records = %v, want 5 (one per interval)", n)
		}
		if b := testkit.Metric(t, reg, "linkgate_analytics_journal_bytes"); b == 0 {
			t.Error("journal bytes = 0 during an outage")
		}
		// Shutdown with the store still down: the rest is journaled too.
		rec.Record("last", time.Now(), true)
		want["last"] = analytics.Visits{Bot: 1}
		want[analytics.AllLinks] = analytics.Visits{Human: 50, Bot: 1}
		if err := f.Close(t.Context()); err != nil {
			t.Errorf("Close with the store down and the journal writable = %v, want nil: nothing is lost", err)
		}

		// A new process on the same journal, the store back.
		st.setFail(nil)
		reg2 := prometheus.NewRegistry()
		f2 := analytics.NewFlusher(analytics.NewRecorder(1000, nil), st, analyticstest.DefaultPlan, opts, analytics.NewMetrics(reg2), nil)
		ctx, cancel = context.WithCancel(t.Context())
		defer cancel()
		go f2.Run(ctx)
		synctest.Wait() // the replay runs at once, before the first tick
		checkStored(t, exact(st), defTiers, want)
		checkStored(t, f2.Reader(st), defTiers, want)
		if n := len(st.batches); n != 6 {
			t.Errorf("%d batches written, want 6: each interval once", n)
		}
		if n := testkit.Metric(t, reg2, "linkgate_analytics_journal_records"); n != 0 {
			t.Errorf("journal records = %v after the replay", n)
		}
		if n := testkit.Metric(t, reg2, "linkgate_analytics_journal_written_batches_total"); n != 6 {
			t.Errorf("batches written from the journal = %v, want 6", n)
		}
	})
}

func TestCloseFlushes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := analytics.NewRecorder(10, nil)
		st := newMemStore()
		f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Interval: time.Minute}, nil, nil)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { f.Run(ctx); close(done) }()
		rec.Record("a", time.Now(), false)
		time.Sleep(5 * time.Second) // SIGTERM long before the interval ends
		cancel()
		<-done
		if err := f.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		checkStored(t, exact(st), defTiers, map[string]analytics.Visits{"a": {Human: 1}, analytics.AllLinks: {Human: 1}})
	})
}

func TestCloseWithoutJournalSaysLost(t *testing.T) {
	rec := analytics.NewRecorder(10, nil)
	st := newMemStore()
	st.setFail(func(int) bool { return true })
	reg := prometheus.NewRegistry()
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{}, analytics.NewMetrics(reg), nil)
	rec.Record("a", monday, false)
	rec.Record("b", monday, true)
	if err := f.Flush(t.Context()); err == nil {
		t.Fatal("Flush with the store down: no error")
	}
	rec.Record("a", monday.Add(time.Minute), false)
	err := f.Close(t.Context())
	var lost *analytics.LostError
	if !errors.As(err, &lost) || !errors.Is(err, errDown) {
		t.Fatalf("Close = %v, want a *LostError wrapping %v", err, errDown)
	}
	if lost.Visits != 3 {
		t.Errorf("LostError.Visits = %d, want 3", lost.Visits)
	}
	if got := testkit.Metric(t, reg, "linkgate_analytics_dropped_visits_total"); got != 3 {
		t.Errorf("dropped visits = %v, want 3", got)
	}
}

func TestMaxKeysOverflow(t *testing.T) {
	reg := prometheus.NewRegistry()
	rec := analytics.NewRecorder(2, analytics.NewMetrics(reg))
	st := newMemStore()
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{}, nil, nil)
	for _, k := range []string{"a", "b", "c", "a", "d", "b", "e"} {
		rec.Record(k, monday, false)
	}
	if rec.Keys() != 2 {
		t.Errorf("Keys() = %d, want 2", rec.Keys())
	}
	if got := testkit.Metric(t, reg, "linkgate_analytics_overflow_total"); got != 3 {
		t.Errorf("overflow = %v, want 3 (c, d, e)", got)
	}
	// All links includes the overflow, even before the flush.
	checkStored(t, f.Reader(st), defTiers, map[string]analytics.Visits{
		"a": {Human: 2}, "b": {Human: 2}, "c": {}, analytics.AllLinks: {Human: 7},
	})
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	checkStored(t, exact(st), defTiers, map[string]analytics.Visits{
		"a": {Human: 2}, "b": {Human: 2}, "c": {}, analytics.AllLinks: {Human: 7},
	})
	// After the flush there is room again; a reload can change the limit.
	rec.SetMaxKeys(3)
	for _, k := range []string{"c", "d", "e", "f"} {
		rec.Record(k, monday, false)
	}
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	checkStored(t, exact(st), defTiers, map[string]analytics.Visits{
		"c": {Human: 1}, "d": {Human: 1}, "e": {Human: 1}, "f": {}, analytics.AllLinks: {Human: 11},
	})
	if got := testkit.Metric(t, reg, "linkgate_visits_recorded_total"); got != 11 {
		t.Errorf("visits recorded = %v, want 11", got)
	}
}

// TestMaxKeysCountsLinksNotCores: a link visited from many goroutines at
// once (so on several cores, each with its own shard) is one tracked link:
// with max_keys 1 all its visits are kept per link and the next link
// overflows.
func TestMaxKeysCountsLinksNotCores(t *testing.T) {
	rec := analytics.NewRecorder(1, nil)
	st := newMemStore()
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{}, nil, nil)
	const workers, per = 8, 500
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range per {
				rec.Record("hot", monday, false)
			}
		})
	}
	wg.Wait()
	rec.Record("cold", monday, false)
	if rec.Keys() != 1 {
		t.Errorf("Keys() = %d, want 1", rec.Keys())
	}
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	checkStored(t, exact(st), defTiers, map[string]analytics.Visits{
		"hot": {Human: workers * per}, "cold": {}, analytics.AllLinks: {Human: workers*per + 1},
	})
}

func TestConcurrentRecordExact(t *testing.T) {
	rec := analytics.NewRecorder(1000, nil)
	st := newMemStore()
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{}, nil, nil)
	const workers, per, keys = 8, 2000, 37
	var wg sync.WaitGroup
	stop := make(chan struct{})
	flushed := make(chan struct{})
	go func() { // flush all the while
		defer close(flushed)
		for {
			select {
			case <-stop:
				return
			default:
				if err := f.Flush(context.Background()); err != nil {
					t.Error(err)
				}
				time.Sleep(100 * time.Microsecond) // pacing, not waiting
			}
		}
	}()
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				k := fmt.Sprintf("k%d", (w*per+i)%keys)
				rec.Record(k, monday.Add(time.Duration(i)*time.Second), i%3 == 0)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-flushed
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := rec.Keys(); n != 0 {
		t.Errorf("Keys() = %d after the last flush, want 0", n)
	}
	want := map[string]analytics.Visits{}
	for w := range workers {
		for i := range per {
			k := fmt.Sprintf("k%d", (w*per+i)%keys)
			for _, key := range []string{k, analytics.AllLinks} {
				v := want[key]
				if i%3 == 0 {
					v.Bot++
				} else {
					v.Human++
				}
				want[key] = v
			}
		}
	}
	checkStored(t, exact(st), defTiers, want)
}

// TestReaderNeverMissesNorDoubleCounts reads totals and curves while
// visits are recorded and flushed (sometimes failing) concurrently: every
// read sees at least the visits recorded before it began and at most those
// begun before it ended.
func TestReaderNeverMissesNorDoubleCounts(t *testing.T) {
	rec := analytics.NewRecorder(1000, nil)
	st := newMemStore()
	var flaky atomic.Bool
	st.setFail(func(try int) bool { return flaky.Load() && try%3 == 0 })
	flaky.Store(true)
	st.applied = func() { time.Sleep(50 * time.Microsecond) } // widen the window a read could fall into
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{}, nil, nil)
	r := f.Reader(st)
	var begun, done, flushes atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				begun.Add(1)
				rec.Record(fmt.Sprintf("k%d", (i+w)%5), monday.Add(time.Duration(i%300)*time.Second), false)
				done.Add(1)
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				f.Flush(context.Background()) // errors are retried by the next
				flushes.Add(1)
				time.Sleep(100 * time.Microsecond) // pacing, not waiting
			}
		}
	})
	ctx := context.Background()
	// Read until 40 flushes went by, so that reads fall into their Writes.
	for i := 0; flushes.Load() < 40; i++ {
		lo := done.Load()
		var got int64
		if i%2 == 0 {
			v, err := r.Total(ctx, analytics.AllLinks)
			if err != nil {
				t.Fatal(err)
			}
			got = v.Human
		} else {
			pts, err := r.Points(ctx, analytics.AllLinks, 5*time.Minute, monday, monday.Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pts {
				got += p.Human
			}
		}
		hi := begun.Load()
		if got < lo || got > hi {
			t.Fatalf("read %d: %d visits, want between %d and %d", i, got, lo, hi)
		}
	}
	close(stop)
	wg.Wait()
	flaky.Store(false)
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	v, _ := exact(st).Total(ctx, analytics.AllLinks)
	if v.Human != done.Load() {
		t.Errorf("stored %d visits, want %d", v.Human, done.Load())
	}
}

func TestDefaultJournalPath(t *testing.T) {
	cfg := analytics.DefaultConfig()
	if got, want := analytics.DefaultJournalPath(cfg), filepath.Join("data", "analytics-journal"); got != want {
		t.Errorf("DefaultJournalPath = %q, want %q", got, want)
	}
	cfg.Embedded.Path = "/var/lib/linkgate/analytics/"
	if got, want := analytics.DefaultJournalPath(cfg), "/var/lib/linkgate/analytics-journal"; got != want {
		t.Errorf("DefaultJournalPath = %q, want %q", got, want)
	}
	cfg.Journal.Path = "/spool/j"
	if got := analytics.DefaultJournalPath(cfg); got != "/spool/j" {
		t.Errorf("DefaultJournalPath with journal.path set = %q, want it", got)
	}
}

type discardWriter struct{}

func (discardWriter) Write(context.Context, analytics.Batch) error { return nil }

// BenchmarkFlush100kLinks is the flusher's own work for an interval in
// which 100,000 links were visited once: swap, the sorted batch of counts,
// and an Active entry for each (each interval is the first of a new hour,
// the costliest).
func BenchmarkFlush100kLinks(b *testing.B) {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
	}
	rec := analytics.NewRecorder(len(keys), nil)
	at := monday
	f := analytics.NewFlusher(rec, discardWriter{}, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: func() time.Time { return at.Add(10 * time.Second) }}, nil, nil)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		at = at.Add(time.Hour)
		for _, k := range keys {
			rec.Record(k, at, false)
		}
		b.StartTimer()
		if err := f.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFlush100kLinksWithDims is the flusher's own work for a steady
// interval in which 100,000 links were visited once each with six
// features and a visitor: BenchmarkFlush100kLinks with the breakdowns'
// cumulative counts (dimState) and the sketches, as TestMeasureFlushCost
// (analytics/cassandra) flushes them.
func BenchmarkFlush100kLinksWithDims(b *testing.B) {
	analyticstest.BenchSteadyFlushes(b, discardWriter{})
}

// TestLongOutageManyBuckets keeps a link's counts through an outage long
// enough for its pending buckets to outgrow the short list they start in.
func TestLongOutageManyBuckets(t *testing.T) {
	rec := analytics.NewRecorder(10, nil)
	st := newMemStore()
	st.setFail(func(int) bool { return true })
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{}, nil, nil)
	const minutes = 100
	for m := range minutes {
		rec.Record("a", monday.Add(time.Duration(m)*time.Minute), m%2 == 0)
		if err := f.Flush(t.Context()); err == nil {
			t.Fatal("Flush with the store down: no error")
		}
	}
	want := map[string]analytics.Visits{"a": {Human: minutes / 2, Bot: minutes / 2}, analytics.AllLinks: {Human: minutes / 2, Bot: minutes / 2}}
	check := func(r reader) {
		t.Helper()
		checkStored(t, r, defTiers, want)
		pts, err := r.Points(t.Context(), "a", time.Minute, monday, monday.Add(rollup.Day))
		if err != nil {
			t.Fatal(err)
		}
		if len(pts) != minutes {
			t.Errorf("%d minute points, want %d", len(pts), minutes)
		}
		for i, p := range pts {
			if w := monday.Add(time.Duration(i) * time.Minute); !p.Start.Equal(w) || p.Human+p.Bot != 1 {
				t.Fatalf("point %d = %+v, want one visit at %v", i, p, w)
			}
		}
	}
	check(f.Reader(st))
	st.setFail(nil)
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	check(exact(st))
	check(f.Reader(st))
}

// TestLateAndOldCounts: a count whose hour may be rolled already comes with
// a mark on its 5-minute bucket, announced in the marks period of the
// flush; a count older than the minutes are kept goes to the 5-minute tier,
// with a mark on its hour. Both read exactly at once, with the worker
// started (its progress tells the reader that the 5-minute tier, not the
// expired minutes, answers for three days ago).
func TestLateAndOldCounts(t *testing.T) {
	rec := analytics.NewRecorder(10, nil)
	mem := analyticstest.NewMemory(analyticstest.DefaultPlan)
	st := &recording{Memory: mem}
	at := monday.Add(3 * time.Hour)
	now := func() time.Time { return at }
	plan, err := rollup.NewPlan(defTiers, rollup.DefaultGrace)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rollup.NewWorker(mem, plan, rollup.WorkerOptions{Now: now}).RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: now}, nil, nil)
	rec.Record("now", at.Add(-30*time.Second), false)
	rec.Record("late", monday.Add(time.Hour+7*time.Minute), false)
	rec.Record("old", monday.Add(-3*rollup.Day+7*time.Minute), false)
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	b := st.batches[0]
	var counts []analytics.Count
	for _, c := range b.Counts {
		if c.Key != analytics.AllLinks {
			counts = append(counts, c)
		}
	}
	wantCounts := []analytics.Count{
		{Key: "late", Step: time.Minute, Start: monday.Add(time.Hour + 7*time.Minute), Visits: analytics.Visits{Human: 1}},
		{Key: "now", Step: time.Minute, Start: at.Add(-time.Minute), Visits: analytics.Visits{Human: 1}},
		{Key: "old", Step: 5 * time.Minute, Start: monday.Add(-3*rollup.Day + 5*time.Minute), Visits: analytics.Visits{Human: 1}},
	}
	if diff := cmp.Diff(wantCounts, counts); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	type mark struct {
		key   string
		step  time.Duration
		start time.Time
	}
	var marks []mark
	for _, m := range b.Marks {
		if m.Key != analytics.AllLinks {
			marks = append(marks, mark{m.Key, m.Step, m.Start})
		}
		if !m.At.Equal(at) {
			t.Errorf("mark %+v made at %v, want the flush time %v", m, m.At, at)
		}
	}
	wantMarks := []mark{{"late", 5 * time.Minute, monday.Add(time.Hour + 5*time.Minute)}, {"old", time.Hour, monday.Add(-3 * rollup.Day)}}
	if diff := cmp.Diff(wantMarks, marks, cmp.AllowUnexported(mark{})); diff != "" {
		t.Errorf("marks (-want +got):\n%s", diff)
	}
	active := map[string]rollup.Active{}
	for _, a := range b.Active {
		active[a.Key] = a
	}
	for key, want := range map[string]rollup.Active{
		"now":  {Step: 5 * time.Minute, Period: monday.Add(2 * time.Hour), Key: "now"},
		"late": {Step: rollup.MarksQueue, Period: at, Key: "late"},
		"old":  {Step: rollup.MarksQueue, Period: at, Key: "old"},
	} {
		if active[key] != want {
			t.Errorf("Active entry of %q = %+v, want %+v", key, active[key], want)
		}
	}
	// Read exactly at once, every tier.
	checkStored(t, f.Reader(mem), defTiers[1:], map[string]analytics.Visits{"now": {Human: 1}, "late": {Human: 1}, "old": {Human: 1}})
}

// recording is a Memory that keeps the batches written to it.
type recording struct {
	*analyticstest.Memory
	batches []analytics.Batch
}

func (r *recording) Write(ctx context.Context, b analytics.Batch) error {
	if err := r.Memory.Write(ctx, b); err != nil {
		return err
	}
	r.batches = append(r.batches, b)
	return nil
}

func TestLostErrorSaysVisits(t *testing.T) {
	for n, want := range map[int64]string{1: "final flush: 1 visit lost: store down", 2: "final flush: 2 visits lost: store down"} {
		if got := (&analytics.LostError{Visits: n, Err: errors.New("store down")}).Error(); !strings.Contains(got, want) {
			t.Errorf("LostError{%d}: %q, want it to say %q", n, got, want)
		}
	}
}
