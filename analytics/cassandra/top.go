package cassandra

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// Top links
//
// A flush's analytics.DimLink counts (each link's human visits per UTC
// day) go to top_days, one partition per (day, shard) (the shard a hash of
// the link, as for Active entries), one row per link and writer generation
// holding its cumulative count, written as breakdowns are (USING
// TIMESTAMP the batch time, a TTL of the breakdowns' retention). Top reads
// the 16 partitions of each day of the range and adds up: its cost is the
// links visited in the range, not all links, but it reads each of them
// (the embedded store reads a sorted index instead).

const (
	insertTopCQL     = `INSERT INTO %s.top_days (day, shard, short_key, writer, visits) VALUES (?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?`
	selectTopCQL     = `SELECT short_key, visits FROM %s.top_days WHERE day = ? AND shard = ?`
	selectTopLinkCQL = `SELECT visits FROM %s.top_days WHERE day = ? AND shard = ? AND short_key = ?`
)

type topRow struct {
	day    time.Time
	shard  int
	key    string
	writer gocql.UUID
	count  int64
	ttl    int
	ts     int64
}

// prepareTop returns the statements that write b's DimLink counts: one
// unlogged batch per (day, shard) of up to maxActiveBatch rows.
func (s *Store) prepareTop(b analytics.Batch) []op {
	anon := gocql.MustRandomUUID()
	keep := time.Duration(s.dimRetention.Load())
	type part struct {
		day   int64
		shard int
	}
	parts := map[part][]topRow{}
	var order []part
	for _, d := range b.Dims {
		if d.Dim != analytics.DimLink {
			continue
		}
		r := topRow{day: d.Day.UTC(), shard: shardOf(d.Value), key: d.Value, writer: anon, count: d.N, ts: b.At.UnixMicro(),
			ttl: ttlOf(d.Day.Add(rollup.Day + keep).Sub(b.At))}
		if b.Writer != "" {
			r.writer, r.count = dimWriter(b.Writer, d.Gen), d.Cum
		}
		if r.ttl <= 0 || r.count == 0 {
			continue
		}
		p := part{r.day.Unix(), r.shard}
		if _, ok := parts[p]; !ok {
			order = append(order, p)
		}
		parts[p] = append(parts[p], r)
	}
	var ops []op
	for _, p := range order {
		rows := parts[p]
		for len(rows) > 0 {
			n := min(len(rows), maxActiveBatch)
			batch := rows[:n:n]
			rows = rows[n:]
			ops = append(ops, func(ctx context.Context, be backend) error { return be.writeTop(ctx, batch) })
		}
	}
	return ops
}

// Top implements analytics.TopSource.
func (s *Store) Top(ctx context.Context, from, to time.Time, n int) ([]analytics.TopLink, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cassandra: top: %w", err)
	}
	be, err := s.backend()
	if err != nil {
		return nil, err
	}
	lo, hi := rollup.AlignUp(from.UTC(), rollup.Day), rollup.AlignUp(to.UTC(), rollup.Day)
	keep := time.Duration(s.dimRetention.Load())
	if now := s.now().UTC(); lo.Before(now.Add(-keep - 2*rollup.Day)) {
		lo = rollup.Align(now.Add(-keep-2*rollup.Day), rollup.Day)
	}
	sums := map[string]int64{}
	for day := lo; day.Before(hi); day = day.Add(rollup.Day) {
		for shard := range activeShards {
			rows, err := be.readTop(ctx, day, shard)
			if err != nil {
				return nil, fmt.Errorf("cassandra: top: %w", err)
			}
			for _, r := range rows {
				sums[r.key] += r.count
			}
		}
	}
	out := make([]analytics.TopLink, 0, len(sums))
	for k, v := range sums {
		if v > 0 {
			out = append(out, analytics.TopLink{Key: k, Visits: v})
		}
	}
	slices.SortFunc(out, func(a, b analytics.TopLink) int {
		if a.Visits != b.Visits {
			if a.Visits > b.Visits {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out[:min(n, len(out))], nil
}

// TopCounts implements analytics.TopSource: a read per key and day.
func (s *Store) TopCounts(ctx context.Context, keys []string, from, to time.Time) (map[string]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cassandra: top counts: %w", err)
	}
	be, err := s.backend()
	if err != nil {
		return nil, err
	}
	lo, hi := rollup.AlignUp(from.UTC(), rollup.Day), rollup.AlignUp(to.UTC(), rollup.Day)
	out := make(map[string]int64, len(keys))
	for _, k := range keys {
		out[k] = 0
		for day := lo; day.Before(hi); day = day.Add(rollup.Day) {
			rows, err := be.readTopLink(ctx, day, shardOf(k), k)
			if err != nil {
				return nil, fmt.Errorf("cassandra: top counts: %w", err)
			}
			for _, r := range rows {
				out[k] += r.count
			}
		}
	}
	return out, nil
}

func (b *cqlBackend) readTopLink(ctx context.Context, day time.Time, shard int, key string) ([]topRow, error) {
	it := b.s.Query(b.selectTopLink, day, shard, key).WithContext(ctx).Idempotent(true).Iter()
	var out []topRow
	var r topRow
	for it.Scan(&r.count) {
		out = append(out, r)
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return out, nil
}

func (b counted) readTopLink(ctx context.Context, day time.Time, shard int, key string) ([]topRow, error) {
	b.c.reads.Add(1)
	return b.be.readTopLink(ctx, day, shard, key)
}

func (b *cqlBackend) writeTop(ctx context.Context, rows []topRow) error {
	args := func(r topRow) []any { return []any{r.day, r.shard, r.key, r.writer, r.count, r.ttl, r.ts} }
	if len(rows) == 1 {
		return b.s.Query(b.insertTop, args(rows[0])...).WithContext(ctx).Idempotent(true).Exec()
	}
	batch := b.s.NewBatch(gocql.UnloggedBatch).WithContext(ctx)
	for _, r := range rows {
		batch.Entries = append(batch.Entries, gocql.BatchEntry{Stmt: b.insertTop, Args: args(r), Idempotent: true})
	}
	return b.s.ExecuteBatch(batch)
}

func (b *cqlBackend) readTop(ctx context.Context, day time.Time, shard int) ([]topRow, error) {
	it := b.s.Query(b.selectTop, day, shard).WithContext(ctx).Idempotent(true).Iter()
	var out []topRow
	var r topRow
	for it.Scan(&r.key, &r.count) {
		out = append(out, r)
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return out, nil
}

func (b counted) writeTop(ctx context.Context, rows []topRow) error {
	b.c.top.Add(int64(len(rows)))
	b.c.topSent.Add(1)
	return b.be.writeTop(ctx, rows)
}

func (b counted) readTop(ctx context.Context, day time.Time, shard int) ([]topRow, error) {
	b.c.reads.Add(1)
	return b.be.readTop(ctx, day, shard)
}

func topSchema(keyspace string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.top_days (
    day       timestamp,
    shard     int,
    short_key text,
    writer    uuid,
    visits    bigint,
    PRIMARY KEY ((day, shard), short_key, writer)
) WITH compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': 'DAYS', 'compaction_window_size': 16}
    AND gc_grace_seconds = 10800
    AND comment = 'human visits per link and UTC day, for top lists; one row per writer generation holding its cumulative count, USING TIMESTAMP the batch time; 16 shards per day; USING TTL'`, keyspace)
}
