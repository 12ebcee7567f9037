package pebblestore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/google/go-cmp/cmp"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/pebblestore"
	"github.com/linkgate/linkgate/rollup"
)

// open is Open without the background expiry: these tests write buckets
// of a fixed day weeks past and call Expire with a clock of their own.
// The background expiry, at the machine's time, would delete those
// buckets as soon as a test ran past its first minute on a busy machine.
func open(t testing.TB, dir string, plan *rollup.Plan) *pebblestore.Store {
	t.Helper()
	s, err := pebblestore.OpenFS(dir, vfs.Default, plan, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	analyticstest.Run(t, func(t *testing.T, plan *rollup.Plan) analyticstest.Harness {
		dir := t.TempDir()
		cur := open(t, dir, plan)
		t.Cleanup(func() {
			if err := cur.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return analyticstest.Harness{
			Store: cur,
			Reopen: func() analyticstest.Store {
				if err := cur.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
				cur = open(t, dir, plan)
				return cur
			},
			Expire: func(now time.Time) error { return cur.Expire(now) },
		}
	})
}

func TestOneProcessHoldsTheDirectory(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, analyticstest.DefaultPlan)
	defer s.Close()
	if s2, err := pebblestore.Open(dir, analyticstest.DefaultPlan, nil); err == nil {
		s2.Close()
		t.Fatal("a second Open of a held directory succeeded")
	}
}

func TestClosed(t *testing.T) {
	s := open(t, t.TempDir(), analyticstest.DefaultPlan)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.Write(ctx, analytics.Batch{}); !errors.Is(err, pebblestore.ErrClosed) {
		t.Errorf("Write after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Points(ctx, "a", time.Minute, time.Unix(0, 0), time.Now()); !errors.Is(err, pebblestore.ErrClosed) {
		t.Errorf("Points after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Marks(ctx, "a"); !errors.Is(err, pebblestore.ErrClosed) {
		t.Errorf("Marks after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Progress(ctx); !errors.Is(err, pebblestore.ErrClosed) {
		t.Errorf("Progress after Close: %v, want ErrClosed", err)
	}
	if _, err := s.Active(ctx, 5*time.Minute, time.Now(), "", 1); !errors.Is(err, pebblestore.ErrClosed) {
		t.Errorf("Active after Close: %v, want ErrClosed", err)
	}
	if err := s.Apply(ctx, rollup.Update{}); !errors.Is(err, pebblestore.ErrClosed) {
		t.Errorf("Apply after Close: %v, want ErrClosed", err)
	}
	if err := s.Advance(ctx, 5*time.Minute, time.Now()); !errors.Is(err, pebblestore.ErrClosed) {
		t.Errorf("Advance after Close: %v, want ErrClosed", err)
	}
	if err := s.Expire(time.Now()); !errors.Is(err, pebblestore.ErrClosed) {
		t.Errorf("Expire after Close: %v, want ErrClosed", err)
	}
	if err := s.Close(); !errors.Is(err, pebblestore.ErrClosed) {
		t.Errorf("second Close: %v, want ErrClosed", err)
	}
}

// TestBadCountsApplyNothing checks that a batch with one bad count fails
// whole: the flusher resends it, and what came before the bad count must
// not be counted twice.
func TestBadCountsApplyNothing(t *testing.T) {
	s := open(t, t.TempDir(), analyticstest.DefaultPlan)
	defer s.Close()
	day := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	good := analytics.Count{Key: "a", Step: rollup.Day, Start: day, Visits: analytics.Visits{Human: 1}}
	for name, bad := range map[string]analytics.Count{
		"unknown step": {Key: "a", Step: 2 * time.Hour, Start: day, Visits: analytics.Visits{Human: 1}},
		"unaligned":    {Key: "a", Step: time.Hour, Start: day.Add(time.Minute), Visits: analytics.Visits{Human: 1}},
	} {
		err := s.Write(context.Background(), analytics.Batch{Counts: []analytics.Count{good, bad},
			Active: []rollup.Active{{Step: time.Hour, Period: day, Key: "a"}}})
		if err == nil {
			t.Errorf("%s: Write succeeded", name)
		}
	}
	if err := s.Write(context.Background(), analytics.Batch{Counts: []analytics.Count{good},
		Active: []rollup.Active{{Step: time.Minute, Period: day, Key: "a"}}}); err == nil {
		t.Error("an Active entry for the finest tier, which nothing rolls into: Write succeeded")
	}
	ps, err := s.Points(context.Background(), "a", rollup.Day, day, day.Add(rollup.Day))
	if err != nil || len(ps) != 0 {
		t.Errorf("Points after failed writes = %v, %v; want none", ps, err)
	}
	if keys, err := s.Active(context.Background(), time.Hour, day, "", 10); err != nil || len(keys) != 0 {
		t.Errorf("Active after failed writes = %v, %v; want none", keys, err)
	}
	if _, err := s.Points(context.Background(), "a", 2*time.Hour, day, day.Add(rollup.Day)); err == nil {
		t.Error("Points of a step that is not a tier succeeded")
	}
}

// TestExpiryAcrossChunks checks Expire's bookkeeping across chunks:
// more buckets than one chunk deletes expire, and a second Expire finds
// nothing left.
func TestExpiryAcrossChunks(t *testing.T) {
	s := open(t, t.TempDir(), analyticstest.DefaultPlan)
	defer s.Close()
	t0 := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	var b analytics.Batch
	const links, minutes = 50, 500 // 25,000 minute buckets
	for l := range links {
		for m := range minutes {
			b.Counts = append(b.Counts, analytics.Count{Key: string(rune('a'+l%26)) + string(rune('a'+l/26)), Step: time.Minute,
				Start: t0.Add(time.Duration(m) * time.Minute), Visits: analytics.Visits{Human: 1}})
		}
	}
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	// Expire the first 200 minutes only: a bucket goes once it ended two days
	// (the retention) before now.
	now := t0.Add(2*rollup.Day + 200*time.Minute)
	if err := s.Expire(now); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"aa", "xa", "xb"} {
		ps, err := s.Points(context.Background(), key, time.Minute, t0, t0.Add(rollup.Day))
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) != minutes-200 || !ps[0].Start.Equal(t0.Add(200*time.Minute)) {
			t.Errorf("%s: %d points from %v after expiry, want %d from %v", key, len(ps), ps[0].Start, minutes-200, t0.Add(200*time.Minute))
		}
	}
	if err := s.Expire(t0.Add(3 * rollup.Day)); err != nil {
		t.Fatal(err)
	}
	ps, err := s.Points(context.Background(), "aa", time.Minute, t0, t0.Add(rollup.Day))
	if err != nil || len(ps) != 0 {
		t.Errorf("after expiring all: %d points, %v", len(ps), err)
	}
}

// TestCrash kills a process that wrote without closing the store and checks
// that every acknowledged write survived.
func TestCrash(t *testing.T) {
	if dir := os.Getenv("LINKGATE_PEBBLE_CRASH_DIR"); dir != "" {
		crashChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrash$")
	cmd.Env = append(os.Environ(), "LINKGATE_PEBBLE_CRASH_DIR="+dir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want killed; output:\n%s", err, out)
	}
	s := open(t, dir, analyticstest.DefaultPlan)
	defer s.Close()
	ps, err := s.Points(context.Background(), "a", time.Minute, crashT0, crashT0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var want []analytics.Point
	for i := range crashWrites {
		want = append(want, analytics.Point{Start: crashT0.Add(time.Duration(i) * time.Minute), Visits: analytics.Visits{Human: int64(i + 1)}})
	}
	if diff := cmp.Diff(want, ps); diff != "" {
		t.Errorf("points after crash (-want +got):\n%s", diff)
	}
	keys, err := s.Active(context.Background(), 5*time.Minute, crashT0, "", 100)
	if err != nil || len(keys) != crashWrites {
		t.Errorf("Active after crash = %d keys, %v; want %d", len(keys), err, crashWrites)
	}
}

var crashT0 = time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)

const crashWrites = 20

// crashChild writes and kills itself without closing the store.
func crashChild(dir string) {
	s, err := pebblestore.Open(dir, analyticstest.DefaultPlan, nil)
	if err != nil {
		panic(err)
	}
	for i := range crashWrites {
		err := s.Write(context.Background(), analytics.Batch{
			Counts: []analytics.Count{{Key: "a", Step: time.Minute, Start: crashT0.Add(time.Duration(i) * time.Minute), Visits: analytics.Visits{Human: int64(i + 1)}}},
			Active: []rollup.Active{{Step: 5 * time.Minute, Period: crashT0, Key: fmt.Sprint("k", i)}},
		})
		if err != nil {
			panic(err)
		}
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// TestExpireRollupState: Expire drops the Active entries of periods whose
// source data has expired and the marks of buckets whose source has,
// keeps the others, and never expires the all-time tier.
func TestExpireRollupState(t *testing.T) {
	s := open(t, t.TempDir(), analyticstest.DefaultPlan)
	defer s.Close()
	ctx := context.Background()
	t0 := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	total, _ := rollup.TotalTier(rollup.DefaultTiers())
	old := rollup.Mark{Key: "a", Step: 5 * time.Minute, Start: t0, At: t0, ID: 1} // source: minutes, 2 days
	young := rollup.Mark{Key: "a", Step: time.Hour, Start: t0, At: t0, ID: 2}     // source: 5 minutes, 8 days
	err := s.Write(ctx, analytics.Batch{At: t0,
		Counts: []analytics.Count{{Key: "a", Step: total.Step, Start: rollup.Align(t0, total.Step), Visits: analytics.Visits{Human: 3}}},
		Active: []rollup.Active{
			{Step: 5 * time.Minute, Period: t0, Key: "a"}, // source kept 2 days
			{Step: time.Hour, Period: t0, Key: "a"},       // source kept 8 days
			{Step: rollup.MarksQueue, Period: t0, Key: "a"},
		},
		Marks: []rollup.Mark{old, young},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Expire(t0.Add(4 * rollup.Day)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		step time.Duration
		want int
	}{{5 * time.Minute, 0}, {time.Hour, 1}, {rollup.MarksQueue, 0}} {
		if keys, err := s.Active(ctx, c.step, t0, "", 10); err != nil || len(keys) != c.want {
			t.Errorf("Active(%v) after 4 days = %q, %v; want %d keys", c.step, keys, err, c.want)
		}
	}
	if ms, err := s.Marks(ctx, "a"); err != nil || len(ms) != 1 || ms[0] != young {
		t.Errorf("marks after 4 days = %+v, %v; want [%+v]", ms, err, young)
	}
	if err := s.Expire(t0.AddDate(30, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if ps, err := s.Points(ctx, "a", total.Step, t0.AddDate(-1, 0, 0), t0.AddDate(1, 0, 0)); err != nil || len(ps) != 1 || ps[0].Human != 3 {
		t.Errorf("the all-time tier 30 years on = %v, %v; want the 3 visits", ps, err)
	}
}
