package analytics

import (
	"context"
	"slices"
	"time"

	"github.com/linkgate/linkgate/rollup"
)

// Reader returns a Reader that answers from store exactly, as NewReader
// does, plus the counts f has not written yet: those still in the recorder
// and those kept from failed writes. So a visit shows up at once, not only
// after the next flush.
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
func (f *Flusher) Reader(store Source) Reader {
	return mergedReader{f, newReader(store, f.plan)}
}

type mergedReader struct {
	f     *Flusher
	store Reader
}

var _ Reader = mergedReader{}

func (r mergedReader) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]Point, error) {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	pts, err := r.store.Points(ctx, key, step, from, to)
	if err != nil {
		return nil, err
	}
	mem := make(map[int64]Visits)
	add := func(start time.Time, v Visits) {
		if start.Before(from) || !start.Before(to) {
			return
		}
		s := start.Unix()
		old := mem[s]
		mem[s] = Visits{Human: old.Human + v.Human, Bot: old.Bot + v.Bot}
	}
	// Unsaved counts are in the finest tier (or, folded or too old for
	// it, a coarser one): each adds to the bucket of step holding it.
	r.f.unsaved(key, func(cstep time.Duration, start time.Time, v Visits) {
		if step >= cstep {
			add(rollup.Align(start, step), v)
		}
	})
	if len(mem) == 0 {
		return pts, nil
	}
	out := make([]Point, 0, len(pts)+len(mem))
	for _, p := range pts {
		s := p.Start.Unix()
		if v, ok := mem[s]; ok {
			p.Human += v.Human
			p.Bot += v.Bot
			delete(mem, s)
		}
		out = append(out, p)
	}
	for s, v := range mem {
		out = append(out, Point{Start: time.Unix(s, 0).UTC(), Visits: v})
	}
	slices.SortFunc(out, func(a, b Point) int { return a.Start.Compare(b.Start) })
	return out, nil
}

func (r mergedReader) Total(ctx context.Context, key string) (Visits, error) {
	r.f.mu.RLock()
	defer r.f.mu.RUnlock()
	v, err := r.store.Total(ctx, key)
	if err != nil {
		return Visits{}, err
	}
	r.f.unsaved(key, func(_ time.Duration, _ time.Time, c Visits) { v = v.Add(c) })
	return v, nil
}
