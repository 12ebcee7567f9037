package analytics

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/linkgate/linkgate/rollup"
)

// ErrUnsavedOnly is matched (errors.Is) by the errors of a Flusher's Reader
// when its store could not be read. The Points or Total returned beside
// such an error are not nothing: they are the counts the Flusher holds and
// has not stored yet (see Flusher.Reader), which the stats API serves as a
// partial answer. The error also wraps the store's.
var ErrUnsavedOnly = errors.New("analytics: store not read: unsaved counts only")

// unsavedOnly is the error of a merged read whose store read failed.
type unsavedOnly struct{ err error }

func (e unsavedOnly) Error() string {
	return "analytics: store not read, unsaved counts only: " + e.err.Error()
}
func (e unsavedOnly) Unwrap() error        { return e.err }
func (e unsavedOnly) Is(target error) bool { return target == ErrUnsavedOnly }

// Reader reads link analytics as the stats API serves them: every tier of
// the store complete, whatever the rollup has done so far (a
// rollup.Reader), plus the counts a Flusher has not written yet. Get one
// from Flusher.Reader or Pipeline.Reader; it is safe for concurrent use.
type Reader struct {
	f     *Flusher
	store *rollup.Reader
}

// Reader returns a Reader that answers from store exactly, as a
// rollup.Reader does, plus the counts f has not written yet: those still in the recorder
// and those kept from failed writes (Flusher.unsaved). So a visit shows up
// at once, not only after the next flush.
//
// A read holds f's lock for reading while it reads the recorder, the
// queued batches, the journal and the store; a flush holds it for writing from taking the
// recorder's counts until its Write returned and the written counts left
// memory. So a read sees each count in one place only — before a flush's
// Write or after it, never both or neither — at the price of waiting for a
// Write in progress. What a read cannot see: a journal left by an earlier
// run before the flush loop has opened it, and the part a failed Write may
// have applied before its retry (a store can be ahead until then; the stores' idempotent
// retries keep the stored result right).
//
// When the store cannot be read, Points and Total return the unsaved
// counts alone (Points only the buckets holding some) with an error
// matching ErrUnsavedOnly: less than the truth, but not nothing, and
// read under the same lock, so still never a count twice.
func (f *Flusher) Reader(store rollup.Source) *Reader {
	return &Reader{f, rollup.NewReader(store, f.plan)}
}

// Points returns the buckets of key in the tier of the given step whose
// Start lies in [from, to), in time order; buckets without visits may be
// left out. See Flusher.Reader for its errors.
func (r *Reader) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]Point, error) {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	pts, err := r.store.Points(ctx, key, step, from, to)
	mem := r.unsavedPoints(key, step, from, to)
	if err != nil {
		pts = nil
	}
	if len(mem) > 0 {
		pts = mergePoints(pts, mem)
	}
	if err != nil {
		return pts, unsavedOnly{err}
	}
	return pts, nil
}

// unsavedPoints returns key's unsaved counts by the start of their bucket
// of step, for the buckets starting in [from, to). A count kept in a tier
// coarser than step (folded at the journal's cap) cannot be split into step's
// buckets and is left out. Call it with f.mu held.
func (r *Reader) unsavedPoints(key string, step time.Duration, from, to time.Time) map[int64]Visits {
	mem := make(map[int64]Visits)
	r.f.unsaved(key, func(s time.Duration, start time.Time, v Visits) {
		if step < s {
			return
		}
		b := rollup.Align(start, step)
		if b.Before(from) || !b.Before(to) {
			return
		}
		mem[b.Unix()] = mem[b.Unix()].Add(v)
	})
	return mem
}

// mergePoints adds mem's counts to the points of their buckets in pts,
// appending those of buckets pts lacks, and returns the points in time
// order.
func mergePoints(pts []Point, mem map[int64]Visits) []Point {
	out := make([]Point, 0, len(pts)+len(mem))
	for _, p := range pts {
		s := p.Start.Unix()
		if v, ok := mem[s]; ok {
			p.Visits = p.Visits.Add(v)
			delete(mem, s)
		}
		out = append(out, p)
	}
	for s, v := range mem {
		out = append(out, Point{Start: time.Unix(s, 0).UTC(), Visits: v})
	}
	slices.SortFunc(out, func(a, b Point) int { return a.Start.Compare(b.Start) })
	return out
}

// Total returns key's all-time visits. See Flusher.Reader for its errors.
func (r *Reader) Total(ctx context.Context, key string) (Visits, error) {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	v, err := r.store.Total(ctx, key)
	if err != nil {
		v = Visits{}
	}
	r.f.unsaved(key, func(_ time.Duration, _ time.Time, c Visits) { v = v.Add(c) })
	if err != nil {
		return v, unsavedOnly{err}
	}
	return v, nil
}
