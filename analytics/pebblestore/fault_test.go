package pebblestore_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/pebblestore"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/rollup"
)

// smallDisk is the real file system reporting avail bytes free.
type smallDisk struct {
	vfs.FS
	avail atomic.Uint64
}

func (d *smallDisk) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	du, err := d.FS.GetDiskUsage(path)
	du.AvailBytes = d.avail.Load()
	return du, err
}

func oneVisit(at time.Time) analytics.Batch {
	return analytics.Batch{
		At:     at,
		Counts: []analytics.Count{{Key: "abc", Step: time.Minute, Start: at, Visits: analytics.Visits{Human: 1}}},
		Active: []rollup.Active{{Step: 5 * time.Minute, Period: rollup.Align(at, time.Hour), Key: "abc"}},
	}
}

// TestDiskAlmostFull: with the disk nearly full a Write is refused whole,
// and once space is back the same batch is counted once.
func TestDiskAlmostFull(t *testing.T) {
	disk := &smallDisk{FS: vfs.Default}
	disk.avail.Store(10 << 20)
	s, err := pebblestore.OpenFS(t.TempDir(), disk, analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	if err := s.Write(t.Context(), oneVisit(at)); !errors.Is(err, pebblestore.ErrDiskFull) {
		t.Fatalf("Write on a nearly full disk = %v, want ErrDiskFull", err)
	}
	if ps, err := s.Points(t.Context(), "abc", time.Minute, at, at.Add(time.Minute)); err != nil || len(ps) != 0 {
		t.Fatalf("after a refused Write: points %+v, %v; want nothing applied", ps, err)
	}
	disk.avail.Store(1 << 40)
	if err := s.Write(t.Context(), oneVisit(at)); err != nil {
		t.Fatalf("Write with space back: %v", err)
	}
	ps, err := s.Points(t.Context(), "abc", time.Minute, at, at.Add(time.Minute))
	if err != nil || len(ps) != 1 || ps[0].Human != 1 {
		t.Errorf("after the retry: points %+v (%v); want one visit", ps, err)
	}
}

// TestFailedCommitDoesNotCrash: when the disk refuses the engine's log, the
// commit's failure is an error, not a crash of the process, and the store
// answers every later call with ErrFailed rather than numbers it cannot
// vouch for.
func TestFailedCommitDoesNotCrash(t *testing.T) {
	var broken atomic.Bool
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if broken.Load() && strings.HasSuffix(path, ".log") && (op == errorfs.OpFileWrite || op == errorfs.OpFileSync) {
			return errorfs.ErrInjected
		}
		return nil
	}))
	s, err := pebblestore.OpenFS(t.TempDir(), fs, analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	if err := s.Write(t.Context(), oneVisit(at)); err != nil {
		t.Fatal(err)
	}
	broken.Store(true)
	if err := s.Write(t.Context(), oneVisit(at)); !errors.Is(err, pebblestore.ErrFailed) {
		t.Fatalf("Write with the log refused = %v, want ErrFailed", err)
	}
	if err := s.Write(t.Context(), oneVisit(at)); !errors.Is(err, pebblestore.ErrFailed) {
		t.Errorf("later Write = %v, want ErrFailed", err)
	}
	if _, err := s.Marks(t.Context(), "abc"); !errors.Is(err, pebblestore.ErrFailed) {
		t.Errorf("Marks after the failure = %v, want ErrFailed", err)
	}
	if err := s.Apply(t.Context(), rollup.Update{}); !errors.Is(err, pebblestore.ErrFailed) {
		t.Errorf("Apply after the failure = %v, want ErrFailed", err)
	}
	if _, err := s.Points(t.Context(), "abc", time.Minute, at, at.Add(time.Minute)); !errors.Is(err, pebblestore.ErrFailed) {
		t.Errorf("Points after the failure = %v, want ErrFailed", err)
	}
	if err := s.Expire(at); !errors.Is(err, pebblestore.ErrFailed) {
		t.Errorf("Expire after the failure = %v, want ErrFailed", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		t.Logf("Close after the failure: %v", err)
	case <-time.After(testkit.Slack(10 * time.Second)):
		t.Fatal("Close after a failed commit hangs")
	}
}
