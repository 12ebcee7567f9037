package analytics_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
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
			f := analytics.NewFlusher(rec, st, defTiers, analytics.FlusherOptions{Now: func() time.Time { return flushAt }}, nil, nil)
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
					for k := range distinct {
						if !seenBefore(st.batches[0], k) {
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

// seenBefore says whether b announced key.
func seenBefore(b analytics.Batch, key string) bool {
	for _, a := range b.Active {
		if a.Key == key {
			return true
		}
	}
	return false
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

func BenchmarkRecord(b *testing.B) {
	rec := analytics.NewRecorder(1000, nil)
	now := monday
	rec.Record("abc123", now, false)
	b.ReportAllocs()
	for b.Loop() {
		rec.Record("abc123", now, false)
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
