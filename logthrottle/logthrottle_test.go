package logthrottle_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/logthrottle"
)

type logKey struct{ rule, kind string }

func TestThrottle(t *testing.T) {
	t0 := time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	a, b := logKey{"login_ip", "store_error"}, logKey{"login_email", "store_error"}
	type step struct {
		k          logKey
		at         time.Time
		ok         bool
		suppressed int64
	}
	steps := []step{
		{a, ms(0), true, 0},
		{a, ms(100), false, 0},
		{b, ms(150), true, 0}, // another rule has its own second
		{a, ms(999), false, 0},
		{a, ms(1000), true, 2}, // a second after a's last line: the two held back
		{a, ms(1500), false, 0},
		{b, ms(1500), true, 0},
		{a, ms(5000), true, 1},
		{a, ms(4990), false, 0}, // read before the last line was let through: the same second
		{a, ms(4000), true, 1},  // the clock stepped back a second: let it through
		{a, ms(4100), false, 0},
		{a, ms(3950), false, 0},
	}
	var th logthrottle.Throttle[logKey]
	for i, s := range steps {
		n, ok := th.Allow(s.k, s.at)
		if ok != s.ok || n != s.suppressed {
			t.Errorf("step %d (%v at %v): got (%d, %v), want (%d, %v)", i, s.k, s.at.Sub(t0), n, ok, s.suppressed, s.ok)
		}
	}
}

// TestLogThrottleConcurrent: of many goroutines hitting one key in the same
// second, exactly one logs, and the next line reports all the others.
func TestThrottleConcurrent(t *testing.T) {
	t0 := time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC)
	var th logthrottle.Throttle[logKey]
	k := logKey{"r", "store_error"}
	var logged atomic.Int64
	var wg sync.WaitGroup
	const n = 64
	for range n {
		wg.Go(func() {
			if _, ok := th.Allow(k, t0); ok {
				logged.Add(1)
			}
		})
	}
	wg.Wait()
	if logged.Load() != 1 {
		t.Fatalf("%d lines in one second, want 1", logged.Load())
	}
	if s, ok := th.Allow(k, t0.Add(time.Second)); !ok || s != n-1 {
		t.Errorf("next second: (%d, %v), want (%d, true)", s, ok, n-1)
	}
}

// TestThrottleEvery: a longer interval holds a key's events back for as
// long, and reports them all on its next line.
func TestThrottleEvery(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	th := logthrottle.Throttle[string]{Every: 10 * time.Second}
	if _, ok := th.Allow("dial", t0); !ok {
		t.Fatal("the first event is held back")
	}
	for i := 1; i < 50; i++ { // five a second for ten seconds
		if _, ok := th.Allow("dial", t0.Add(time.Duration(i)*200*time.Millisecond)); ok {
			t.Fatalf("event %d, %v after the first line, let through", i, time.Duration(i)*200*time.Millisecond)
		}
	}
	if n, ok := th.Allow("dial", t0.Add(10*time.Second)); !ok || n != 49 {
		t.Errorf("ten seconds on: (%d, %v), want (49, true)", n, ok)
	}
}
