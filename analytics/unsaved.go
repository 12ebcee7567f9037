package analytics

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/journal"
	"github.com/linkgate/linkgate/visitor"
)

// view is what a read copied, under f.mu, of the counts of one key that
// are not in the store yet: those in memory, and the bounds of the
// journal's records to scan for the rest.
type view struct {
	key      string
	counts   []Count // in the recorder (per minute) and in the queue
	j        *spool  // nil: nothing waits in the journal
	from, to journal.Pos
	version  uint64
	busy     bool // a Write was in progress when v was copied
	dim      visitor.Dim
	dims     []DimCount // of dimView: in the recorder and in the queue
}

// lockForView takes f.mu for a read's view, once a Write in progress, if
// any, has returned or readWait has passed (see Reader).
func (f *Flusher) lockForView(ctx context.Context) {
	f.mu.Lock()
	if in := f.writing; in != nil {
		f.mu.Unlock()
		t := time.NewTimer(readWait)
		select {
		case <-in.done:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		f.mu.Lock()
	}
}

// view copies what a read of key needs of the unsaved counts.
func (f *Flusher) view(ctx context.Context, key string) view {
	f.lockForView(ctx)
	defer f.mu.Unlock()
	v := view{key: key, version: f.version, busy: f.writing != nil}
	f.rec.visits(key, func(c minuteCount) {
		v.counts = append(v.counts, Count{Key: key, Step: time.Minute, Start: time.Unix(c.minute*60, 0).UTC(), Visits: c.Visits})
	})
	for _, iv := range f.queue {
		cs := iv.b.Counts // sorted by key
		i, _ := slices.BinarySearchFunc(cs, key, func(c Count, k string) int { return strings.Compare(c.Key, k) })
		for ; i < len(cs) && cs[i].Key == key; i++ {
			v.counts = append(v.counts, cs[i])
		}
	}
	if f.j.waiting() {
		v.j, v.from, v.to = f.j, f.j.j.Acked(), f.j.j.End()
	}
	return v
}

// moved says whether counts may have moved between the store and the
// unsaved places since v was copied, so that a store read made meanwhile
// may hold some of v's counts, or miss some: a Write began or returned, or
// was in progress then (its batch may be in the store in part).
func (f *Flusher) moved(v view) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return v.busy || f.version != v.version
}

// scan calls each with every count of v, those in the journal streamed
// from disk without f.mu (memory stays bounded; a read during an outage
// pays a scan of the journal). Steps are those of the tiers the counts
// are in (a fold or an old count puts some in a coarser tier); starts are
// UTC bucket starts.
func (f *Flusher) scan(v view, each func(step time.Duration, start time.Time, c Visits)) {
	for _, c := range v.counts {
		each(c.Step, c.Start, c.Visits)
	}
	if v.j == nil {
		return
	}
	if err := v.j.eachIn(v.from, v.to, v.key, each); err != nil {
		f.log.Error("analytics: journal unreadable: a read misses its counts", "key", v.key, "err", err)
	}
}

// backlog returns the state of the counts waiting for the store: the
// journal's bytes on disk, the oldest bucket start among the batches
// waiting (zero when none wait: the recorder's current interval is not
// backlog), and the visits dropped since the start. Safe for concurrent
// use, and it never waits for a write in progress: health checks call it.
func (f *Flusher) backlog() (journalBytes int64, oldest time.Time, dropped uint64) {
	if j := f.jopen.Load(); j != nil {
		journalBytes = j.Bytes()
	}
	if ns := f.oldestNS.Load(); ns != 0 {
		oldest = time.Unix(0, ns).UTC()
	}
	return journalBytes, oldest, f.droppedN.Load()
}

// noteBacklogLocked updates what backlog reports. Called with f.mu held
// whenever batches move.
func (f *Flusher) noteBacklogLocked() {
	var oldest time.Time
	if f.j != nil {
		oldest = f.j.oldest
	}
	if len(f.queue) > 0 {
		if t := batchOldest(&f.queue[0].b); oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	ns := int64(0)
	if !oldest.IsZero() {
		ns = oldest.UnixNano()
	}
	f.oldestNS.Store(ns)
	d := f.dropped
	if f.j != nil {
		d += f.j.dropped
	}
	f.droppedN.Store(d)
}

// dimView is view for a read of key's breakdown by dim: the values in
// memory and the bounds of the journal.
func (f *Flusher) dimView(ctx context.Context, key string, dim visitor.Dim) view {
	f.lockForView(ctx)
	defer f.mu.Unlock()
	v := view{key: key, version: f.version, busy: f.writing != nil, dim: dim}
	f.rec.dimsOf(key, dim, func(day int32, value string, n int64) {
		v.dims = append(v.dims, DimCount{Key: key, Dim: dim, Day: time.Unix(int64(day)*86400, 0).UTC(), Value: value, N: n})
	})
	for _, iv := range f.queue {
		ds := iv.b.Dims // sorted by key, then dim
		i, _ := slices.BinarySearchFunc(ds, key, func(d DimCount, k string) int { return strings.Compare(d.Key, k) })
		for ; i < len(ds) && ds[i].Key == key; i++ {
			if ds[i].Dim == dim {
				v.dims = append(v.dims, ds[i])
			}
		}
	}
	if f.j.waiting() {
		v.j, v.from, v.to = f.j, f.j.j.Acked(), f.j.j.End()
	}
	return v
}

// scanDims calls each with every dimension count of v, those in the
// journal streamed from disk without f.mu.
func (f *Flusher) scanDims(v view, each func(DimCount)) {
	for _, d := range v.dims {
		each(d)
	}
	if v.j == nil {
		return
	}
	err := v.j.j.Scan(v.from, func(end journal.Pos, rec []byte) error {
		if v.to.Less(end) {
			return errStopScan
		}
		return scanRecord(rec, v.key, recordScan{dims: func(d DimCount) {
			if d.Dim == v.dim {
				each(d)
			}
		}})
	})
	if err != nil && err != errStopScan {
		f.log.Error("analytics: journal unreadable: a read misses its counts", "key", v.key, "err", err)
	}
}

// uniqView copies, under f.mu, key's sketches not in the store yet (in the
// recorder and the queue) merged into sk, and the bounds of the journal.
// Sketches merge idempotently, so a sketch seen both here and in the store
// counts once: a read needs no retry.
func (f *Flusher) uniqView(key string, lo, hi int32, sk *hll.Sketch) view {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rec.uniqOf(key, func(day int32, s *hll.Sketch) {
		if day >= lo && day < hi {
			sk.Merge(s)
		}
	})
	for _, iv := range f.queue {
		for _, u := range iv.b.Uniques {
			if d := unixDay(u.Day); u.Key == key && d >= lo && d < hi {
				sk.MergeBinary(u.Sketch)
			}
		}
	}
	v := view{key: key}
	if f.j.waiting() {
		v.j, v.from, v.to = f.j, f.j.j.Acked(), f.j.j.End()
	}
	return v
}

// scanUniques merges into sk the sketches of v's key in the journal.
func (f *Flusher) scanUniques(v view, lo, hi int32, sk *hll.Sketch) {
	if v.j == nil {
		return
	}
	err := v.j.j.Scan(v.from, func(end journal.Pos, rec []byte) error {
		if v.to.Less(end) {
			return errStopScan
		}
		return scanRecord(rec, v.key, recordScan{uniques: func(u UniqueSketch) {
			if d := unixDay(u.Day); d >= lo && d < hi {
				sk.MergeBinary(u.Sketch)
			}
		}})
	})
	if err != nil && err != errStopScan {
		f.log.Error("analytics: journal unreadable: a read misses its counts", "key", v.key, "err", err)
	}
}
