package rollup

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// MaxPoints is about how many points Choose lets one curve have: enough for a
// day per minute (1,440), few enough to draw and send quickly.
const MaxPoints = 1500

// ErrStep is returned by WithStep for a step that is no tier's step.
var ErrStep = errors.New("rollup: unsupported step")

// Choose returns the tier to answer the range [from, to) with at now: the
// finest tier whose retention still covers the range's start
// (from >= now - Retention) and that yields at most maxPoints buckets
// (MaxPoints when maxPoints <= 0). When none does, it returns the coarsest
// tier: what it still holds is the best answer there is. tiers go from fine
// to coarse, as ValidateTiers checks.
//
// A query of the chosen tier reads one range of stored buckets:
// Points(key, tier.Step, Align(from, tier.Step), to).
func Choose(tiers []Tier, from, to, now time.Time, maxPoints int) (Tier, error) {
	if len(tiers) == 0 {
		return Tier{}, errors.New("rollup: no tiers")
	}
	if !from.Before(to) {
		return Tier{}, fmt.Errorf("rollup: range start %v is not before its end %v", from, to)
	}
	if maxPoints <= 0 {
		maxPoints = MaxPoints
	}
	for _, t := range tiers {
		if !from.Before(now.Add(-t.Retention)) && NumBuckets(from, to, t.Step) <= maxPoints {
			return t, nil
		}
	}
	return tiers[len(tiers)-1], nil
}

// WithStep returns the tier whose step is step, or an error wrapping ErrStep
// that names the valid steps.
func WithStep(tiers []Tier, step time.Duration) (Tier, error) {
	valid := make([]string, len(tiers))
	for i, t := range tiers {
		if t.Step == step {
			return t, nil
		}
		valid[i] = FormatDuration(t.Step)
	}
	return Tier{}, fmt.Errorf("%w %s: valid steps are %s", ErrStep, FormatDuration(step), strings.Join(valid, ", "))
}

// NumBuckets returns how many buckets of the given step Buckets(from, to,
// step) returns, without making them.
func NumBuckets(from, to time.Time, step time.Duration) int {
	start := Align(from, step)
	if step <= 0 || !start.Before(to) {
		return 0
	}
	d := to.Sub(start) // saturates rather than overflows for huge ranges
	n := d / step
	if d%step != 0 {
		n++
	}
	return int(n)
}

// Buckets returns the start of every bucket of the given step that holds
// some of [from, to): Align(from, step), then every step up to but excluding
// to. Callers zero-fill a curve from it. It returns nil for an empty range
// or a step <= 0.
func Buckets(from, to time.Time, step time.Duration) []time.Time {
	n := NumBuckets(from, to, step)
	if n == 0 {
		return nil
	}
	out := make([]time.Time, n)
	t := Align(from, step)
	for i := range out {
		out[i] = t
		t = t.Add(step)
	}
	return out
}

// Segment is one piece of a stitched curve: the buckets of Tier.Step from
// Align(From, Tier.Step) up to but excluding To.
type Segment struct {
	Tier     Tier
	From, To time.Time
}

// Stitch splits [from, to) into the seeds' mixed-resolution curve at now:
// coarse buckets far back, finer ones toward now (weeks, then days, hours,
// 5 minutes and minutes with the default tiers). The segments are in time
// order, at most one per tier. Each one uses the finest tier whose retention
// covers the segment's start; the first starts at from (its first bucket at
// Align(from, step)), and every later one starts where the one before ends,
// on a bucket boundary of the coarser tier, so that no coarse bucket is
// split: together their buckets cover [Align(from, first step), to) with no
// gap and no overlap, and each point carries its own step. Before the
// coarsest tier's retention the coarsest tier is used. tiers go from fine to
// coarse, each step a multiple of the one before, as ValidateTiers checks.
//
// A stitched query reads one range of stored buckets per segment, so at
// most len(tiers) ranges however long the curve:
// Points(key, seg.Tier.Step, Align(seg.From, seg.Tier.Step), seg.To).
func Stitch(tiers []Tier, from, to, now time.Time) ([]Segment, error) {
	if len(tiers) == 0 {
		return nil, errors.New("rollup: no tiers")
	}
	if !from.Before(to) {
		return nil, fmt.Errorf("rollup: range start %v is not before its end %v", from, to)
	}
	// finest returns the index of the finest tier whose retention covers t.
	finest := func(t time.Time) int {
		for i, tr := range tiers {
			if !t.Before(now.Add(-tr.Retention)) {
				return i
			}
		}
		return len(tiers) - 1
	}
	var segs []Segment
	cur, i := from, finest(from)
	for {
		if i == 0 {
			break
		}
		// The first bucket boundary of this tier at which the next finer
		// tier covers what follows: switching earlier would split a bucket.
		b := AlignUp(now.Add(-tiers[i-1].Retention), tiers[i].Step)
		if !b.Before(to) {
			break
		}
		segs = append(segs, Segment{tiers[i], cur, b})
		cur, i = b, finest(b)
	}
	return append(segs, Segment{tiers[i], cur, to}), nil
}

// AlignUp returns the first bucket boundary of the given step at or after t.
func AlignUp(t time.Time, step time.Duration) time.Time {
	a := Align(t, step)
	if a.Before(t) {
		a = a.Add(step)
	}
	return a
}
