package rollup_test

import (
	"context"
	"fmt"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/rollup"
)

// A year-long curve at a fixed now: which tier answers it, and the seeds'
// mixed-resolution version, one stored range per segment.
func ExampleStitch() {
	tiers := rollup.DefaultTiers()
	now := time.Date(2026, 11, 22, 23, 30, 33, 0, time.UTC)
	from := now.AddDate(-1, 0, 0)

	t, _ := rollup.Choose(tiers, from, now, now, rollup.MaxPoints)
	fmt.Printf("chosen: %v, %d points\n", t, rollup.NumBuckets(from, now, t.Step))

	segs, _ := rollup.Stitch(tiers, from, now, now)
	for _, s := range segs {
		fmt.Printf("%-3s %s to %s: %d points\n", rollup.FormatDuration(s.Tier.Step),
			s.From.Format(time.DateTime), s.To.Format(time.DateTime), rollup.NumBuckets(s.From, s.To, s.Tier.Step))
	}
	// Output:
	// chosen: 1d:400d, 366 points
	// 1d  2025-11-22 23:30:33 to 2026-10-14 00:00:00: 326 points
	// 1h  2026-10-14 00:00:00 to 2026-11-15 00:00:00: 768 points
	// 5m  2026-11-15 00:00:00 to 2026-11-20 23:35:00: 1723 points
	// 1m  2026-11-20 23:35:00 to 2026-11-22 23:30:33: 2876 points
}

func ExampleWithStep() {
	_, err := rollup.WithStep(rollup.DefaultTiers(), 10*time.Minute)
	fmt.Println(err)
	// Output: rollup: unsupported step 10m: valid steps are 1m, 5m, 1h, 1d, 1w
}

// A worker rolls what a flush wrote: once the hour and the grace are over,
// the 5-minute tier holds the hour's buckets, read from the minutes. A
// gateway runs it for its whole life:
//
//	w := rollup.NewWorker(store, plan, rollup.WorkerOptions{Metrics: m, Log: log})
//	go w.Run(ctx) // cancel ctx, and wait for Run to return, before closing the store
func ExampleWorker() {
	plan, _ := rollup.NewPlan(rollup.DefaultTiers(), rollup.DefaultGrace)
	store := analyticstest.NewMemory(plan)
	now := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	w := rollup.NewWorker(store, plan, rollup.WorkerOptions{Now: clock})
	w.RunOnce(context.Background()) // the gateway starts

	rec := analytics.NewRecorder(100, nil)
	fl := analytics.NewFlusher(rec, store, plan, analytics.FlusherOptions{Now: clock}, nil, nil)
	for _, m := range []int{2, 3, 17, 59} {
		rec.Record("abc", now.Add(time.Duration(m)*time.Minute), false)
	}
	now = now.Add(time.Hour)
	fl.Flush(context.Background())

	now = now.Add(rollup.DefaultGrace)
	rep, _ := w.RunOnce(context.Background())
	fmt.Printf("%d rows written\n", rep.Rows)
	pts, _ := store.Points(context.Background(), "abc", 5*time.Minute, now.Add(-2*time.Hour), now)
	for _, p := range pts {
		fmt.Println(p.Start.Format("15:04"), p.Human)
	}
	// Output:
	// 6 rows written
	// 09:00 2
	// 09:15 1
	// 09:55 1
}
