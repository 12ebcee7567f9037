package analytics_test

import (
	"context"
	"fmt"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/rollup"
)

// printWriter is a Writer that prints what it is given.
type printWriter struct{}

func (printWriter) Write(ctx context.Context, b analytics.Batch) error {
	for _, c := range b.Counts {
		fmt.Printf("%-4s %-3s %s %+v\n", c.Key, rollup.FormatDuration(c.Step), c.Start.Format("15:04"), c.Visits)
	}
	for _, a := range b.Active {
		fmt.Printf("%-4s to roll into %s, hour of %s\n", a.Key, rollup.FormatDuration(a.Step), a.Period.Format("15:04"))
	}
	return nil
}

// A flush turns the visits of each link into one count per minute, for the
// link and for all links ("/"), and announces each link once per hour to
// the rollup worker, which derives the coarser tiers and the totals.
func ExampleFlusher() {
	tiers := []rollup.Tier{{Step: time.Minute, Retention: 2 * rollup.Day}, {Step: time.Hour, Retention: 40 * rollup.Day}}
	rec := analytics.NewRecorder(1_000_000, nil)
	t0 := time.Date(2026, 11, 23, 9, 59, 30, 0, time.UTC)
	flushAt := func() time.Time { return t0.Add(45 * time.Second) }
	f := analytics.NewFlusher(rec, printWriter{}, analyticstest.Plan(tiers, rollup.DefaultGrace), analytics.FlusherOptions{Now: flushAt}, nil, nil)

	rec.Record("abc", t0, false)
	rec.Record("abc", t0.Add(35*time.Second), false) // the next minute
	rec.Record("abc", t0.Add(40*time.Second), true)  // a bot
	if err := f.Flush(context.Background()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// /    1m  09:59 {Human:1 Bot:0 Other:[0 0 0 0]}
	// /    1m  10:00 {Human:1 Bot:1 Other:[0 0 0 0]}
	// abc  1m  09:59 {Human:1 Bot:0 Other:[0 0 0 0]}
	// abc  1m  10:00 {Human:1 Bot:1 Other:[0 0 0 0]}
	// /    to roll into 1h, hour of 09:00
	// /    to roll into 1h, hour of 10:00
	// abc  to roll into 1h, hour of 09:00
	// abc  to roll into 1h, hour of 10:00
}
