package analytics

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"time"

	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
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

// Batch is what one flush writes: the visits of every link visited in one
// flush interval in its finest-tier buckets (per minute), or in
// a coarser tier for the odd count too old for the finest one to keep
// (rollup.Plan.Place); and what the rollup worker needs to find them: an
// Active entry for each (link, batch period) with new data, not yet
// announced by this process, or a Mark on the coarser bucket of data that
// arrives after its period may have been rolled (rollup.Plan.Late).
// Coarser tiers and all-time totals are not written by flushes: the
// rollup worker derives them.
//
// Writer and Seq are the batch's identity: every flush interval's counts
// are one batch, and Seq increases by one per interval of a Writer (an id
// new per process, kept with the batch in the journal). The flusher writes
// a Writer's batches in Seq order, each with its own Write, however often
// it has to try; a store applies each identity at most once. A Batch
// without a Writer has no identity: a store applies it every time.
//
// A batch that folds several intervals of a Writer that were never sent
// (the journal at its cap folds old counts into coarser buckets) covers
// the Seqs [First, Seq]; First is 0 (or Seq) for a batch of one interval.
// A store applies it only when none of those Seqs was applied: the
// flusher never folds an interval a store may have seen, so either all or
// none were.
type Batch struct {
	Writer string    // the flushing process's id; "" for none
	First  uint64    // the first Seq a folded batch covers; 0 for one interval
	Seq    uint64    // the interval's number in Writer's sequence, from 1 (the last one covered)
	At     time.Time // when the batch was placed in tiers; the Cassandra store pins write timestamps to it
	Counts []Count
	Active []rollup.Active
	Marks  []rollup.Mark
	// Dims are the interval's visits per link, UTC day, dimension and
	// value, sorted by link, dimension, day and value.
	Dims []DimCount
	// Uniques are the interval's unique-visitor sketches per link and UTC
	// day. A store merges each into what it holds (each register's
	// maximum), which is idempotent: they need no identity.
	Uniques []UniqueSketch
}

// UniqueSketch is a HyperLogLog sketch (package hll, encoded by
// Sketch.AppendBinary) of the visitor hashes of one link's human visits on
// one UTC day.
type UniqueSketch struct {
	Key    string
	Day    time.Time
	Sketch []byte
}

// UniqueSource reads unique visitors. Every Store is one.
type UniqueSource interface {
	// Uniques returns the union of key's sketches of the UTC days whose
	// start lies in [from, to), and how many days had one.
	Uniques(ctx context.Context, key string, from, to time.Time) (*hll.Sketch, error)
}

// DimCount is visits of one value of one dimension of one link on one UTC
// day: N are those of the batch, to add. Cum is the count of the same
// (link, day, dimension, value) in every batch of the writer's generation
// Gen so far, this one included: a store that keeps one row per writer
// overwrites it with Cum (Cassandra, under a writer id derived from
// Batch.Writer and Gen, with a write timestamp of Batch.At, which grows
// with Seq), so that a resent or replayed batch, or an older one landing
// late, never counts twice. A writer starts a new generation whenever it
// forgets the cumulative counts of some (link, day, dimension) (at the end
// of a day, or to bound its memory), so that a Cum never goes back within
// a generation.
type DimCount struct {
	Key   string      // short_key, or AllLinks
	Day   time.Time   // the UTC day's start
	Dim   visitor.Dim // which dimension
	Value string      // its value, or visitor.Other beyond the cap
	N     int64       // visits of this batch
	Cum   int64       // visits of the writer's generation so far, N included
	Gen   uint64      // the writer's generation of Cum
}

// DimLink is the dimension of AllLinks whose values are the links: a
// DimCount of it counts the human visits of the link named by its Value on
// its day. The flusher writes it for every link visited, uncapped, so that
// stores can answer the most visited links of a range (TopSource) from
// what flushes wrote, without reading every link's curve.
const DimLink = visitor.Links

// ValidDim reports whether a DimCount may name d: a dimension of visitor,
// or DimLink.
func ValidDim(d visitor.Dim) bool { return d < visitor.NumDims }

// TopLink is a link and its human visits over a range.
type TopLink struct {
	Key    string
	Visits int64
}

// CompareTop is the order of a top list: most visits first, ties by key.
func CompareTop(a, b TopLink) int {
	return cmp.Or(cmp.Compare(b.Visits, a.Visits), strings.Compare(a.Key, b.Key))
}

// TopSource answers the most visited links. Every Store is one.
type TopSource interface {
	// Top returns the n links with the most human visits over the UTC
	// days whose start lies in [from, to), most visited first (ties by
	// key), with their visits over those days.
	Top(ctx context.Context, from, to time.Time, n int) ([]TopLink, error)
	// TopCounts returns the human visits of each of keys over the same
	// days, as Top counts them (0 for a link without any).
	TopCounts(ctx context.Context, keys []string, from, to time.Time) (map[string]int64, error)
	// TenantTop is Top over the links of tenant (not "") alone: those
	// whose keys are its TenantKeys, returned as stored.
	TenantTop(ctx context.Context, tenant string, from, to time.Time, n int) ([]TopLink, error)
}

// DimValue is the visits of one value of a dimension over a range of days.
type DimValue struct {
	Value string
	Count int64
}

// DimSource reads breakdowns. Every Store is one.
type DimSource interface {
	// Dims returns key's visits per value of dim over the UTC days whose
	// start lies in [from, to), summed over days and writers, in no
	// particular order, leaving out values without visits.
	Dims(ctx context.Context, key string, dim visitor.Dim, from, to time.Time) ([]DimValue, error)
}

// FirstSeq returns the first Seq b covers: First, or Seq when First is 0.
func (b Batch) FirstSeq() uint64 {
	if b.First == 0 || b.First > b.Seq {
		return b.Seq
	}
	return b.First
}

// Writer stores flushed counts. It is what the flusher needs from a store.
type Writer interface {
	// Write stores b and returns nil only once all of it is durable. The
	// Active entries and Marks must be durable no later than the counts
	// (a crash must not leave counts the worker is never told of).
	//
	// A Write of an identity (Writer, Seq) that the store applied already
	// changes nothing, whichever process sends it: that is what makes a
	// retry after a lost answer, and a replay of the journal after a
	// crash, count every visit once. After a failed Write the flusher
	// sends the same identity with the same Counts and At again (Active
	// entries and marks may differ: storing one twice changes nothing),
	// so a store that can apply part of a batch must make the parts it
	// applied the same rows the retry overwrites. The flusher sends the
	// batches of one Writer in Seq order and sends a later one only once
	// the earlier ones were applied, so a store may keep per Writer the
	// highest Seq applied and skip any batch whose FirstSeq is not above it.
	Write(ctx context.Context, b Batch) error
}

// Store is an analytics backend as the gateway holds it: the flusher
// writes to it, the stats API reads from it (through a rollup.Reader and
// the flusher's Reader), the rollup worker rolls it (it is a rollup.Store),
// and the Pipeline that owns it closes it last. A Store starts its own background work
// (connecting, expiring old buckets) when it is opened and stops it in
// Close. The embedded and Cassandra stores implement it.
type Store interface {
	Writer
	rollup.Store
	DimSource
	TopSource
	UniqueSource
	// Close stops the store's background work and releases it. The
	// Pipeline calls it once, after the final flush.
	Close() error
}

// entries returns how many entries b holds: its counts and its
// dimensions' values.
func (b *Batch) entries() int { return len(b.Counts) + len(b.Dims) + len(b.Uniques) }

// part returns the entries [from, to) of b, counting its counts, then its
// breakdowns, then its sketches, with b's identity and At: a part a
// PartWriter takes.
func (b *Batch) part(from, to int) Batch {
	p := Batch{Writer: b.Writer, First: b.First, Seq: b.Seq, At: b.At}
	take := func(n, from, to int) (int, int) {
		return min(max(from, 0), n), min(max(to, 0), n)
	}
	lo, hi := take(len(b.Counts), from, to)
	p.Counts = b.Counts[lo:hi:hi]
	from, to = from-len(b.Counts), to-len(b.Counts)
	lo, hi = take(len(b.Dims), from, to)
	p.Dims = b.Dims[lo:hi:hi]
	from, to = from-len(b.Dims), to-len(b.Dims)
	lo, hi = take(len(b.Uniques), from, to)
	p.Uniques = b.Uniques[lo:hi:hi]
	return p
}

// ErrTimeout is wrapped by a store's error when a Write ran out of time
// at the store (a cluster's write timeout, a request never answered)
// rather than being refused. The flusher then writes the batch in smaller
// parts to a PartWriter, or gives a Write more time.
var ErrTimeout = errors.New("analytics: the store timed out")

// PartWriter is a Writer that stores a batch written in parts as it
// stores the whole: Writes of parts of one batch (its counts, breakdowns
// and sketches split between them, each part with the batch's identity
// and At; see Batch.part) store what one Write of the whole does, in any
// order and however often each is sent. The flusher writes a batch too
// large for the store's pace (a Write of it timed out) in such parts, so
// that it gets smaller until it fits. The Cassandra store is one (a row per
// batch identity and bucket, overwritten by a resend); a store that applies
// an identity once (the embedded store's watermark) is not.
type PartWriter interface {
	Writer
	// WritesParts marks a PartWriter.
	WritesParts()
}
