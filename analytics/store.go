package analytics

import (
	"context"
	"time"
)

// AllLinks is the key under which visits to all links together are stored.
// No short_key can be "/": a path segment never contains a slash.
const AllLinks = "/"

// Visits is a count of human visits and, counted apart, of known bots and
// link-preview fetchers.
type Visits struct {
	Human, Bot int64
}

// Count is visits to add to one bucket of one tier for one link.
type Count struct {
	Key   string        // short_key, or AllLinks
	Step  time.Duration // the tier's step: names the tier
	Start time.Time     // the bucket's start, UTC, aligned by rollup (weeks start Monday)
	Visits
}

// Total is visits to add to one link's all-time total.
type Total struct {
	Key string // short_key, or AllLinks
	Visits
}

// Batch is what one flush writes: for every link visited since the last
// successful flush, its counts in every tier and its all-time total.
type Batch struct {
	At     time.Time // when the flush was made; the Cassandra store pins write timestamps to it
	Counts []Count
	Totals []Total
}

// Writer stores flushed counts. It is what the flusher needs from a store.
type Writer interface {
	// Write stores b and returns nil only once all of it is durable. After
	// an error the flusher keeps b's counts and sends them again, merged
	// into a later batch with a later At; a store must not count twice
	// what a failed Write applied in part, nor what a retry of an
	// acknowledged write carries again.
	Write(ctx context.Context, b Batch) error
}

// Point is the visits of one stored bucket.
type Point struct {
	Start time.Time
	Visits
}

// Reader reads stored counts. It is what the stats API needs from a store.
type Reader interface {
	// Points returns the buckets of key in the tier of the given step whose
	// Start lies in [from, to), in time order. Buckets without visits may be
	// left out. It reads a bounded number of partitions or iterator ranges
	// however long the range.
	Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]Point, error)
	// Total returns key's all-time visits.
	Total(ctx context.Context, key string) (Visits, error)
}

// Store is an analytics backend as the gateway holds it: the flusher
// writes to it, the stats API reads from it, and the Pipeline that owns it
// closes it last. A Store starts its own background work (connecting,
// expiring old buckets) when it is opened and stops it in Close.
type Store interface {
	Writer
	Reader
	// Close stops the store's background work and releases it. The
	// Pipeline calls it once, after the final flush.
	Close() error
}
