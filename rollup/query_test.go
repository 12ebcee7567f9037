package rollup_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/linkgate/linkgate/rollup"
)

// nows are the fixed clocks the tests run under: mid-week, a Monday at
// midnight (week boundary), the last second of a year, a leap day.
var nows = []time.Time{
	time.Date(2026, 11, 22, 23, 30, 33, 0, time.UTC), // a Sunday
	time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC),    // Monday 00:00
	time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC),
	time.Date(2028, 2, 29, 12, 7, 0, 0, time.UTC),
}

// bucketsRef lists every t with Align(t, step) == t that overlaps [from, to),
// found by walking minute by minute (hour by hour for steps of an hour or
// more) rather than by arithmetic.
func bucketsRef(from, to time.Time, step time.Duration) []time.Time {
	walk := time.Minute
	if step >= time.Hour {
		walk = time.Hour
	}
	var out []time.Time
	for t := from.Add(-step).Truncate(walk); t.Before(to); t = t.Add(walk) {
		if isAligned(t, step) && t.Add(step).After(from) {
			out = append(out, t)
		}
	}
	return out
}

// isAligned says whether t starts a bucket of step, checked by calendar
// rather than with Align: midnight for days, Monday midnight for weeks.
func isAligned(t time.Time, step time.Duration) bool {
	t = t.UTC()
	if t.Second() != 0 || t.Nanosecond() != 0 {
		return false
	}
	switch {
	case step%rollup.Week == 0:
		// Weeks count from Monday 0001-01-01, unix second -62135596800.
		days := (t.Unix() + 62135596800) / 86400
		return t.Weekday() == time.Monday && t.Hour() == 0 && t.Minute() == 0 && days%int64(step/rollup.Day) == 0
	case step == rollup.Day:
		return t.Hour() == 0 && t.Minute() == 0
	default:
		m := time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute
		return m%step == 0
	}
}

func TestBuckets(t *testing.T) {
	for _, now := range nows {
		for _, tc := range []struct {
			back, len time.Duration
		}{{90 * time.Minute, 90 * time.Minute}, {rollup.Day, rollup.Day}, {3 * rollup.Day, 2*rollup.Day + 7*time.Minute}, {40 * rollup.Day, 31 * rollup.Day}, {rollup.Year, rollup.Year}} {
			from, to := now.Add(-tc.back), now.Add(-tc.back+tc.len)
			for _, tr := range rollup.DefaultTiers() {
				if tr.Step < time.Hour && tc.len > 40*rollup.Day {
					continue // the reference walks minutes: keep it quick
				}
				got := rollup.Buckets(from, to, tr.Step)
				want := bucketsRef(from, to, tr.Step)
				if !sameTimes(want, got) {
					t.Errorf("Buckets(%v, %v, %v) (-want +got):\n%s", from, to, tr.Step, cmp.Diff(want, got))
				}
				if n := rollup.NumBuckets(from, to, tr.Step); n != len(got) {
					t.Errorf("NumBuckets(%v, %v, %v) = %d, Buckets has %d", from, to, tr.Step, n, len(got))
				}
			}
		}
	}
	mon := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	got := rollup.Buckets(mon.Add(-time.Minute), mon.Add(rollup.Week+time.Minute), rollup.Week)
	want := []time.Time{mon.Add(-rollup.Week), mon, mon.Add(rollup.Week)}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("weeks around Monday 2026-11-23 (-want +got):\n%s", d)
	}
	if got := rollup.Buckets(mon, mon, time.Minute); got != nil {
		t.Errorf("empty range: got %v", got)
	}
}

// sameTimes is a quick equality check; cmp.Diff on long slices is slow.
func sameTimes(a, b []time.Time) bool {
	return slices.EqualFunc(a, b, time.Time.Equal)
}

// chooseRef is Choose by enumeration: count each tier's buckets by making
// them and test retention by subtraction.
func chooseRef(tiers []rollup.Tier, from, to, now time.Time, maxPoints int) rollup.Tier {
	for _, tr := range tiers {
		covered := now.Sub(from) <= tr.Retention
		if covered && len(bucketsRef(from, to, tr.Step)) <= maxPoints {
			return tr
		}
	}
	return tiers[len(tiers)-1]
}

func TestChoose(t *testing.T) {
	tiers := rollup.DefaultTiers()
	for _, now := range nows {
		for _, tc := range []struct {
			last time.Duration
			want time.Duration
		}{
			{90 * time.Minute, time.Minute},
			{6 * time.Hour, time.Minute},
			{rollup.Day, time.Minute}, // 1,440 or 1,441 minutes
			{2 * rollup.Day, 5 * time.Minute},
			{3 * rollup.Day, 5 * time.Minute},
			{2 * rollup.Week, time.Hour},
			{60 * rollup.Day, rollup.Day}, // beyond the hour tier's 40 days
			{rollup.Year, rollup.Day},
			{2 * rollup.Year, rollup.Week},
			{30 * rollup.Year, rollup.Week}, // beyond everything: the coarsest
		} {
			from := now.Add(-tc.last)
			got, err := rollup.Choose(tiers, from, now, now, 0)
			if err != nil || got.Step != tc.want {
				t.Errorf("now %v, last %v: Choose = %v, %v; want step %v", now, tc.last, got, err, tc.want)
			}
			if tc.last <= rollup.Year {
				if ref := chooseRef(tiers, from, now, now, rollup.MaxPoints); got != ref {
					t.Errorf("now %v, last %v: Choose = %v, reference %v", now, tc.last, got, ref)
				}
			}
		}
	}
	now := nows[0]
	if _, err := rollup.Choose(tiers, now, now, now, 0); err == nil {
		t.Error("Choose of an empty range: no error")
	}
	if _, err := rollup.Choose(nil, now.Add(-time.Hour), now, now, 0); err == nil {
		t.Error("Choose without tiers: no error")
	}
	// An old range of an hour: finer tiers have expired it.
	if got, _ := rollup.Choose(tiers, now.Add(-10*rollup.Day), now.Add(-10*rollup.Day+time.Hour), now, 0); got.Step != time.Hour {
		t.Errorf("an hour 10 days ago: Choose = %v, want the hour tier", got)
	}
}

func TestWithStep(t *testing.T) {
	tiers := rollup.DefaultTiers()
	for _, tr := range tiers {
		if got, err := rollup.WithStep(tiers, tr.Step); err != nil || got != tr {
			t.Errorf("WithStep(%v) = %v, %v", tr.Step, got, err)
		}
	}
	_, err := rollup.WithStep(tiers, 2*time.Minute)
	if !errors.Is(err, rollup.ErrStep) || !strings.Contains(err.Error(), "2m") || !strings.Contains(err.Error(), "1m, 5m, 1h, 1d, 1w") {
		t.Errorf("WithStep(2m) error = %v; want ErrStep naming 2m and the valid steps", err)
	}
}

// point is one bucket of a curve with its own step.
type point struct {
	Start time.Time
	Step  time.Duration
}

// stitchRef builds the stitched curve bucket by bucket: the first bucket is
// that of the finest tier covering from; every next bucket starts where the
// last ended and uses the finest tier covering its start.
func stitchRef(tiers []rollup.Tier, from, to, now time.Time) []point {
	finest := func(t time.Time) rollup.Tier {
		for _, tr := range tiers {
			if now.Sub(t) <= tr.Retention {
				return tr
			}
		}
		return tiers[len(tiers)-1]
	}
	tr := finest(from)
	var out []point
	for s := rollup.Align(from, tr.Step); s.Before(to); {
		out = append(out, point{s, tr.Step})
		s = s.Add(tr.Step)
		tr = finest(s)
	}
	return out
}

func stitchPoints(t *testing.T, tiers []rollup.Tier, from, to, now time.Time) []point {
	t.Helper()
	segs, err := rollup.Stitch(tiers, from, to, now)
	if err != nil {
		t.Fatalf("Stitch(%v, %v, now %v): %v", from, to, now, err)
	}
	if len(segs) > len(tiers) {
		t.Errorf("Stitch(%v, %v, now %v): %d segments, more than the %d tiers", from, to, now, len(segs), len(tiers))
	}
	var out []point
	for i, s := range segs {
		if i > 0 && !s.From.Equal(segs[i-1].To) {
			t.Errorf("segment %d starts at %v, the one before ends at %v", i, s.From, segs[i-1].To)
		}
		if i > 0 && s.Tier.Step >= segs[i-1].Tier.Step {
			t.Errorf("segment %d (%v) is not finer than the one before (%v)", i, s.Tier, segs[i-1].Tier)
		}
		if i > 0 && !isAligned(s.From, segs[i-1].Tier.Step) {
			t.Errorf("segment %d starts at %v, not on a bucket boundary of %v", i, s.From, segs[i-1].Tier.Step)
		}
		for _, b := range rollup.Buckets(s.From, s.To, s.Tier.Step) {
			out = append(out, point{b, s.Tier.Step})
		}
	}
	return out
}

func TestStitch(t *testing.T) {
	tiers := rollup.DefaultTiers()
	for _, now := range nows {
		for _, r := range []struct{ back, len time.Duration }{
			{time.Hour, time.Hour}, {3 * rollup.Day, 3 * rollup.Day}, {30 * rollup.Day, 30 * rollup.Day},
			{rollup.Year, rollup.Year}, {2 * rollup.Year, 2 * rollup.Year}, {6 * rollup.Year, rollup.Year},
			{rollup.Year, 300 * rollup.Day}, {9 * rollup.Day, 3 * rollup.Day},
		} {
			from, to := now.Add(-r.back), now.Add(-r.back+r.len)
			got := stitchPoints(t, tiers, from, to, now)
			want := stitchRef(tiers, from, to, now)
			if !slices.Equal(want, got) {
				t.Errorf("now %v, [%v, %v) (-reference +Stitch):\n%s", now, from, to, cmp.Diff(want, got))
			}
		}
	}
	// The seeds' curve: a year back from Sunday night, in weeks? No: the
	// day tier keeps 400 days, so days, then hours, 5 minutes, minutes.
	now := nows[0]
	segs, _ := rollup.Stitch(tiers, now.Add(-rollup.Year), now, now)
	var steps []string
	for _, s := range segs {
		steps = append(steps, fmt.Sprintf("%v from %s", rollup.FormatDuration(s.Tier.Step), s.From.Format(time.DateTime)))
	}
	want := []string{
		"1d from 2025-11-22 23:30:33",
		"1h from 2026-10-14 00:00:00", // the first midnight after now-40d (23:30:33)
		"5m from 2026-11-15 00:00:00", // the first hour after now-8d
		"1m from 2026-11-20 23:35:00", // the first 5 minutes after now-2d
	}
	if d := cmp.Diff(want, steps); d != "" {
		t.Errorf("one year at %v (-want +got):\n%s", now, d)
	}
	segs, _ = rollup.Stitch(tiers, now.Add(-3*rollup.Year), now.Add(-2*rollup.Year), now)
	if len(segs) != 1 || segs[0].Tier.Step != rollup.Week {
		t.Errorf("a year, three years back: %v; want weeks only", segs)
	}
}

// FuzzStitch checks Stitch against the bucket-by-bucket reference for
// arbitrary ranges, clocks and tier sets.
func FuzzStitch(f *testing.F) {
	f.Add(int64(0), uint32(60), uint32(24*60), uint8(0))
	f.Add(int64(3600*24*400), uint32(60*24*365), uint32(60*24*365), uint8(1))
	f.Add(int64(12345), uint32(60*24*9), uint32(60*24*3), uint8(2))
	base := nows[1]
	sets := [][]rollup.Tier{
		rollup.DefaultTiers(),
		{{time.Minute, rollup.Day}, {time.Hour, rollup.Day}, {rollup.Day, rollup.Week}, {rollup.Week, rollup.Year}}, // equal retentions
		{{5 * time.Minute, 3 * time.Hour}, {time.Hour, 2 * rollup.Day}, {2 * rollup.Week, 3 * rollup.Year}},
	}
	f.Fuzz(func(t *testing.T, nowOff int64, backMin, lenMin uint32, set uint8) {
		tiers := sets[int(set)%len(sets)]
		now := base.Add(time.Duration(nowOff%(10*365*86400)) * time.Second)
		back := time.Duration(backMin%(3*365*24*60)) * time.Minute
		length := time.Duration(lenMin%(2*365*24*60))*time.Minute + time.Second
		from := now.Add(-back).Add(-time.Duration(nowOff%59) * time.Second)
		to := from.Add(length)
		if len(stitchRef(tiers, from, to, now)) > 20000 {
			t.Skip("too many points for a quick reference")
		}
		got := stitchPoints(t, tiers, from, to, now)
		want := stitchRef(tiers, from, to, now)
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("now %v, [%v, %v) (-reference +Stitch):\n%s", now, from, to, d)
		}
	})
}

func FuzzBuckets(f *testing.F) {
	f.Add(int64(0), uint32(100), uint8(0))
	f.Add(int64(-86400*3-17), uint32(60*24*15), uint8(4))
	steps := []time.Duration{time.Minute, 5 * time.Minute, time.Hour, rollup.Day, rollup.Week}
	f.Fuzz(func(t *testing.T, off int64, lenMin uint32, s uint8) {
		step := steps[int(s)%len(steps)]
		from := nows[0].Add(time.Duration(off%(400*86400)) * time.Second)
		to := from.Add(time.Duration(lenMin%(60*24*30)) * time.Minute)
		got := rollup.Buckets(from, to, step)
		want := bucketsRef(from, to, step)
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("Buckets(%v, %v, %v) (-want +got):\n%s", from, to, step, d)
		}
	})
}
