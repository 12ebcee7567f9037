package rollup

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// progressTTL is how long a Reader reuses the rollup progress it read. A
// progress read earlier is never ahead of the truth (progress only moves
// forward), and being behind only makes a read answer more from the finer
// tiers, so reusing it is always exact.
const progressTTL = time.Second

// The range Total sums the all-time tier over: every bucket there can be.
var (
	beginning = time.Unix(0, 0).UTC()
	endOfTime = time.Unix(1<<37, 0).UTC() // about the year 6325
)

// Source is what a Reader reads from a store: what each tier holds now,
// how far the rollup has got and which rolled buckets are stale. Every
// Store is one.
type Source interface {
	// Points returns the stored buckets of key in the tier of the given
	// step whose start lies in [from, to), in time order, each the sum of
	// all that is stored for it: those of a coarse tier are complete only
	// where the rollup has got to (Progress) and no Mark says otherwise.
	// The all-time tier (TotalTier) is one of the tiers.
	Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]Point, error)
	// Progress returns how far the rollup has got.
	Progress(ctx context.Context) (Progress, error)
	// Marks returns key's marks, in any order.
	Marks(ctx context.Context, key string) ([]Mark, error)
}

// Reader reads every tier of a Source exactly, whatever the Worker has
// done so far: it is the read half of the rule the Worker keeps, "a
// bucket of a coarse tier is complete once the worker has got past its
// period and no mark says it is stale". It is safe for concurrent use.
// Build one with NewReader.
//
// A bucket of a coarse tier is read from that tier when the rollup has got
// past it (Source.Progress) and no mark on it or on a finer bucket inside
// it says it is stale (Source.Marks); every other bucket is summed from the
// next finer tier, read the same way, down to the finest tier, which the
// flushes write and which is always complete. Points reads one range of
// the tier asked for, plus one per stretch of stale buckets and one for
// the part not rolled yet, in each finer tier it goes down to; with the
// default tiers and a worker keeping up, a year's daily curve reads the day
// tier, the last week or less of hours, the last day or less of 5 minutes
// and the last hour or less of minutes. Total is the sum of the all-time
// tier (TotalTier) over all time, read the same way. Both also read the
// key's marks (one small read) and the progress (at most once a second).
//
// One limit: a count flushed too late for the finest tier to keep it
// (Plan.Place, days after its visit) is stored in a coarser tier only, so
// it is read only where the rollup has got past its bucket. That is always
// so while the worker keeps up; a worker behind by the finest tier's
// retention loses data to the coarser tiers anyway, and shows it (see
// Worker).
type Reader struct {
	s    Source
	plan *Plan

	mu     sync.Mutex
	prog   Progress
	progAt time.Time // when prog was read, by the wall clock
}

// NewReader returns the Reader of s, whose tiers are plan's.
func NewReader(s Source, plan *Plan) *Reader { return &Reader{s: s, plan: plan} }

func (r *Reader) progress(ctx context.Context) (Progress, error) {
	r.mu.Lock()
	if r.prog != nil && time.Since(r.progAt) < progressTTL {
		p := r.prog
		r.mu.Unlock()
		return p, nil
	}
	r.mu.Unlock()
	at := time.Now()
	p, err := r.s.Progress(ctx)
	if err != nil {
		return nil, fmt.Errorf("rollup: read progress: %w", err)
	}
	if p == nil {
		p = Progress{}
	}
	r.mu.Lock()
	if at.After(r.progAt) {
		r.prog, r.progAt = p, at
	}
	r.mu.Unlock()
	return p, nil
}

// state returns what a read of key needs besides the points.
func (r *Reader) state(ctx context.Context, key string) (Progress, []Mark, error) {
	prog, err := r.progress(ctx)
	if err != nil {
		return nil, nil, err
	}
	marks, err := r.s.Marks(ctx, key)
	if err != nil {
		return nil, nil, fmt.Errorf("rollup: read marks of %q: %w", key, err)
	}
	return prog, marks, nil
}

// Points returns the buckets of key in the tier of the given step whose
// Start lies in [from, to), in time order, each complete. Buckets without
// visits may be left out.
func (r *Reader) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]Point, error) {
	i, ok := r.plan.Level(step)
	if !ok {
		return nil, fmt.Errorf("rollup: points: step %v is not a tier", step)
	}
	if !from.Before(to) {
		return nil, nil
	}
	prog, marks, err := r.state(ctx, key)
	if err != nil {
		return nil, err
	}
	return r.points(ctx, key, i, from, to, prog, marks)
}

// Total returns key's all-time visits.
func (r *Reader) Total(ctx context.Context, key string) (Visits, error) {
	prog, marks, err := r.state(ctx, key)
	if err != nil {
		return Visits{}, err
	}
	pts, err := r.points(ctx, key, len(r.plan.Tiers())-1, beginning, endOfTime, prog, marks)
	if err != nil {
		return Visits{}, err
	}
	var v Visits
	for _, p := range pts {
		v = v.Add(p.Visits)
	}
	return v, nil
}

// segment is a stretch [from, to) of buckets of one tier, aligned, read
// from that tier (fresh) or summed from the finer one.
type segment struct {
	from, to time.Time
	fresh    bool
}

// points returns the buckets of tier i whose start lies in [from, to).
func (r *Reader) points(ctx context.Context, key string, i int, from, to time.Time, prog Progress, marks []Mark) ([]Point, error) {
	tiers := r.plan.Tiers()
	step := tiers[i].Step
	if i == 0 {
		pts, err := r.s.Points(ctx, key, step, from, to)
		if err != nil {
			return nil, fmt.Errorf("rollup: points of %q at %v: %w", key, step, err)
		}
		return pts, nil
	}
	// The buckets asked for start in [lo, hi), both bucket boundaries.
	lo, hi := AlignUp(from, step), AlignUp(to, step)
	if !lo.Before(hi) {
		return nil, nil
	}
	rolled := prog.Done(step) // buckets before it are rolled
	if rolled.Before(lo) {
		rolled = lo
	} else if rolled.After(hi) {
		rolled = hi
	}
	var stale []time.Time
	for _, m := range marks {
		if j, ok := r.plan.Level(m.Step); ok && j >= 1 && j <= i {
			if s := Align(m.Start, step); !s.Before(lo) && s.Before(rolled) {
				stale = append(stale, s)
			}
		}
	}
	slices.SortFunc(stale, time.Time.Compare)
	stale = slices.CompactFunc(stale, time.Time.Equal)
	var segs []segment
	cur := lo
	for _, s := range stale {
		if s.After(cur) {
			segs = append(segs, segment{cur, s, true})
		}
		if n := len(segs); n > 0 && !segs[n-1].fresh && segs[n-1].to.Equal(s) {
			segs[n-1].to = s.Add(step) // adjacent stale buckets: one read
		} else {
			segs = append(segs, segment{s, s.Add(step), false})
		}
		cur = s.Add(step)
	}
	if cur.Before(rolled) {
		segs = append(segs, segment{cur, rolled, true})
		cur = rolled
	}
	if cur.Before(hi) {
		if n := len(segs); n > 0 && !segs[n-1].fresh {
			segs[n-1].to = hi
		} else {
			segs = append(segs, segment{cur, hi, false})
		}
	}
	var out []Point
	for _, sg := range segs {
		if sg.fresh {
			pts, err := r.s.Points(ctx, key, step, sg.from, sg.to)
			if err != nil {
				return nil, fmt.Errorf("rollup: points of %q at %v: %w", key, step, err)
			}
			out = append(out, pts...)
			continue
		}
		pts, err := r.points(ctx, key, i-1, sg.from, sg.to, prog, marks)
		if err != nil {
			return nil, err
		}
		for _, p := range pts {
			start := Align(p.Start, step)
			if n := len(out); n > 0 && out[n-1].Start.Equal(start) {
				out[n-1].Visits = out[n-1].Visits.Add(p.Visits)
				continue
			}
			out = append(out, Point{Start: start, Visits: p.Visits})
		}
	}
	return out, nil
}
