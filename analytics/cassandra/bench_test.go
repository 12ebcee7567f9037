package cassandra

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// nopBackend acknowledges every write at once: BenchmarkWrite measures the
// store's own work (state, statements, collection), not the network.
type nopBackend struct{}

func (nopBackend) writePoint(context.Context, pointRow) error { return nil }
func (nopBackend) writeTotal(context.Context, totalRow) error { return nil }
func (nopBackend) readPoints(context.Context, string, string, time.Time, time.Time, time.Time) ([]analytics.Point, error) {
	return nil, nil
}
func (nopBackend) readTotals(context.Context, string, bool) (totals, error) {
	return totals{}, nil
}
func (nopBackend) fold(context.Context, foldOp) (bool, error) { return true, nil }
func (nopBackend) close()                                     {}

// BenchmarkWrite writes flushes of 1,000 links in every tier, 10 s apart;
// rows/s is statements handed to gocql per second of the store's CPU.
func BenchmarkWrite(b *testing.B) {
	for _, links := range []int{100, 1000} {
		b.Run(fmt.Sprint(links, "links"), func(b *testing.B) {
			s, err := newStore(rollup.DefaultTiers(), nil)
			if err != nil {
				b.Fatal(err)
			}
			s.be, s.connErr = nopBackend{}, nil
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
					for _, tr := range rollup.DefaultTiers() {
						batch.Counts = append(batch.Counts, analytics.Count{Key: k, Step: tr.Step, Start: rollup.Align(at, tr.Step), Visits: analytics.Visits{Human: 1}})
					}
					batch.Totals = append(batch.Totals, analytics.Total{Key: k, Visits: analytics.Visits{Human: 1}})
				}
				if err := s.Write(context.Background(), batch); err != nil {
					b.Fatal(err)
				}
				rows += len(batch.Counts) + len(batch.Totals)
			}
			b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
