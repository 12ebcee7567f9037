package pebblestore

import (
	"context"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/rollup"
)

// TestRunExpires drives the expiry loop with its own ticks and clock: a
// tick is taken only once the Expire before it has returned.
func TestRunExpires(t *testing.T) {
	s, err := Open(t.TempDir(), analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	ctx := context.Background()
	err = s.Write(ctx, analytics.Batch{Counts: []analytics.Count{
		{Key: "a", Step: time.Minute, Start: t0, Visits: analytics.Visits{Human: 1}},
		{Key: "a", Step: time.Hour, Start: t0, Visits: analytics.Visits{Human: 1}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// A tick is received once the Expire before it returned, and the next
	// Expire starts at once: the clock stays at t0 for the first two.
	clock := []time.Time{t0, t0, t0.Add(3 * rollup.Day)}
	calls := 0
	now := func() time.Time { calls++; return clock[min(calls, len(clock))-1] }
	tick := make(chan time.Time)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.run(runCtx, now, tick); close(done) }()

	count := func(step time.Duration) int {
		ps, err := s.Points(ctx, "a", step, t0, t0.Add(rollup.Day))
		if err != nil {
			t.Fatal(err)
		}
		return len(ps)
	}
	tick <- time.Time{} // Expire(t0) is done
	if m, h := count(time.Minute), count(time.Hour); m != 1 || h != 1 {
		t.Errorf("after Expire(t0): %d minute and %d hour points, want 1 and 1", m, h)
	}
	tick <- time.Time{}
	tick <- time.Time{} // Expire(t0+3d) is done
	if m, h := count(time.Minute), count(time.Hour); m != 0 || h != 1 {
		t.Errorf("after Expire(t0+3d): %d minute and %d hour points, want 0 and 1", m, h)
	}
	cancel()
	<-done
}

// TestExpireWhileWriting writes to buckets that are expiring while Expire
// runs, then expires everything: no bucket and no index entry may be left,
// which an index entry written between Expire's walk and its range delete
// would break.
func TestExpireWhileWriting(t *testing.T) {
	s, err := Open(t.TempDir(), analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	ctx := context.Background()
	done := make(chan error)
	go func() {
		for i := range 200 {
			var b analytics.Batch
			for j := range 100 {
				b.Counts = append(b.Counts, analytics.Count{Key: string(rune('a' + j%26)), Step: time.Minute,
					Start: t0.Add(time.Duration((i*7+j)%600) * time.Minute), Visits: analytics.Visits{Human: 1}})
			}
			if err := s.Write(ctx, b); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		default:
			if err := s.Expire(t0.Add(2*rollup.Day + 300*time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Expire(t0.Add(rollup.Day * 3)); err != nil {
		t.Fatal(err)
	}
	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		t.Errorf("left after expiring everything: %q", it.Key())
	}
}
