package rollup_test

import (
	"fmt"
	"time"

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
