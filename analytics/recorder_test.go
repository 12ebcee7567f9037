package analytics_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/rollup"
)

// TestStoreWritesPerVisit measures what one flush interval costs the store:
// 10 s of 2,000 visits/s spread evenly over n links, flushed in one batch.
// Each visited link costs one count per minute it was visited in, plus, the
// first time this process writes it in an hour, one Active entry for the
// rollup; the same for all links together. Later flushes of the hour cost
// the counts only.
func TestStoreWritesPerVisit(t *testing.T) {
	const rate, interval = 2000, 10 * time.Second
	for _, tt := range []struct {
		name  string
		links int
		start time.Time
	}{
		{"100 links", 100, monday.Add(20 * time.Second)},
		{"100 links across a minute", 100, monday.Add(55 * time.Second)},
		{"100000 links", 100_000, monday.Add(20 * time.Second)},
		{"100000 links across a minute", 100_000, monday.Add(55 * time.Second)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := analytics.NewRecorder(1_000_000, nil)
			st := newMemStore()
			flushAt := tt.start
			f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: func() time.Time { return flushAt }}, nil, nil)
			rng := rand.New(rand.NewPCG(7, uint64(tt.links)))
			keys := make([]string, tt.links)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%06d", i)
			}
			visits := int(rate * interval.Seconds())
			for round := range 2 {
				distinct := map[string]bool{}
				minutes := map[string]map[int64]bool{}
				start := tt.start.Add(time.Duration(round) * interval)
				for i := range visits {
					at := start.Add(time.Duration(i) * interval / time.Duration(visits))
					k := keys[rng.IntN(len(keys))]
					rec.Record(k, at, false)
					distinct[k] = true
					if minutes[k] == nil {
						minutes[k] = map[int64]bool{}
					}
					minutes[k][at.Unix()/60] = true
				}
				flushAt = start.Add(interval)
				if err := f.Flush(t.Context()); err != nil {
					t.Fatal(err)
				}
				b := st.batches[round]
				writes := len(b.Counts) + len(b.Active) + len(b.Marks)
				// Expected: per link (and for all links) one count per
				// minute, and an Active entry unless announced before.
				want, announced := 0, 0
				allMinutes := map[int64]bool{}
				for k := range distinct {
					want += len(minutes[k])
					for m := range minutes[k] {
						allMinutes[m] = true
					}
				}
				want += len(allMinutes)
				if round == 0 {
					announced = len(distinct) + 1
				} else {
					before := map[string]bool{}
					for _, a := range st.batches[0].Active {
						before[a.Key] = true
					}
					for k := range distinct {
						if !before[k] {
							announced++
						}
					}
				}
				if len(b.Counts) != want || len(b.Active) != announced || len(b.Marks) != 0 {
					t.Errorf("flush %d: %d counts, %d Active entries, %d marks; want %d, %d, 0", round, len(b.Counts), len(b.Active), len(b.Marks), want, announced)
				}
				t.Logf("flush %d: %d visits to %d of %d links in %v: %d store writes (%d counts, %d Active), %.4f writes/visit, %.0f writes/s",
					round, visits, len(distinct), tt.links, interval, writes, len(b.Counts), len(b.Active), float64(writes)/float64(visits), float64(writes)/interval.Seconds())
			}
		})
	}
}

// TestMemoryPerLink logs the heap a Recorder uses per tracked link, one
// visit each, and checks that it stays modest.
func TestMemoryPerLink(t *testing.T) {
	const n = 100_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%07d", i) // a 7-character short_key
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rec := analytics.NewRecorder(n, nil)
	rec.SetLiveLinks(0) // the live view's memory is TestLiveMemory's
	for _, k := range keys {
		rec.Record(k, monday, false)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f bytes per tracked link (%d links, 7-byte keys)", per, n)
	if rec.Keys() != n {
		t.Errorf("Keys() = %d, want %d", rec.Keys(), n)
	}
	if per > 512 {
		t.Errorf("%.0f bytes per tracked link, want under 512", per)
	}
	runtime.KeepAlive(rec)
	runtime.KeepAlive(keys) // else freed between the two readings
}

// BenchmarkRecord is a visit to a known link, without the live view and
// with it (the link followed live, as analytics.live.max_links does by
// default): live is what the last 15 minutes add to a visit.
func BenchmarkRecord(b *testing.B) {
	for _, live := range []int{0, analytics.DefaultLiveLinks} {
		b.Run(map[bool]string{false: "plain", true: "live"}[live > 0], func(b *testing.B) {
			rec := analytics.NewRecorder(1000, nil)
			rec.SetLiveLinks(live)
			now := time.Now()
			rec.Record("abc123", now, false)
			b.ReportAllocs()
			for b.Loop() {
				rec.Record("abc123", now, false)
			}
		})
	}
}

// BenchmarkRecordParallel records visits to 1,000 known links from every
// core; the time per visit should fall as GOMAXPROCS grows (-cpu 1,2,4).
func BenchmarkRecordParallel(b *testing.B) {
	rec := analytics.NewRecorder(10_000, nil)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
		rec.Record(keys[i], monday, false)
	}
	var seed atomic.Uint64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seed.Add(7919))
		for pb.Next() {
			i++
			rec.Record(keys[i%len(keys)], monday, false)
		}
	})
}

// BenchmarkRecordNewKey is the cost of the first visit to a link since the
// last flush: copying the key and a small allocation.
func BenchmarkRecordNewKey(b *testing.B) {
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
	}
	rec := analytics.NewRecorder(1<<30, nil)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		rec.Record(keys[i&(len(keys)-1)]+"", monday, false)
		i++
		if i&(len(keys)-1) == 0 {
			b.StopTimer()
			rec = analytics.NewRecorder(1<<30, nil)
			b.StartTimer()
		}
	}
}

// countingStore is a Memory that counts what the flusher and the worker
// ask it to write, by kind and tier.
type countingStore struct {
	*analyticstest.Memory
	mu                     sync.Mutex
	counts, marks, deletes int64
	flushActive            int64
	rows, active           map[time.Duration]int64 // worker's rolled rows and Active entries, by tier step
	advances               int64
}

func newCountingStore() *countingStore {
	return &countingStore{Memory: analyticstest.NewMemory(analyticstest.DefaultPlan), rows: map[time.Duration]int64{}, active: map[time.Duration]int64{}}
}

func (s *countingStore) Write(ctx context.Context, b analytics.Batch) error {
	if err := s.Memory.Write(ctx, b); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts += int64(len(b.Counts))
	s.flushActive += int64(len(b.Active))
	s.marks += int64(len(b.Marks))
	return nil
}

func (s *countingStore) Apply(ctx context.Context, u rollup.Update) error {
	if err := s.Memory.Apply(ctx, u); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range u.Rows {
		s.rows[r.Step]++
	}
	for _, a := range u.Active {
		s.active[a.Step]++
	}
	s.marks += int64(len(u.Marks))
	s.deletes += int64(len(u.Done))
	return nil
}

func (s *countingStore) Advance(ctx context.Context, step time.Duration, done time.Time) error {
	s.mu.Lock()
	s.advances++
	s.mu.Unlock()
	return s.Memory.Advance(ctx, step, done)
}

// TestWritesPerVisitWithRollup measures what the store is asked to write
// for an hour of 2,000 visits/s spread evenly over n links, through the
// real Recorder, Flusher (every 10 s) and rollup Worker (every minute,
// then on until every tier holding the hour is rolled, the all-time one
// included). Writes of the finest tier and of the 5-minute and hour tiers
// grow with the hours of traffic; those of the day, week and all-time
// tiers are one per link per day, week or 52 weeks whatever the traffic
// within, so the steady rate per hour counts them once per bucket step.
// The 100,000-link hour (7.2 million visits, about a minute) is left out
// with -short and -race. Under -race the 100-link hour records 200 visits/s
// rather than 2,000 (the race detector makes each Record slow, and a
// loaded machine more so): at either rate every link is visited in every
// flush interval (2,000 visits over 100 links), so the store is asked for
// the same writes, and the figures per visit are those of 2,000/s.
func TestWritesPerVisitWithRollup(t *testing.T) {
	const nominal, interval = 2000, 10 * time.Second
	rate := nominal
	if testkit.Race {
		rate = 200
	}
	for _, links := range []int{100, 100_000} {
		t.Run(fmt.Sprint(links, " links"), func(t *testing.T) {
			if links > 1000 && (testing.Short() || testkit.Race) {
				t.Skip("an hour of 2,000 visits/s over 100,000 links: not with -short or -race")
			}
			plan, err := rollup.NewPlan(defTiers, rollup.DefaultGrace)
			if err != nil {
				t.Fatal(err)
			}
			st := newCountingStore()
			clock := monday
			now := func() time.Time { return clock }
			w := rollup.NewWorker(st, plan, rollup.WorkerOptions{Now: now, MaxJobs: 1 << 30})
			run := func() {
				if _, err := w.RunOnce(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			run()
			rec := analytics.NewRecorder(1_000_000, nil)
			f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: now}, nil, nil)
			rng := rand.New(rand.NewPCG(9, uint64(links)))
			keys := make([]string, links)
			for i := range keys {
				keys[i] = fmt.Sprintf("k%06d", i)
			}
			perInterval := int(float64(rate) * interval.Seconds())
			for i := range int(time.Hour / interval) {
				start := monday.Add(time.Duration(i) * interval)
				for v := range perInterval {
					rec.Record(keys[rng.IntN(links)], start.Add(time.Duration(v)*interval/time.Duration(perInterval)), false)
				}
				clock = start.Add(interval)
				if err := f.Flush(t.Context()); err != nil {
					t.Fatal(err)
				}
				if i%6 == 5 {
					run()
				}
			}
			flushCounts, flushActive := st.counts, st.flushActive
			// On until the all-time tier's period holding the hour closed.
			clock = rollup.Align(monday, plan.Total().Step).Add(plan.Total().Step + plan.Grace())
			run()
			recorded := float64(rate * int(time.Hour/time.Second))
			visits := float64(nominal * time.Hour / time.Second) // the figures per visit are at the nominal rate
			perHour := func(step time.Duration, n int64) float64 {
				return float64(n) * float64(time.Hour) / float64(max(step, time.Hour))
			}
			steady := float64(flushCounts + flushActive)
			t.Logf("flushes: %d counts, %d Active entries", flushCounts, flushActive)
			var rollupPerHour float64
			for i, tr := range plan.Tiers()[1:] {
				// Rolled rows: one per link and bucket. Active entries
				// announcing links to this tier's roll (written by the
				// worker, except the finest's, by the flushes): one per
				// link and batch period.
				r, a := st.rows[tr.Step], st.active[tr.Step]
				x := perHour(tr.Step, r) + perHour(plan.Batch(i+1), a)
				rollupPerHour += x
				t.Logf("tier %-12v %8d rows, %7d Active entries: %9.1f writes per hour of steady traffic", tr, r, a, x)
			}
			if st.marks != 0 || st.deletes != 0 {
				t.Errorf("%d marks and %d deletes without a late count", st.marks, st.deletes)
			}
			// Progress: one advance per period of each queue.
			progress := 1.0 // the marks queue, hourly
			for i := 1; i < len(plan.Tiers()); i++ {
				progress += perHour(plan.Batch(i), 1)
			}
			steady += rollupPerHour + progress
			t.Logf("%d links, 2,000 visits/s: %.0f flush writes (%.4f per visit) + %.0f rollup writes (%.4f per visit) + %.1f progress writes per hour = %.0f/h, %.1f/s, %.4f per visit",
				links, float64(flushCounts+flushActive), float64(flushCounts+flushActive)/visits, rollupPerHour, rollupPerHour/visits, progress, steady, steady/3600, steady/visits)
			limit := 0.05
			if links > 1000 {
				limit = 1.2
			}
			if steady/visits > limit {
				t.Errorf("%.4f store writes per visit, more than the goal of %v", steady/visits, limit)
			}
			// And the rollup is right: the hour's total in every tier.
			r := rollup.NewReader(st, analyticstest.DefaultPlan)
			v, err := r.Total(t.Context(), analytics.AllLinks)
			if err != nil || v.Human != int64(recorded) {
				t.Errorf("Total(AllLinks) = %+v, %v; want %v visits", v, err, recorded)
			}
			for _, tr := range plan.Tiers()[1:] {
				pts, err := st.Points(t.Context(), analytics.AllLinks, tr.Step, monday.Add(-rollup.Year), monday.Add(rollup.Year))
				var sum int64
				for _, p := range pts {
					sum += p.Human
				}
				if err != nil || sum != int64(recorded) {
					t.Errorf("tier %v as stored holds %d visits, %v; want %v", tr, sum, err, recorded)
				}
			}
		})
	}
}
