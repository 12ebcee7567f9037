package cassandra

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/rollup"
)

// nopBackend acknowledges every write at once: BenchmarkWrite measures the
// store's own work (state, statements, collection), not the network.
type nopBackend struct{}

func (nopBackend) writePoints(context.Context, []pointRow) error { return nil }

// writeLinks returns the rows a statement would write, as the store's
// count of them (TestFlushStatementsWithDims) comes from it.
func (nopBackend) writeLinks(_ context.Context, parts []linkPart) (int, error) {
	return linkRowCount(parts), nil
}

func (nopBackend) readUniques(context.Context, string, time.Time, time.Time, time.Time) ([]uniqRow, error) {
	return nil, nil
}
func (nopBackend) readTopKeys(context.Context, time.Time, int, []string) ([]topRow, error) {
	return nil, nil
}
func (nopBackend) readLinkVisits(context.Context, time.Time, []string, time.Time, time.Time) ([]topRow, error) {
	return nil, nil
}
func (nopBackend) writeLeaders(context.Context, []leaderRow) error { return nil }
func (nopBackend) readLeaders(context.Context, string, time.Time) ([]leaderRow, error) {
	return nil, nil
}
func (nopBackend) readLeader(context.Context, string, time.Time, gocql.UUID) ([]leaderRow, error) {
	return nil, nil
}
func (nopBackend) readDims(context.Context, string, time.Time, int, time.Time, time.Time) ([]dimReadRow, error) {
	return nil, nil
}
func (nopBackend) readPoints(context.Context, string, string, time.Time, time.Time, time.Time) ([]analytics.Point, error) {
	return nil, nil
}
func (nopBackend) writeActive(context.Context, activeRows) error { return nil }
func (nopBackend) readActive(context.Context, int, time.Time, int, string, int) ([]string, error) {
	return nil, nil
}
func (nopBackend) writeMark(context.Context, markRow) error                 { return nil }
func (nopBackend) deleteMark(context.Context, markRow) error                { return nil }
func (nopBackend) readMarks(context.Context, string) ([]rollup.Mark, error) { return nil, nil }
func (nopBackend) writeProgress(context.Context, int, time.Time) error      { return nil }
func (nopBackend) readProgress(context.Context) (rollup.Progress, error)    { return nil, nil }
func (nopBackend) lease(context.Context, gocql.UUID, int) (bool, error)     { return true, nil }
func (nopBackend) close()                                                   {}

// BenchmarkWrite writes flushes of 100 or 1,000 links, 10 s apart, each a
// count of the minute and an Active entry (as the first flush of an hour
// has); rows/s is statements handed to gocql per second of the store's CPU.
func BenchmarkWrite(b *testing.B) {
	for _, links := range []int{100, 1000} {
		b.Run(fmt.Sprint(links, "links"), func(b *testing.B) {
			s := newStore(analyticstest.DefaultPlan, nil)
			s.be = nopBackend{}
			at := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
			keys := make([]string, links)
			for i := range keys {
				keys[i] = fmt.Sprint("link", i)
			}
			b.ReportAllocs()
			rows := 0
			for b.Loop() {
				at = at.Add(10 * time.Second)
				batch := analytics.Batch{At: at}
				for _, k := range keys {
					batch.Counts = append(batch.Counts, analytics.Count{Key: k, Step: time.Minute, Start: rollup.Align(at, time.Minute), Visits: analytics.Visits{Human: 1}})
					batch.Active = append(batch.Active, rollup.Active{Step: 5 * time.Minute, Period: rollup.Align(at, time.Hour), Key: k})
				}
				if err := s.Write(context.Background(), batch); err != nil {
					b.Fatal(err)
				}
				rows += len(batch.Counts) + len(batch.Active)
			}
			b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkFlush100kLinksWithDims is the client's work of a steady flush
// of 100,000 links, each visited once with six features and a visitor:
// the flusher's batch and the store's statements, all but gocql's
// encoding and the network (nopBackend).
func BenchmarkFlush100kLinksWithDims(b *testing.B) {
	s := newStore(analyticstest.DefaultPlan, nil)
	s.be = nopBackend{}
	analyticstest.BenchSteadyFlushes(b, s)
}

// BenchmarkFirstFlush100kLinksWithDims is the first flush of an hour and
// a day of the same links: each link announced to the rollup and its
// breakdown values new to the flusher.
func BenchmarkFirstFlush100kLinksWithDims(b *testing.B) {
	analyticstest.BenchFirstFlushes(b, func() analytics.Writer {
		s := newStore(analyticstest.DefaultPlan, nil)
		s.be = nopBackend{}
		return s
	})
}
