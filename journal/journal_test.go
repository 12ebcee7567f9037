package journal_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/linkgate/linkgate/journal"
)

// entry is a record as Scan yields it.
type entry struct {
	End journal.Pos
	Rec string
}

var cmpPos = cmp.Comparer(func(a, b journal.Pos) bool { return a == b })

func open(t *testing.T, dir string, opts journal.Options) *journal.Journal {
	t.Helper()
	j, err := journal.Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func scanAll(t *testing.T, j *journal.Journal) []entry {
	t.Helper()
	var got []entry
	if err := j.Scan(j.Acked(), func(end journal.Pos, rec []byte) error {
		got = append(got, entry{end, string(rec)})
		return nil
	}); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return got
}

func appendAll(t *testing.T, j *journal.Journal, recs ...string) []entry {
	t.Helper()
	var out []entry
	for _, r := range recs {
		p, err := j.Append([]byte(r))
		if err != nil {
			t.Fatalf("Append(%d bytes): %v", len(r), err)
		}
		out = append(out, entry{p, r})
	}
	return out
}

// files lists the journal's segment and fold files, sorted.
func files(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		if n := de.Name(); (strings.HasPrefix(n, "seg-") || strings.HasPrefix(n, "fold-")) && strings.HasSuffix(n, ".log") {
			names = append(names, n)
		}
	}
	return names
}

// diskBytes is the size of the journal's segment and fold files on disk.
func diskBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	for _, name := range files(t, dir) {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		n += fi.Size()
	}
	return n
}

// checkScan fails the test, saying what, unless a scan of j from its ack
// position yields want.
func checkScan(t *testing.T, j *journal.Journal, want []entry, what string) {
	t.Helper()
	if got := scanAll(t, j); !cmp.Equal(got, want, cmpPos) {
		t.Fatalf("%s: %s", what, cmp.Diff(want, got, cmpPos))
	}
}

// recsOf returns n records of size bytes.
func recsOf(n, size int) []string {
	recs := make([]string, n)
	for i := range recs {
		recs[i] = rec(i, size)
	}
	return recs
}

func rec(i, size int) string {
	s := fmt.Sprintf("record %d:", i)
	return s + strings.Repeat(string(rune('a'+i%26)), max(size-len(s), 0))
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir, journal.Options{SegmentBytes: 4096})
	recs := []string{"", "a", rec(2, 100), rec(3, 5000) /* larger than a segment */, rec(4, 4000), rec(5, 10)}
	want := appendAll(t, j, recs...)
	for i := 1; i < len(want); i++ {
		if !want[i-1].End.Less(want[i].End) || want[i].End.Less(want[i-1].End) {
			t.Fatalf("positions not increasing: %v then %v", want[i-1].End, want[i].End)
		}
	}
	checkScan(t, j, want, "Scan")
	// Scanning after a record's position starts after it.
	var got []entry
	j.Scan(want[2].End, func(end journal.Pos, rec []byte) error {
		got = append(got, entry{end, string(rec)})
		return nil
	})
	if !cmp.Equal(got, want[3:], cmpPos) {
		t.Fatalf("Scan after %v: %s", want[2].End, cmp.Diff(want[3:], got, cmpPos))
	}
	if n := len(files(t, dir)); n < 3 {
		t.Errorf("%d segment files for records of 5000 and 4000 bytes with 4 KiB segments, want at least 3", n)
	}
	if got, want := j.Bytes(), diskBytes(t, dir); got != want {
		t.Errorf("Bytes() = %d, files hold %d", got, want)
	}
	if want := j.End(); want != got[len(got)-1].End {
		t.Errorf("End() = %v, last record ends at %v", j.End(), want)
	}
}

func TestScanStopsAtError(t *testing.T) {
	j := open(t, t.TempDir(), journal.Options{})
	appendAll(t, j, "a", "b", "c")
	stop := errors.New("stop")
	var seen []string
	err := j.Scan(journal.Pos{}, func(_ journal.Pos, rec []byte) error {
		seen = append(seen, string(rec))
		if string(rec) == "b" {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || !slices.Equal(seen, []string{"a", "b"}) {
		t.Fatalf("Scan = %v after %q, want %v after [a b]", err, seen, stop)
	}
}

func TestReopen(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir, journal.Options{SegmentBytes: 1024})
	var recs []string
	for i := range 20 {
		recs = append(recs, rec(i, 100+i*10))
	}
	want := appendAll(t, j, recs...)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append([]byte("x")); !errors.Is(err, journal.ErrClosed) {
		t.Errorf("Append after Close = %v, want ErrClosed", err)
	}
	j = open(t, dir, journal.Options{SegmentBytes: 1024})
	checkScan(t, j, want, "Scan after reopen")
	st := j.Recovered()
	if st.Records != 20 || st.Segments != len(files(t, dir)) || st.Bytes != diskBytes(t, dir) || st.TornBytes != 0 || st.Corrupt != 0 {
		t.Errorf("Recovered() = %+v, want 20 records in %d segments, %d bytes, nothing torn or corrupt", st, len(files(t, dir)), diskBytes(t, dir))
	}
	// Appends go on after the last record.
	more := appendAll(t, j, "after reopen")
	if !want[len(want)-1].End.Less(more[0].End) {
		t.Errorf("Append after reopen at %v, not after %v", more[0].End, want[len(want)-1].End)
	}
	if got := scanAll(t, j); !cmp.Equal(got, append(want, more...), cmpPos) {
		t.Fatalf("Scan: %s", cmp.Diff(append(want, more...), got, cmpPos))
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		opts journal.Options
		want string
	}{
		{"negative cap", journal.Options{MaxBytes: -1}, "MaxBytes"},
		{"negative segment", journal.Options{SegmentBytes: -1}, "SegmentBytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := journal.Open(dir, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open = %v, want an error naming %s", err, tc.want)
			}
		})
	}
	t.Run("open twice", func(t *testing.T) {
		open(t, dir, journal.Options{})
		_, err := journal.Open(dir, journal.Options{})
		if err == nil || !strings.Contains(err.Error(), "LOCK") {
			t.Fatalf("second Open = %v, want an error naming the lock", err)
		}
	})
	t.Run("not a directory", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		os.WriteFile(file, nil, 0o600)
		if _, err := journal.Open(file, journal.Options{}); err == nil || !strings.HasPrefix(err.Error(), "journal: ") {
			t.Fatalf("Open(a file) = %v, want a journal: error", err)
		}
	})
}

// copyDir copies the journal files of src into a new directory.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	des, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if de.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, de.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestTornTail cuts the newest segment at every byte of its last record, as
// a crash in the middle of appending it could, and at every byte replaces
// the rest with zeros, as a file grown before its data reached the disk
// would: the reopened journal keeps exactly the whole records before it and
// appends after them.
func TestTornTail(t *testing.T) {
	src := t.TempDir()
	j := open(t, src, journal.Options{SegmentBytes: 1 << 20})
	want := appendAll(t, j, rec(0, 50), rec(1, 70), rec(2, 90), rec(3, 60))
	j.Close()
	seg := files(t, src)
	if len(seg) != 1 {
		t.Fatalf("want one segment, have %v", seg)
	}
	_, start := journal.Split(want[2].End)
	_, size := journal.Split(want[3].End)
	for _, zeros := range []bool{false, true} {
		for cut := start; cut < size; cut++ {
			dir := copyDir(t, src)
			path := filepath.Join(dir, seg[0])
			if err := os.Truncate(path, cut); err != nil {
				t.Fatal(err)
			}
			if zeros {
				os.Truncate(path, size) // the rest reads as zeros
			}
			j, err := journal.Open(dir, journal.Options{})
			if err != nil {
				t.Fatalf("cut at %d (zeros %v): Open: %v", cut, zeros, err)
			}
			got := scanAll(t, j)
			if !cmp.Equal(got, want[:3], cmpPos) {
				t.Fatalf("cut at %d (zeros %v): %s", cut, zeros, cmp.Diff(want[:3], got, cmpPos))
			}
			wantTorn := cut - start
			if zeros {
				wantTorn = size - start
			}
			if st := j.Recovered(); st.TornBytes != wantTorn || st.Corrupt != 0 || st.Records != 3 {
				t.Fatalf("cut at %d (zeros %v): Recovered() = %+v, want %d torn bytes, 3 records, none corrupt", cut, zeros, st, wantTorn)
			}
			if fi, _ := os.Stat(path); fi.Size() != start {
				t.Fatalf("cut at %d: segment is %d bytes after Open, want %d", cut, fi.Size(), start)
			}
			// The next record goes where the torn one was, and reads back.
			p, err := j.Append([]byte("next"))
			if err != nil {
				t.Fatal(err)
			}
			if got, want := scanAll(t, j), append(slices.Clone(want[:3]), entry{p, "next"}); !cmp.Equal(got, want, cmpPos) {
				t.Fatalf("cut at %d: after Append: %s", cut, cmp.Diff(want, got, cmpPos))
			}
			j.Close()
		}
	}
}

// flip flips one bit of the byte at off in the file.
func flip(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestCorruptRecord flips one bit in a record in the middle of a segment:
// the record is refused and counted, never returned; the records before
// it and those of the other segments are kept.
func TestCorruptRecord(t *testing.T) {
	for _, tc := range []struct {
		name   string
		seg    int   // which segment file: 0 the oldest, 1 the newest
		offset int64 // from the start of the second record of that segment
	}{
		{"payload in an older segment", 0, journal.FrameHeader + 3},
		{"length in an older segment", 0, 1},
		{"crc in an older segment", 0, 5},
		{"payload in the newest segment", 1, journal.FrameHeader + 3},
		{"length in the newest segment", 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			j := open(t, dir, journal.Options{SegmentBytes: 400})
			// Three records of 112 bytes per segment, two segments.
			recs := recsOf(6, 100)
			all := appendAll(t, j, recs...)
			j.Close()
			segs := files(t, dir)
			if len(segs) != 2 {
				t.Fatalf("segments %v, want 2", segs)
			}
			_, second := journal.Split(all[0].End)
			flip(t, filepath.Join(dir, segs[tc.seg]), second+tc.offset)
			j = open(t, dir, journal.Options{SegmentBytes: 400})
			// Only the damaged record is lost: its header's CRC tells a
			// damaged payload from a damaged length, and after a damaged
			// length the next good frame is found again.
			bad := 3*tc.seg + 1
			want := slices.Concat(all[:bad], all[bad+1:])
			checkScan(t, j, want, "Scan")
			if st := j.Recovered(); st.Corrupt != 1 || st.LostBytes != 100+journal.FrameHeader || st.TornBytes != 0 {
				t.Errorf("Recovered() = %+v, want 1 corrupt record of %d bytes lost, none torn", st, 100+journal.FrameHeader)
			}
			if j.Corrupt() != 1 {
				t.Errorf("Corrupt() = %d, want 1", j.Corrupt())
			}
			// New records never go after a corrupt one.
			p, err := j.Append([]byte("new"))
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, entry{p, "new"})
			j.Close()
			j = open(t, dir, journal.Options{SegmentBytes: 400})
			checkScan(t, j, want, "Scan after Append and reopen")
		})
	}
}

// TestCorruptAfterOpen damages a record after Open checked it: Scan refuses
// it, counts it and goes on with the next segment.
func TestCorruptAfterOpen(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir, journal.Options{SegmentBytes: 400})
	recs := recsOf(6, 100)
	all := appendAll(t, j, recs...)
	_, second := journal.Split(all[0].End)
	flip(t, filepath.Join(dir, files(t, dir)[0]), second+20)
	want := slices.Concat(all[:1], all[3:])
	checkScan(t, j, want, "Scan")
	if j.Corrupt() != 1 {
		t.Errorf("Corrupt() = %d, want 1", j.Corrupt())
	}
}

func TestAck(t *testing.T) {
	dir := t.TempDir()
	opts := journal.Options{SegmentBytes: 400}
	j := open(t, dir, opts)
	var recs []string
	for i := range 12 { // 3 records of 112 bytes a segment: 4 segments
		recs = append(recs, rec(i, 100))
	}
	all := appendAll(t, j, recs...)
	if n := len(files(t, dir)); n != 4 {
		t.Fatalf("%d segments, want 4", n)
	}
	if err := j.Ack(all[0].End); err != nil {
		t.Fatal(err)
	}
	// Acking into the third segment removes the first two, wholly acked.
	if err := j.Ack(all[7].End); err != nil {
		t.Fatal(err)
	}
	if got := files(t, dir); len(got) != 2 {
		t.Errorf("files after Ack into the third segment: %v, want the last two", got)
	}
	if got, want := j.Bytes(), diskBytes(t, dir); got != want || got != 6*112 {
		t.Errorf("Bytes() = %d, files hold %d, want %d", got, want, 6*112)
	}
	checkScan(t, j, all[8:], "Scan after Ack")
	// Acking backwards does nothing.
	if err := j.Ack(all[2].End); err != nil || j.Acked() != all[7].End {
		t.Errorf("Ack backwards = %v, Acked() = %v, want nil and %v", err, j.Acked(), all[7].End)
	}
	// Acking past the last record is refused: it would ack records not
	// yet appended.
	seg, off := journal.Split(all[11].End)
	if err := j.Ack(journal.MakePos(seg, off+1)); err == nil {
		t.Errorf("Ack past End() (%v) = nil, want an error", j.End())
	}
	j.Close()

	// The ack persists: a reopened journal skips the acked records of the
	// partly acked segment.
	j = open(t, dir, opts)
	if j.Acked() != all[7].End {
		t.Errorf("Acked() after reopen = %v, want %v", j.Acked(), all[7].End)
	}
	checkScan(t, j, all[8:], "Scan after reopen")
	if st := j.Recovered(); st.Records != 4 || st.Segments != 2 {
		t.Errorf("Recovered() = %+v, want 4 records in 2 segments", st)
	}

	// Acking everything removes every file, and the next record still
	// comes after the acked position.
	if err := j.Ack(all[11].End); err != nil {
		t.Fatal(err)
	}
	if got := files(t, dir); len(got) != 0 || j.Bytes() != 0 {
		t.Errorf("after acking everything: files %v, Bytes() %d, want none", got, j.Bytes())
	}
	more := appendAll(t, j, "more")
	if !all[11].End.Less(more[0].End) {
		t.Errorf("Append after acking everything at %v, not after %v", more[0].End, all[11].End)
	}
	j.Close()
	j = open(t, dir, opts)
	checkScan(t, j, more, "Scan after reopen")
}

// TestAckDuringScan acks each record from inside Scan, as a replay that
// applies and acks one record at a time does: files are removed once the
// scan has passed them, and nothing is lost or repeated.
func TestAckDuringScan(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir, journal.Options{SegmentBytes: 400})
	recs := recsOf(12, 100)
	all := appendAll(t, j, recs...)
	var got []entry
	err := j.Scan(journal.Pos{}, func(end journal.Pos, rec []byte) error {
		got = append(got, entry{end, string(rec)})
		if len(got) == 7 {
			// The first two segments are acked and the scan is done with
			// them: they are gone.
			if n := len(files(t, dir)); n != 2 {
				t.Errorf("files after acking 6 records in Scan: %d, want 2", n)
			}
		}
		return j.Ack(end)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(got, all, cmpPos) {
		t.Fatalf("Scan: %s", cmp.Diff(all, got, cmpPos))
	}
	if f := files(t, dir); len(f) != 0 || j.Bytes() != 0 {
		t.Errorf("after the scan acked everything: files %v, Bytes() %d, want none", f, j.Bytes())
	}
}

func TestFull(t *testing.T) {
	dir := t.TempDir()
	opts := journal.Options{MaxBytes: 1000, SegmentBytes: 250}
	j := open(t, dir, opts)
	var all []entry
	for i := 0; ; i++ {
		r := rec(i, 100-journal.FrameHeader) // 100 bytes framed
		p, err := j.Append([]byte(r))
		if errors.Is(err, journal.ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, entry{p, r})
	}
	if len(all) != 10 || j.Bytes() != 1000 || diskBytes(t, dir) != 1000 {
		t.Fatalf("full after %d records, Bytes() %d, disk %d: want 10 records, 1000 bytes", len(all), j.Bytes(), diskBytes(t, dir))
	}
	// Acking the first segment (two records) makes room for two more.
	if err := j.Ack(all[1].End); err != nil {
		t.Fatal(err)
	}
	if j.Bytes() != 800 || diskBytes(t, dir) != 800 {
		t.Fatalf("after acking a segment: Bytes() %d, disk %d, want 800", j.Bytes(), diskBytes(t, dir))
	}
	all = append(all[2:], appendAll(t, j, rec(10, 100-journal.FrameHeader), rec(11, 100-journal.FrameHeader))...)
	if _, err := j.Append([]byte("x")); !errors.Is(err, journal.ErrFull) {
		t.Fatalf("Append at the cap = %v, want ErrFull", err)
	}
	// Folding everything gives back all but the folded record.
	if err := j.Fold(j.End(), func(recs func(func([]byte) bool)) ([]byte, error) {
		n := 0
		for range recs {
			n++
		}
		return fmt.Appendf(nil, "%d records", n), nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, want := j.Bytes(), diskBytes(t, dir); got != want || got > 100 {
		t.Fatalf("after folding everything: Bytes() %d, disk %d, want them equal and under 100", got, want)
	}
	if got := scanAll(t, j); len(got) != 1 || got[0].Rec != "10 records" || got[0].End != all[9].End {
		t.Fatalf("after folding: %v, want one record \"10 records\" ending at %v", got, all[9].End)
	}
	if _, err := j.Append([]byte(rec(12, 100-journal.FrameHeader))); err != nil {
		t.Fatalf("Append after folding: %v", err)
	}
	j.Close()

	// A journal over a lowered cap opens, and refuses appends.
	j = open(t, dir, journal.Options{MaxBytes: 50})
	if _, err := j.Append([]byte("x")); !errors.Is(err, journal.ErrFull) {
		t.Fatalf("Append over a lowered cap = %v, want ErrFull", err)
	}
	if got := scanAll(t, j); len(got) != 2 {
		t.Fatalf("records over a lowered cap: %v, want the folded one and the last", got)
	}
}

func TestDefaultSegmentBytes(t *testing.T) {
	for _, tc := range []struct {
		opts journal.Options
		want int64
	}{
		{journal.Options{}, 4 << 20},
		{journal.Options{MaxBytes: 1 << 30}, 4 << 20},
		{journal.Options{MaxBytes: 16 << 20}, 1 << 20},
		{journal.Options{MaxBytes: 100 << 10}, 64 << 10},
		{journal.Options{MaxBytes: 16 << 20, SegmentBytes: 8 << 20}, 8 << 20},
	} {
		dir := t.TempDir()
		j := open(t, dir, tc.opts)
		// Two records that fit in want together, and one more that does
		// not: two segments.
		half := int(tc.want/2) - journal.FrameHeader
		appendAll(t, j, strings.Repeat("a", half), strings.Repeat("b", half), "c")
		if n := len(files(t, dir)); n != 2 {
			t.Errorf("%+v: %d segments for 2 × SegmentBytes/2 + 1 record, want 2 (segments of %d)", tc.opts, n, tc.want)
		}
		j.Close()
	}
}

func TestDirIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "journal")
	j := open(t, dir, journal.Options{})
	appendAll(t, j, "x")
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, want 0700", fi.Mode().Perm())
	}
	f, _ := os.Stat(filepath.Join(dir, files(t, dir)[0]))
	if f.Mode().Perm() != 0o600 {
		t.Errorf("segment mode %v, want 0600", f.Mode().Perm())
	}
}

var _ io.Closer = (*journal.Journal)(nil)

// TestDamagedAckFile: an ack file that does not check is reported and the
// records still on disk are scanned again, rather than lost.
func TestDamagedAckFile(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir, journal.Options{})
	all := appendAll(t, j, "a", "b", "c")
	if err := j.Ack(all[1].End); err != nil {
		t.Fatal(err)
	}
	j.Close()
	flip(t, filepath.Join(dir, "ack"), 6)
	j = open(t, dir, journal.Options{})
	if st := j.Recovered(); !st.AckLost {
		t.Errorf("Recovered() = %+v, want AckLost", st)
	}
	checkScan(t, j, all, "Scan")
	// The next Ack writes a good file again.
	if err := j.Ack(all[1].End); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j = open(t, dir, journal.Options{})
	if st := j.Recovered(); st.AckLost || j.Acked() != all[1].End {
		t.Errorf("after a new Ack: Recovered() = %+v, Acked() = %v; want the ack file good, at %v", st, j.Acked(), all[1].End)
	}
}

// TestDamagedAckedRecord: damage to a record already acked (left in a
// partly acked segment) costs nothing: Open walks acked records by their
// length and does not check their payload.
func TestDamagedAckedRecord(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir, journal.Options{})
	all := appendAll(t, j, rec(0, 100), rec(1, 100), rec(2, 100))
	if err := j.Ack(all[0].End); err != nil {
		t.Fatal(err)
	}
	j.Close()
	flip(t, filepath.Join(dir, files(t, dir)[0]), journal.FrameHeader+50)
	j = open(t, dir, journal.Options{})
	checkScan(t, j, all[1:], "Scan")
	if st := j.Recovered(); st.Corrupt != 0 || st.Records != 2 {
		t.Errorf("Recovered() = %+v, want 2 records, none corrupt", st)
	}
}
