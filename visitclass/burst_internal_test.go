package visitclass

import (
	"strconv"
	"testing"
	"time"
)

// TestBurstTableBounded fills a burst table far past its cap: it holds at
// most the cap, and a link it forgot starts a new burst at its next cloud
// visit rather than passing as a person.
func TestBurstTableBounded(t *testing.T) {
	tb := newBurstTable(time.Minute, 64)
	t0 := time.Unix(1e9, 0)
	for i := range 10_000 {
		if !tb.within("link"+strconv.Itoa(i), t0) {
			t.Fatalf("link %d: a first visit outside the window", i)
		}
	}
	n := 0
	for i := range tb.shards {
		n += len(tb.shards[i].first)
	}
	if n > 64 {
		t.Errorf("the table holds %d links, over its cap of 64", n)
	}
	if !tb.within("link0", t0.Add(10*time.Second)) {
		t.Error("a forgotten link's next visit within the window is not a burst")
	}
	if tb.within("link0", t0.Add(2*time.Minute)) {
		t.Error("a visit after the window is a burst")
	}
}
