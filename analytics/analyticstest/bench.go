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

// benchLinks is the traffic of the flush benchmarks: 100,000 links, each
// visited once an interval with six features (a referrer, a source, a
// country, a device, a browser, an OS; 100 values of each at most) and a
// visitor of its own.
type benchLinks struct {
	keys []string
	rec  *analytics.Recorder
	f    *analytics.Flusher
	at   time.Time
}

func newBenchLinks(keys []string, w analytics.Writer) *benchLinks {
	l := &benchLinks{keys: keys, rec: analytics.NewRecorder(2*len(keys), nil)}
	l.rec.SetMaxValues(100)
	l.rec.SetMaxBytes(1 << 30)
	l.at = rollup.Align(time.Now(), rollup.Week).Add(rollup.Week + time.Hour) // a Monday, 01:00 UTC
	l.f = analytics.NewFlusher(l.rec, w, DefaultPlan, analytics.FlusherOptions{Now: func() time.Time { return l.at }}, nil, nil)
	return l
}

func benchKeys() []string {
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
	}
	return keys
}

// visit records an interval's visits.
func (l *benchLinks) visit() {
	refs := []string{"news.example", "direct", "t.co"}
	for i, k := range l.keys {
		fe := visitor.Features{refs[i%3], refs[i%3], "DE", "mobile", "Safari", "iOS"}
		l.rec.RecordVisit(k, l.at, false, &fe, uint64(i)*0x9e3779b97f4a7c15)
	}
}

func (l *benchLinks) flush(b *testing.B) {
	if err := l.f.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// BenchSteadyFlushes measures the steady flushes of 100,000 links into w:
// what the Flusher and w do for a flush, not the recording of the visits
// before it. The first flush, of the first interval of a day and an hour
// (every link announced, every value new), is made before the timer
// starts.
func BenchSteadyFlushes(b *testing.B, w analytics.Writer) {
	l := newBenchLinks(benchKeys(), w)
	l.visit()
	l.flush(b)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		l.at = l.at.Add(10 * time.Second)
		l.visit()
		b.StartTimer()
		l.flush(b)
	}
}

// BenchFirstFlushes measures the first flush of a day and an hour of the
// same 100,000 links, each into a new writer of newWriter and from a new
// Recorder and Flusher: every link announced to the rollup, every
// breakdown value new to the day.
func BenchFirstFlushes(b *testing.B, newWriter func() analytics.Writer) {
	keys := benchKeys()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		l := newBenchLinks(keys, newWriter())
		l.visit()
		b.StartTimer()
		l.flush(b)
	}
}
