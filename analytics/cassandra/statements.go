package cassandra

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// Statements counts the CQL statements a Store sent, by kind: what the
// cluster had to absorb. Failed statements count too (gocql's own retries
// of one are not seen here).
type Statements struct {
	Points      int64 // flushed counts written (rows of points_*)
	Rolled      int64 // rolled values written by the rollup worker
	PointsSent  int64 // statements that wrote both: several rows each (pack.go)
	Active      int64 // rollup_active entries written
	ActiveSent  int64 // statements that wrote them: one per partition and up to maxPartitionRows entries
	Marks       int64 // marks written
	MarkDeletes int64 // marks deleted once processed
	Progress    int64 // rollup_progress rows written
	Leases      int64 // lease transactions (each one or two LWTs)
	Dims        int64 // breakdown counts written (a cell of link_days each)
	Uniques     int64 // sketch registers written (a cell each)
	LinkSent    int64 // statements that wrote them: a link's partition, or several links' (pack.go)
	LinkRows    int64 // link_days rows those statements wrote: one per link, day and writer generation
	Top         int64 // links' human visits of a day written (a cell of link_days each, with the link's breakdowns)
	Leaders     int64 // top_leaders slots written: a link among its writer generation's topLeaders of a day
	LeadersSent int64 // statements that wrote them: batches of one day of up to maxPartitionRows slots
	Reads       int64 // reads of any table (each also reads the tables it replaced, until their rows expire: link_days the dims and uniques tables, the sharded tables those before them)
	TopRows     int64 // rows the reads of links' visits (link_days, top_days) and of top_leaders returned
}

// Writes returns the statements that write: all but Reads and Leases.
func (s Statements) Writes() int64 {
	return s.PointsSent + s.ActiveSent + s.Marks + s.MarkDeletes + s.Progress + s.LinkSent + s.LeadersSent
}

// statements are the counters behind Statements.
type statements struct {
	points, rolled, pointsSent, active, activeSent, marks, markDeletes, progress, leases, reads, dims, uniques, linkSent, linkRows, top, leaders, leadersSent, topRows atomic.Int64
}

// Statements returns the statements sent so far. Safe for concurrent use.
func (s *Store) Statements() Statements {
	c := &s.stmts
	return Statements{
		Points: c.points.Load(), Rolled: c.rolled.Load(), PointsSent: c.pointsSent.Load(), Active: c.active.Load(), ActiveSent: c.activeSent.Load(), Marks: c.marks.Load(),
		MarkDeletes: c.markDeletes.Load(), Progress: c.progress.Load(), Leases: c.leases.Load(), Reads: c.reads.Load(),
		Dims: c.dims.Load(), Uniques: c.uniques.Load(), LinkSent: c.linkSent.Load(), LinkRows: c.linkRows.Load(), Top: c.top.Load(),
		Leaders: c.leaders.Load(), LeadersSent: c.leadersSent.Load(), TopRows: c.topRows.Load(),
	}
}

// counted is a backend that counts the statements sent through it.
type counted struct {
	be backend
	c  *statements
}

func (b counted) writePoints(ctx context.Context, rows []pointRow) error {
	for _, r := range rows {
		if r.writer == rollupWriter {
			b.c.rolled.Add(1)
		} else {
			b.c.points.Add(1)
		}
	}
	b.c.pointsSent.Add(1)
	return b.be.writePoints(ctx, rows)
}

func (b counted) readPoints(ctx context.Context, table, key string, bucket, from, to time.Time) ([]analytics.Point, error) {
	b.c.reads.Add(1)
	return b.be.readPoints(ctx, table, key, bucket, from, to)
}

func (b counted) writeActive(ctx context.Context, a activeRows) error {
	b.c.active.Add(int64(len(a.keys)))
	b.c.activeSent.Add(1)
	return b.be.writeActive(ctx, a)
}

func (b counted) readActive(ctx context.Context, step int, period time.Time, shard int, after string, limit int) ([]string, error) {
	b.c.reads.Add(1)
	return b.be.readActive(ctx, step, period, shard, after, limit)
}

func (b counted) writeMark(ctx context.Context, r markRow) error {
	b.c.marks.Add(1)
	return b.be.writeMark(ctx, r)
}

func (b counted) deleteMark(ctx context.Context, r markRow) error {
	b.c.markDeletes.Add(1)
	return b.be.deleteMark(ctx, r)
}

func (b counted) readMarks(ctx context.Context, key string) ([]rollup.Mark, error) {
	b.c.reads.Add(1)
	return b.be.readMarks(ctx, key)
}

func (b counted) writeProgress(ctx context.Context, step int, done time.Time) error {
	b.c.progress.Add(1)
	return b.be.writeProgress(ctx, step, done)
}

func (b counted) readProgress(ctx context.Context) (rollup.Progress, error) {
	b.c.reads.Add(1)
	return b.be.readProgress(ctx)
}

func (b counted) lease(ctx context.Context, holder gocql.UUID, ttl int) (bool, error) {
	b.c.leases.Add(1)
	return b.be.lease(ctx, holder, ttl)
}

func (b counted) close() { b.be.close() }
