// Package analytics is the write path of link analytics: it counts visits
// to short links in memory and moves the counts to a store every flush
// interval, through outages, with a journal on local disk. The read side
// (the /stats API, its parameters, encoders and chart page) is package
// stats; the tiers, the rollup worker and the tier-correct reader are
// package rollup.
//
// # Visits
//
// A visit is a request that matches the configured route (by default GET or
// HEAD /{short_key}) and that the upstream answers with a status in
// count_status (by default a redirect). A 404 for an unknown key is not a
// visit, so random paths grow neither memory nor storage. NewMiddleware
// wraps the proxy handler and records visits in a Recorder.
//
// # Classes
//
// Each visit is classed as it is counted by package visitclass: human,
// bot (crawlers that say so), preview (link unfurlers), scanner (security
// scanners and automated fetchers posing as browsers), prefetch or
// internal, from its headers, its User-Agent, the JA4 fingerprint of its
// TLS ClientHello (package ja4, put in the request's context by the edge)
// and its network (analytics.asn). With "bots: separate" every class but
// human is counted apart from human visits (Visits.Bot), with "count" every
// visit is a human one, with "ignore" only human visits are counted.
//
// # Aggregation
//
// A Recorder counts visits in memory per (short_key, minute), in 64 shards
// with a lock and a map each. A visit is counted in the shard of the core it
// runs on, so cores never write the same memory, even when they serve the
// same popular links: there is no global lock on the hot path, recording
// scales with the cores, and a visit to a link this core has already seen
// since the last flush does not allocate. At most max_keys distinct links
// are held between two flushes (decided once per link, in a directory
// sharded by the link's hash); visits to further links are still counted in
// the all-links total (key AllLinks) and in linkgate_analytics_overflow_total,
// never dropped silently.
//
// # Where visits come from
//
// With analytics.dimensions on, each visit's features (package visitor:
// referrer, source, country, device, browser, OS) are counted with it per
// link, UTC day, dimension and value, capped at max_values values per
// (link, day, dimension) with the rest as "other" (dims.go); every link's
// human visits of the day are counted as DimLink of all links, for top
// lists; and with a uniques secret, each human visit's visitor hash goes
// into its link's HyperLogLog sketch of the day (package hll). They travel
// in the interval's Batch (Dims, Uniques), journal record and Write, and
// stores apply them once per batch identity (breakdowns, top counts) or
// merge them idempotently (sketches). Flusher.Reader adds what is not
// written yet, as for counts.
//
// # Flushing
//
// Every flush_interval a Flusher swaps each shard's map for an empty one and,
// outside the shard locks, writes what it took as one Batch with one
// Writer.Write: one count per (link, minute) in the finest tier, for each
// link and for all links, and nothing else per tier or per total. Store
// writes grow with the number of distinct links visited in an interval, not
// with the number of visits nor of tiers: visits of 100 links at 2,000
// visits/s make about 0.005 writes per visit, of 100,000 links about 0.92,
// and the rollup adds 0.0002 and 0.18 (TestWritesPerVisitWithRollup).
// So that the rollup finds them, a flush also stores an Active entry the
// first time this process writes a link in a batch period (once an hour
// per link with the default tiers), or, for a count that comes after its
// period may have been rolled (rollup.Plan.Late), a Mark on the coarser
// bucket it changes. A count too old for the finest tier to keep until it
// is rolled goes to the first coarser tier that does (rollup.Plan.Place).
//
// # Rollup
//
// A rollup.Worker, one per gateway (on Cassandra, the one holding the
// lease works and the others stand by), derives every coarser tier from the
// next finer one as batch periods close, and the all-time tier
// (rollup.TotalTier) from the coarsest, and rolls again the buckets that
// marks name. See package rollup.
//
// # Failures
//
// Every flush interval's counts are one Batch with an identity (Writer,
// Seq) that a store applies once. When a Write fails, the batch waits and
// is tried again after a backoff of one flush interval, doubling up to
// six, followed by the later intervals' batches, oldest first, each its
// own Write, while visits keep being taken from the recorder. While the
// store fails, every batch is appended (fsynced) to a journal on local
// disk (FlusherOptions.JournalPath, package journal) and acknowledged there once written:
// by this process or, after a crash or a restart, the next one, in the
// background. Close, the final flush at shutdown, journals what it cannot
// write and returns a *LostError for what it can neither write nor
// journal. So a crash loses at most the last interval, outage or not; the
// journal's cap (folding, then dropping, counted) and the README's
// Durability section say what else can be lost.
//
// # Reading
//
// A rollup.Reader answers every tier of a store exactly whatever the
// rollup has done: a coarse bucket is read from its tier where the rollup
// has got past it and no mark says it is stale, and summed from the finer
// tiers elsewhere; an all-time total is the sum of the all-time tier read
// the same way. So a curve never waits for the worker, and a late flush
// shows at once. Flusher.Reader (the Reader the stats API reads) adds the
// counts not written yet (still in the recorder, or kept from failed writes): a visit
// shows up at once. A read and a flush exclude each other, so a read sees
// each count either in memory or in the store, never in both or neither.
//
// # Wiring
//
// One Recorder, Metrics, Flusher and rollup.Worker live as long as the
// process; the middleware is rebuilt from each config snapshot. At
// shutdown, stop the servers, end Flusher.Run and Worker.Run, then call
// Flusher.Close, then close the store.
package analytics
