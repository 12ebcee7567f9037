// Package limittest is the conformance suite every limit.Store runs: the
// in-process Memory store in limit's own tests, the memcached store against a
// real memcached its tests start.
//
// Usage:
//
//	func TestConformance(t *testing.T) {
//		limittest.Run(t, func(t *testing.T) limittest.Harness {
//			return limittest.Harness{Store: newStore(t)}
//		})
//	}
package limittest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/limit"
)

// Harness is one fresh store under test and how the suite controls its clock.
type Harness struct {
	// Store is the store under test, empty (or holding only counters the
	// suite will not name: every subtest uses its own rule name).
	Store limit.Store
	// Now is the store's clock. Nil means time.Now.
	Now func() time.Time
	// Advance moves the store's clock forward by d. Nil means the store
	// runs on real time: the expiry subtest then waits for the TTL to pass
	// (a few seconds) instead of advancing.
	Advance func(d time.Duration)
	// Peer is another store on the same backend, as another gateway of a
	// fleet has (memcached: a second Store on the same servers); nil when
	// the backend is the process's own (Memory): the subtests of sharing
	// are then skipped.
	Peer limit.Store
}

func (h Harness) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// Run runs the suite against stores made by newStore, one per subtest.
func Run(t *testing.T, newStore func(t *testing.T) Harness) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"MissingIsZero", testMissingIsZero},
		{"AddThenLoad", testAddThenLoad},
		{"AddNow", testAddNow},
		{"IndependentCounters", testIndependentCounters},
		{"LevelsIndependent", testLevelsIndependent},
		{"ManyBucketsOneLoad", testManyBuckets},
		{"WindowRoll", testWindowRoll},
		{"Reset", testReset},
		{"ConcurrentAdds", testConcurrentAdds},
		{"Expiry", testExpiry},
		{"ContextCancelled", testContextCancelled},
		{"BoxMissingIsNone", testBoxMissing},
		{"BoxReadWithCounts", testBoxReadWithCounts},
		{"BoxReplacedAndReset", testBoxReplacedAndReset},
		{"BoxKeptUntilKeep", testBoxKept},
		{"BoxesListed", testBoxesListed},
		{"BoxSharedByPeer", testBoxShared},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

// bucket returns the bucket of level l that holds now, minus back buckets.
func bucket(now time.Time, l limit.Level, back int64, ttl time.Duration) limit.Bucket {
	size := int64(l.Size() / time.Second)
	return limit.Bucket{Level: l, Start: (now.Unix()/size - back) * size, TTL: ttl}
}

// load loads buckets of c and fails the test on error.
func load(t *testing.T, s limit.Store, c limit.Counter, bs ...limit.Bucket) []int64 {
	t.Helper()
	counts := make([]int64, len(bs))
	for i := range counts {
		counts[i] = -1 // a store must overwrite every entry
	}
	if err := s.Load(context.Background(), c, bs, counts); err != nil {
		t.Fatalf("Load(%v): %v", c, err)
	}
	return counts
}

func equal(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func testMissingIsZero(t *testing.T, h Harness) {
	now := h.now()
	c := limit.Counter{Rule: "missing", Value: "203.0.113.7"}
	bs := []limit.Bucket{bucket(now, limit.Second, 0, time.Hour), bucket(now, limit.Minute, 3, time.Hour), bucket(now, limit.Hour, 1, time.Hour)}
	if got := load(t, h.Store, c, bs...); !equal(got, []int64{0, 0, 0}) {
		t.Errorf("Load of missing buckets = %v, want zeros", got)
	}
	if err := h.Store.Load(context.Background(), c, nil, nil); err != nil {
		t.Errorf("Load of no buckets: %v", err)
	}
}

func testAddThenLoad(t *testing.T, h Harness) {
	ctx := context.Background()
	now := h.now()
	c := limit.Counter{Rule: "add", Value: "alice@example.com"}
	b0 := bucket(now, limit.Second, 0, time.Hour)
	b1 := bucket(now, limit.Second, 1, time.Hour)
	for range 3 {
		if err := h.Store.Add(ctx, c, []limit.Bucket{b0}, 1); err != nil {
			t.Fatalf("Add: %v", err)
		}
	}
	if err := h.Store.Add(ctx, c, []limit.Bucket{b1}, 5); err != nil {
		t.Fatalf("Add: %v", err)
	}
	// Add may be asynchronous, but Load includes this process's own adds.
	if got, want := load(t, h.Store, c, b0, b1, bucket(now, limit.Second, 2, time.Hour)), []int64{3, 5, 0}; !equal(got, want) {
		t.Errorf("Load after Add = %v, want %v", got, want)
	}
}

func testAddNow(t *testing.T, h Harness) {
	ctx := context.Background()
	now := h.now()
	c := limit.Counter{Rule: "addnow", Value: "u42"}
	bs := []limit.Bucket{bucket(now, limit.Second, 0, time.Hour), bucket(now, limit.Minute, 0, time.Hour), bucket(now, limit.Hour, 0, 2*time.Hour)}
	if err := h.Store.AddNow(ctx, c, bs, 2); err != nil {
		t.Fatalf("AddNow: %v", err)
	}
	if err := h.Store.AddNow(ctx, c, bs, 1); err != nil {
		t.Fatalf("AddNow: %v", err)
	}
	if err := h.Store.Add(ctx, c, bs[:1], 1); err != nil {
		t.Fatalf("Add: %v", err)
	}
	if got, want := load(t, h.Store, c, bs...), []int64{4, 3, 3}; !equal(got, want) {
		t.Errorf("Load after AddNow = %v, want %v", got, want)
	}
}

func testIndependentCounters(t *testing.T, h Harness) {
	ctx := context.Background()
	now := h.now()
	b := bucket(now, limit.Minute, 0, time.Hour)
	cs := []limit.Counter{
		{Rule: "indep", Value: "a"},
		{Rule: "indep", Value: "b"},
		{Rule: "indep2", Value: "a"},
		{Rule: "indep", Value: "A"},                               // values are compared exactly
		{Rule: "indep", Value: "a b\x00c/é" + string(rune(0x7f))}, // odd bytes must not collide or fail
	}
	for i, c := range cs {
		if err := h.Store.Add(ctx, c, []limit.Bucket{b}, int64(i+1)); err != nil {
			t.Fatalf("Add(%q): %v", c, err)
		}
	}
	long := limit.Counter{Rule: "indep", Value: string(make([]byte, 400))}
	if err := h.Store.Add(ctx, long, []limit.Bucket{b}, 9); err != nil {
		t.Fatalf("Add(long value): %v", err)
	}
	for i, c := range cs {
		if got := load(t, h.Store, c, b); got[0] != int64(i+1) {
			t.Errorf("Load(%q) = %d, want %d", c, got[0], i+1)
		}
	}
	if got := load(t, h.Store, long, b); got[0] != 9 {
		t.Errorf("Load(long value) = %d, want 9", got[0])
	}
}

func testLevelsIndependent(t *testing.T, h Harness) {
	ctx := context.Background()
	now := h.now()
	c := limit.Counter{Rule: "levels", Value: "198.51.100.0"}
	// The same start in three levels names three buckets.
	start := now.Unix() / 3600 * 3600
	bs := []limit.Bucket{{Level: limit.Second, Start: start, TTL: 2 * time.Hour}, {Level: limit.Minute, Start: start, TTL: 2 * time.Hour}, {Level: limit.Hour, Start: start, TTL: 2 * time.Hour}}
	for i, b := range bs {
		if err := h.Store.Add(ctx, c, []limit.Bucket{b}, int64(10*(i+1))); err != nil {
			t.Fatalf("Add: %v", err)
		}
	}
	if got, want := load(t, h.Store, c, bs...), []int64{10, 20, 30}; !equal(got, want) {
		t.Errorf("Load = %v, want %v", got, want)
	}
}

// testManyBuckets reads a whole day's plan (60 s + 60 m + 24 h) in one Load.
func testManyBuckets(t *testing.T, h Harness) {
	ctx := context.Background()
	now := h.now()
	c := limit.Counter{Rule: "many", Value: "10.0.0.1"}
	var bs []limit.Bucket
	for _, lv := range []struct {
		l limit.Level
		n int64
	}{{limit.Second, 60}, {limit.Minute, 60}, {limit.Hour, 24}} {
		for i := lv.n - 1; i >= 0; i-- {
			bs = append(bs, bucket(now, lv.l, i, 26*time.Hour))
		}
	}
	want := make([]int64, len(bs))
	for i := 0; i < len(bs); i += 7 {
		if err := h.Store.Add(ctx, c, []limit.Bucket{bs[i]}, int64(i+1)); err != nil {
			t.Fatalf("Add: %v", err)
		}
		want[i] = int64(i + 1)
	}
	if got := load(t, h.Store, c, bs...); !equal(got, want) {
		t.Errorf("Load of %d buckets = %v, want %v", len(bs), got, want)
	}
}

// testWindowRoll counts in a bucket, moves on (the clock advances, or on
// real time the next bucket is named ahead of it) and counts again: the
// older bucket keeps its count until its TTL.
func testWindowRoll(t *testing.T, h Harness) {
	ctx := context.Background()
	c := limit.Counter{Rule: "roll", Value: "203.0.113.70"}
	now := h.now()
	if h.Advance == nil {
		now = now.Add(-140 * time.Second)
	}
	old := []limit.Bucket{bucket(now, limit.Second, 0, time.Hour), bucket(now, limit.Minute, 0, time.Hour)}
	if err := h.Store.Add(ctx, c, old, 2); err != nil {
		t.Fatalf("Add: %v", err)
	}
	later := now.Add(130 * time.Second)
	if h.Advance != nil {
		h.Advance(130 * time.Second)
	}
	cur := []limit.Bucket{bucket(later, limit.Second, 0, time.Hour), bucket(later, limit.Minute, 0, time.Hour)}
	if err := h.Store.Add(ctx, c, cur, 3); err != nil {
		t.Fatalf("Add: %v", err)
	}
	between := []limit.Bucket{bucket(later, limit.Second, 65, time.Hour), bucket(later, limit.Minute, 1, time.Hour)}
	got := load(t, h.Store, c, old[0], old[1], between[0], between[1], cur[0], cur[1])
	if want := []int64{2, 2, 0, 0, 3, 3}; !equal(got, want) {
		t.Errorf("Load of old, between and current buckets = %v, want %v", got, want)
	}
}

func testReset(t *testing.T, h Harness) {
	ctx := context.Background()
	now := h.now()
	c := limit.Counter{Rule: "reset", Value: "bob@example.com"}
	other := limit.Counter{Rule: "reset", Value: "carol@example.com"}
	bs := []limit.Bucket{bucket(now, limit.Second, 0, time.Hour), bucket(now, limit.Minute, 0, time.Hour), bucket(now, limit.Hour, 0, 2*time.Hour)}
	for _, cc := range []limit.Counter{c, other} {
		if err := h.Store.AddNow(ctx, cc, bs, 3); err != nil {
			t.Fatalf("AddNow: %v", err)
		}
	}
	if err := h.Store.Reset(ctx, c, bs[:2]); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if got, want := load(t, h.Store, c, bs...), []int64{0, 0, 3}; !equal(got, want) {
		t.Errorf("Load after Reset of two buckets = %v, want %v", got, want)
	}
	if got, want := load(t, h.Store, other, bs...), []int64{3, 3, 3}; !equal(got, want) {
		t.Errorf("Load of another counter after Reset = %v, want %v", got, want)
	}
	if err := h.Store.Reset(ctx, limit.Counter{Rule: "reset", Value: "nobody"}, bs); err != nil {
		t.Errorf("Reset of missing buckets: %v", err)
	}
	// A reset bucket counts again from zero.
	if err := h.Store.Add(ctx, c, bs[:1], 1); err != nil {
		t.Fatalf("Add: %v", err)
	}
	if got := load(t, h.Store, c, bs[0]); got[0] != 1 {
		t.Errorf("Load after Reset then Add = %d, want 1", got[0])
	}
}

func testConcurrentAdds(t *testing.T, h Harness) {
	ctx := context.Background()
	now := h.now()
	c := limit.Counter{Rule: "concurrent", Value: "192.0.2.1"}
	bs := []limit.Bucket{bucket(now, limit.Second, 0, time.Hour), bucket(now, limit.Minute, 0, time.Hour), bucket(now, limit.Hour, 0, 2*time.Hour)}
	const workers, each = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			counts := make([]int64, len(bs))
			for i := range each {
				var err error
				if (w+i)%2 == 0 {
					err = h.Store.Add(ctx, c, bs, 1)
				} else {
					err = h.Store.AddNow(ctx, c, bs, 1)
				}
				if err == nil {
					err = h.Store.Load(ctx, c, bs, counts) // reads race with writes
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	testkit.Await(t, wg.Wait, 5*time.Minute, "the concurrent checks")
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := int64(workers * each)
	if got := load(t, h.Store, c, bs...); !equal(got, []int64{want, want, want}) {
		t.Errorf("Load after %d concurrent adds = %v, want %d each", want, got, want)
	}
}

// testExpiry adds to a bucket with a short TTL and checks that it reads 0
// once Start+TTL (plus a store's rounding) has passed: by advancing the
// store's clock, or by polling real time until a deadline.
func testExpiry(t *testing.T, h Harness) {
	ctx := context.Background()
	now := h.now()
	c := limit.Counter{Rule: "expiry", Value: "198.51.100.9"}
	short := bucket(now, limit.Second, 0, 2*time.Second)
	long := bucket(now, limit.Minute, 0, time.Hour)
	if err := h.Store.AddNow(ctx, c, []limit.Bucket{short}, 4); err != nil {
		t.Fatalf("AddNow: %v", err)
	}
	if err := h.Store.AddNow(ctx, c, []limit.Bucket{long}, 6); err != nil {
		t.Fatalf("AddNow: %v", err)
	}
	if got := load(t, h.Store, c, short, long); !equal(got, []int64{4, 6}) {
		t.Fatalf("Load before expiry = %v, want [4 6]", got)
	}
	if h.Advance != nil {
		h.Advance(4 * time.Second)
		if got := load(t, h.Store, c, short, long); !equal(got, []int64{0, 6}) {
			t.Errorf("Load 4s after a 2s TTL = %v, want [0 6]", got)
		}
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := load(t, h.Store, c, short, long)
		if got[0] == 0 {
			if got[1] != 6 {
				t.Errorf("the long-lived bucket reads %d after the short one expired, want 6", got[1])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a bucket with a 2s TTL still reads %d after 10s", got[0])
		}
		time.Sleep(200 * time.Millisecond) // real-time store: poll until the TTL passes
	}
}

func testContextCancelled(t *testing.T, h Harness) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	now := h.now()
	c := limit.Counter{Rule: "cancel", Value: "x"}
	bs := []limit.Bucket{bucket(now, limit.Second, 0, time.Hour)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		counts := make([]int64, len(bs))
		for name, err := range map[string]error{
			"Load":   h.Store.Load(ctx, c, bs, counts),
			"AddNow": h.Store.AddNow(ctx, c, bs, 1),
			"Reset":  h.Store.Reset(ctx, c, bs),
		} {
			if err == nil {
				t.Errorf("%s with a cancelled context: no error", name)
			} else if !errors.Is(err, context.Canceled) {
				t.Logf("%s with a cancelled context: %v (does not wrap context.Canceled)", name, err)
			}
		}
		// Add may accept the hit before looking at ctx (asynchronous
		// stores); it must return, error or not.
		_ = h.Store.Add(ctx, c, bs, 1)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("store calls with a cancelled context did not return within 5s")
	}
}

// box returns a box of trips trips from now for d, kept until keep after
// now.
func box(now time.Time, d time.Duration, trips int) limit.Box {
	return limit.Box{Start: now.Unix(), Until: now.Add(d).Unix(), Trips: trips}
}

func putBox(t *testing.T, s limit.Store, c limit.Counter, b limit.Box, keep int64) {
	t.Helper()
	if err := s.PutBox(context.Background(), c, b, keep); err != nil {
		t.Fatalf("PutBox(%v): %v", c, err)
	}
}

func testBoxMissing(t *testing.T, h Harness) {
	c := limit.Counter{Rule: "boxmissing", Value: "203.0.113.8"}
	if got := load(t, h.Store, c, limit.BoxBucket); got[0] != 0 {
		t.Errorf("Load of a counter without a box = %d, want 0", got[0])
	}
}

// testBoxReadWithCounts: a box put is read by the same Load as the
// counts, whole (start, end, trips), and only for its counter.
func testBoxReadWithCounts(t *testing.T, h Harness) {
	ctx := context.Background()
	now := h.now()
	c := limit.Counter{Rule: "boxread", Value: "alice@example.com,203.0.113.9"}
	other := limit.Counter{Rule: "boxread", Value: "bob@example.com,203.0.113.9"}
	bs := []limit.Bucket{bucket(now, limit.Second, 0, time.Hour), bucket(now, limit.Minute, 0, time.Hour)}
	if err := h.Store.Add(ctx, c, bs, 2); err != nil {
		t.Fatalf("Add: %v", err)
	}
	b := box(now, 15*time.Minute, 3)
	putBox(t, h.Store, c, b, now.Add(time.Hour).Unix())
	got := load(t, h.Store, c, bs[0], bs[1], limit.BoxBucket)
	if got[0] != 2 || got[1] != 2 || limit.UnpackBox(got[2]) != b {
		t.Errorf("Load of counts and box = %v (box %+v), want [2 2] and %+v", got, limit.UnpackBox(got[2]), b)
	}
	if got := load(t, h.Store, other, bs[0], limit.BoxBucket); got[0] != 0 || got[1] != 0 {
		t.Errorf("Load of another counter = %v, want zeros", got)
	}
}

// testBoxReplacedAndReset: a second PutBox replaces the first; Reset of
// the box bucket deletes the box and leaves the counts, and a Reset of the
// counts leaves the box.
func testBoxReplacedAndReset(t *testing.T, h Harness) {
	ctx := context.Background()
	now := h.now()
	c := limit.Counter{Rule: "boxreset", Value: "198.51.100.20"}
	b0 := bucket(now, limit.Minute, 0, time.Hour)
	if err := h.Store.AddNow(ctx, c, []limit.Bucket{b0}, 4); err != nil {
		t.Fatalf("AddNow: %v", err)
	}
	putBox(t, h.Store, c, box(now, time.Minute, 1), now.Add(time.Hour).Unix())
	second := box(now, 2*time.Minute, 2)
	putBox(t, h.Store, c, second, now.Add(time.Hour).Unix())
	if got := load(t, h.Store, c, limit.BoxBucket); limit.UnpackBox(got[0]) != second {
		t.Errorf("box after a second PutBox = %+v, want %+v", limit.UnpackBox(got[0]), second)
	}
	if err := h.Store.Reset(ctx, c, []limit.Bucket{b0}); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if got := load(t, h.Store, c, b0, limit.BoxBucket); got[0] != 0 || limit.UnpackBox(got[1]) != second {
		t.Errorf("after a Reset of the counts: %v, want the count 0 and the box kept", got)
	}
	if err := h.Store.AddNow(ctx, c, []limit.Bucket{b0}, 1); err != nil {
		t.Fatalf("AddNow: %v", err)
	}
	if err := h.Store.Reset(ctx, c, []limit.Bucket{limit.BoxBucket}); err != nil {
		t.Fatalf("Reset of the box: %v", err)
	}
	if got := load(t, h.Store, c, b0, limit.BoxBucket); got[0] != 1 || got[1] != 0 {
		t.Errorf("after a Reset of the box: %v, want [1 0]", got)
	}
}

// testBoxKept: a box is read past its end until keep (its trips decide
// the next box), and not after.
func testBoxKept(t *testing.T, h Harness) {
	now := h.now()
	c := limit.Counter{Rule: "boxkept", Value: "u7"}
	b := limit.Box{Start: now.Unix() - 10, Until: now.Unix() - 5, Trips: 2} // ended
	putBox(t, h.Store, c, b, now.Unix()+2)
	if got := load(t, h.Store, c, limit.BoxBucket); limit.UnpackBox(got[0]) != b {
		t.Fatalf("an ended box before keep reads %+v, want %+v", limit.UnpackBox(got[0]), b)
	}
	if h.Advance != nil {
		h.Advance(4 * time.Second)
		if got := load(t, h.Store, c, limit.BoxBucket); got[0] != 0 {
			t.Errorf("a box 4s after a keep 2s away reads %+v, want none", limit.UnpackBox(got[0]))
		}
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for load(t, h.Store, c, limit.BoxBucket)[0] != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a box kept 2s still reads after 10s")
		}
		time.Sleep(200 * time.Millisecond) // real-time store: poll until keep passes
	}
}

// testBoxesListed: Boxes yields the boxes put that have not ended, each
// once, and none reset; yield returning false stops it.
func testBoxesListed(t *testing.T, h Harness) {
	ctx := context.Background()
	now := h.now()
	keep := now.Add(time.Hour).Unix()
	live := map[limit.Counter]limit.Box{}
	for i := range 5 {
		c := limit.Counter{Rule: "boxlist", Value: fmt.Sprintf("203.0.113.%d", 100+i)}
		live[c] = box(now, time.Duration(i+1)*time.Minute, i+1)
		putBox(t, h.Store, c, live[c], keep)
	}
	ended := limit.Counter{Rule: "boxlist", Value: "ended"}
	putBox(t, h.Store, ended, limit.Box{Start: now.Unix() - 60, Until: now.Unix() - 1, Trips: 1}, keep)
	released := limit.Counter{Rule: "boxlist", Value: "released"}
	putBox(t, h.Store, released, box(now, time.Minute, 1), keep)
	if err := h.Store.Reset(ctx, released, []limit.Bucket{limit.BoxBucket}); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	got := map[limit.Counter]limit.Box{}
	err := h.Store.Boxes(ctx, now.Unix(), func(b limit.Boxed) bool {
		if b.Rule != "boxlist" {
			return true // another subtest's
		}
		if _, dup := got[b.Counter]; dup {
			t.Errorf("Boxes yields %v twice", b.Counter)
		}
		got[b.Counter] = b.Box
		return true
	})
	if err != nil {
		t.Fatalf("Boxes: %v", err)
	}
	if len(got) != len(live) {
		t.Errorf("Boxes yields %d boxes of the rule, want the %d that have not ended nor been reset: %v", len(got), len(live), got)
	}
	for c, b := range live {
		if got[c] != b {
			t.Errorf("Boxes: %v has %+v, want %+v", c, got[c], b)
		}
	}
	calls := 0
	if err := h.Store.Boxes(ctx, now.Unix(), func(limit.Boxed) bool { calls++; return false }); err != nil {
		t.Fatalf("Boxes: %v", err)
	}
	if calls != 1 {
		t.Errorf("Boxes called yield %d times after it returned false, want once", calls)
	}
}

// testBoxShared: a box one gateway puts is read by the next Load of
// another on the same backend, and the other's Reset releases it for
// both.
func testBoxShared(t *testing.T, h Harness) {
	if h.Peer == nil {
		t.Skip("the store is one process's: nothing to share")
	}
	ctx := context.Background()
	now := h.now()
	c := limit.Counter{Rule: "boxshared", Value: "carol@example.com"}
	if got := load(t, h.Peer, c, limit.BoxBucket); got[0] != 0 {
		t.Fatalf("the peer reads a box before any was put: %+v", limit.UnpackBox(got[0]))
	}
	b := box(now, time.Hour, 1)
	putBox(t, h.Store, c, b, now.Add(2*time.Hour).Unix())
	// PutBox returns once the backend holds the box; the peer's read of a
	// moment ago may still answer (memcached: for a millisecond).
	eventually(t, "the peer reads the box", func() bool { return limit.UnpackBox(load(t, h.Peer, c, limit.BoxBucket)[0]) == b })
	if err := h.Peer.Reset(ctx, c, []limit.Bucket{limit.BoxBucket}); err != nil {
		t.Fatalf("Reset on the peer: %v", err)
	}
	eventually(t, "the box the peer reset is gone", func() bool { return load(t, h.Store, c, limit.BoxBucket)[0] == 0 })
}

// eventually polls cond every millisecond until it holds, failing the
// test after 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
