package pebblestore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/pebblestore"
	"github.com/linkgate/linkgate/rollup"
)

// BenchmarkWrite writes one 10-second flush: every link's count of the
// minute and its Active entry (as the first flush of a batch period has:
// later ones have none), and the same for all links, synced to disk.
// Successive flushes move on by a minute.
func BenchmarkWrite(b *testing.B) {
	for _, links := range []int{100, 10_000} {
		b.Run(fmt.Sprintf("links=%d", links), func(b *testing.B) {
			s := open(b, b.TempDir(), analyticstest.DefaultPlan)
			defer s.Close()
			t0 := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
			b.ReportAllocs()
			var counts int
			for i := 0; b.Loop(); i++ {
				batch := flush(links, t0.Add(time.Duration(i)*time.Minute))
				counts = len(batch.Counts) + len(batch.Active)
				if err := s.Write(context.Background(), batch); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(counts), "counts/op")
		})
	}
}

func flush(links int, at time.Time) analytics.Batch {
	b := analytics.Batch{At: at}
	for i := -1; i < links; i++ {
		k := analytics.AllLinks
		if i >= 0 {
			k = benchKey(i)
		}
		b.Counts = append(b.Counts, analytics.Count{Key: k, Step: time.Minute, Start: rollup.Align(at, time.Minute), Visits: analytics.Visits{Human: 3, Bot: 1}})
		b.Active = append(b.Active, rollup.Active{Step: 5 * time.Minute, Period: rollup.Align(at, time.Hour), Key: k})
	}
	return b
}

// benchKey returns link i's short_key: seven base-62 characters, scattered
// as real short_keys are.
func benchKey(i int) string {
	const digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	x := uint64(i)*0x9E3779B97F4A7C15 + 1
	var b [7]byte
	for j := range b {
		b[j] = digits[x%62]
		x /= 62
	}
	return string(b[:])
}

// The read benchmark's store: benchLinks links with 30 days of history in
// the day and week tiers; benchHot of them also have a year and five days of
// days and 30 days of hours. Not every link has 30 days of hours (nor any
// minutes), which would be 72 million rows and take far longer to build than
// a benchmark should; the rows a one-year query reads are the same either
// way, and the store still holds millions of rows around them.
const (
	benchLinks = 100_000
	benchHot   = 1_000
	benchDays  = 370
)

var benchEnd = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC) // a Monday

// benchStore returns the read benchmark's store, built once (about a
// minute) under the temporary directory and kept there for later runs.
// Change the directory's name when the layout changes.
func benchStore(b *testing.B) *pebblestore.Store {
	dir := filepath.Join(os.TempDir(), "linkgate-pebble-bench-v1")
	done := filepath.Join(dir, "COMPLETE")
	if _, err := os.Stat(done); err != nil {
		b.Logf("building %s: %d links × 30 days, %d of them × %d days and 30 days of hours", dir, benchLinks, benchHot, benchDays)
		start := time.Now()
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		s := open(b, dir, analyticstest.DefaultPlan)
		rows := 0
		// One batch per day, as the flushes of that day would have
		// written it, oldest first.
		for d := benchDays - 1; d >= 0; d-- {
			day := benchEnd.Add(-time.Duration(d) * rollup.Day)
			var batch analytics.Batch
			n := benchHot
			if d < 30 {
				n = benchLinks
			}
			for i := range n {
				k := benchKey(i)
				v := analytics.Visits{Human: int64(1 + (i+d)%97), Bot: int64((i + d) % 5)}
				batch.Counts = append(batch.Counts,
					analytics.Count{Key: k, Step: rollup.Day, Start: day, Visits: v},
					analytics.Count{Key: k, Step: rollup.Week, Start: rollup.Align(day, rollup.Week), Visits: v})
				if d < 30 && i < benchHot {
					for h := range 24 {
						batch.Counts = append(batch.Counts, analytics.Count{Key: k, Step: time.Hour, Start: day.Add(time.Duration(h) * time.Hour), Visits: analytics.Visits{Human: 1}})
					}
				}
			}
			rows += len(batch.Counts)
			if err := s.Write(context.Background(), batch); err != nil {
				b.Fatal(err)
			}
		}
		if err := pebblestore.Compact(s); err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(done, nil, 0o644); err != nil {
			b.Fatal(err)
		}
		b.Logf("built in %v: %d counts written", time.Since(start).Round(time.Second), rows)
	}
	return open(b, dir, analyticstest.DefaultPlan)
}

// BenchmarkPointsYear reads one link's daily curve over a year (366
// buckets) from a store of 100,000 links, and reports the rows read per
// query and the 99th percentile of the queries' latencies. Run it with
// -benchtime=1000x for a p99 over 1,000 queries.
func BenchmarkPointsYear(b *testing.B) {
	s := benchStore(b)
	defer s.Close()
	for _, c := range []struct {
		name  string
		links int
	}{{"hot", benchHot}, {"any", benchLinks}} {
		b.Run(c.name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			from, to := benchEnd.Add(-365*rollup.Day), benchEnd.Add(rollup.Day)
			lat := make([]time.Duration, 0, b.N)
			rows := 0
			b.ReportAllocs()
			for b.Loop() {
				k := benchKey(r.IntN(c.links))
				t := time.Now()
				ps, err := s.Points(context.Background(), k, rollup.Day, from, to)
				lat = append(lat, time.Since(t))
				if err != nil {
					b.Fatal(err)
				}
				if len(ps) == 0 {
					b.Fatalf("no points for %s", k)
				}
				rows += len(ps)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(rows)/float64(len(lat)), "rows/op")
			b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
		})
	}
}

// BenchmarkReaderYear reads the same curve as BenchmarkPointsYear, and the
// link's total, through analytics.NewReader, as the stats API does, with
// the rollup's progress at the end of the stored data: the reader adds the
// link's marks, the progress (cached for a second) and one range per finer
// tier for the part not rolled yet.
func BenchmarkReaderYear(b *testing.B) {
	s := benchStore(b)
	defer s.Close()
	ctx := context.Background()
	for _, step := range []time.Duration{5 * time.Minute, time.Hour, rollup.Day, rollup.Week, 52 * rollup.Week, 0} {
		if err := s.Advance(ctx, step, benchEnd); err != nil {
			b.Fatal(err)
		}
	}
	r := rollup.NewReader(s, analyticstest.DefaultPlan)
	rng := rand.New(rand.NewPCG(1, 2))
	from, to := benchEnd.Add(-365*rollup.Day), benchEnd.Add(rollup.Day)
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	for b.Loop() {
		k := benchKey(rng.IntN(benchHot))
		t := time.Now()
		ps, err := r.Points(ctx, k, rollup.Day, from, to)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Total(ctx, k); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t))
		if len(ps) == 0 {
			b.Fatalf("no points for %s", k)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
}
