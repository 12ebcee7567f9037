package pebblestore_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/pebblestore"
	"github.com/linkgate/linkgate/internal/testkit"
)

// flushOf returns a batch like a flush of links distinct links makes,
// for the minute at.
func flushOf(at time.Time, links, seq int) analytics.Batch {
	b := analytics.Batch{At: at, Counts: make([]analytics.Count, 0, links)}
	for i := range links {
		b.Counts = append(b.Counts, analytics.Count{
			Key: "link-" + strconv.Itoa(seq) + "-" + strconv.Itoa(i), Step: time.Minute, Start: at,
			Visits: analytics.Visits{Human: int64(i%7 + 1)},
		})
	}
	return b
}

// fill writes a file of zeros in dir until the volume has no byte left,
// and returns its path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the volume: %v", err)
			}
			return path
		}
	}
}

// minVolumeMiB is the smallest volume docs/analytics.md says the embedded
// store supports: TestSmallVolume runs on it.
const minVolumeMiB = 48

// TestSmallVolume runs the store on a tmpfs of the smallest supported
// size: flushes of 1,000 links go through for several memtables (so the
// engine has preallocated, rotated and flushed its log); a volume filled
// up refuses writes with ErrDiskFull, without marking the store failed;
// once space is back the same process writes again, and the counts
// written are all there.
func TestSmallVolume(t *testing.T) {
	dir := testkit.Tmpfs(t, minVolumeMiB<<20, "TestReserveOnSmallDisk covers the reserve without privileges")
	s, err := pebblestore.Open(filepath.Join(dir, "analytics"), analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// This minute: Open's background expiry, a minute on, deletes the
	// minute buckets older than two days, and on a busy machine the test
	// runs for minutes.
	t0 := time.Now().UTC().Truncate(time.Minute)
	ctx := t.Context()
	// 200 flushes of 1,000 links: about 16 MB through the log, four
	// times the memtable a 48 MiB volume gets.
	const flushes, links = 200, 1000
	for i := range flushes {
		if err := s.Write(ctx, flushOf(t0, links, i)); err != nil {
			var st syscall.Statfs_t
			syscall.Statfs(dir, &st)
			t.Fatalf("flush %d of %d on a %d MiB volume: %v (%d MiB free)", i, flushes, minVolumeMiB, err, st.Bavail*uint64(st.Bsize)>>20)
		}
	}

	filler := fill(t, dir)
	err = s.Write(ctx, flushOf(t0, links, flushes))
	if !errors.Is(err, pebblestore.ErrDiskFull) {
		t.Fatalf("Write on a full volume = %v, want ErrDiskFull", err)
	}
	if st := s.State(); st.Err != nil || !st.Open {
		t.Errorf("State after a refused write = %+v, want open and usable", st)
	}
	// Reads go on while writes are refused.
	if ps, err := s.Points(ctx, "link-0-1", time.Minute, t0, t0.Add(time.Minute)); err != nil || len(ps) != 1 || ps[0].Human != 2 {
		t.Errorf("Points on a full volume = %v, %v; want the 2 visits written", ps, err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, flushOf(t0, links, flushes)); err != nil {
		t.Fatalf("Write once space is back: %v", err)
	}
	for _, seq := range []int{0, flushes / 2, flushes} {
		key := "link-" + strconv.Itoa(seq) + "-" + strconv.Itoa(links-1)
		ps, err := s.Points(ctx, key, time.Minute, t0, t0.Add(time.Minute))
		if want := int64((links-1)%7 + 1); err != nil || len(ps) != 1 || ps[0].Human != want {
			t.Errorf("Points(%s) = %v, %v; want %d visits", key, ps, err, want)
		}
	}
}

// TestReserveOnSmallDisk is TestSmallVolume's logic without a mount: the
// disk's free space is what the test says. On a small volume the reserve
// is small enough that the space the engine preallocated for its log does
// not leave every write refused; a write that would eat into the reserve
// is refused whole without failing the store, and writes resume on their
// own once the disk has room again.
func TestReserveOnSmallDisk(t *testing.T) {
	disk := &sizedDisk{FS: vfs.Default, total: 80 << 20}
	disk.avail.Store(80 << 20)
	s, err := pebblestore.OpenFS(t.TempDir(), disk, analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	reserve := pebblestore.Reserve(s)
	// An 80 MiB volume gets a 5 MiB memtable: a 5.5 MiB log, 15.5 MiB
	// kept free (the fixed 64 MiB of before left none after the log).
	if want := uint64(5<<20 + 5<<20/10 + 10<<20); reserve != want {
		t.Fatalf("reserve on 80 MiB = %d, want %d", reserve, want)
	}
	at := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	// What the issue measured: the log's preallocation took about 36 MB
	// of 80 MiB, leaving 44 MiB; the store must still write.
	disk.avail.Store(44 << 20)
	if err := s.Write(t.Context(), oneVisit(at)); err != nil {
		t.Fatalf("Write with 44 MiB free on 80 MiB: %v", err)
	}
	disk.avail.Store(reserve + 10) // less than the reserve plus the batch
	if err := s.Write(t.Context(), oneVisit(at)); !errors.Is(err, pebblestore.ErrDiskFull) {
		t.Fatalf("Write eating into the reserve = %v, want ErrDiskFull", err)
	}
	if st := s.State(); st.Err != nil {
		t.Errorf("State after ErrDiskFull = %+v, want usable", st)
	}
	disk.avail.Store(reserve + 1<<20)
	if err := s.Write(t.Context(), oneVisit(at)); err != nil {
		t.Fatalf("Write with space back: %v", err)
	}
	ps, err := s.Points(t.Context(), "abc", time.Minute, at, at.Add(time.Minute))
	if err != nil || len(ps) != 1 || ps[0].Human != 2 {
		t.Errorf("points %+v (%v); want the 2 visits accepted, not the refused one", ps, err)
	}
}

// TestReserveFollowsVolume: the memtable, and so the reserve, scales with
// the volume between its bounds.
func TestReserveFollowsVolume(t *testing.T) {
	for _, c := range []struct {
		volume, reserve uint64
	}{
		{16 << 20, 4<<20 + 4<<20/10 + 8<<20},     // the smallest memtable
		{80 << 20, 5<<20 + 5<<20/10 + 10<<20},    // a sixteenth, whole MiB
		{256 << 20, 16<<20 + 16<<20/10 + 32<<20}, //
		{1 << 40, 32<<20 + 32<<20/10 + 64<<20},   // the largest
		{0, 32<<20 + 32<<20/10 + 64<<20},         // the file system cannot tell
	} {
		disk := &sizedDisk{FS: vfs.Default, total: c.volume}
		disk.avail.Store(1 << 40)
		s, err := pebblestore.OpenFS(t.TempDir(), disk, analyticstest.DefaultPlan, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := pebblestore.Reserve(s); got != c.reserve {
			t.Errorf("volume of %d MiB: reserve %d MiB, want %d MiB", c.volume>>20, got>>20, c.reserve>>20)
		}
		s.Close()
	}
}

// sizedDisk is the real file system reporting a volume of total bytes
// with avail free; total 0: it cannot tell.
type sizedDisk struct {
	vfs.FS
	total uint64
	avail atomic.Uint64
}

func (d *sizedDisk) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	if d.total == 0 {
		return vfs.DiskUsage{}, errors.ErrUnsupported
	}
	du, err := d.FS.GetDiskUsage(path)
	du.TotalBytes, du.AvailBytes = d.total, d.avail.Load()
	return du, err
}
