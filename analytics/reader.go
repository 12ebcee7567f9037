package analytics

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/linkgate/linkgate/rollup"
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

// NewReader returns a Reader that answers from s exactly, whatever the
// rollup worker has done so far. tiers is the retention setting, which
// must pass rollup.NewPlan (Config.Validate checks it); it panics
// otherwise.
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
// tier (rollup.TotalTier) over all time, read the same way. Both also read
// the key's marks (one small read) and the progress (at most once a
// second). The Reader is safe for concurrent use.
//
// One limit: a count flushed too late for the finest tier to keep it
// (rollup.Plan.Place, days after its visit) is stored in a coarser tier
// only, so it is read only where the rollup has got past its bucket. That
// is always so while the worker keeps up; a worker behind by the finest
// tier's retention loses data to the coarser tiers anyway, and shows it
// (see rollup.Worker).
func NewReader(s Source, tiers []rollup.Tier) Reader {
	p, err := rollup.NewPlan(tiers, 0)
	if err != nil {
		panic("analytics: NewReader: " + err.Error())
	}
	return newReader(s, p)
}

func newReader(s Source, p *rollup.Plan) *rolledReader { return &rolledReader{s: s, plan: p} }

type rolledReader struct {
	s    Source
	plan *rollup.Plan

	mu     sync.Mutex
	prog   rollup.Progress
	progAt time.Time // when prog was read, by the wall clock
}

var _ Reader = (*rolledReader)(nil)

func (r *rolledReader) progress(ctx context.Context) (rollup.Progress, error) {
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
		return nil, fmt.Errorf("analytics: read rollup progress: %w", err)
	}
	if p == nil {
		p = rollup.Progress{}
	}
	r.mu.Lock()
	if at.After(r.progAt) {
		r.prog, r.progAt = p, at
	}
	r.mu.Unlock()
	return p, nil
}

// state returns what a read of key needs besides the points.
func (r *rolledReader) state(ctx context.Context, key string) (rollup.Progress, []rollup.Mark, error) {
	prog, err := r.progress(ctx)
	if err != nil {
		return nil, nil, err
	}
	marks, err := r.s.Marks(ctx, key)
	if err != nil {
		return nil, nil, fmt.Errorf("analytics: read marks of %q: %w", key, err)
	}
	return prog, marks, nil
}

func (r *rolledReader) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]Point, error) {
	i, ok := r.plan.Level(step)
	if !ok {
		return nil, fmt.Errorf("analytics: points: step %v is not a tier", step)
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

func (r *rolledReader) Total(ctx context.Context, key string) (Visits, error) {
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
func (r *rolledReader) points(ctx context.Context, key string, i int, from, to time.Time, prog rollup.Progress, marks []rollup.Mark) ([]Point, error) {
	tiers := r.plan.Tiers()
	step := tiers[i].Step
	if i == 0 {
		pts, err := r.s.Points(ctx, key, step, from, to)
		if err != nil {
			return nil, fmt.Errorf("analytics: points of %q at %v: %w", key, step, err)
		}
		return pts, nil
	}
	// The buckets asked for start in [lo, hi), both bucket boundaries.
	lo, hi := rollup.AlignUp(from, step), rollup.AlignUp(to, step)
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
			if s := rollup.Align(m.Start, step); !s.Before(lo) && s.Before(rolled) {
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
				return nil, fmt.Errorf("analytics: points of %q at %v: %w", key, step, err)
			}
			out = append(out, pts...)
			continue
		}
		pts, err := r.points(ctx, key, i-1, sg.from, sg.to, prog, marks)
		if err != nil {
			return nil, err
		}
		for _, p := range pts {
			start := rollup.Align(p.Start, step)
			if n := len(out); n > 0 && out[n-1].Start.Equal(start) {
				out[n-1].Visits = out[n-1].Visits.Add(p.Visits)
				continue
			}
			out = append(out, Point{Start: start, Visits: p.Visits})
		}
	}
	return out, nil
}
