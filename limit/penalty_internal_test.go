package limit

import (
	"math"
	"testing"
	"time"
)

// TestPenaltyNext: the box of each trip, against the rule written out:
// duration × factor^(trips-1), never past max, the count starting again
// after forget_after, ending on a whole second no sooner than its length
// and than the limits let a request through.
func TestPenaltyNext(t *testing.T) {
	p, err := compilePenalty(Penalty{Duration: 15 * time.Minute, Factor: 2, Max: 24 * time.Hour, ForgetAfter: 7 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 28, 12, 0, 10, 0, time.UTC)
	now, old := t0, Box{}
	for trips, want := range []time.Duration{15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 4 * time.Hour,
		8 * time.Hour, 16 * time.Hour, 24 * time.Hour, 24 * time.Hour} {
		b, keep := p.next(old, now, 0)
		if b.Trips != trips+1 || b.Start != now.Unix() || b.Until != now.Add(want).Unix() {
			t.Fatalf("trip %d at %v: %+v, want a box of %v", trips+1, now, b, want)
		}
		if keep != now.Unix()+7*24*3600 {
			t.Errorf("trip %d: kept until %d, want forget_after past the trip", trips+1, keep)
		}
		now, old = time.Unix(b.Until, 0).Add(time.Second), b
	}
	// A trip more than forget_after after the last starts again.
	if b, _ := p.next(old, time.Unix(old.Start, 0).Add(7*24*time.Hour+time.Second), 0); b.Trips != 1 || b.Until-b.Start != 15*60 {
		t.Errorf("a trip past forget_after: %+v, want a first trip's box", b)
	}
	// A box ends on a whole second, no sooner than its length.
	frac := t0.Add(300 * time.Millisecond)
	if b, _ := p.next(Box{}, frac, 0); b.Until != t0.Unix()+15*60+1 {
		t.Errorf("a trip at %v ends at %d, want %d", frac, b.Until, t0.Unix()+15*60+1)
	}
	// Nor before the limits let a request through.
	free := t0.Unix() + 3*3600
	if b, keep := p.next(Box{}, t0, free); b.Until != free || keep != t0.Unix()+7*24*3600 {
		t.Errorf("a trip whose limits free in 3h: until %d kept %d, want until %d", b.Until, keep, free)
	}
	// A box longer than forget_after is kept until it ends.
	short, err := compilePenalty(Penalty{Duration: time.Hour, ForgetAfter: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if b, keep := short.next(Box{}, t0, 0); keep != b.Until || b.Until != t0.Unix()+3600 {
		t.Errorf("a 1h box forgotten after 1m: %+v kept until %d, want kept until its end", b, keep)
	}
	// Without a factor every box is the first's.
	flat, err := compilePenalty(Penalty{Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if n := flat.length(200); n != 60 {
		t.Errorf("the 200th box without a factor lasts %ds, want 60", n)
	}
	// A factor that overflows float64 stops at max.
	huge, err := compilePenalty(Penalty{Duration: time.Second, Factor: MaxPenaltyFactor})
	if err != nil {
		t.Fatal(err)
	}
	if n := huge.length(255); n != int64(DefaultPenaltyMax/time.Second) {
		t.Errorf("the 255th box at factor 100 lasts %ds, want max", n)
	}
	if n := huge.length(math.MaxInt32); n != int64(DefaultPenaltyMax/time.Second) {
		t.Errorf("length(MaxInt32) = %d, want max", n)
	}
}

// TestBoxPack: a box packs into a count and back whole, within its
// fields' ranges, and numbers no box packs to read as no box.
func TestBoxPack(t *testing.T) {
	for _, b := range []Box{
		{Start: 1774699210, Until: 1774699210 + 900, Trips: 1},
		{Start: 1774699210, Until: 1774699210 + 14*24*3600, Trips: 255},
		{Start: 1, Until: 2, Trips: 7},
	} {
		v := b.Pack()
		if v <= 0 || UnpackBox(v) != b {
			t.Errorf("%+v packs to %d, which unpacks to %+v", b, v, UnpackBox(v))
		}
	}
	if v := (Box{}).Pack(); v != 0 {
		t.Errorf("no box packs to %d, want 0", v)
	}
	if b := UnpackBox(1 << 40); b != (Box{}) {
		t.Errorf("a number with no trips unpacks to %+v, want no box", b)
	}
	if b := UnpackBox(-5); b != (Box{}) {
		t.Errorf("a negative number unpacks to %+v, want no box", b)
	}
	// Past the fields: trips and length are capped, the end kept.
	b := Box{Start: 100, Until: 100 + 30*24*3600, Trips: 1000}
	if got := UnpackBox(b.Pack()); got.Until != b.Until || got.Trips != 255 || got.Until-got.Start != packLen {
		t.Errorf("%+v packs to %+v, want the end kept, trips 255 and the length capped", b, got)
	}
}

// TestPairValue: pairs of values never share a counter value, and the
// admin API splits what pairValue joins.
func TestPairValue(t *testing.T) {
	seen := map[string][2]string{}
	for _, p := range [][2]string{
		{"alice@example.com", "203.0.113.7"}, {"a,b", "c"}, {"a", "b,c"}, {"a%2Cb", "c"}, {"a%", "c"}, {"", "x"}, {"x", ""},
		{`"q,r"@example.com`, "2001:db8::/64"},
	} {
		v := pairValue(p[0], p[1])
		if q, dup := seen[v]; dup {
			t.Errorf("%q and %q share the value %q", p, q, v)
		}
		seen[v] = p
		a, b, ok := splitPair(v)
		if !ok || a != p[0] || b != p[1] {
			t.Errorf("splitPair(%q) = %q, %q, %v; want %q", v, a, b, ok, p)
		}
	}
	if got := pairValue("alice@example.com", "203.0.113.7"); got != "alice@example.com,203.0.113.7" {
		t.Errorf("pairValue = %q, want the two values as they read", got)
	}
	for _, bad := range []string{"no comma", "a,b,c", "a%zz,b"} {
		if _, _, ok := splitPair(bad); ok {
			t.Errorf("splitPair(%q) accepted", bad)
		}
	}
}
