// Package pebblestore is the embedded analytics store: visit counts on the local
// disk of one gateway, in a github.com/cockroachdb/pebble database.
//
// # Why Pebble
//
// A flush is a few hundred to a few hundred thousand "add n to this bucket"
// operations that must land all or nothing, and exactly once however often
// the flusher sends the batch (a retry, a replay of the journal after a
// crash). Pebble gives exactly that: all of a flush goes into one
// pebble.Batch committed with one fsync, together with the batch's
// sequence number as its writer's watermark, and a merge operator adds
// counts inside the engine, so a flush reads one key (the watermark)
// before it writes. It builds with CGO_ENABLED=0 (its cgo zstd binding is optional;
// this store uses snappy), so the gateway stays one static binary, and it is
// kept by Cockroach Labs as CockroachDB's engine. SQLite through a pure-Go
// driver would let an operator poke at the data with SQL, but each flush
// would be an UPSERT per bucket through a C engine translated to Go, and
// expiring old buckets a DELETE through an index; the stats API already
// serves the data, so Pebble wins.
//
// # Layout
//
// The keys of one link's tier lie together, so that any query is one
// iterator range and reads only the rows it returns (a year of days is at most 366 rows, whatever else the store
// holds); a time-major layout would make expiry a single range delete but a
// one-link read would scan every link of the time range. Expiry is served
// by a small time-major index written in the same batch:
//
//	'p' uvarint(len(key)) key step start     -> visits   flushed counts (merged by adding)
//	'p' uvarint(len(key)) key step start 'r' -> visits   the rolled value (set by the rollup worker)
//	't' step start key                   -> empty    the bucket's index entry, for expiry
//	'a' step period key                  -> empty    rollup.Active: key has work in period
//	'd' uvarint(len(key)) key step start id -> at    rollup.Mark: the bucket may be stale
//	'w' step                             -> done     rollup.Progress of the queue of step
//	'q' writer                           -> seq      the last batch of writer applied
//	'e' uvarint(len(tenant)) tenant key  -> at       an erasure (erase.go)
//
// step is the tier's step in seconds (uint32, big-endian; 0 for the marks
// queue) and start, period and done are unix seconds (int64 with the sign
// bit flipped, big-endian, so keys sort in time order); id is the mark's ID
// (uint64) and at its time in unix nanoseconds. visits is two varints,
// human and bot. A bucket's value is the sum of its two rows, which sort
// next to each other: the flush adds to the finest tier (and, for counts too old for it, to a
// coarser one), the worker sets coarse buckets computed from the finer
// tier. Expire walks each tier's index up to its retention cutoff, deletes
// the buckets it names with point deletes and the walked index span with
// one range delete: its work grows with what expires, not with what is
// kept. The all-time tier (rollup.TotalTier) never expires. Active entries
// and marks whose source data has expired are deleted too.
//
// Write sets a bucket's index entry with every count. It costs a second key
// per count but needs no read, and the entry is idempotent.
//
// A batch with an identity (analytics.Batch Writer and Seq) is applied
// only when its Seq (its FirstSeq, for a batch folding several intervals)
// is above its writer's watermark ('q'), which the same atomic commit
// raises to Seq: the flusher sends a writer's batches in Seq
// order, so one number per writer tells every batch applied already, and a
// resent or replayed batch changes nothing. There is one such key per
// gateway process that ever wrote (a few bytes each); they are not
// expired, since a journal can be replayed long after it was written.
//
// The rollup worker (rollup.Worker) reads and writes through the
// rollup.Store methods; this store has one process, so it needs no lease.
// Apply reads the rolled values it replaces under the same lock as
// Write's commits, so that a larger value is never replaced.
//
// # Use
//
//	s, err := pebble.Start(cfg.Embedded.Path, cfg.Retention, log) // expires old buckets hourly
//	// s is the flusher's analytics.Store and the rollup worker's
//	// rollup.Store: hand it to analytics.NewPipeline, whose Close stops
//	// the worker, makes the final flush and closes the store. Start
//	// opens a folder that is not usable yet in the background (State
//	// says why it is not open); Open fails instead.
//
// # Disk space
//
// Write and Apply refuse a batch (ErrDiskFull) that would leave less free
// than the engine takes by itself when the memtable fills (reserveFor),
// and the memtable is sized to the volume (memTableFor), so that on a
// small volume the log Pebble preallocates does not use up the reserve.
// A refused batch marks nothing: writes resume once space is back.
package pebblestore
