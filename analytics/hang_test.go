package analytics_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/rollup"
)

// hangingStore is a memStore whose reads, or writes, never answer: they
// return only when their context is done, as a store whose coordinator
// waits for replicas that are gone does.
type hangingStore struct {
	*memStore
	reads, writes atomic.Bool // hang
	hungReads     atomic.Int64
}

func (s *hangingStore) Write(ctx context.Context, b analytics.Batch) error {
	if s.writes.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.memStore.Write(ctx, b)
}

func (s *hangingStore) hang(ctx context.Context) error {
	s.hungReads.Add(1)
	<-ctx.Done()
	return ctx.Err()
}

func (s *hangingStore) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]analytics.Point, error) {
	if s.reads.Load() {
		return nil, s.hang(ctx)
	}
	return s.memStore.Points(ctx, key, step, from, to)
}

func (s *hangingStore) Progress(ctx context.Context) (rollup.Progress, error) {
	if s.reads.Load() {
		return nil, s.hang(ctx)
	}
	return s.memStore.Progress(ctx)
}

// watchdog ends the test binary, saying why, if the func it returns is
// not called within d of real time: a bubble of synctest whose goroutines
// wait on a lock held across a hung call never advances its clock, and
// would otherwise wait for the test timeout.
func watchdog(d time.Duration, why string) (stop func()) {
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
		case <-time.After(d):
			panic("deadlock: " + why)
		}
	}()
	return func() { close(done) }
}

// TestHungReadsNeverHoldUpFlushes reads a link's stats without pause
// from a store whose reads hang (each until its deadline, 2 s), while
// visits are recorded: the flusher still takes and writes every interval's
// counts on time, and every read answers at its deadline.
func TestHungReadsNeverHoldUpFlushes(t *testing.T) {
	defer watchdog(time.Minute, "a hung read held up the flusher")()
	synctest.Test(t, func(t *testing.T) {
		st := &hangingStore{memStore: newMemStore()}
		st.reads.Store(true)
		rec := analytics.NewRecorder(1000, nil)
		const interval = time.Second
		f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Interval: interval}, nil, nil)
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		wg.Go(func() { f.Run(ctx) })
		r := f.Reader(st)
		var reads atomic.Int64
		for range 3 {
			wg.Go(func() {
				for ctx.Err() == nil {
					rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
					_, err := r.Total(rctx, "k")
					rcancel()
					if err != nil && ctx.Err() == nil {
						reads.Add(1)
					}
				}
			})
		}
		start := time.Now()
		for range 100 { // 10 s of visits
			rec.Record("k", time.Now(), false)
			time.Sleep(100 * time.Millisecond)
		}
		synctest.Wait()
		st.mu.Lock()
		var late []time.Duration
		for i, at := range st.tries {
			if want := time.Duration(i+1) * interval; at.Sub(start) != want {
				late = append(late, at.Sub(start))
			}
		}
		writes := len(st.tries)
		st.mu.Unlock()
		if writes != 10 || len(late) > 0 {
			t.Errorf("%d writes in 10 s of 1 s intervals while reads hang, %d not on their tick: %v", writes, len(late), late)
		}
		if st.hungReads.Load() == 0 {
			t.Fatal("no read reached the store")
		}
		cancel()
		wg.Wait()
		// 3 readers, each answered every 2 s.
		if n := reads.Load(); n < 3*5 {
			t.Errorf("%d reads answered in 10 s, want 15 (each reader's, at their deadline)", n)
		}
	})
}

// TestHungWritesLoseAtMostAnIntervalAndTheBound has the store stop
// answering writes (they neither succeed nor fail until their deadline)
// and crashes the flusher at a random moment of the hang, 40 times: a new
// flusher on the same journal writes everything but, at most, the visits
// of the last interval and SpillAfter before the crash.
func TestHungWritesLoseAtMostAnIntervalAndTheBound(t *testing.T) {
	defer watchdog(2*time.Minute, "a hung write held up the flusher")()
	for _, interval := range []time.Duration{time.Second, 10 * time.Second} {
		for run := range 20 {
			synctest.Test(t, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "journal")
				st := &hangingStore{memStore: newMemStore()}
				rec := analytics.NewRecorder(1000, nil)
				opts := analytics.FlusherOptions{Interval: interval, JournalPath: dir}
				f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, opts, nil, nil)
				ctx, cancel := context.WithCancel(t.Context())
				var wg sync.WaitGroup
				wg.Go(func() { f.Run(ctx) })
				rng := rand.New(rand.NewPCG(uint64(interval), uint64(run)))
				const perSecond = 20
				var sent []time.Time
				visit := func() {
					rec.Record("k", time.Now(), false)
					sent = append(sent, time.Now())
					time.Sleep(time.Second / perSecond)
				}
				for range 3 * perSecond * int(interval/time.Second) { // healthy for 3 intervals
					visit()
				}
				st.writes.Store(true)
				crashIn := time.Duration(rng.Int64N(int64(6 * interval)))
				for crash := time.Now().Add(crashIn); time.Now().Before(crash); {
					visit()
				}
				crashed := time.Now()
				analytics.Crash(f)
				cancel()
				wg.Wait()

				st.writes.Store(false)
				f2 := analytics.NewFlusher(analytics.NewRecorder(1000, nil), st, analyticstest.DefaultPlan, opts, nil, nil)
				if err := f2.Flush(t.Context()); err != nil {
					t.Fatal(err)
				}
				v, err := exact(st).Total(t.Context(), "k")
				if err != nil {
					t.Fatal(err)
				}
				lost := int64(len(sent)) - v.Human
				spill := min(max(interval/2, 250*time.Millisecond), 2*time.Second)
				var mayLose int64
				for _, at := range sent {
					if crashed.Sub(at) <= interval+spill {
						mayLose++
					}
				}
				if lost < 0 || lost > mayLose {
					t.Errorf("interval %v, crash %v into the hang: %d of %d visits lost, at most %d (the last %v) may be",
						interval, crashIn, lost, len(sent), mayLose, interval+spill)
				}
				f2.Close(t.Context())
			})
		}
	}
}

// TestOutageLogged: the log says once that the store stopped taking
// writes (a refusal) or has not answered one (a hang), and once that it
// takes them again with the journal empty, with how long and how much the
// journal held.
func TestOutageLogged(t *testing.T) {
	for _, hang := range []bool{false, true} {
		t.Run(fmt.Sprint("hang=", hang), func(t *testing.T) {
			defer watchdog(time.Minute, "the flusher stopped")()
			synctest.Test(t, func(t *testing.T) {
				st := &hangingStore{memStore: newMemStore()}
				var logs testkit.Buffer
				rec := analytics.NewRecorder(1000, nil)
				opts := analytics.FlusherOptions{Interval: time.Second, JournalPath: filepath.Join(t.TempDir(), "journal")}
				f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, opts, nil, slog.New(slog.NewTextHandler(&logs, nil)))
				ctx, cancel := context.WithCancel(t.Context())
				var wg sync.WaitGroup
				wg.Go(func() { f.Run(ctx) })
				visits := func(n int) {
					for range n {
						rec.Record("k", time.Now(), false)
						time.Sleep(100 * time.Millisecond)
					}
				}
				visits(20)
				if hang {
					st.writes.Store(true)
				} else {
					st.setFail(func(int) bool { return true })
				}
				visits(50)
				st.writes.Store(false)
				st.setFail(nil)
				visits(200) // the backoff (up to 6 intervals) and the replay
				synctest.Wait()
				cancel()
				wg.Wait()
				out := logs.String()
				began := "the store stopped taking writes"
				if hang {
					began = "the store has not answered a write"
				}
				if n := strings.Count(out, began); n != 1 {
					t.Errorf("%q logged %d times, want once:\n%s", began, n, out)
				}
				if n := strings.Count(out, "the store takes writes again and the journal is empty"); n != 1 || !strings.Contains(out, "journal_max_records=") {
					t.Errorf("the end of the outage logged %d times, want once with the journal's peak:\n%s", n, out)
				}
				v, err := exact(st).Total(t.Context(), "k")
				if err != nil || v.Human != 270 {
					t.Errorf("stored %+v, %v; want all 270 visits", v, err)
				}
			})
		})
	}
}

// slowStore takes every write, each after a delay.
type slowStore struct {
	*memStore
	delay time.Duration
}

func (s slowStore) Write(ctx context.Context, b analytics.Batch) error {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.memStore.Write(ctx, b)
}

// TestWriteDeadlineFloor: at flush_interval 100ms a write's deadline is
// not 3 × 100 ms but 5 s at least, so a store that takes a second per
// batch (a burst, a replay) gets every batch, at the first try.
func TestWriteDeadlineFloor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := slowStore{memStore: newMemStore(), delay: time.Second}
		rec := analytics.NewRecorder(100, nil)
		f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Interval: 100 * time.Millisecond}, nil, nil)
		rec.Record("k", time.Now(), false)
		if err := f.Flush(t.Context()); err != nil {
			t.Fatalf("a write of 1 s at a 100ms interval: %v", err)
		}
		if n := st.numTries(); n != 1 {
			t.Errorf("%d tries, want 1", n)
		}
	})
}
