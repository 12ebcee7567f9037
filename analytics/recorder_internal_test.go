package analytics

import (
	"testing"
	"time"
)

func TestEntryMinutes(t *testing.T) {
	var e entry
	// In order, back in time (concurrent requests), forward again.
	for _, m := range []int64{5, 5, 6, 5, 4, 6, 7, 4} {
		e.add(m, classOf(m == 4))
	}
	got := map[int64]Visits{}
	e.each(func(c minuteCount) {
		if _, dup := got[c.minute]; dup {
			t.Errorf("minute %d twice", c.minute)
		}
		got[c.minute] = c.Visits
	})
	want := map[int64]Visits{4: {Bot: 2}, 5: {Human: 3}, 6: {Human: 2}, 7: {Human: 1}}
	if len(got) != len(want) {
		t.Fatalf("minutes %v, want %v", got, want)
	}
	for m, v := range want {
		if got[m] != v {
			t.Errorf("minute %d: %+v, want %+v", m, got[m], v)
		}
	}
	if e.last.minute != 7 {
		t.Errorf("newest minute held inline is %d, want 7", e.last.minute)
	}
}

func TestUnixMinute(t *testing.T) {
	for _, tt := range []struct {
		sec  int64
		want int64
	}{{0, 0}, {59, 0}, {60, 1}, {-1, -1}, {-60, -1}, {-61, -2}} {
		if got := unixMinute(time.Unix(tt.sec, 0)); got != tt.want {
			t.Errorf("unixMinute(%d s) = %d, want %d", tt.sec, got, tt.want)
		}
	}
}
