package analytics

import "time"

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
