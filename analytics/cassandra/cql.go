package cassandra

import (
	"context"
	"fmt"
	"time"

	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// backend is the few operations the Store does on the cluster. cqlBackend
// does them with gocql; the unit tests use a model of their semantics that
// can fail and delay them.
type backend interface {
	// writePoint overwrites one bucket row, with r.ttl and r.ts.
	writePoint(ctx context.Context, r pointRow) error
	// writeTotal overwrites one writer's totals row, with r.ts.
	writeTotal(ctx context.Context, r totalRow) error
	// readPoints returns the rows of one partition of a tier table whose
	// start is in [from, to), one per (start, writer), in start order.
	readPoints(ctx context.Context, table, key string, bucket, from, to time.Time) ([]analytics.Point, error)
	// readTotals returns key's totals partition, at SERIAL consistency when
	// serial is set (to see the outcome of lightweight transactions).
	readTotals(ctx context.Context, key string, serial bool) (totals, error)
	// fold runs the conditional batch that moves a writer's row into the
	// base, and reports whether it was applied.
	fold(ctx context.Context, f foldOp) (bool, error)
	close()
}

type pointRow struct {
	table         string
	key           string
	bucket, start time.Time
	writer        gocql.UUID
	v             analytics.Visits
	ttl           int   // seconds
	ts            int64 // write timestamp, µs
}

type totalRow struct {
	key    string
	writer gocql.UUID
	v      analytics.Visits
	ts     int64 // write timestamp: the Store's sequence number, not a time
}

// totals is one key's partition of the totals table.
type totals struct {
	base    analytics.Visits
	version int64 // base_version; 0 when no row was ever folded
	rows    map[gocql.UUID]analytics.Visits
}

// foldOp moves row (of writer) into the base: the base becomes base and
// base_version version+1, if base_version is still version and the row
// still holds row.
type foldOp struct {
	key       string
	writer    gocql.UUID
	row, base analytics.Visits
	version   int64
}

// The statements, with the keyspace and table filled in once at connection
// (fmt verbs), bind markers for everything else, so that gocql prepares each
// once per connection.
const (
	insertPointCQL  = `INSERT INTO %s.%s (short_key, bucket, start, writer, human, bot) VALUES (?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?`
	selectPointsCQL = `SELECT start, human, bot FROM %s.%s WHERE short_key = ? AND bucket = ? AND start >= ? AND start < ?`
	insertTotalCQL  = `INSERT INTO %s.totals (short_key, writer, human, bot) VALUES (?, ?, ?, ?) USING TIMESTAMP ?`
	selectTotalsCQL = `SELECT writer, human, bot, base_human, base_bot, base_version FROM %s.totals WHERE short_key = ?`
	// The fold: a conditional batch on one partition, both statements or
	// neither. The first fold of a key finds no base_version (null).
	foldBaseCQL      = `UPDATE %s.totals SET base_human = ?, base_bot = ?, base_version = ? WHERE short_key = ? IF base_version = ?`
	foldFirstBaseCQL = `UPDATE %s.totals SET base_human = ?, base_bot = ?, base_version = ? WHERE short_key = ? IF base_version = null`
	foldRowCQL       = `DELETE FROM %s.totals WHERE short_key = ? AND writer = ? IF human = ? AND bot = ?`
)

// cqlBackend is the backend on a gocql session.
type cqlBackend struct {
	s      *gocql.Session
	serial gocql.SerialConsistency

	insertPoint, selectPoints map[string]string // by table
	insertTotal, selectTotals string
	foldBase, foldFirst       string
	foldRow                   string
}

func newCQL(s *gocql.Session, ks string, tiers []rollup.Tier, serial gocql.SerialConsistency) *cqlBackend {
	b := &cqlBackend{
		s: s, serial: serial,
		insertPoint:  make(map[string]string),
		selectPoints: make(map[string]string),
		insertTotal:  fmt.Sprintf(insertTotalCQL, ks),
		selectTotals: fmt.Sprintf(selectTotalsCQL, ks),
		foldBase:     fmt.Sprintf(foldBaseCQL, ks),
		foldFirst:    fmt.Sprintf(foldFirstBaseCQL, ks),
		foldRow:      fmt.Sprintf(foldRowCQL, ks),
	}
	for _, t := range tiers {
		table := pointsTable(t.Step)
		b.insertPoint[table] = fmt.Sprintf(insertPointCQL, ks, table)
		b.selectPoints[table] = fmt.Sprintf(selectPointsCQL, ks, table)
	}
	return b
}

// Writes are marked idempotent, though gocql v1's retry policy does not
// look at it (only speculative execution does): overwrites pinned to the
// flush time are what make every retry safe.

func (b *cqlBackend) writePoint(ctx context.Context, r pointRow) error {
	return b.s.Query(b.insertPoint[r.table], r.key, r.bucket, r.start, r.writer, r.v.Human, r.v.Bot, r.ttl, r.ts).
		WithContext(ctx).Idempotent(true).Exec()
}

func (b *cqlBackend) writeTotal(ctx context.Context, r totalRow) error {
	return b.s.Query(b.insertTotal, r.key, r.writer, r.v.Human, r.v.Bot, r.ts).
		WithContext(ctx).Idempotent(true).Exec()
}

func (b *cqlBackend) readPoints(ctx context.Context, table, key string, bucket, from, to time.Time) ([]analytics.Point, error) {
	it := b.s.Query(b.selectPoints[table], key, bucket, from, to).WithContext(ctx).Idempotent(true).Iter()
	var out []analytics.Point
	var p analytics.Point
	for it.Scan(&p.Start, &p.Human, &p.Bot) {
		p.Start = p.Start.UTC()
		out = append(out, p)
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return out, nil
}

func (b *cqlBackend) readTotals(ctx context.Context, key string, serial bool) (totals, error) {
	q := b.s.Query(b.selectTotals, key).WithContext(ctx).Idempotent(true)
	if serial {
		q = q.Consistency(gocql.Consistency(b.serial))
	}
	it := q.Iter()
	t := totals{rows: make(map[gocql.UUID]analytics.Visits)}
	var (
		w    gocql.UUID
		v    analytics.Visits
		base analytics.Visits
		ver  int64
	)
	for it.Scan(&w, &v.Human, &v.Bot, &base.Human, &base.Bot, &ver) {
		t.base, t.version = base, ver
		if w != (gocql.UUID{}) { // a partition with only the base has one row, writer null
			t.rows[w] = v
		}
	}
	if err := it.Close(); err != nil {
		return totals{}, err
	}
	return t, nil
}

func (b *cqlBackend) fold(ctx context.Context, f foldOp) (bool, error) {
	// Logged, though one partition: Cassandra skips the batchlog for it.
	bt := b.s.NewBatch(gocql.LoggedBatch).WithContext(ctx).SerialConsistency(b.serial)
	if f.version == 0 {
		bt.Query(b.foldFirst, f.base.Human, f.base.Bot, f.version+1, f.key)
	} else {
		bt.Query(b.foldBase, f.base.Human, f.base.Bot, f.version+1, f.key, f.version)
	}
	bt.Query(b.foldRow, f.key, f.writer, f.row.Human, f.row.Bot)
	applied, it, err := b.s.MapExecuteBatchCAS(bt, map[string]any{})
	if it != nil {
		if cerr := it.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}
	return applied, err
}

func (b *cqlBackend) close() { b.s.Close() }
