package journal_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/linkgate/linkgate/journal"
)

// smallVolume mounts a 1 MiB tmpfs for the test, or skips it loudly where
// mounting is not allowed (not root, a container without CAP_SYS_ADMIN).
func smallVolume(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("SKIPPED: cannot mount a 1 MiB tmpfs to fill (%v): the ENOSPC behaviour of Append is not tested here", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// TestAppendNoSpace fills a small volume: the Append that does not fit
// fails with ENOSPC and leaves no part of its record, the journal stays
// valid (also reopened), and Appends succeed again once space returns.
func TestAppendNoSpace(t *testing.T) {
	vol := smallVolume(t)
	filler := filepath.Join(vol, "filler")
	if err := os.WriteFile(filler, make([]byte, 256<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(vol, "journal")
	opts := journal.Options{SegmentBytes: 100 << 10}
	j := open(t, dir, opts)
	kept, err := appendUntilFails(j, 0, nil)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Append on a full volume = %v, want ENOSPC", err)
	}
	t.Logf("%d records of 30 KiB fit, then: %v", len(kept), err)
	check := func(what string) {
		t.Helper()
		checkScan(t, j, kept, what)
		if want := int64(len(kept)) * (30<<10 + journal.FrameHeader); j.Bytes() != want || diskBytes(t, dir) != want {
			t.Fatalf("%s: Bytes() %d, files hold %d, want %d: a part of the failed record is left", what, j.Bytes(), diskBytes(t, dir), want)
		}
	}
	check("after ENOSPC")
	// Still no space: still refused, still valid.
	if _, err := j.Append([]byte(rec(99, 30<<10))); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("second Append on a full volume = %v, want ENOSPC", err)
	}
	check("after a second ENOSPC")
	j.Close()
	j = open(t, dir, opts)
	if st := j.Recovered(); st.TornBytes != 0 || st.Corrupt != 0 {
		t.Errorf("Recovered() after ENOSPC = %+v, want nothing torn or corrupt", st)
	}
	check("reopened")

	// Space returns: Appends succeed again, in the same journal.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	kept = append(kept, appendAll(t, j, rec(100, 30<<10), rec(101, 30<<10))...)
	check("after space returned")
	j.Close()
	j = open(t, dir, opts)
	check("reopened after space returned")
}

// TestFoldNoSpace: a Fold whose file does not fit fails and changes
// nothing; acking frees whole segments.
func TestFoldNoSpace(t *testing.T) {
	vol := smallVolume(t)
	dir := filepath.Join(vol, "journal")
	j := open(t, dir, journal.Options{SegmentBytes: 100 << 10})
	kept, _ := appendUntilFails(j, 0, nil)
	big := func(recs func(func([]byte) bool)) ([]byte, error) {
		for range recs {
		}
		return make([]byte, 512<<10), nil
	}
	if err := j.Fold(kept[len(kept)-1].End, big); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Fold into a file that does not fit = %v, want ENOSPC", err)
	}
	checkScan(t, j, kept, "after a failed Fold")
	if j.Bytes() != diskBytes(t, dir) {
		t.Errorf("Bytes() %d, files hold %d", j.Bytes(), diskBytes(t, dir))
	}
	if err := j.Ack(kept[5].End); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append([]byte(rec(100, 30<<10))); err != nil {
		t.Fatalf("Append after acking two segments: %v", err)
	}
}

// TestAckNoSpace fills the volume to the last byte: Ack still works (it
// overwrites the ack file in place) and gives space back, and the ack
// holds after reopening.
func TestAckNoSpace(t *testing.T) {
	vol := smallVolume(t)
	dir := filepath.Join(vol, "journal")
	opts := journal.Options{SegmentBytes: 100 << 10}
	j := open(t, dir, opts)
	kept, _ := appendUntilFails(j, 0, nil)
	// Take what space is left, down to the last block.
	f, err := os.Create(filepath.Join(vol, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for _, err = f.Write(make([]byte, 4096)); err == nil; _, err = f.Write(make([]byte, 4096)) {
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(vol, "probe"), []byte("x"), 0o600); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("the volume is not full: writing a byte = %v", err)
	}
	before := len(files(t, dir))
	if err := j.Ack(kept[5].End); err != nil {
		t.Fatalf("Ack on a full volume: %v", err)
	}
	if got := len(files(t, dir)); got != before-2 {
		t.Errorf("%d segments after acking the first two of %d, want %d", got, before, before-2)
	}
	j.Close()
	j = open(t, dir, opts)
	if j.Acked() != kept[5].End {
		t.Fatalf("Acked() after reopen = %v, want %v", j.Acked(), kept[5].End)
	}
	checkScan(t, j, kept[6:], "Scan after reopen")
	if _, err := j.Append([]byte(rec(100, 30<<10))); err != nil {
		t.Errorf("Append after the ack gave space back: %v", err)
	}
}

// fill writes a file on vol until the volume is full to the last block.
func fill(t *testing.T, vol string) {
	t.Helper()
	f, err := os.Create(filepath.Join(vol, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// TestPreallocateOnFullVolume fills a volume to the last block after the
// journal opened: with Preallocate, Appends go on into the space of the
// current segment and of the spare one (six records of 30 KiB in segments
// of 100 KiB); without it, the first one fails. Everything appended is
// read back after reopening.
func TestPreallocateOnFullVolume(t *testing.T) {
	for _, prealloc := range []bool{false, true} {
		t.Run(fmt.Sprint("Preallocate=", prealloc), func(t *testing.T) {
			vol := smallVolume(t)
			dir := filepath.Join(vol, "journal")
			opts := journal.Options{SegmentBytes: 100 << 10, Preallocate: prealloc}
			j := open(t, dir, opts)
			kept := appendAll(t, j, rec(0, 30<<10))
			fill(t, vol)
			kept, err := appendUntilFails(j, 1, kept)
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Append past the reserve = %v, want ENOSPC", err)
			}
			after := len(kept) - 1
			t.Logf("%d records of 30 KiB appended on the full volume, then %v", after, err)
			if want := 0; !prealloc && after != want {
				t.Errorf("without Preallocate %d records fit on a full volume, want %d", after, want)
			}
			if want := 5; prealloc && after < want {
				t.Errorf("with Preallocate %d records fit on a full volume, want at least %d (the rest of one segment and a spare)", after, want)
			}
			j.Close()
			j = open(t, dir, opts)
			checkScan(t, j, kept, "reopened")
			j.Close()
		})
	}
}

// appendUntilFails appends records of 30 KiB, numbered from i, to kept
// until an Append fails, and returns them and the error. (The volumes
// are small: it ends.)
func appendUntilFails(j *journal.Journal, i int, kept []entry) ([]entry, error) {
	for ; ; i++ {
		r := rec(i, 30<<10)
		p, err := j.Append([]byte(r))
		if err != nil {
			return kept, err
		}
		kept = append(kept, entry{p, r})
	}
}
