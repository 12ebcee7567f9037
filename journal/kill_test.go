package journal_test

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/journal"
)

// TestKill kills a process that appends, acks and folds (with every sync)
// at random moments with SIGKILL, then reopens its journal: every record
// whose Append returned is there, at most one more, each once, in order,
// acked records stay acked, and folds are all or nothing.
//
// The child is this test binary running TestKillChild. It prints "a i"
// after Append of record i returns, "acking i" before and "acked i" after
// an Ack up to record i.
func TestKill(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no kill -9 test")
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	for round := range 6 {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$")
		cmd.Env = append(os.Environ(), "JOURNAL_KILL_DIR="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(out)
		first, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("round %d: child: %v", round, err)
		}
		wait := time.Duration(20+rng.IntN(400)) * time.Millisecond
		time.Sleep(wait) // the moment of the kill, not a wait for a result
		cmd.Process.Kill()
		rest, _ := io.ReadAll(br)
		cmd.Wait()

		appended, ackedDone, acking := -1, -1, -1
		for _, line := range strings.Split(first+string(rest), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				continue
			}
			n, _ := strconv.Atoi(f[1])
			switch f[0] {
			case "a":
				appended = n
			case "acked":
				ackedDone = n
			case "acking":
				acking = n
			}
		}

		j := open(t, dir, journal.Options{SegmentBytes: 1024})
		spans, _, err := contiguous(j)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		st := j.Recovered()
		t.Logf("round %d: killed after %v: %d appends returned, acked up to %d (acking %d); %d records left, %d torn bytes",
			round, wait, appended+1, ackedDone, acking, len(spans), st.TornBytes)
		if st.Corrupt != 0 {
			t.Errorf("round %d: Recovered() = %+v: a crash is not damage", round, st)
		}
		if len(spans) == 0 {
			t.Fatalf("round %d: no records left; %d were appended, acked up to %d", round, appended+1, ackedDone)
		}
		if last := spans[len(spans)-1].last; last != appended && last != appended+1 {
			t.Errorf("round %d: the last record is %d; Append returned for %d, so want %d or %d", round, last, appended, appended, appended+1)
		}
		// Nothing acked comes back (a folded record that an ack only
		// partly covers stays whole), nothing unacked is missing.
		if f := spans[0]; f.first > max(acking, ackedDone)+1 || f.last < ackedDone+1 {
			t.Errorf("round %d: the first record is %v; acked up to %d (acking %d)", round, f, ackedDone, acking)
		}
		j.Close()
	}
}

// TestKillChild is the process TestKill kills.
func TestKillChild(t *testing.T) {
	dir := os.Getenv("JOURNAL_KILL_DIR")
	if dir == "" {
		t.Skip("run by TestKill")
	}
	j, err := journal.Open(dir, journal.Options{SegmentBytes: 1024})
	if err != nil {
		t.Fatal(err)
	}
	var ends []journal.Pos
	for i := 0; ; i++ {
		p, err := j.Append(fmt.Appendf(nil, "%d-%d %s", i, i, strings.Repeat("x", i%200)))
		if err != nil {
			t.Fatal(err)
		}
		ends = append(ends, p)
		fmt.Printf("a %d\n", i)
		if i%17 == 16 {
			k := i - 10
			fmt.Printf("acking %d\n", k)
			if err := j.Ack(ends[k]); err != nil {
				t.Fatal(err)
			}
			fmt.Printf("acked %d\n", k)
		}
		if i%29 == 28 {
			err := j.Fold(ends[i-3], func(recs func(func([]byte) bool)) ([]byte, error) {
				var all span
				n := 0
				for r := range recs {
					s, err := parseSpan(r)
					if err != nil {
						return nil, err
					}
					if n == 0 {
						all.first = s.first
					}
					all.last = s.last
					n++
				}
				return fmt.Appendf(nil, "%d-%d", all.first, all.last), nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}
