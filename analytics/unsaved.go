package analytics

import (
	"slices"
	"strings"
	"time"
)

// unsaved calls each with every count of key not in the store yet: those
// in the recorder (per minute), in the batches queued in memory and in the
// journal (streamed from disk: memory stays bounded, and a read during an
// outage pays a scan of the journal). Called with f.mu held for reading,
// so that no count moves meanwhile: each is seen in exactly one place.
// Steps are those of the tiers the counts are in (a fold or an old count
// puts some in a coarser tier); starts are UTC bucket starts.
func (f *Flusher) unsaved(key string, each func(step time.Duration, start time.Time, v Visits)) {
	f.rec.visits(key, func(c minuteCount) {
		each(time.Minute, time.Unix(c.minute*60, 0).UTC(), c.Visits)
	})
	for _, iv := range f.queue {
		cs := iv.b.Counts // sorted by key
		i, _ := slices.BinarySearchFunc(cs, key, func(c Count, k string) int { return strings.Compare(c.Key, k) })
		for ; i < len(cs) && cs[i].Key == key; i++ {
			each(cs[i].Step, cs[i].Start, cs[i].Visits)
		}
	}
	if err := f.j.each(key, each); err != nil {
		f.log.Error("analytics: journal unreadable: a read misses its counts", "key", key, "err", err)
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
// for writing whenever batches move.
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
