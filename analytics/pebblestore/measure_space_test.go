package pebblestore_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/pebblestore"
	"github.com/linkgate/linkgate/internal/testkit"
)

// TestMeasureVolumes measures, it asserts nothing but errors other than
// ErrDiskFull: on tmpfs volumes of several sizes, how many flushes of
// 1,000 new links (up to 800) the store takes before it refuses writes,
// and what is on the volume then. The minimum volume docs/analytics.md
// gives comes from it:
//
//	LINKGATE_MEASURE_VOLUMES=1 go test ./analytics/pebble -run TestMeasureVolumes -v
func TestMeasureVolumes(t *testing.T) {
	if os.Getenv("LINKGATE_MEASURE_VOLUMES") == "" {
		t.Skip("a measurement: set LINKGATE_MEASURE_VOLUMES=1 to run it")
	}
	for _, mib := range []int{16, 24, 32, 40, 48, 80} {
		dir := testkit.Tmpfs(t, int64(mib)<<20, "a measurement only")
		s, err := pebblestore.Open(filepath.Join(dir, "analytics"), analyticstest.DefaultPlan, nil)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
		n := 0
		for ; n < 800; n++ {
			if err := s.Write(t.Context(), flushOf(t0, 1000, n)); err != nil {
				if !errors.Is(err, pebblestore.ErrDiskFull) {
					t.Errorf("%d MiB: %v", mib, err)
				}
				break
			}
		}
		var logs, ssts, other int64
		filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err != nil || fi.IsDir() {
				return nil
			}
			switch {
			case strings.HasSuffix(p, ".log"):
				logs += fi.Size()
			case strings.HasSuffix(p, ".sst"):
				ssts += fi.Size()
			default:
				other += fi.Size()
			}
			return nil
		})
		var st syscall.Statfs_t
		syscall.Statfs(dir, &st)
		t.Logf("%3d MiB: reserve %d MiB, %d flushes of 1000 links accepted, logs %.1f MiB, tables %.1f MiB, other %.1f MiB, free %.1f MiB, state %+v",
			mib, pebblestore.Reserve(s)>>20, n, float64(logs)/(1<<20), float64(ssts)/(1<<20), float64(other)/(1<<20), float64(st.Bavail*uint64(st.Bsize))/(1<<20), s.State())
		s.Close()
	}
}
