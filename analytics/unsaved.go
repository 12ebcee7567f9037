package analytics

import "time"

// unsaved calls each for every count of key that f holds and the store has
// not acknowledged: the recorder's counts since the last flush (step
// time.Minute, start the minute) and those kept from failed writes (in the
// tier they were counted in: the finest, or another for counts from a spill
// file of an earlier configuration). Key AllLinks gives those of all links
// together. Call it with f.mu held for reading (or writing), so that no
// count moves between these places and the store during the walk: each is
// then seen in exactly one place (see Reader).
//
// It is the one place that knows where unsaved counts live; the merged
// Reader and the stats API's partial answers only go through it.
func (f *Flusher) unsaved(key string, each func(step time.Duration, start time.Time, v Visits)) {
	if lc := f.pending.links[key]; lc != nil {
		lc.each(func(k bucketKey, v Visits) {
			each(k.step, time.Unix(k.start, 0).UTC(), v)
		})
	}
	f.rec.visits(key, func(c minuteCount) {
		each(time.Minute, time.Unix(c.minute*60, 0).UTC(), c.Visits)
	})
}

// backlog returns what f holds that the store does not have yet: the bytes
// of its journal on disk, the start of the oldest bucket waiting (zero
// when none, or when a write in progress holds the counts: a health
// request must not wait for a slow store), and the visits dropped since
// start. Safe for concurrent use.
//
// This version knows no journal and drops nothing: it reports 0 for both
// and scans the pending counts for the oldest.
func (f *Flusher) backlog() (journalBytes int64, oldest time.Time, dropped uint64) {
	if !f.mu.TryRLock() {
		return 0, time.Time{}, 0
	}
	defer f.mu.RUnlock()
	for _, lc := range f.pending.links {
		lc.each(func(k bucketKey, _ Visits) {
			if t := time.Unix(k.start, 0).UTC(); oldest.IsZero() || t.Before(oldest) {
				oldest = t
			}
		})
	}
	return 0, oldest, 0
}
