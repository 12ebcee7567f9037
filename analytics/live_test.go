package analytics_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
)

// liveSums returns the humans and bots of pts, and their count.
func liveSums(pts []analytics.Point) (human, bot int64) {
	for _, p := range pts {
		human += p.Human
		bot += p.Bot
	}
	return human, bot
}

// TestLiveBuckets: the live view holds every visit of the last 15 minutes
// in its 10-second bucket, per link and for all links, humans and bots
// apart, a late clock reading in its own bucket, and nothing older.
func TestLiveBuckets(t *testing.T) {
	rec := analytics.NewRecorder(100, nil)
	rec.SetLiveLinks(analytics.DefaultLiveLinks)
	now := time.Date(2026, 11, 26, 12, 0, 5, 0, time.UTC) // in the bucket 12:00:00
	rec.Record("go", now.Add(-20*time.Minute), false)     // outside the window
	rec.Record("go", now.Add(-14*time.Minute-55*time.Second), false)
	rec.Record("go", now.Add(-30*time.Second), true)
	rec.Record("go", now, false)
	rec.Record("go", now, false)
	rec.Record("go", now.Add(-time.Minute), false) // late: before the newest bucket
	rec.Record("gh", now.Add(-5*time.Second), false)

	pts, complete := rec.Live("go", now)
	if len(pts) != analytics.LiveBuckets || !complete {
		t.Fatalf("Live = %d points, complete %v; want %d, true", len(pts), complete, analytics.LiveBuckets)
	}
	if first, last := pts[0].Start, pts[len(pts)-1].Start; !last.Equal(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)) || last.Sub(first) != analytics.LiveWindow-analytics.LiveStep {
		t.Fatalf("buckets %v to %v; want 15 minutes ending with 12:00:00", first, last)
	}
	at := func(d time.Duration) analytics.Visits {
		for _, p := range pts {
			if p.Start.Equal(now.Add(d).Truncate(analytics.LiveStep)) {
				return p.Visits
			}
		}
		t.Fatalf("no bucket for %v", now.Add(d))
		return analytics.Visits{}
	}
	for _, c := range []struct {
		d    time.Duration
		want analytics.Visits
	}{
		{0, analytics.Visits{Human: 2}},
		{-30 * time.Second, analytics.Visits{Bot: 1}},
		{-time.Minute, analytics.Visits{Human: 1}},
		{-14*time.Minute - 55*time.Second, analytics.Visits{Human: 1}},
	} {
		if got := at(c.d); got != c.want {
			t.Errorf("bucket at %v: %+v, want %+v", c.d, got, c.want)
		}
	}
	if h, b := liveSums(pts); h != 4 || b != 1 {
		t.Errorf("go: %d humans, %d bots in the window; want 4, 1", h, b)
	}
	all, _ := rec.Live(analytics.AllLinks, now)
	if h, b := liveSums(all); h != 5 || b != 1 {
		t.Errorf("all links: %d humans, %d bots; want 5, 1", h, b)
	}
	// Ten minutes on, only the last five minutes' visits are left.
	later, _ := rec.Live("go", now.Add(10*time.Minute))
	if h, b := liveSums(later); h != 3 || b != 1 {
		t.Errorf("go ten minutes later: %d humans, %d bots; want 3, 1", h, b)
	}
	// A flush takes the minute counts, not the live buckets.
	f := analytics.NewFlusher(rec, analyticstest.NewMemory(analyticstest.DefaultPlan), analyticstest.DefaultPlan,
		analytics.FlusherOptions{Now: func() time.Time { return now }}, nil, nil)
	if err := f.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if again, _ := rec.Live("go", now); fmt.Sprint(again) != fmt.Sprint(pts) {
		t.Errorf("after a flush the live buckets changed:\n%v\nwant\n%v", again, pts)
	}
}

// TestLiveCap: past analytics.live.max_links a new link is not followed and
// the answers say they may be incomplete; links without a visit for 15
// minutes are let go at the next flush, and new ones followed again.
func TestLiveCap(t *testing.T) {
	rec := analytics.NewRecorder(100, nil)
	rec.SetLiveLinks(2)
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	rec.Record("a", now, false)
	rec.Record("b", now, false)
	rec.Record("c", now, false)
	if n := rec.LiveLinks(); n != 2 {
		t.Fatalf("%d links followed, want 2", n)
	}
	if pts, complete := rec.Live("c", now); complete {
		t.Errorf("c, beyond the cap: complete, want incomplete")
	} else if h, _ := liveSums(pts); h != 0 {
		t.Errorf("c, beyond the cap: %d visits, want none followed", h)
	}
	if all, complete := rec.Live(analytics.AllLinks, now); !complete {
		t.Errorf("all links: incomplete")
	} else if h, _ := liveSums(all); h != 3 {
		t.Errorf("all links: %d visits, want 3", h)
	}

	// 15 minutes later, a flush lets a and b go.
	later := now.Add(analytics.LiveWindow)
	f := analytics.NewFlusher(rec, analyticstest.NewMemory(analyticstest.DefaultPlan), analyticstest.DefaultPlan,
		analytics.FlusherOptions{Now: func() time.Time { return later }}, nil, nil)
	if err := f.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := rec.LiveLinks(); n != 0 {
		t.Fatalf("after 15 quiet minutes and a flush: %d links followed, want 0", n)
	}
	rec.Record("c", later, false)
	if pts, complete := rec.Live("c", later.Add(analytics.LiveWindow-analytics.LiveStep)); !complete {
		t.Errorf("c once the cap has room and the refusal left the window: incomplete")
	} else if h, _ := liveSums(pts); h != 1 {
		t.Errorf("c: %d visits, want 1", h)
	}

	rec.SetLiveLinks(0)
	rec.Record("e", later, false)
	if _, complete := rec.Live("e", later); complete {
		t.Errorf("max_links 0: e complete, want incomplete (links are not followed)")
	}
}

// TestLiveConcurrent: visits recorded on every core while the live view is
// read and flushes sweep it are all counted (run with -race).
func TestLiveConcurrent(t *testing.T) {
	rec := analytics.NewRecorder(1000, nil)
	rec.SetLiveLinks(analytics.DefaultLiveLinks)
	now := time.Now()
	f := analytics.NewFlusher(rec, analyticstest.NewMemory(analyticstest.DefaultPlan), analyticstest.DefaultPlan,
		analytics.FlusherOptions{}, nil, nil)
	var wg sync.WaitGroup
	const workers, visits = 4, 500
	for w := range workers {
		wg.Go(func() {
			for i := range visits {
				rec.Record(fmt.Sprintf("k%d", i%7), now, w == 0)
			}
		})
	}
	wg.Go(func() {
		for range 20 {
			rec.Live("k1", now)
			f.Flush(context.Background())
		}
	})
	wg.Wait()
	all, _ := rec.Live(analytics.AllLinks, now)
	if h, b := liveSums(all); h != (workers-1)*visits || b != visits {
		t.Errorf("all links: %d humans, %d bots; want %d, %d", h, b, (workers-1)*visits, visits)
	}
	var sum int64
	for k := range 7 {
		pts, _ := rec.Live(fmt.Sprintf("k%d", k), now)
		h, b := liveSums(pts)
		sum += h + b
	}
	if sum != workers*visits {
		t.Errorf("links: %d visits, want %d", sum, workers*visits)
	}
}

// TestLiveMemory logs what the live view holds per link at worst (a visit
// in every bucket of the window) and checks the bound that
// docs/configuration.md gives: a link's key and at most 3 KB. It is the
// heap of a recorder following the links less that of one that does not.
func TestLiveMemory(t *testing.T) {
	const n = 4_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%07d", i)
	}
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	heap := func(live int) (int64, *analytics.Recorder) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		rec := analytics.NewRecorder(n, nil)
		rec.SetLiveLinks(live)
		for b := range analytics.LiveBuckets {
			at := now.Add(time.Duration(b) * analytics.LiveStep)
			for _, k := range keys {
				rec.Record(k, at, false)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		return int64(after.HeapAlloc) - int64(before.HeapAlloc), rec
	}
	// The heap moves by what else the process does meanwhile (a single
	// measure read from 600 to 3,100 bytes): the median of three.
	var pers []float64
	for range 3 {
		without, r0 := heap(0)
		with, r1 := heap(n)
		if r1.LiveLinks() < n {
			t.Fatalf("%d links followed, want %d", r1.LiveLinks(), n)
		}
		runtime.KeepAlive(r0)
		pers = append(pers, float64(with-without)/n)
	}
	slices.Sort(pers)
	per := pers[len(pers)/2]
	t.Logf("%.0f bytes per link followed live with a visit in each of the %d buckets (7-byte keys); three measures %.0f", per, analytics.LiveBuckets, pers)
	if per > 3000 {
		t.Errorf("%.0f bytes per link followed live, want at most 3000 (docs/configuration.md)", per)
	}
	runtime.KeepAlive(keys)
}
