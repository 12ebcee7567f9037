package analytics

import (
	"context"
	"time"

	"github.com/linkgate/linkgate/rollup"
)

// AllLinks is the key under which visits to all links together are stored.
// No short_key can be "/": a path segment never contains a slash.
const AllLinks = "/"

// Visits is a count of human visits and, counted apart, of known bots and
// link-preview fetchers. It is rollup.Visits, which moves counts between
// tiers.
type Visits = rollup.Visits

// Point is the visits of one bucket: rollup.Point.
type Point = rollup.Point

// Count is visits to add to one bucket of one tier for one link.
type Count struct {
	Key   string        // short_key, or AllLinks
	Step  time.Duration // the tier's step: names the tier
	Start time.Time     // the bucket's start, UTC, aligned by rollup (weeks start Monday)
	Visits
}

// Batch is what one flush writes: the visits of every link visited since
// the last successful flush in its finest-tier buckets (per minute), or in
// a coarser tier for the odd count too old for the finest one to keep
// (rollup.Plan.Place); and what the rollup worker needs to find them: an
// Active entry for each (link, batch period) with new data, not yet
// announced by this process, or a Mark on the coarser bucket of data that
// arrives after its period may have been rolled (rollup.Plan.Late).
// Coarser tiers and all-time totals are not written by flushes: the
// rollup worker derives them.
type Batch struct {
	At     time.Time // when the flush was made; the Cassandra store pins write timestamps to it
	Counts []Count
	Active []rollup.Active
	Marks  []rollup.Mark
}

// Writer stores flushed counts. It is what the flusher needs from a store.
type Writer interface {
	// Write stores b and returns nil only once all of it is durable. The
	// Active entries and Marks must be durable no later than the counts
	// (a crash must not leave counts the worker is never told of). After
	// an error the flusher keeps b's counts and sends them again, merged
	// into a later batch with a later At; a store must not count twice
	// what a failed Write applied in part, nor what a retry of an
	// acknowledged write carries again.
	Write(ctx context.Context, b Batch) error
}

// Reader reads link analytics as the stats API serves them: every tier
// complete, whatever the rollup has done so far. NewReader makes one from
// a store's Source; Flusher.Reader adds the counts not flushed yet.
type Reader interface {
	// Points returns the buckets of key in the tier of the given step whose
	// Start lies in [from, to), in time order. Buckets without visits may be
	// left out. It reads a bounded number of partitions or iterator ranges
	// however long the range.
	Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]Point, error)
	// Total returns key's all-time visits.
	Total(ctx context.Context, key string) (Visits, error)
}

// Source is what a store offers for reading: what each tier holds now, how
// far the rollup has got and which rolled buckets are stale. NewReader
// turns it into a Reader.
type Source interface {
	// Points returns the stored buckets of key in the tier of the given
	// step whose start lies in [from, to), in time order, each the sum of
	// all that is stored for it: those of a coarse tier are complete only
	// where the rollup has got to (Progress) and no Mark says otherwise.
	// The all-time tier (rollup.TotalTier) is one of the tiers.
	Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]Point, error)
	// Progress returns how far the rollup has got.
	Progress(ctx context.Context) (rollup.Progress, error)
	// Marks returns key's marks.
	Marks(ctx context.Context, key string) ([]rollup.Mark, error)
}

// Store is an analytics backend as the gateway holds it: the flusher
// writes to it, the stats API reads from it (through NewReader), the
// rollup worker rolls it (it is a rollup.Store too), and the Pipeline that
// owns it closes it last. A Store starts its own background work
// (connecting, expiring old buckets) when it is opened and stops it in
// Close. The embedded and Cassandra stores implement it.
type Store interface {
	Writer
	Source
	rollup.Store
	// Close stops the store's background work and releases it. The
	// Pipeline calls it once, after the final flush.
	Close() error
}
