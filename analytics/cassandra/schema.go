package cassandra

import (
	"fmt"
	"strings"
	"time"

	"github.com/linkgate/linkgate/rollup"
)

// maxRowsPerWriter bounds the buckets of one tier in one partition: a
// partition holds at most this many rows per writer id.
const maxRowsPerWriter = 2016

// partitionSpan returns the period of time that one partition of a tier
// with the given step holds: the longest of ten years, 366 days, 30 days, a
// week and a day that holds at most maxRowsPerWriter buckets, rounded down
// to a whole number of steps. For the default tiers: 1m → a day (1,440
// buckets), 5m → a week (2,016), 1h → 30 days (720), 1d → 366 days (366:
// so that a year of days, leap or not, lies in at most two partitions),
// 1w → 521 weeks (about ten years).
//
// A span is a whole number of steps and partition starts are aligned the way
// rollup.Align aligns bucket starts (time.Truncate from January 1 of year
// 1), so every bucket lies in exactly one partition.
func partitionSpan(step time.Duration) time.Duration {
	for _, p := range []time.Duration{3650 * rollup.Day, 366 * rollup.Day, 30 * rollup.Day, rollup.Week, rollup.Day} {
		if n := p / step; n >= 1 && n <= maxRowsPerWriter {
			return n * step
		}
	}
	// Steps finer than a minute (which rollup rejects) or coarser than
	// ten years: one day's worth, or one bucket.
	return max(step, rollup.Day/step*step)
}

// partitionOf returns the start of the partition that holds the bucket
// starting at start.
func partitionOf(start time.Time, span time.Duration) time.Time { return rollup.Align(start, span) }

// allTime is the bucket column of the all-time tier's one partition per
// link: it holds one row per 52 weeks (with the default tiers), a few dozen
// in a link's life, so it never needs splitting.
var allTime = time.Unix(0, 0).UTC()

// tierPartition returns the partition of tier t that holds the bucket
// starting at start.
func tierPartition(t rollup.Tier, start time.Time) time.Time {
	if !t.Expires() {
		return allTime
	}
	return partitionOf(start, partitionSpan(t.Step))
}

// tierSpan returns how much time one partition of tier t covers.
func tierSpan(t rollup.Tier) time.Duration {
	if !t.Expires() {
		return rollup.Forever
	}
	return partitionSpan(t.Step)
}

// partitions returns the starts of the partitions of tier t that hold a
// bucket starting in [from, to), in time order; none when no bucket starts
// in the range.
func partitions(from, to time.Time, t rollup.Tier) []time.Time {
	first := rollup.Align(from, t.Step)
	if first.Before(from) {
		first = first.Add(t.Step)
	}
	if !first.Before(to) {
		return nil
	}
	if !t.Expires() {
		return []time.Time{allTime}
	}
	span := partitionSpan(t.Step)
	var ps []time.Time
	for p := partitionOf(first, span); p.Before(to); p = p.Add(span) {
		ps = append(ps, p)
	}
	return ps
}

// pointsTable names the table of a tier: points_1m, points_5m, points_1h,
// points_1d, points_1w; points_total for the all-time tier.
func pointsTable(t rollup.Tier) string {
	if !t.Expires() {
		return "points_total"
	}
	return "points_" + rollup.FormatDuration(t.Step)
}

// activeShards is how many partitions the Active entries of one period are
// spread over, by a hash of the key (shardOf): a period of 100,000 links
// is 16 partitions of about 6,000 rows.
const activeShards = 16

// shardOf returns key's shard of the active table: FNV-1a, 32 bits. It
// must never change, or entries already stored would not be found.
func shardOf(key string) int { return int(fnv32a(key) % activeShards) }

// compactionWindow returns the TimeWindowCompactionStrategy window of a
// tier: about 1/24 of its retention (TWCS works best with a few dozen
// windows), in whole hours below a day and whole days above.
func compactionWindow(t rollup.Tier) (unit string, size int) {
	w := t.Retention / 24
	if w < rollup.Day {
		return "HOURS", int(max(1, (w+time.Hour-1)/time.Hour))
	}
	return "DAYS", int((w + rollup.Day - 1) / rollup.Day)
}

// pointCounts are the count columns of a points table (and of the finest
// tier's sharded one).
const pointCounts = `    human     bigint,
    bot       bigint,
    preview   bigint,
    scanner   bigint,
    prefetch  bigint,
    internal  bigint,`

// schema returns the CQL statements that create the keyspace and tables
// when they are missing, in order; configs/cassandra.cql holds their output
// for the default configuration. tiers are the retention setting; the
// all-time tier (rollup.TotalTier) is added to them.
func schema(keyspace string, replicationFactor int, tiers []rollup.Tier) []string {
	stmts := []string{fmt.Sprintf(`CREATE KEYSPACE IF NOT EXISTS %s
    WITH replication = {'class': 'SimpleStrategy', 'replication_factor': %d}`, keyspace, replicationFactor)}
	const columns = `    short_key text,
    bucket    timestamp,
    start     timestamp,
    writer    uuid,
` + pointCounts + `
    PRIMARY KEY ((short_key, bucket), start, writer)
) WITH CLUSTERING ORDER BY (start ASC, writer ASC)`
	for _, t := range tiers {
		unit, size := compactionWindow(t)
		stmts = append(stmts, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
%s
    AND compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': '%s', 'compaction_window_size': %d}
    AND gc_grace_seconds = 10800
    AND comment = 'visits per %s bucket, kept %s (USING TTL), partition = %s of buckets, one row per bucket and writer'`,
			keyspace, pointsTable(t), columns, unit, size, rollup.FormatDuration(t.Step), rollup.FormatDuration(t.Retention),
			rollup.FormatDuration(partitionSpan(t.Step))))
	}
	if total, err := rollup.TotalTier(tiers); err == nil {
		stmts = append(stmts, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
%s
    AND compaction = {'class': 'LeveledCompactionStrategy'}
    AND comment = 'all-time visits per %s bucket, rolled from the coarsest tier, never expired; one partition per link (bucket = 1970-01-01)'`,
			keyspace, pointsTable(total), columns, rollup.FormatDuration(total.Step)))
	}
	stmts = append(stmts, shardedSchema(keyspace, tiers[0])...)
	stmts = append(stmts,
		linkDaysSchema(keyspace),
		dimsSchema(keyspace),
		topSchema(keyspace),
		leadersSchema(keyspace),
		tenantLeadersSchema(keyspace),
		uniquesSchema(keyspace),
		erasuresSchema(keyspace),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.rollup_active (
    step      int,
    period    timestamp,
    shard     int,
    short_key text,
    listed    boolean,
    PRIMARY KEY ((step, period, shard), short_key)
) WITH gc_grace_seconds = 10800
    AND comment = 'links with data to roll into the tier of step (0: marks to process) in a batch period; USING TTL'`, keyspace),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.rollup_marks (
    short_key text,
    step      int,
    start     timestamp,
    id        bigint,
    at_us     bigint,
    PRIMARY KEY (short_key, step, start, id)
) WITH gc_grace_seconds = 10800
    AND comment = 'rolled buckets made stale by late counts, until rolled again; USING TTL'`, keyspace),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.rollup_progress (
    name text,
    step int,
    done timestamp,
    PRIMARY KEY (name, step)
) WITH comment = 'how far the rollup has got, by queue; written USING TIMESTAMP done, so it never goes back'`, keyspace),
		fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.rollup_lease (
    name   text PRIMARY KEY,
    holder uuid
) WITH comment = 'the gateway that runs the rollup: lightweight transactions with a TTL'`, keyspace),
	)
	return stmts
}

// classColumns are the columns of a points table that split bot by class
// (analytics.Visits.Other, in its order), null in a row without any: rows
// of all-human or declared-bot visits hold no cell of them.
var classColumns = [rollup.NumOther]string{"preview", "scanner", "prefetch", "internal"}

// migrations returns the statements that bring tables created by an
// earlier release to schema's: the class columns added to each points
// table, the links' visits to link_days, and the listed cell that the
// Active entries are written with to rollup_active. Cassandra 4.0 has no
// ADD IF NOT EXISTS: Open runs them after schema, and cqlsession takes
// the refusal of a column that exists as done (it always does on tables
// schema created).
func migrations(keyspace string, tiers []rollup.Tier) []string {
	add := "ADD (" + strings.Join(classColumns[:], " bigint, ") + " bigint)"
	var stmts []string
	for _, t := range tiers {
		stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s.%s %s", keyspace, pointsTable(t), add))
	}
	if total, err := rollup.TotalTier(tiers); err == nil {
		stmts = append(stmts, fmt.Sprintf("ALTER TABLE %s.%s %s", keyspace, pointsTable(total), add))
	}
	return append(stmts, fmt.Sprintf("ALTER TABLE %s.link_days ADD (visits bigint)", keyspace),
		fmt.Sprintf("ALTER TABLE %s.rollup_active ADD (listed boolean)", keyspace))
}

// SchemaCQL returns the CQL script that creates the keyspace and tables the
// store uses, as Open runs it when they are missing: what
// configs/cassandra.cql holds for the default configuration. Operators who
// manage the schema themselves run it (or their NetworkTopologyStrategy
// version of it) before starting gateways.
func SchemaCQL(keyspace string, replicationFactor int, tiers []rollup.Tier) string {
	var b strings.Builder
	b.WriteString(`-- The linkgate analytics schema for Apache Cassandra (analytics.store: cassandra).
-- Gateways create it when it is missing; this file is for operators who manage it
-- themselves. Generated by cassandra.SchemaCQL for the default configuration
-- (keyspace linkgate, replication_factor 1, retention 1m:2d, 5m:8d, 1h:40d,
-- 1d:400d, 1w:5y); a test keeps it in step.
--
-- In production use NetworkTopologyStrategy, for example
--   WITH replication = {'class': 'NetworkTopologyStrategy', 'dc1': 3}
-- with consistency LOCAL_QUORUM.
--
-- points_<step>: one table per tier, so that each has one TTL (its retention,
-- set per write) and TimeWindowCompactionStrategy can drop whole expired
-- SSTables. Partition (short_key, bucket): bucket is the start of a period
-- holding a bounded number of buckets. Flushes write the finest tier: each
-- gateway process its own cumulative count under its writer id. The rollup
-- worker writes the coarser tiers from the finer ones, one row per bucket
-- under a fixed writer id. Readers sum the writers. bot counts every visit
-- that is not a person's; preview, scanner, prefetch and internal split it by
-- class, written only in rows that have such visits. Tables made by a release
-- without them get them at a gateway's start (ALTER TABLE ... ADD (preview
-- bigint, scanner bigint, prefetch bigint, internal bigint)).
--
-- points_1m_by_shard and link_days_by_shard: what a flush writes of points_1m
-- and link_days since links are hashed into 1,024 shards, partitioned by
-- (shard, an hour of minutes or 61 days) with the link in the clustering key,
-- so that a flush writes a partition per shard rather than two per link.
-- points_1m and link_days are read until their rows expire.
--
-- link_days: a link's breakdowns, unique visitors' sketch registers and human
-- visits per UTC day and writer generation, one row each. A link_days made by a
-- release without visits gets it at a gateway's start (ALTER TABLE ... ADD
-- (visits bigint)). dims, uniques and top_days: what it replaced, read until
-- their rows expire.
--
-- points_total: the all-time tier, rolled from the coarsest, never expired.
--
-- rollup_active, rollup_marks, rollup_progress, rollup_lease: the rollup's
-- work lists, stale buckets, progress and the lease of the gateway that
-- runs it. rollup_active's rows are written with an UPDATE of many links at
-- once, which needs a regular column: a rollup_active made by a release
-- without listed gets it at a gateway's start (ALTER TABLE ... ADD (listed
-- boolean)).
--
-- erasures: the links and tenants erased (POST /admin/erase), which every
-- gateway reads before each flush: an erased link's rows are stored from then
-- on under a key naming its new epoch, and the old ones are read no more.
`)
	for _, s := range schema(keyspace, replicationFactor, tiers) {
		b.WriteString("\n")
		b.WriteString(s)
		b.WriteString(";\n")
	}
	return b.String()
}
