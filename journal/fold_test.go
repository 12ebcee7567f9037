package journal_test

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/linkgate/linkgate/journal"
)

// joinFold is a fold that joins the records with "+".
func joinFold(recs func(func([]byte) bool)) ([]byte, error) {
	var parts []string
	for r := range recs {
		parts = append(parts, string(r))
	}
	return []byte(strings.Join(parts, "+")), nil
}

func short(i int) string { return fmt.Sprintf("r%d", i) }

// foldFixture is a journal of 9 short records in 3 segments of 3, the
// first acked.
func foldFixture(t *testing.T) (dir string, j *journal.Journal, all []entry) {
	t.Helper()
	dir = t.TempDir()
	j = open(t, dir, journal.Options{SegmentBytes: 3 * (journal.FrameHeader + 2)})
	for i := range 9 {
		all = append(all, appendAll(t, j, short(i))...)
	}
	if n := len(files(t, dir)); n != 3 {
		t.Fatalf("%d segments, want 3", n)
	}
	if err := j.Ack(all[0].End); err != nil {
		t.Fatal(err)
	}
	return dir, j, all
}

func TestFold(t *testing.T) {
	dir, j, all := foldFixture(t)
	// Fold r1..r4: from the first segment into the middle of the second.
	if err := j.Fold(all[4].End, joinFold); err != nil {
		t.Fatal(err)
	}
	want := append([]entry{{all[4].End, "r1+r2+r3+r4"}}, all[5:]...)
	checkScan(t, j, want, "Scan after Fold")
	if got := files(t, dir); len(got) != 3 || !strings.HasPrefix(got[0], "fold-") {
		t.Errorf("files after Fold: %v, want the fold file and the last two segments", got)
	}
	if j.Bytes() != diskBytes(t, dir) {
		t.Errorf("Bytes() = %d, files hold %d", j.Bytes(), diskBytes(t, dir))
	}
	j.Close()
	j = open(t, dir, journal.Options{})
	checkScan(t, j, want, "Scan after reopen")
	if st := j.Recovered(); st.Records != 5 || st.Removed != 0 {
		t.Errorf("Recovered() = %+v, want 5 records, nothing removed", st)
	}

	// A second fold takes in the first one.
	if err := j.Fold(all[6].End, joinFold); err != nil {
		t.Fatal(err)
	}
	want = append([]entry{{all[6].End, "r1+r2+r3+r4+r5+r6"}}, all[7:]...)
	checkScan(t, j, want, "Scan after a second Fold")
	if got := files(t, dir); len(got) != 2 || !strings.HasPrefix(got[0], "fold-") {
		t.Errorf("files after a second Fold: %v, want one fold file and the last segment", got)
	}

	// Acking part of the folded range leaves the folded record: it is
	// applied only as a whole.
	if err := j.Ack(all[5].End); err != nil {
		t.Fatal(err)
	}
	checkScan(t, j, want, "Scan after acking inside the folded range")
	// Acking its end removes it.
	if err := j.Ack(want[0].End); err != nil {
		t.Fatal(err)
	}
	if got := files(t, dir); len(got) != 1 || !strings.HasPrefix(got[0], "seg-") {
		t.Errorf("files after acking the folded record: %v, want the last segment", got)
	}
	j.Close()
	j = open(t, dir, journal.Options{})
	checkScan(t, j, all[7:], "Scan after reopen")
}

func TestFoldEverything(t *testing.T) {
	dir, j, all := foldFixture(t)
	if err := j.Fold(j.End(), joinFold); err != nil {
		t.Fatal(err)
	}
	want := []entry{{all[8].End, "r1+r2+r3+r4+r5+r6+r7+r8"}}
	checkScan(t, j, want, "Scan")
	if got := files(t, dir); len(got) != 1 {
		t.Errorf("files after folding everything: %v, want the fold file only", got)
	}
	next := appendAll(t, j, "next")
	if got, want := scanAll(t, j), append(want, next...); !cmp.Equal(got, want, cmpPos) {
		t.Fatalf("Scan after Append: %s", cmp.Diff(want, got, cmpPos))
	}
}

func TestFoldChangesNothing(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		upTo    func(all []entry) journal.Pos
		fold    func(recs func(func([]byte) bool)) ([]byte, error)
		wantErr bool
		called  bool
	}{
		{"fold fails", func(all []entry) journal.Pos { return all[5].End },
			func(recs func(func([]byte) bool)) ([]byte, error) {
				for range recs {
				}
				return nil, boom
			}, true, true},
		{"fold stops early", func(all []entry) journal.Pos { return all[5].End },
			func(recs func(func([]byte) bool)) ([]byte, error) {
				for range recs {
					break
				}
				return []byte("x"), nil
			}, true, true},
		{"up to the ack position", func(all []entry) journal.Pos { return all[0].End }, joinFold, false, false},
		{"no record ends in range", func(all []entry) journal.Pos {
			seg, off := journal.Split(all[1].End)
			return journal.MakePos(seg, off-1)
		}, joinFold, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, j, all := foldFixture(t)
			before := files(t, dir)
			called := false
			err := j.Fold(tc.upTo(all), func(recs func(func([]byte) bool)) ([]byte, error) {
				called = true
				return tc.fold(recs)
			})
			if (err != nil) != tc.wantErr || called != tc.called {
				t.Fatalf("Fold = %v, fold called %v; want error %v, called %v", err, called, tc.wantErr, tc.called)
			}
			checkScan(t, j, all[1:], "Scan")
			if got := files(t, dir); !slices.Equal(got, before) {
				t.Errorf("files %v, want %v", got, before)
			}
		})
	}
}

// TestFoldCrash stops Fold after each of its steps, as a crash would, and
// reopens the journal: it holds either the original records or the folded
// one, never both and never neither, and a second reopen agrees.
func TestFoldCrash(t *testing.T) {
	steps := []string{
		"fold: folded", "fold: written", "fold: synced", // the fold file is a *.tmp
		"fold: renamed", "fold: dir synced", "fold: removed one", "fold: removed",
	}
	// wrap marks a fold's record, so that folding a folded record alone
	// again gives a record that differs from it.
	wrap := func(recs func(func([]byte) bool)) ([]byte, error) {
		b, err := joinFold(recs)
		return fmt.Appendf(nil, "[%s]", b), err
	}
	for i, step := range steps {
		for _, mode := range []string{"first fold", "second fold", "refold"} {
			t.Run(step+"/"+mode, func(t *testing.T) {
				dir, j, all := foldFixture(t)
				orig := all[1:]
				upTo := all[4].End
				folded := append([]entry{{all[4].End, "[r1+r2+r3+r4]"}}, all[5:]...)
				switch mode {
				case "second fold":
					if err := j.Fold(all[4].End, wrap); err != nil {
						t.Fatal(err)
					}
					orig = folded
					upTo = all[7].End
					folded = append([]entry{{all[7].End, "[[r1+r2+r3+r4]+r5+r6+r7]"}}, all[8:]...)
				case "refold":
					if err := j.Fold(all[4].End, wrap); err != nil {
						t.Fatal(err)
					}
					orig = folded
					folded = append([]entry{{all[4].End, "[[r1+r2+r3+r4]]"}}, all[5:]...)
				}
				reached := false
				journal.SetHook(j, func(s string) error {
					if s == step {
						reached = true
						return journal.ErrHookStop
					}
					return nil
				})
				if err := j.Fold(upTo, wrap); !errors.Is(err, journal.ErrHookStop) || !reached {
					t.Fatalf("Fold = %v, reached %q %v; want it stopped there", err, step, reached)
				}
				journal.Crash(j)

				want := orig
				if i >= slices.Index(steps, "fold: renamed") {
					want = folded
				}
				for reopen := range 2 {
					j = open(t, dir, journal.Options{})
					checkScan(t, j, want, fmt.Sprintf("reopen %d", reopen))
					if j.Bytes() != diskBytes(t, dir) {
						t.Errorf("reopen %d: Bytes() = %d, files hold %d", reopen, j.Bytes(), diskBytes(t, dir))
					}
					j.Close()
				}
				if des, _ := os.ReadDir(dir); slices.ContainsFunc(des, func(de os.DirEntry) bool { return strings.HasSuffix(de.Name(), ".tmp") }) {
					t.Errorf("a *.tmp file is left after reopening")
				}
			})
		}
	}
}

// TestAckCrash stops Ack after each of its steps: a reopened journal scans
// from either the old or the new ack position.
func TestAckCrash(t *testing.T) {
	steps := []string{"ack: written", "ack: synced", "ack: renamed", "ack: dir synced", "ack: removed one", "ack: removed"}
	for i, step := range steps {
		t.Run(step, func(t *testing.T) {
			dir, j, all := foldFixture(t)
			journal.SetHook(j, func(s string) error {
				if s == step {
					return journal.ErrHookStop
				}
				return nil
			})
			if err := j.Ack(all[7].End); !errors.Is(err, journal.ErrHookStop) {
				t.Fatalf("Ack = %v, want it stopped at %q", err, step)
			}
			journal.Crash(j)
			want := all[1:]
			if i >= slices.Index(steps, "ack: renamed") {
				want = all[8:]
			}
			j = open(t, dir, journal.Options{})
			checkScan(t, j, want, "reopen")
			if i >= slices.Index(steps, "ack: renamed") && len(files(t, dir)) != 1 {
				t.Errorf("files after reopen: %v, want the last segment only", files(t, dir))
			}
		})
	}
}

// TestDamagedFoldFile: a fold file that does not check (only a damaged
// disk makes one: it is written by rename) is set aside and counted; the
// originals still on disk are scanned again, so nothing is counted twice.
func TestDamagedFoldFile(t *testing.T) {
	dir, j, all := foldFixture(t)
	if err := j.Fold(all[4].End, joinFold); err != nil {
		t.Fatal(err)
	}
	j.Close()
	fold := files(t, dir)[0]
	fi, _ := os.Stat(dir + "/" + fold)
	flip(t, dir+"/"+fold, fi.Size()-1)
	j = open(t, dir, journal.Options{})
	// r1 and r2 were in the first segment, removed by the fold: lost with
	// it. r3 and r4 are still in the second segment.
	checkScan(t, j, all[3:], "Scan")
	if st := j.Recovered(); st.Corrupt != 1 || st.LostBytes != fi.Size() {
		t.Errorf("Recovered() = %+v, want 1 corrupt, %d bytes lost", st, fi.Size())
	}
	if _, err := os.Stat(dir + "/" + fold + ".bad"); err != nil {
		t.Errorf("the damaged fold file is not set aside: %v", err)
	}
}

// TestRefold folds the folded record alone again (into a smaller one, as
// a coarser fold does): the new record replaces it, also after reopening.
func TestRefold(t *testing.T) {
	dir, j, all := foldFixture(t)
	if err := j.Fold(all[4].End, joinFold); err != nil {
		t.Fatal(err)
	}
	shrink := func(recs func(func([]byte) bool)) ([]byte, error) {
		n := 0
		for range recs {
			n++
		}
		return fmt.Appendf(nil, "%d folded", n), nil
	}
	if err := j.Fold(all[4].End, shrink); err != nil {
		t.Fatal(err)
	}
	want := append([]entry{{all[4].End, "1 folded"}}, all[5:]...)
	checkScan(t, j, want, "Scan")
	if j.Bytes() != diskBytes(t, dir) {
		t.Errorf("Bytes() = %d, files hold %d", j.Bytes(), diskBytes(t, dir))
	}
	j.Close()
	j = open(t, dir, journal.Options{})
	checkScan(t, j, want, "Scan after reopen")
}

// TestReclaimable: acking up to what Reclaimable says gives back exactly
// the bytes it says, and less gives back nothing.
func TestReclaimable(t *testing.T) {
	dir, j, all := foldFixture(t)
	check := func(wantUpTo journal.Pos) {
		t.Helper()
		upTo, n := j.Reclaimable()
		if upTo != wantUpTo {
			t.Fatalf("Reclaimable() = %v, want %v", upTo, wantUpTo)
		}
		before := j.Bytes()
		seg, off := journal.Split(upTo)
		if err := j.Ack(journal.MakePos(seg, off-1)); err != nil {
			t.Fatal(err)
		}
		if j.Bytes() != before {
			t.Fatalf("Ack just before %v gave back %d bytes, want none", upTo, before-j.Bytes())
		}
		if err := j.Ack(upTo); err != nil {
			t.Fatal(err)
		}
		if got := before - j.Bytes(); got != n || n <= 0 || j.Bytes() != diskBytes(t, dir) {
			t.Fatalf("Ack(%v) gave back %d bytes, Reclaimable said %d; Bytes() %d, disk %d", upTo, got, n, j.Bytes(), diskBytes(t, dir))
		}
	}
	check(all[2].End) // the rest of the first segment
	if err := j.Fold(all[4].End, joinFold); err != nil {
		t.Fatal(err)
	}
	check(all[4].End) // the folded record's file
	check(all[5].End) // the rest of the second segment
	check(all[8].End) // the last segment, being appended to
	if upTo, n := j.Reclaimable(); upTo != (journal.Pos{}) || n != 0 {
		t.Errorf("Reclaimable() of an empty journal = %v, %d; want nothing", upTo, n)
	}
}
