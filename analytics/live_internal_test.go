package analytics

import (
	"testing"
	"time"

	"github.com/linkgate/linkgate/visitclass"
)

// TestLiveSweepAtCap: with the cap reached, a new link's visit sweeps its
// shard of rings without a visit for 15 minutes, once per bucket, and takes
// the room they held, before any flush; an entry pointing at a swept ring
// looks its link up again.
func TestLiveSweepAtCap(t *testing.T) {
	r := NewRecorder(100, nil)
	r.SetLiveLinks(1)
	s := &r.shards[0]
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	old := &entry{}
	s.mu.Lock()
	defer s.mu.Unlock()
	r.recordLive(s, old, "old", true, liveTick(now), visitclass.Human)
	if n := r.LiveLinks(); n != 1 {
		t.Fatalf("%d rings, want 1", n)
	}
	fresh := &entry{}
	r.recordLive(s, fresh, "new", true, liveTick(now.Add(time.Minute)), visitclass.Human)
	if fresh.live != nil || r.LiveLinks() != 1 {
		t.Fatalf("a second link within the window got a ring at a cap of 1")
	}
	later := liveTick(now.Add(LiveWindow))
	r.recordLive(s, fresh, "new", true, later, visitclass.Human)
	if fresh.live == nil || s.live["old"] != nil || !old.live.dead || r.LiveLinks() != 1 {
		t.Fatalf("15 minutes on, the stale ring was not swept for the new link: old %v, new %v", s.live["old"], fresh.live)
	}
	r.recordLive(s, old, "old", true, later, visitclass.Bot) // the stale entry's ring is gone: looked up, refused
	if old.live.dead == false || len(s.live) != 1 {
		t.Errorf("a visit through a swept ring revived it")
	}
	if c := fresh.live.counts; len(c) != 1 || c[0].human != 1 || c[0].tick != later {
		t.Errorf("new's ring %+v, want one human visit at %d", c, later)
	}
}

// TestLiveRingWindow: a ring keeps only its buckets within the window of its
// newest, in order, however visits arrive.
func TestLiveRingWindow(t *testing.T) {
	var r liveRing
	for _, tick := range []uint32{100, 101, 101, 150, 120, 189, 95, 190, 240} {
		r.add(tick, visitclass.Human)
	}
	var got []uint32
	for _, c := range r.counts {
		got = append(got, c.tick)
	}
	want := []uint32{189, 190, 240} // 240 pushes out everything at or before 150
	if len(got) != len(want) {
		t.Fatalf("ticks %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ticks %v, want %v", got, want)
		}
	}
	if cap(r.counts) > 16 {
		t.Errorf("capacity %d: the window was not compacted in place", cap(r.counts))
	}
}
