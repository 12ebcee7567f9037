package analyticstest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
)

// BenchSteadyFlushes measures the steady flushes of 100,000 links into w,
// each link visited once an interval with six features (a referrer, a
// source, a country, a device, a browser, an OS; 100 values of each at
// most) and a visitor of its own: what the Flusher and w do for a flush,
// not the recording of the visits before it. The first flush, of the
// first interval of a day and an hour (every link announced, every value
// new), is made before the timer starts.
func BenchSteadyFlushes(b *testing.B, w analytics.Writer) {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
	}
	rec := analytics.NewRecorder(2*len(keys), nil)
	rec.SetMaxValues(100)
	rec.SetMaxBytes(1 << 30)
	at := rollup.Align(time.Now(), rollup.Week).Add(rollup.Week + time.Hour) // a Monday, 01:00 UTC
	f := analytics.NewFlusher(rec, w, DefaultPlan, analytics.FlusherOptions{Now: func() time.Time { return at }}, nil, nil)
	refs := []string{"news.example", "direct", "t.co"}
	visit := func() {
		for i, k := range keys {
			fe := visitor.Features{refs[i%3], refs[i%3], "DE", "mobile", "Safari", "iOS"}
			rec.RecordVisit(k, at, false, &fe, uint64(i)*0x9e3779b97f4a7c15)
		}
	}
	visit()
	if err := f.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		at = at.Add(10 * time.Second)
		visit()
		b.StartTimer()
		if err := f.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
