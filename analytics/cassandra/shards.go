package cassandra

import (
	"fmt"
	"slices"
	"time"

	"github.com/linkgate/linkgate/rollup"
)

// Shards
//
// A flush writes two rows per link: its count of the minute (the finest
// tier) and its link_days row of the day. What a write costs Cassandra
// follows the partitions it touches far more than its rows or bytes
// (docs/analytics.md has the figures), so these two kinds of rows are kept
// in partitions of many links each: a link is hashed to one of linkShards
// shards, and the tables
//
//	points_<finest step>_by_shard  PRIMARY KEY ((shard, bucket), short_key, start, writer)
//	link_days_by_shard             PRIMARY KEY ((shard, bucket), short_key, day, writer)
//
// hold what points_<finest step> and link_days held (the same columns),
// with the link in the clustering key. A flush of 100,000 links then
// touches about 2,000 partitions, each written in statements of one
// partition of up to partitionBytes (one mutation on each replica, whose
// size Cassandra does not measure), where it touched 200,000 partitions,
// 15 links to a statement. A link's reads stay one statement per
// partition of the unsharded tables: a slice of its shard's partitions
// (bucket IN), a day of minutes being 24 partitions of an hour and 366
// days of breakdowns 6 of 61 days.
//
// The spans keep partitions bounded: a partition holds at most 60 buckets
// of a link (shardSpan), and 61 days of link_days rows. With 100,000 links
// visited every 10 s, a shard holds about 100 links: an hour of minutes is
// about 36,000 rows, 61 days of link_days about 6,000 to 12,000 rows (a
// row per link, day and writer generation). Each unsharded partition is a
// whole number of sharded ones (the spans divide theirs, both aligned as
// rollup.Align aligns), so a read of one unsharded partition reads the
// sharded ones inside it.
//
// Tables made by an earlier release keep what it wrote until their rows
// expire (points_1m two days, link_days the dimension retention). Until
// then readers read both: a bucket's rows are summed once per writer id
// (a batch written to the old table and replayed into the new one after an
// upgrade has the same writer id and the same counts in both), and a
// writer generation's breakdown or visits count is the larger of its two
// (cumulative counts only grow), as readers already merge link_days with
// the tables it replaced.

// linkShards is how many shards links are hashed into (linkShard). It
// must never change, or rows already stored would not be found.
const linkShards = 1024

// linkShard returns key's shard: FNV-1a, 32 bits.
func linkShard(key string) int { return int(fnv32a(key) % linkShards) }

// fnv32a is the FNV-1a hash of key.
func fnv32a(key string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return h
}

// shardSpan returns the time a partition of the sharded table of a tier of
// step holds: the largest whole number of steps, at most 60, that divides
// partitionSpan(step), so that every unsharded partition is a whole
// number of sharded ones. An hour for a step of a minute.
func shardSpan(step time.Duration) time.Duration {
	n := int64(partitionSpan(step) / step)
	for k := min(n, 60); k > 1; k-- {
		if n%k == 0 {
			return time.Duration(k) * step
		}
	}
	return step
}

// linkDaysShardSpan is the time a partition of link_days_by_shard holds:
// a sixth of dimSpan, 61 days.
const linkDaysShardSpan = dimSpan / 6

// shardBuckets returns the starts of the partitions of span that hold a
// time in [from, to), in time order.
func shardBuckets(from, to time.Time, span time.Duration) []time.Time {
	var out []time.Time
	for p := partitionOf(from, span); p.Before(to); p = p.Add(span) {
		out = append(out, p)
	}
	return out
}

// shardedTable names the sharded table of a table: points_1m_by_shard,
// link_days_by_shard.
func shardedTable(table string) string { return table + "_by_shard" }

// shardedSchema returns the CQL that creates the sharded tables: that of
// the finest tier t and link_days_by_shard.
func shardedSchema(keyspace string, t rollup.Tier) []string {
	unit, size := compactionWindow(t)
	return []string{
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
    shard     int,
    bucket    timestamp,
    short_key text,
    start     timestamp,
    writer    uuid,
`+pointCounts+`
    PRIMARY KEY ((shard, bucket), short_key, start, writer)
) WITH CLUSTERING ORDER BY (short_key ASC, start ASC, writer ASC)
    AND compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': '%s', 'compaction_window_size': %d}
    AND gc_grace_seconds = 10800
    AND comment = 'what %s holds, links hashed into %d shards: partition = a shard and %s of buckets, one row per link, bucket and writer'`,
			keyspace, shardedTable(pointsTable(t)), unit, size, pointsTable(t), linkShards, rollup.FormatDuration(shardSpan(t.Step))),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.link_days_by_shard (
    shard     int,
    bucket    timestamp,
    short_key text,
    day       timestamp,
    writer    uuid,
    dims      map<text, bigint>,
    regs      set<int>,
    visits    bigint,
    PRIMARY KEY ((shard, bucket), short_key, day, writer)
) WITH CLUSTERING ORDER BY (short_key ASC, day ASC, writer ASC)
    AND compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': 'DAYS', 'compaction_window_size': 16}
    AND gc_grace_seconds = 10800
    AND comment = 'what link_days holds, links hashed into %d shards: partition = a shard and 61 days; USING TTL'`, keyspace, linkShards),
	}
}

// byPartition groups items into statements: the items of a partition
// whose data is over packBytes go alone, in statements of up to
// partitionBytes; the others are packed, several partitions a statement,
// up to packBytes (pack.go).
func byPartition[K comparable, T any](items []T, part func(T) K, size func(T) int) [][]T {
	var out [][]T
	var small []T
	for _, rows := range groupByPartition(items, part) {
		n := 0
		for _, r := range rows {
			n += size(r)
		}
		if n <= packBytes {
			small = append(small, rows...)
			continue
		}
		out = append(out, pack(rows, size, partitionBytes)...)
	}
	return append(out, pack(small, size, packBytes)...)
}

// groupByPartition returns items by partition: the partitions in the
// order they first come, a partition's items in theirs. They are put in
// that order in one array (a counting sort), not appended to a slice per
// partition: a flush of 100,000 links has a thousand partitions of a
// hundred rows.
func groupByPartition[K comparable, T any](items []T, part func(T) K) [][]T {
	index := map[K]int32{}
	of := make([]int32, len(items)) // each item's partition, numbered as they come
	var starts []int                // each partition's count of items, then where they start
	for i, it := range items {
		k := part(it)
		j, ok := index[k]
		if !ok {
			j = int32(len(starts))
			index[k] = j
			starts = append(starts, 0)
		}
		of[i] = j
		starts[j]++
	}
	at := 0
	for j, n := range starts {
		starts[j], at = at, at+n
	}
	sorted := make([]T, len(items))
	ends := slices.Clone(starts) // where the next item of each goes; in the end, where each ends
	for i, it := range items {
		sorted[ends[of[i]]] = it
		ends[of[i]]++
	}
	groups := make([][]T, len(starts))
	for j, start := range starts {
		groups[j] = sorted[start:ends[j]:ends[j]]
	}
	return groups
}
