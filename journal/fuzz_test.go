package journal_test

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/linkgate/linkgate/journal"
)

// FuzzRecover damages a journal's files in the ways the input says
// (flipped bytes, zeroed runs, truncations) and checks what Open and Scan
// promise whatever the damage: no panic; every record scanned is one that
// was appended, at the position Append returned, in order (damage is never
// returned as a record); and a second Open agrees with the first.
func FuzzRecover(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 20, 0, 0x10})              // a payload bit of the first record
	f.Add([]byte{1, 0, 2, 0, 0x01})               // a length bit in the second segment
	f.Add([]byte{2, 0, 50, 1, 0})                 // truncate the newest segment
	f.Add([]byte{0, 0, 0, 2, 30, 1, 0, 40, 1, 3}) // zeros, then a truncation
	f.Add([]byte{3, 0, 5, 0, 0xff})               // the ack file
	f.Add([]byte{4, 0, 45, 0, 0x04})              // the fold file
	f.Fuzz(func(t *testing.T, ops []byte) {
		dir := t.TempDir()
		j, err := journal.Open(dir, journal.Options{SegmentBytes: 200})
		if err != nil {
			t.Fatal(err)
		}
		journal.SetNoSync(j)
		appended := map[journal.Pos]string{}
		var ends []journal.Pos
		for i := range 12 {
			r := rec(i, 20+i*7)
			p, err := j.Append([]byte(r))
			if err != nil {
				t.Fatal(err)
			}
			appended[p] = r
			ends = append(ends, p)
		}
		if err := j.Ack(ends[0]); err != nil {
			t.Fatal(err)
		}
		// A fold of records 1..3, so that a fold file is there to damage.
		if err := j.Fold(ends[3], func(recs func(func([]byte) bool)) ([]byte, error) {
			for range recs {
			}
			return []byte("folded"), nil
		}); err != nil {
			t.Fatal(err)
		}
		appended[ends[3]] = "folded"
		j.Close()

		des, _ := os.ReadDir(dir)
		var names []string // ack, the fold file, the segments
		for _, de := range des {
			if n := de.Name(); n != "LOCK" {
				names = append(names, n)
			}
		}
		for len(ops) >= 5 {
			name := filepath.Join(dir, names[int(ops[0])%len(names)])
			off := int64(binary.LittleEndian.Uint16(ops[1:3]))
			kind, v := ops[3]%3, ops[4]
			ops = ops[5:]
			b, err := os.ReadFile(name)
			if err != nil || len(b) == 0 {
				continue
			}
			off %= int64(len(b))
			switch kind {
			case 0:
				b[off] ^= max(v, 1)
			case 1:
				b = b[:off]
			case 2:
				clear(b[off:min(int64(len(b)), off+int64(v))])
			}
			os.WriteFile(name, b, 0o600)
		}

		scan := func() []journal.Pos {
			j, err := journal.Open(dir, journal.Options{SegmentBytes: 200})
			if err != nil {
				t.Fatalf("Open after damage: %v", err)
			}
			defer j.Close()
			var got []journal.Pos
			err = j.Scan(journal.Pos{}, func(end journal.Pos, rec []byte) error {
				want, ok := appended[end]
				if !ok || want != string(rec) {
					t.Fatalf("Scan returned %q at %v, which was never appended there (want %q)", rec, end, want)
				}
				if n := len(got); n > 0 && !got[n-1].Less(end) {
					t.Fatalf("Scan returned %v after %v", end, got[n-1])
				}
				got = append(got, end)
				return nil
			})
			if err != nil {
				t.Fatalf("Scan after damage: %v", err)
			}
			if j.Bytes() != diskBytes(t, dir) {
				des, _ := os.ReadDir(dir)
				for _, de := range des {
					fi, _ := de.Info()
					t.Log(de.Name(), fi.Size())
				}
				t.Fatalf("Bytes() = %d, files hold %d; Open found %+v", j.Bytes(), diskBytes(t, dir), j.Recovered())
			}
			return got
		}
		first := scan()
		if again := scan(); len(again) != len(first) {
			t.Fatalf("second Open scans %d records, the first %d", len(again), len(first))
		}
	})
}
