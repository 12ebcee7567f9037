package pebblestore_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/pebblestore"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
)

// The breakdown and top-list figures of docs/benchmarks.md: an embedded
// store of 100,000 links, each visited every day of 30 (link i about 20,000/(i+1)
// times a day: a few links take most visits, as short links' traffic
// does), with five dimensions per link and day, and one link with a year
// of breakdowns. Building it takes a minute or two, so it runs only with
// LINKGATE_MEASURE_TOP=1:
//
//	LINKGATE_MEASURE_TOP=1 go test ./analytics/pebblestore -run '^$' -bench 'TopMonth|BreakdownYear' -benchtime 20x

const measureLinks = 100_000

var (
	bigDir   string // the store built, to remove at the end
	bigOnce  sync.Once
	bigStore *pebblestore.Store
	bigDay0  time.Time
	bigErr   error
)

func bigTopStore(b *testing.B) *pebblestore.Store {
	if os.Getenv("LINKGATE_MEASURE_TOP") == "" {
		b.Skip("set LINKGATE_MEASURE_TOP=1 to build a store of 100,000 links and measure (a minute or two)")
	}
	bigOnce.Do(func() {
		// LINKGATE_MEASURE_TOP_DIR names a store an earlier run built the
		// same day, kept to measure again without building.
		dir, kept := os.Getenv("LINKGATE_MEASURE_TOP_DIR"), true
		if dir == "" {
			kept = false
			var err error
			if dir, err = os.MkdirTemp("", "linkgate-top-*"); err != nil {
				bigErr = err
				return
			}
			bigDir = dir // removed by TestMain once every benchmark ran
		}
		s, err := pebblestore.Open(dir, analyticstest.DefaultPlan, nil)
		if err != nil {
			bigErr = err
			return
		}
		bigStore = s
		today := rollup.Align(time.Now().UTC(), rollup.Day)
		bigDay0 = today.Add(-29 * rollup.Day)
		if kept {
			return
		}
		seq := uint64(0)
		values := [5][]string{{"news.example", "direct", "t.co"}, {"newsletter", "qr", "direct"}, {"DE", "FR", "US"}, {"mobile", "desktop", "tablet"}, {"Safari", "Chrome", "Firefox"}}
		for d := range 30 {
			day := bigDay0.Add(time.Duration(d) * rollup.Day)
			for lo := 0; lo < measureLinks; lo += 20_000 {
				seq++
				batch := analytics.Batch{Writer: "measure", Seq: seq, At: time.Now()}
				for i := lo; i < lo+20_000; i++ {
					n := max(int64(20_000/(i+1)), 1)
					k := benchKey(i)
					batch.Dims = append(batch.Dims, analytics.DimCount{Key: analytics.AllLinks, Day: day, Dim: analytics.DimLink, Value: k, N: n})
					for dim := range 5 {
						batch.Dims = append(batch.Dims, analytics.DimCount{Key: k, Day: day, Dim: visitor.Dim(dim), Value: values[dim][i%3], N: n})
					}
				}
				if err := s.Write(context.Background(), batch); err != nil {
					bigErr = err
					return
				}
			}
		}
		// One link with a year of breakdowns: 20 referrers a day.
		seq++
		batch := analytics.Batch{Writer: "measure", Seq: seq, At: time.Now()}
		for d := range 366 {
			day := today.Add(-time.Duration(d) * rollup.Day)
			for r := range 20 {
				batch.Dims = append(batch.Dims, analytics.DimCount{Key: "year", Day: day, Dim: visitor.Referrer, Value: benchKey(r) + ".example", N: int64(r + 1)})
			}
		}
		bigErr = s.Write(context.Background(), batch)
	})
	if bigErr != nil {
		b.Fatal(bigErr)
	}
	return bigStore
}

// BenchmarkTopMonth answers the 100 most visited of 100,000 links over 30
// days.
func BenchmarkTopMonth(b *testing.B) {
	s := bigTopStore(b)
	to := bigDay0.Add(30 * rollup.Day)
	b.ReportAllocs()
	for b.Loop() {
		top, err := s.Top(context.Background(), bigDay0, to, 100)
		if err != nil || len(top) != 100 || top[0].Key != benchKey(0) || top[0].Visits != 30*20_000 {
			b.Fatalf("top = %v…, %v", top[:min(len(top), 2)], err)
		}
	}
}

// BenchmarkBreakdownYear answers one link's referrers over a year: 366
// days of 20 values.
func BenchmarkBreakdownYear(b *testing.B) {
	s := bigTopStore(b)
	today := rollup.Align(time.Now().UTC(), rollup.Day)
	b.ReportAllocs()
	for b.Loop() {
		vals, err := s.Dims(context.Background(), "year", visitor.Referrer, today.Add(-365*rollup.Day), today.Add(rollup.Day))
		if err != nil || len(vals) != 20 {
			b.Fatalf("breakdown = %d values, %v", len(vals), err)
		}
	}
}

// TestMain removes the store the measurements built, once all ran.
func TestMain(m *testing.M) {
	code := m.Run()
	if bigStore != nil {
		bigStore.Close()
	}
	if bigDir != "" {
		os.RemoveAll(bigDir)
	}
	os.Exit(code)
}
