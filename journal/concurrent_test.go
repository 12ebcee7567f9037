package journal_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/journal"
)

// span is what a record of the concurrency test stands for: the appends
// first..last (one append, or a fold of several).
type span struct{ first, last int }

func parseSpan(rec []byte) (span, error) {
	var s span
	head, _, _ := strings.Cut(string(rec), " ")
	if _, err := fmt.Sscanf(head, "%d-%d", &s.first, &s.last); err != nil {
		return s, fmt.Errorf("record %q: %w", rec, err)
	}
	return s, nil
}

// contiguous scans j and checks that its records are consecutive spans:
// what a consistent prefix of the appends, folded and acked in any way,
// looks like.
func contiguous(j *journal.Journal) (spans []span, ends []journal.Pos, err error) {
	err = j.Scan(j.Acked(), func(end journal.Pos, rec []byte) error {
		s, err := parseSpan(rec)
		if err != nil {
			return err
		}
		if n := len(spans); n > 0 && s.first != spans[n-1].last+1 {
			return fmt.Errorf("span %v after %v", s, spans[n-1])
		}
		spans = append(spans, s)
		ends = append(ends, end)
		return nil
	})
	return spans, ends, err
}

// TestConcurrent appends from one goroutine while others scan, ack and
// fold: every scan sees consecutive records, and at the end nothing is
// lost or repeated.
func TestConcurrent(t *testing.T) {
	dir := t.TempDir()
	j := open(t, dir, journal.Options{SegmentBytes: 512})
	journal.SetNoSync(j) // the test is about ordering, not the disk
	const n = 3000
	var (
		ackedLast = -1 // the last append the acker acked; only it writes
		wg        sync.WaitGroup
		done      = make(chan struct{})
		errs      = make(chan error, 3)
	)
	// loop runs step until done is closed or it fails.
	loop := func(step func() error) {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if err := step(); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	loop(func() error { // scanner and acker: acks a third of what it sees
		spans, ends, err := contiguous(j)
		if err != nil || len(spans) <= 2 {
			return err
		}
		if err := j.Ack(ends[len(ends)/3]); err != nil {
			return err
		}
		ackedLast = max(ackedLast, spans[len(ends)/3].last)
		return nil
	})
	loop(func() error { // scanner
		_, _, err := contiguous(j)
		return err
	})
	loop(func() error { // folder: folds the first half of what it sees
		_, ends, err := contiguous(j)
		if err != nil || len(ends) < 4 {
			return nil
		}
		return j.Fold(ends[len(ends)/2], func(recs func(func([]byte) bool)) ([]byte, error) {
			var all span
			first := true
			for r := range recs {
				s, err := parseSpan(r)
				if err != nil {
					return nil, err
				}
				if first {
					all.first = s.first
					first = false
				} else if s.first != all.last+1 {
					return nil, fmt.Errorf("fold: span %v after %d", s, all.last)
				}
				all.last = s.last
			}
			return fmt.Appendf(nil, "%d-%d", all.first, all.last), nil
		})
	})
	stopped := make(chan struct{})
	stop := sync.OnceFunc(func() {
		close(done)
		go func() { wg.Wait(); close(stopped) }()
	})
	wait := func() {
		stop()
		testkit.Recv(t, stopped, time.Minute, "the scanners, the acker and the folder stopping")
	}
	t.Cleanup(wait) // also when an Append fails the test
	for i := range n {
		if _, err := j.Append(fmt.Appendf(nil, "%d-%d", i, i)); err != nil {
			t.Fatal(err)
		}
	}
	wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// What is left, plus what was acked, is every append once. A record
	// folded before the acker acked part of it stays whole, so it may
	// start before the acked position, never after.
	check := func(j *journal.Journal) {
		t.Helper()
		spans, _, err := contiguous(j)
		if err != nil {
			t.Fatal(err)
		}
		if len(spans) == 0 || spans[len(spans)-1].last != n-1 {
			t.Fatalf("spans %v, want them to end with append %d", spans, n-1)
		}
		if first := spans[0]; first.first > ackedLast+1 || first.last < ackedLast+1 {
			t.Fatalf("first span %v, last acked append %d: appends lost or acked twice", first, ackedLast)
		}
		if j.Bytes() != diskBytes(t, dir) {
			t.Errorf("Bytes() = %d, files hold %d", j.Bytes(), diskBytes(t, dir))
		}
	}
	check(j)
	first, _, _ := contiguous(j)
	j.Close()
	j = open(t, dir, journal.Options{SegmentBytes: 512})
	check(j)
	again, _, _ := contiguous(j)
	if first[0] != again[0] {
		t.Errorf("first span %v after reopen, %v before", again[0], first[0])
	}
	t.Logf("left %d spans, the first %v", len(again), again[0])
}

func TestClosed(t *testing.T) {
	j := open(t, t.TempDir(), journal.Options{})
	p := appendAll(t, j, "x")[0].End
	j.Close()
	for name, err := range map[string]error{
		"Scan": j.Scan(journal.Pos{}, func(journal.Pos, []byte) error { return nil }),
		"Ack":  j.Ack(p),
		"Fold": j.Fold(p, joinFold),
	} {
		if !errors.Is(err, journal.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	if err := j.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}
