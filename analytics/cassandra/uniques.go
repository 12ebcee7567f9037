package cassandra

import (
	"context"
	"fmt"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/rollup"
)

// Unique visitors
//
// A sketch's registers are elements of the regs set of link_days
// (linkdays.go), reg<<8 | rho: a flush adds those its sketches set, a
// register's elements only ever add up, and a read takes each register's
// largest rho, which is exactly a sketch's merge, across retries, replays
// and every gateway of a fleet, with no writer id and no state. The
// uniques table it replaced, one row per (link, day, register) written
// USING TIMESTAMP its value, is still read until its rows expire.

// selectUniqsCQL reads the uniques table, which nothing writes any more.
const selectUniqsCQL = `SELECT reg, rho FROM %s.uniques WHERE short_key = ? AND bucket = ? AND day >= ? AND day < ?`

type uniqRow struct {
	key         string
	bucket, day time.Time
	reg, rho    int
	ttl         int
	ts          int64 // µs: the batch's At
}

// uniqRows returns the registers of b's sketches as rows.
func (s *Store) uniqRows(b analytics.Batch) ([]uniqRow, error) {
	keep := time.Duration(s.dimRetention.Load())
	rows := make([]uniqRow, 0, len(b.Uniques)) // a sketch of a link's day holds a register or a few
	for _, u := range b.Uniques {
		if !rollup.Align(u.Day, rollup.Day).Equal(u.Day) {
			return nil, fmt.Errorf("cassandra: write: %q: %v is not the start of a UTC day", u.Key, u.Day)
		}
		var sk hll.Sketch
		if err := sk.MergeBinary(u.Sketch); err != nil {
			return nil, fmt.Errorf("cassandra: write: %q: %w", u.Key, err)
		}
		ttl := s.dayTTL(u.Key, ttlOf(u.Day.Add(rollup.Day+keep).Sub(b.At)), u.Day, b.At)
		if ttl <= 0 {
			continue
		}
		day := u.Day.UTC()
		sk.Each(func(idx uint16, rho uint8) {
			rows = append(rows, uniqRow{u.Key, partitionOf(day, dimSpan), day, int(idx), int(rho), ttl, b.At.UnixMicro()})
		})
	}
	return rows, nil
}

// Uniques implements analytics.UniqueSource.
func (s *Store) Uniques(ctx context.Context, key string, from, to time.Time) (*hll.Sketch, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cassandra: uniques: %w", err)
	}
	be, err := s.backend()
	if err != nil {
		return nil, err
	}
	if key, err = s.readKey(ctx, be, key); err != nil {
		return nil, fmt.Errorf("cassandra: uniques: %w", err)
	}
	sk := new(hll.Sketch)
	lo, hi := rollup.AlignUp(from.UTC(), rollup.Day), rollup.AlignUp(to.UTC(), rollup.Day)
	keep := time.Duration(s.dimRetention.Load())
	if now := s.now().UTC(); lo.Before(now.Add(-keep - 2*rollup.Day)) {
		lo = rollup.Align(now.Add(-keep-2*rollup.Day), rollup.Day)
	}
	for p := partitionOf(lo, dimSpan); p.Before(hi); p = p.Add(dimSpan) {
		regs, err := be.readUniques(ctx, key, p, latest(lo, p), earliest(hi, p.Add(dimSpan)))
		if err != nil {
			return nil, fmt.Errorf("cassandra: uniques: %w", err)
		}
		for _, r := range regs {
			if r.reg >= 0 && r.reg < hll.M && r.rho > 0 && r.rho <= 64 {
				sk.Set(uint16(r.reg), uint8(r.rho))
			}
		}
	}
	return sk, nil
}

// readUniques reads link_days and the uniques table it replaced.
func (b *cqlBackend) readUniques(ctx context.Context, key string, bucket, from, to time.Time) ([]uniqRow, error) {
	out, err := b.readLinkRegs(ctx, key, bucket, from, to)
	if err != nil {
		return nil, err
	}
	it := b.query(ctx, b.selectUniqs, key, bucket, from, to).Iter()
	var r uniqRow
	for it.Scan(&r.reg, &r.rho) {
		out = append(out, r)
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return out, nil
}

func (b counted) readUniques(ctx context.Context, key string, bucket, from, to time.Time) ([]uniqRow, error) {
	b.c.reads.Add(1)
	return b.be.readUniques(ctx, key, bucket, from, to)
}

// uniquesSchema returns the CQL that creates the uniques table, which
// link_days replaced: readers still read what it holds.
func uniquesSchema(keyspace string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.uniques (
    short_key text,
    bucket    timestamp,
    day       timestamp,
    reg       int,
    rho       int,
    PRIMARY KEY ((short_key, bucket), day, reg)
) WITH compaction = {'class': 'LeveledCompactionStrategy'}
    AND gc_grace_seconds = 10800
    AND comment = 'unique visitors: the HyperLogLog registers of a link per UTC day, each written USING TIMESTAMP its value so that the largest wins; partition = 366 days; USING TTL; replaced by link_days, read until its rows expire'`, keyspace)
}
