package analytics

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
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
	dims  DimSource // nil when the store keeps none
}

// readWait bounds how long a read waits for a Write in progress to return
// before it copies the unsaved counts: a store may show part of a batch
// before its Write returns, which the read would count twice. A store
// that takes longer hangs, and the read goes on without it.
const readWait = 100 * time.Millisecond

// readTries is how many times a read tries to read the store while no
// count moves (no Write begins or returns, the journal is not acked or
// folded). The last try keeps Writes from beginning while it reads (see
// Flusher.gate): a read cannot lose to a writer that writes back to back
// (a replay) forever.
const readTries = 4

// Reader returns a Reader that answers from store exactly, as a
// rollup.Reader does, plus the counts f has not written yet: those still
// in the recorder and those kept from failed writes, in memory or in the
// journal. So a visit shows up at once, not only after the next flush.
//
// A read never holds up a flush, nor a flush a read, however long the
// store takes: the read copies what it needs of the counts in memory, and
// the bounds of the journal's part, under f's lock, which moves of counts
// hold only briefly and a store's Write never, then reads the store and
// scans the journal without it, and starts again (up to readTries times)
// when f says counts moved between the store and the unsaved places
// meanwhile; its last try keeps new Writes from beginning while it reads
// (a replay writing back to back would otherwise always move counts), for
// as long as the read takes, which its context bounds. So it sees each
// count in one place only, never in both or neither. What it cannot see: a journal left by an earlier run before the
// flush loop has opened it; and a Write still going on past readWait (a
// store that hangs) may have applied part of its batch, which a read then
// counts twice until it returns, as it may when a failed Write applied
// part of a batch before its retry (the stores' idempotent retries keep
// the stored result right).
//
// When the store cannot be read, Points and Total return the unsaved
// counts alone (Points only the buckets holding some) with an error
// matching ErrUnsavedOnly: less than the truth, but not nothing, and
// never a count twice.
func (f *Flusher) Reader(store rollup.Source) *Reader {
	dims, _ := store.(DimSource)
	return &Reader{f, rollup.NewReader(store, f.plan), dims}
}

// Points returns the buckets of key in the tier of the given step whose
// Start lies in [from, to), in time order; buckets without visits may be
// left out. See Flusher.Reader for its errors.
func (r *Reader) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]Point, error) {
	for try := 1; ; try++ {
		last := r.f.lastTry(try)
		v := r.f.view(ctx, key)
		pts, err := r.store.Points(ctx, key, step, from, to)
		last()
		if try < readTries && ctx.Err() == nil && r.f.moved(v) {
			continue
		}
		mem := make(map[int64]Visits)
		// A count kept in a tier coarser than step (folded at the
		// journal's cap) cannot be split into step's buckets: left out.
		r.f.scan(v, func(s time.Duration, start time.Time, c Visits) {
			if step < s {
				return
			}
			if b := rollup.Align(start, step); !b.Before(from) && b.Before(to) {
				mem[b.Unix()] = mem[b.Unix()].Add(c)
			}
		})
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
}

// lastTry holds back the beginning of Writes when try is a read's last,
// until the func it returns is called.
func (f *Flusher) lastTry(try int) (done func()) {
	if try < readTries {
		return func() {}
	}
	f.gate.RLock()
	return f.gate.RUnlock
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
	for try := 1; ; try++ {
		last := r.f.lastTry(try)
		v := r.f.view(ctx, key)
		total, err := r.store.Total(ctx, key)
		last()
		if try < readTries && ctx.Err() == nil && r.f.moved(v) {
			continue
		}
		if err != nil {
			total = Visits{}
		}
		r.f.scan(v, func(_ time.Duration, _ time.Time, c Visits) { total = total.Add(c) })
		if err != nil {
			return total, unsavedOnly{err}
		}
		return total, nil
	}
}

// ErrNoDims is returned by Reader.Dims when the store keeps no
// breakdowns.
var ErrNoDims = errors.New("analytics: the store keeps no breakdowns")

// Dims returns key's visits per value of dim over the UTC days whose start
// lies in [from, to), the store's and those not written yet, sorted by
// count, largest first. See Flusher.Reader for its errors.
func (r *Reader) Dims(ctx context.Context, key string, dim visitor.Dim, from, to time.Time) ([]DimValue, error) {
	if r.dims == nil {
		return nil, ErrNoDims
	}
	lo, hi := rollup.AlignUp(from, rollup.Day), rollup.AlignUp(to, rollup.Day)
	for try := 1; ; try++ {
		last := r.f.lastTry(try)
		v := r.f.dimView(ctx, key, dim)
		vals, err := r.dims.Dims(ctx, key, dim, from, to)
		last()
		if try < readTries && ctx.Err() == nil && r.f.moved(v) {
			continue
		}
		if err != nil {
			vals = nil
		}
		r.f.scanDims(v, func(d DimCount) {
			if !d.Day.Before(lo) && d.Day.Before(hi) {
				vals = append(vals, DimValue{d.Value, d.N})
			}
		})
		vals = sumDims(vals)
		if err != nil {
			return vals, unsavedOnly{err}
		}
		return vals, nil
	}
}

// Top returns the n links with the most human visits over the UTC days
// whose start lies in [from, to), the store's and those not written yet,
// most visited first (ties by key). A link with visits not written yet
// joins the store's top n when its visits could lift it there: its stored
// visits are read (TopCounts) and added. See Flusher.Reader for its
// errors; with the store unreadable, the list is of the unsaved visits.
func (r *Reader) Top(ctx context.Context, from, to time.Time, n int) ([]TopLink, error) {
	return r.top(ctx, "", from, to, n)
}

// TenantTop is Top over the links of tenant alone (their TenantKeys).
func (r *Reader) TenantTop(ctx context.Context, tenant string, from, to time.Time, n int) ([]TopLink, error) {
	return r.top(ctx, tenant, from, to, n)
}

// top is Top over the links of tenant ("": every link).
func (r *Reader) top(ctx context.Context, tenant string, from, to time.Time, n int) ([]TopLink, error) {
	ts, ok := r.f.w.(TopSource)
	if !ok {
		return nil, ErrNoDims
	}
	lo, hi := rollup.AlignUp(from, rollup.Day), rollup.AlignUp(to, rollup.Day)
	for try := 1; ; try++ {
		last := r.f.lastTry(try)
		v := r.f.dimView(ctx, AllLinks, DimLink)
		var top []TopLink
		var err error
		if tenant == "" {
			top, err = ts.Top(ctx, from, to, n)
		} else {
			top, err = ts.TenantTop(ctx, tenant, from, to, n)
		}
		unsaved := map[string]int64{}
		r.f.scanDims(v, func(d DimCount) {
			if t, _ := SplitKey(d.Value); (tenant == "" || t == tenant) && !d.Day.Before(lo) && d.Day.Before(hi) {
				unsaved[d.Value] += d.N
			}
		})
		var stored map[string]int64
		if err == nil && len(unsaved) > 0 {
			stored, err = r.topStored(ctx, ts, top, unsaved, from, to, n)
		}
		last()
		if try < readTries && ctx.Err() == nil && r.f.moved(v) {
			continue
		}
		if err != nil {
			top, stored = nil, nil
		}
		totals := make(map[string]int64, len(top)+len(stored))
		for _, l := range top {
			totals[l.Key] = l.Visits
		}
		for k, c := range stored {
			totals[k] = c
		}
		for k, c := range unsaved {
			if _, ok := totals[k]; ok || err != nil || len(top) < n {
				totals[k] += c // a link outside a short list has nothing stored
			}
		}
		out := make([]TopLink, 0, len(totals))
		for k, c := range totals {
			if c > 0 {
				out = append(out, TopLink{k, c})
			}
		}
		slices.SortFunc(out, CompareTop)
		out = out[:min(n, len(out))]
		if err != nil {
			return out, unsavedOnly{err}
		}
		return out, nil
	}
}

// topStored returns the stored visits of the links with unsaved visits
// that could lift them into the top n: those not in the store's top (top)
// whose unsaved visits exceed the n-th total's margin over the n-th
// stored count. A link outside top has at most that count stored.
func (r *Reader) topStored(ctx context.Context, ts TopSource, top []TopLink, unsaved map[string]int64, from, to time.Time, n int) (map[string]int64, error) {
	if len(top) < n {
		return nil, nil // every link with stored visits is in top
	}
	in := make(map[string]bool, len(top))
	totals := make([]int64, 0, len(top))
	for _, l := range top {
		in[l.Key] = true
		totals = append(totals, l.Visits+unsaved[l.Key])
	}
	slices.Sort(totals)
	threshold, nth := totals[len(totals)-n], top[n-1].Visits // the n-th total and stored count
	var keys []string
	for k, c := range unsaved {
		if !in[k] && nth+c >= threshold {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	return ts.TopCounts(ctx, keys, from, to)
}

// Uniques returns the union of key's unique-visitor sketches of the UTC
// days whose start lies in [from, to): the store's and those not written
// yet. See Flusher.Reader for its errors.
func (r *Reader) Uniques(ctx context.Context, key string, from, to time.Time) (*hll.Sketch, error) {
	us, ok := r.f.w.(UniqueSource)
	if !ok {
		return nil, ErrNoDims
	}
	lo, hi := unixDay(rollup.AlignUp(from, rollup.Day)), unixDay(rollup.AlignUp(to, rollup.Day))
	sk := new(hll.Sketch)
	v := r.f.uniqView(key, lo, hi, sk)
	stored, err := us.Uniques(ctx, key, from, to)
	if err == nil && stored != nil {
		sk.Merge(stored)
	}
	r.f.scanUniques(v, lo, hi, sk)
	if err != nil {
		return sk, unsavedOnly{err}
	}
	return sk, nil
}
