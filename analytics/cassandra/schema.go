package cassandra

import (
	"fmt"
	"regexp"
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

// partitions returns the starts of the partitions of a tier with the given
// step that hold a bucket starting in [from, to), in time order; none when
// no bucket starts in the range.
func partitions(from, to time.Time, step time.Duration) []time.Time {
	first := rollup.Align(from, step)
	if first.Before(from) {
		first = first.Add(step)
	}
	span := partitionSpan(step)
	var ps []time.Time
	for p := partitionOf(first, span); p.Before(to); p = p.Add(span) {
		ps = append(ps, p)
	}
	return ps
}

// pointsTable names the table of a tier: points_1m, points_5m, points_1h,
// points_1d, points_1w.
func pointsTable(step time.Duration) string { return "points_" + rollup.FormatDuration(step) }

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

var keyspaceName = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_]{0,47}$`)

// schema returns the CQL statements that create the keyspace and tables
// when they are missing, in order; configs/cassandra.cql holds their output
// for the default configuration.
func schema(keyspace string, replicationFactor int, tiers []rollup.Tier) []string {
	stmts := []string{fmt.Sprintf(`CREATE KEYSPACE IF NOT EXISTS %s
    WITH replication = {'class': 'SimpleStrategy', 'replication_factor': %d}`, keyspace, replicationFactor)}
	for _, t := range tiers {
		unit, size := compactionWindow(t)
		stmts = append(stmts, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
    short_key text,
    bucket    timestamp,
    start     timestamp,
    writer    uuid,
    human     bigint,
    bot       bigint,
    PRIMARY KEY ((short_key, bucket), start, writer)
) WITH CLUSTERING ORDER BY (start ASC, writer ASC)
    AND compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': '%s', 'compaction_window_size': %d}
    AND gc_grace_seconds = 10800
    AND comment = 'visits per %s bucket, kept %s (USING TTL), partition = %s of buckets, one row per bucket and writer'`,
			keyspace, pointsTable(t.Step), unit, size, rollup.FormatDuration(t.Step), rollup.FormatDuration(t.Retention),
			rollup.FormatDuration(partitionSpan(t.Step))))
	}
	stmts = append(stmts, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.totals (
    short_key    text,
    writer       uuid,
    human        bigint,
    bot          bigint,
    base_human   bigint static,
    base_bot     bigint static,
    base_version bigint static,
    PRIMARY KEY (short_key, writer)
) WITH comment = 'all-time visits: base (folded by lightweight transactions) plus one row per unfolded writer'`, keyspace))
	return stmts
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
-- holding a bounded number of buckets. Each gateway process writes its own
-- cumulative count under its writer id; readers sum the writers.
--
-- totals: all-time visits per link, never expired: base_* (static, folded by
-- lightweight transactions) plus one row per writer not yet folded.
`)
	for _, s := range schema(keyspace, replicationFactor, tiers) {
		b.WriteString("\n")
		b.WriteString(s)
		b.WriteString(";\n")
	}
	return b.String()
}
