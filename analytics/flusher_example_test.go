package analytics_test

import (
	"context"
	"fmt"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// printWriter is a Writer that prints what it is given.
type printWriter struct{}

func (printWriter) Write(ctx context.Context, b analytics.Batch) error {
	for _, c := range b.Counts {
		fmt.Printf("%-4s %-3s %s %+v\n", c.Key, rollup.FormatDuration(c.Step), c.Start.Format("15:04"), c.Visits)
	}
	for _, t := range b.Totals {
		fmt.Printf("%-4s total     %+v\n", t.Key, t.Visits)
	}
	return nil
}

// A flush turns the visits of each link into one count per tier bucket and
// a total, for the link and for all links ("/").
func ExampleFlusher() {
	tiers := []rollup.Tier{{Step: time.Minute, Retention: 2 * rollup.Day}, {Step: time.Hour, Retention: 40 * rollup.Day}}
	rec := analytics.NewRecorder(1_000_000, nil)
	f := analytics.NewFlusher(rec, printWriter{}, tiers, analytics.FlusherOptions{}, nil, nil)

	t0 := time.Date(2026, 11, 23, 9, 59, 30, 0, time.UTC)
	rec.Record("abc", t0, false)
	rec.Record("abc", t0.Add(35*time.Second), false) // the next minute
	rec.Record("abc", t0.Add(40*time.Second), true)  // a bot
	if err := f.Flush(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// /    1m  09:59 {Human:1 Bot:0}
	// /    1m  10:00 {Human:1 Bot:1}
	// /    1h  09:00 {Human:1 Bot:0}
	// /    1h  10:00 {Human:1 Bot:1}
	// abc  1m  09:59 {Human:1 Bot:0}
	// abc  1m  10:00 {Human:1 Bot:1}
	// abc  1h  09:00 {Human:1 Bot:0}
	// abc  1h  10:00 {Human:1 Bot:1}
	// /    total     {Human:2 Bot:1}
	// abc  total     {Human:2 Bot:1}
}
