package analytics_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/rollup"
)

// rowStore is a PartWriter as the Cassandra store is one: a row per batch
// identity and bucket, which a resend overwrites, read as the sum of the
// rows of a bucket. A Write of more entries than fit applies the first of
// them and times out, as a cluster too slow for it applies some statements
// before the deadline.
type rowStore struct {
	mu     sync.Mutex
	rows   map[rowID]analytics.Visits
	fit    int   // entries a Write can take in time
	sizes  []int // the entries of every Write, in order
	refuse error // when set, every Write is refused with it
}

type rowID struct {
	writer     string
	first, seq uint64
	key        string
	step       time.Duration
	start      int64
}

func (s *rowStore) Write(ctx context.Context, b analytics.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(b.Counts) + len(b.Dims) + len(b.Uniques)
	s.sizes = append(s.sizes, n)
	if s.refuse != nil {
		return s.refuse
	}
	applied := b.Counts
	if n > s.fit {
		applied = applied[:min(len(applied), s.fit)]
	}
	for _, c := range applied {
		s.rows[rowID{b.Writer, b.FirstSeq(), b.Seq, c.Key, c.Step, c.Start.Unix()}] = c.Visits
	}
	if n > s.fit {
		return fmt.Errorf("rowStore: %d entries: %w", n, analytics.ErrTimeout)
	}
	return nil
}

func (s *rowStore) WritesParts() {}

func (s *rowStore) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]analytics.Point, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sums := map[int64]analytics.Visits{}
	for id, v := range s.rows {
		st := time.Unix(id.start, 0)
		if id.key == key && id.step == step && !st.Before(from) && st.Before(to) {
			sums[id.start] = sumVisits(sums[id.start], v)
		}
	}
	var pts []analytics.Point
	for st, v := range sums {
		pts = append(pts, analytics.Point{Start: time.Unix(st, 0).UTC(), Visits: v})
	}
	slices.SortFunc(pts, func(a, b analytics.Point) int { return a.Start.Compare(b.Start) })
	return pts, nil
}

func (s *rowStore) Progress(context.Context) (rollup.Progress, error) { return nil, nil }
func (s *rowStore) Marks(context.Context, string) ([]rollup.Mark, error) {
	return nil, nil
}

func (s *rowStore) writes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sizes)
}

// journalOutage records links visits of distinct links in one interval
// while the store refuses every write, and closes the flusher: its batch
// waits in the journal at dir.
func journalOutage(t *testing.T, dir string, links int) map[string]analytics.Visits {
	t.Helper()
	rec := analytics.NewRecorder(links+10, nil)
	down := &rowStore{rows: map[rowID]analytics.Visits{}, refuse: errors.New("down")}
	f := analytics.NewFlusher(rec, down, analyticstest.DefaultPlan, analytics.FlusherOptions{Interval: 10 * time.Second, JournalPath: dir}, nil, nil)
	want := map[string]analytics.Visits{analytics.AllLinks: {Human: int64(links)}}
	for i := range links {
		key := fmt.Sprintf("k%04d", i)
		rec.Record(key, time.Now(), false)
		want[key] = analytics.Visits{Human: 1}
	}
	if err := f.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	return want
}

// TestJournalDrainsToASlowStore: a journaled batch of 1,000 links is
// replayed to a store that takes 150 entries per Write in time (the rest
// of a larger Write times out, some of it applied): the writer halves the
// part written after each timeout, at once, until it fits, then writes
// the batch in such parts, trying a part twice as large after 8 in a row
// fit; every count is stored once, whatever the timed-out Writes applied;
// a small batch then is written whole.
func TestJournalDrainsToASlowStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	synctest.Test(t, func(t *testing.T) {
		want := journalOutage(t, dir, 1000)
		st := &rowStore{rows: map[rowID]analytics.Visits{}, fit: 150}
		rec := analytics.NewRecorder(1000, nil)
		reg := prometheus.NewRegistry()
		f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Interval: 10 * time.Second, JournalPath: dir}, analytics.NewMetrics(reg), nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		start := time.Now()
		go f.Run(ctx)
		synctest.Wait() // the replay runs at once
		if took := time.Since(start); took != 0 {
			t.Errorf("the replay took %v of the clock: it waited for a backoff", took)
		}
		sizes := st.writes()
		// 2,001 entries (the counts of 1,000 links and all-links, and the
		// links' top-list counts): 2,001 times out, then 1,000, 500, 250,
		// and 125 fits; after 8 parts in a row fit, 250 is tried, times
		// out, and 125 again; 2,001 = 16 × 125 + 1.
		p8 := slices.Repeat([]int{125}, 8)
		want1 := slices.Concat([]int{2001, 1000, 500, 250}, p8, []int{250}, p8, []int{1})
		if !slices.Equal(sizes, want1) {
			t.Errorf("Writes of %v entries, want %v", sizes, want1)
		}
		checkStored(t, exact(st), defTiers, want)
		if n := testkit.Metric(t, reg, "linkgate_analytics_journal_records"); n != 0 {
			t.Errorf("journal records = %v after the replay, want 0", n)
		}

		// A batch of 7 entries (3 links, all-links, 3 top-list counts) is
		// written whole.
		for i := range 3 {
			rec.Record(fmt.Sprintf("late%d", i), time.Now(), false)
			want[fmt.Sprintf("late%d", i)] = analytics.Visits{Human: 1}
		}
		want[analytics.AllLinks] = analytics.Visits{Human: 1003}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if got := st.writes()[len(sizes):]; !slices.Equal(got, []int{7}) {
			t.Errorf("the next batch: Writes of %v entries, want [7]", got)
		}
		checkStored(t, exact(st), defTiers, want)
	})
}

// TestRefusedBatchNotSplitNorHurried: a store that refuses a write for
// another reason than time gets the whole batch again, after the backoff
// (one interval, doubling, at most six): never at once, never in parts;
// the refusal of the journaled batch is reported at ERROR, once.
func TestRefusedBatchNotSplitNorHurried(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	synctest.Test(t, func(t *testing.T) {
		journalOutage(t, dir, 1000)
		st := &rowStore{rows: map[rowID]analytics.Visits{}, fit: 100000, refuse: errors.New("Invalid: refused")}
		var logs testkit.Logs
		f := analytics.NewFlusher(analytics.NewRecorder(10, nil), st, analyticstest.DefaultPlan,
			analytics.FlusherOptions{Interval: 10 * time.Second, JournalPath: dir}, nil, slog.New(logs.Handler()))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go f.Run(ctx)
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		sizes := st.writes()
		// At 0, 10, 30, 70, 130, 190, 250 s.
		if len(sizes) != 7 || slices.ContainsFunc(sizes, func(n int) bool { return n != 2001 }) {
			t.Errorf("Writes of %v entries in 5 minutes, want 7 of the whole batch (2,001)", sizes)
		}
		if n := logs.Count("analytics: the store refuses a journaled batch; it is tried again after the backoff, and the batches after it wait",
			map[string]string{"level": "ERROR", "visits": "1000", "err": "analytics: write 1001 counts: Invalid: refused"}); n != 1 {
			t.Errorf("the refusal reported %d times at ERROR, want once:\n%s", n, &logs)
		}
	})
}

// patientStore is a store that takes no parts and needs need to write a
// batch: a Write whose deadline comes sooner times out.
type patientStore struct {
	*memStore
	need      time.Duration
	deadlines []time.Duration
}

func (s *patientStore) Write(ctx context.Context, b analytics.Batch) error {
	d, _ := ctx.Deadline()
	s.deadlines = append(s.deadlines, time.Until(d))
	select {
	case <-time.After(s.need):
		return s.memStore.Write(ctx, b)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestSlowStoreGetsMoreTime: a store that takes no parts and needs 12 s
// for a write gets twice the deadline after each timeout (5 s, 10 s, 20
// s), and the batch is written.
func TestSlowStoreGetsMoreTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &patientStore{memStore: newMemStore(), need: 12 * time.Second}
		rec := analytics.NewRecorder(10, nil)
		f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan,
			analytics.FlusherOptions{Interval: time.Second, WriteTimeout: 5 * time.Second}, nil, nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go f.Run(ctx)
		rec.Record("slow", time.Now(), false)
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		s := time.Second
		if !slices.Equal(st.deadlines[:3], []time.Duration{5 * s, 10 * s, 20 * s}) {
			t.Errorf("deadlines %v, want 5s, 10s, 20s first", st.deadlines)
		}
		checkStored(t, exact(st.memStore), defTiers, map[string]analytics.Visits{"slow": {Human: 1}})
	})
}
