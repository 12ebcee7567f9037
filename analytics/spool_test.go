package analytics_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/rollup"
)

// TestJournalCap fills a 2 MiB journal during an outage. Links visited in
// every interval fold into hours and nothing is dropped; then a flood of
// distinct links that no fold can shrink makes the journal drop its oldest
// records, counted in the metric and logged with numbers. Once the store is
// back, what it holds plus what was dropped is every visit, each once.
func TestJournalCap(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	var logs testkit.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	st := newMemStore()
	st.setFail(func(int) bool { return true })
	reg := prometheus.NewRegistry()
	at := monday.Add(10 * time.Hour)
	now := func() time.Time { return at }
	rec := analytics.NewRecorder(1_000_000, nil)
	// 2 MiB: each interval's batch holds a link's count and its day's
	// analytics.DimLink entry, which a fold merges per day.
	opts := analytics.FlusherOptions{JournalPath: dir, JournalMaxBytes: 2 << 20, Now: now}
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, opts, analytics.NewMetrics(reg), log)
	var sent int64
	flush := func() {
		t.Helper()
		if err := f.Flush(t.Context()); err == nil {
			t.Fatal("Flush with the store down: no error")
		}
		at = at.Add(10 * time.Second)
	}
	// Phase 1: 200 links visited every interval for 2 hours of intervals:
	// about 3 MB of batches, folded into hours.
	for i := range 720 {
		for k := range 200 {
			rec.Record(fmt.Sprintf("link%03d", k), at, i%7 == 0)
			sent++
		}
		flush()
	}
	if got := testkit.Metric(t, reg, "linkgate_analytics_dropped_visits_total"); got != 0 {
		t.Errorf("phase 1: %v visits dropped; folding should have made room", got)
	}
	if !strings.Contains(logs.String(), "oldest counts folded into coarser buckets") {
		t.Errorf("phase 1: no fold logged:\n%s", tail(logs.String()))
	}
	if b := testkit.Metric(t, reg, "linkgate_analytics_journal_bytes"); b > 4<<20 {
		t.Errorf("journal bytes %v, far beyond the 2 MiB cap", b)
	}
	// The counts read back from the journal, folded or not: every visit.
	checkTotal(t, f.Reader(st), analytics.AllLinks, sent)

	// Phase 2: 400 new links an interval, each once: folding cannot
	// shrink them, the oldest records go, a file of several at a time
	// (space comes back a whole file at a time).
	for i := range 400 {
		for k := range 400 {
			rec.Record(fmt.Sprintf("flood%03d-%03d", i, k), at, false)
			sent++
		}
		flush()
	}
	dropped := int64(testkit.Metric(t, reg, "linkgate_analytics_dropped_visits_total"))
	if dropped == 0 {
		t.Fatalf("phase 2: nothing dropped at the cap; journal %v bytes", testkit.Metric(t, reg, "linkgate_analytics_journal_bytes"))
	}
	if !strings.Contains(logs.String(), "analytics: journal full: oldest counts dropped") || !strings.Contains(logs.String(), "dropped_total=") {
		t.Errorf("no drop logged with numbers:\n%s", tail(logs.String()))
	}
	t.Logf("sent %d visits; dropped %d at the 2 MiB cap", sent, dropped)

	// The store is back: it gets every visit not dropped, once.
	st.setFail(nil)
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	checkTotal(t, exact(st), analytics.AllLinks, sent-dropped)
	if err := f.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestJournalNewest: JournalNewest reads the time of the newest batch a
// journal holds for the store, refuses a journal a Flusher has open, and
// reads zero once the store took everything.
func TestJournalNewest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	st := newMemStore()
	st.setFail(func(int) bool { return true })
	at := monday.Add(10 * time.Hour)
	opts := analytics.FlusherOptions{JournalPath: dir, Now: func() time.Time { return at }}
	rec := analytics.NewRecorder(100, nil)
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, opts, nil, nil)
	var last time.Time
	for i := range 3 {
		rec.Record(fmt.Sprintf("link%d", i), at, false)
		if err := f.Flush(t.Context()); err == nil {
			t.Fatal("Flush with the store down: no error")
		}
		last = at
		at = at.Add(10 * time.Second)
	}
	if _, err := analytics.JournalNewest(dir); err == nil {
		t.Error("JournalNewest of a journal a Flusher has open: no error")
	}
	if err := f.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, err := analytics.JournalNewest(dir); err != nil || !got.Equal(last) {
		t.Errorf("JournalNewest = %v, %v; want %v, the third batch's time", got, err, last)
	}

	st.setFail(nil)
	f2 := analytics.NewFlusher(analytics.NewRecorder(100, nil), st, analyticstest.DefaultPlan, opts, nil, nil)
	if err := f2.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := f2.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(st.batches) != 3 {
		t.Errorf("%d batches written from the journal, want 3", len(st.batches))
	}
	if got, err := analytics.JournalNewest(dir); err != nil || !got.IsZero() {
		t.Errorf("JournalNewest after the store took the journal = %v, %v; want zero", got, err)
	}
}

func checkTotal(t *testing.T, r reader, key string, want int64) {
	t.Helper()
	v, err := r.Total(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if got := v.Human + v.Bot; got != want {
		t.Errorf("Total(%q) = %d visits, want %d", key, got, want)
	}
}

func tail(s string) string {
	if len(s) > 2000 {
		return "…" + s[len(s)-2000:]
	}
	return s
}

// TestJournalReplayBounded writes a journal much larger than the flusher's
// memory bound during an outage (batches of the same 2,000 links, one
// per interval), then has a new flusher replay it into a store that is
// back: every visit arrives once, and the heap grows by about one batch
// (plus the Active entries the flusher remembers), not by the journal's
// size. It logs the replay's time and the heap's peak. 8 MB normally (4
// with -short); set LINKGATE_JOURNAL_MB for a bigger one (docs/durability.md's
// figures are of 250).
func TestJournalReplayBounded(t *testing.T) {
	mb := 8 // a journal four times the working set of a replay, at least: enough to tell streaming from loading
	if testing.Short() {
		mb = 4
	}
	if s := os.Getenv("LINKGATE_JOURNAL_MB"); s != "" {
		fmt.Sscan(s, &mb)
	}
	dir := filepath.Join(t.TempDir(), "journal")
	st := &countingWriter{}
	st.fail.Store(true)
	at := monday
	now := func() time.Time { return at }
	opts := analytics.FlusherOptions{JournalPath: dir, JournalMaxBytes: int64(mb+64) << 20, Now: now}
	rec := analytics.NewRecorder(1_000_000, nil)
	reg := prometheus.NewRegistry()
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, opts, analytics.NewMetrics(reg), nil)
	const perInterval = 2_000
	keys := make([]string, perInterval)
	for k := range keys {
		keys[k] = fmt.Sprintf("k%05d", k)
	}
	var sent int64
	for i := 0; testkit.Metric(t, reg, "linkgate_analytics_journal_bytes") < float64(mb<<20); i++ {
		for k := range perInterval {
			rec.Record(keys[k], at, false)
		}
		sent += perInterval
		f.Flush(t.Context())
		at = at.Add(10 * time.Second)
	}
	// A /stats read during the outage scans the journal for its link.
	r := f.Reader(emptySource{})
	began := time.Now()
	v, err := r.Total(t.Context(), keys[7])
	if err != nil {
		t.Fatal(err)
	}
	readTook := time.Since(began)
	if want := sent / perInterval; v.Human != want {
		t.Errorf("Total during the outage = %d, want %d", v.Human, want)
	}
	if err := f.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	bytesOnDisk := testkit.Metric(t, reg, "linkgate_analytics_journal_bytes")
	t.Logf("a link's total read during the outage, from a %.1f MB journal: %v", bytesOnDisk/1e6, readTook.Round(time.Millisecond))

	// A low GC target, so that the heap in use follows what is live
	// rather than the garbage the pacer lets accumulate.
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	st.fail.Store(false)
	reg2 := prometheus.NewRegistry()
	f2 := analytics.NewFlusher(analytics.NewRecorder(1000, nil), st, analyticstest.DefaultPlan, opts, analytics.NewMetrics(reg2), nil)
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	rssBefore := resetPeakRSS()
	began = time.Now()
	if err := f2.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	close(stop)
	wg.Wait()
	if got := st.visits.Load(); got != sent {
		t.Errorf("replay wrote %d visits, want %d", got, sent)
	}
	if rssBefore > 0 {
		t.Logf("process RSS: %.1f MB before the replay, peak during it %.1f MB", float64(rssBefore)/1e6, float64(procStatus("VmHWM:"))/1e6)
	}
	grew := int64(peak) - int64(base)
	t.Logf("journal %.1f MB (%d visits in %d-link batches): replayed in %v (%.0f MB/s); heap in use grew by at most %.1f MB",
		bytesOnDisk/1e6, sent, perInterval, took.Round(time.Millisecond), bytesOnDisk/1e6/took.Seconds(), float64(grew)/1e6)
	// Decoded, the journal takes more memory than on disk: a replay that
	// loaded it would grow the heap by more than the journal's bytes, one
	// that streams it by about one batch (2,000 links, each with its
	// count and its day's analytics.DimLink entry: under 4 MB).
	if limit := min(32<<20, max(bytesOnDisk/2, 4<<20)); float64(grew) > limit {
		t.Errorf("heap grew by %d bytes replaying a journal of %.0f (limit %.0f): not streamed", grew, bytesOnDisk, limit)
	}
	if n := testkit.Metric(t, reg2, "linkgate_analytics_journal_records"); n != 0 {
		t.Errorf("journal records after the replay = %v, want 0", n)
	}
	f2.Close(t.Context())
}

// countingWriter counts the visits of the all-links key it is given and
// keeps nothing else.
type countingWriter struct {
	fail   atomic.Bool
	visits atomic.Int64
}

func (w *countingWriter) Write(ctx context.Context, b analytics.Batch) error {
	if w.fail.Load() {
		return errDown
	}
	for _, c := range b.Counts {
		if c.Key == analytics.AllLinks {
			w.visits.Add(c.Human + c.Bot)
		}
	}
	return nil
}

// TestJournalUnopenable: a journal directory that cannot be made (its
// parent is a file) leaves refused batches in memory, logged; once it can
// be made, the next flush opens it and journals them, so a shutdown with
// the store still down loses nothing and the next process writes them.
func TestJournalUnopenable(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "blocked")
	if err := os.WriteFile(parent, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs testkit.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	st := newMemStore()
	st.setFail(func(int) bool { return true })
	reg := prometheus.NewRegistry()
	opts := analytics.FlusherOptions{JournalPath: filepath.Join(parent, "journal")}
	rec := analytics.NewRecorder(10, nil)
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, opts, analytics.NewMetrics(reg), log)
	rec.Record("a", monday, false)
	rec.Record("a", monday, true)
	if err := f.Flush(t.Context()); err == nil {
		t.Fatal("Flush with the store down: no error")
	}
	if !strings.Contains(logs.String(), "journal cannot be opened") {
		t.Errorf("the unopenable journal is not logged:\n%s", logs.String())
	}
	if b := testkit.Metric(t, reg, "linkgate_analytics_buffered_keys"); b == 0 {
		t.Error("nothing buffered in memory with the journal unopenable")
	}
	checkTotal(t, f.Reader(st), "a", 2)

	if err := os.Remove(parent); err != nil {
		t.Fatal(err)
	}
	rec.Record("b", monday, false)
	if err := f.Flush(t.Context()); err == nil {
		t.Fatal("Flush with the store down: no error")
	}
	if b := testkit.Metric(t, reg, "linkgate_analytics_buffered_keys"); b != 0 {
		t.Errorf("%v entries still in memory with the journal open", b)
	}
	checkTotal(t, f.Reader(st), analytics.AllLinks, 3)
	if err := f.Close(t.Context()); err != nil {
		t.Fatalf("Close with the journal open = %v, want nil", err)
	}
	st.setFail(nil)
	f2 := analytics.NewFlusher(analytics.NewRecorder(10, nil), st, analyticstest.DefaultPlan, opts, nil, nil)
	if err := f2.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	checkTotal(t, exact(st), analytics.AllLinks, 3)
	checkTotal(t, exact(st), "a", 2)
}

// emptySource is a store that holds nothing.
type emptySource struct{}

func (emptySource) Points(context.Context, string, time.Duration, time.Time, time.Time) ([]analytics.Point, error) {
	return nil, nil
}
func (emptySource) Progress(context.Context) (rollup.Progress, error)    { return nil, nil }
func (emptySource) Marks(context.Context, string) ([]rollup.Mark, error) { return nil, nil }

// BenchmarkFlushIntoJournal100kLinks is an interval of an outage in which
// 100,000 links were visited once: the batch, the failed write, and the
// append of the batch to the journal with its fdatasync.
func BenchmarkFlushIntoJournal100kLinks(b *testing.B) {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
	}
	rec := analytics.NewRecorder(len(keys), nil)
	at := monday
	w := &countingWriter{}
	w.fail.Store(true)
	reg := prometheus.NewRegistry()
	f := analytics.NewFlusher(rec, w, analyticstest.DefaultPlan, analytics.FlusherOptions{
		JournalPath: filepath.Join(b.TempDir(), "journal"), JournalMaxBytes: 1 << 40,
		Now: func() time.Time { return at.Add(10 * time.Second) },
	}, analytics.NewMetrics(reg), nil)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		at = at.Add(time.Minute)
		for _, k := range keys {
			rec.Record(k, at, false)
		}
		b.StartTimer()
		f.Flush(context.Background())
	}
	b.StopTimer()
	b.ReportMetric(testkit.Metric(b, reg, "linkgate_analytics_journal_bytes")/float64(b.N), "journal-bytes/op")
	f.Close(context.Background())
}

// resetPeakRSS resets the process's peak RSS (Linux: clear_refs 5) and
// returns the RSS now, in bytes; 0 where it cannot.
func resetPeakRSS() int64 {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		return 0
	}
	return procStatus("VmRSS:")
}

// procStatus returns a kB field of /proc/self/status in bytes, 0 when
// missing.
func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, field); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}
