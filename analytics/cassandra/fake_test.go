package cassandra

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/analytics"
)

// fakeDB models what the Store relies on from Cassandra: last write wins by
// write timestamp (a tombstone wins a tie), TTL expiry, single-partition
// conditional batches applied atomically, and faults that a real cluster
// produces but hardly on demand: an error before the write reaches a
// replica, an error after it was applied (a timeout whose answer was lost),
// and a write that succeeds and is applied once more later with its old
// timestamp (a gocql retry of a statement that had in fact been applied,
// arriving late). It is a model of the semantics, not of the protocol.
type fakeDB struct {
	mu     sync.Mutex
	now    time.Time // the cluster's clock: tombstones and TTL expiry
	points map[fakePartition]map[fakeRow]fakeCell
	totals map[string]*fakeTotals
	late   []func() // duplicates to apply later (applyLate)

	fault func(op string) fault // nil: no faults

	partitionsRead int
}

type fault int

const (
	ok         fault = iota
	failBefore       // error, nothing applied
	failAfter        // applied, error returned
	dupLate          // applied, success returned, applied again later
)

type fakePartition struct {
	table, key string
	bucket     int64
}

type fakeRow struct {
	start  int64
	writer gocql.UUID
}

type fakeCell struct {
	v       analytics.Visits
	ts      int64
	expires time.Time // zero: never
	dead    bool      // a tombstone
}

type fakeTotals struct {
	base    analytics.Visits
	version int64
	rows    map[gocql.UUID]fakeCell
}

var errFault = errors.New("fake: injected fault (timeout)")

func newFakeDB(now time.Time) *fakeDB {
	return &fakeDB{now: now, points: make(map[fakePartition]map[fakeRow]fakeCell), totals: make(map[string]*fakeTotals)}
}

// do runs apply under the fault that the fault function picks for op.
func (db *fakeDB) do(ctx context.Context, op string, apply func()) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	f := ok
	if db.fault != nil {
		f = db.fault(op)
	}
	switch f {
	case failBefore:
		return errFault
	case failAfter:
		apply()
		return errFault
	case dupLate:
		apply()
		db.late = append(db.late, apply)
	default:
		apply()
	}
	return nil
}

// applyLate applies the late duplicates, in random order if shuffle is set.
func (db *fakeDB) applyLate(shuffle func([]func())) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if shuffle != nil {
		shuffle(db.late)
	}
	for _, f := range db.late {
		f()
	}
	db.late = nil
}

func (db *fakeDB) setNow(t time.Time) {
	db.mu.Lock()
	db.now = t
	db.mu.Unlock()
}

// put applies a write to a cell: last write wins by timestamp.
func put(c fakeCell, exists bool, n fakeCell) fakeCell {
	if exists && (n.ts < c.ts || (n.ts == c.ts && c.dead)) {
		return c
	}
	return n
}

func (db *fakeDB) writePoint(ctx context.Context, r pointRow) error {
	if r.ttl <= 0 || r.ts <= 0 {
		panic("fake: write without TTL or timestamp")
	}
	return db.do(ctx, "point", func() {
		pk := fakePartition{r.table, r.key, r.bucket.UnixMicro()}
		if db.points[pk] == nil {
			db.points[pk] = make(map[fakeRow]fakeCell)
		}
		k := fakeRow{r.start.UnixMicro(), r.writer}
		c, exists := db.points[pk][k]
		db.points[pk][k] = put(c, exists, fakeCell{v: r.v, ts: r.ts, expires: db.now.Add(time.Duration(r.ttl) * time.Second)})
	})
}

func (db *fakeDB) partition(key string) *fakeTotals {
	p := db.totals[key]
	if p == nil {
		p = &fakeTotals{rows: make(map[gocql.UUID]fakeCell)}
		db.totals[key] = p
	}
	return p
}

func (db *fakeDB) writeTotal(ctx context.Context, r totalRow) error {
	return db.do(ctx, "total", func() {
		p := db.partition(r.key)
		c, exists := p.rows[r.writer]
		p.rows[r.writer] = put(c, exists, fakeCell{v: r.v, ts: r.ts})
	})
}

func (db *fakeDB) readPoints(ctx context.Context, table, key string, bucket, from, to time.Time) ([]analytics.Point, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	db.partitionsRead++
	type row struct {
		start  int64
		writer gocql.UUID
		v      analytics.Visits
	}
	var rows []row
	for k, c := range db.points[fakePartition{table, key, bucket.UnixMicro()}] {
		if c.dead || !db.now.Before(c.expires) || k.start < from.UnixMicro() || k.start >= to.UnixMicro() {
			continue
		}
		if got := partitionOf(time.UnixMicro(k.start), bucketSpanOf(table)).UnixMicro(); got != bucket.UnixMicro() {
			panic("fake: row written to the wrong partition")
		}
		rows = append(rows, row{k.start, k.writer, c.v})
	}
	slices.SortFunc(rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(a.start, b.start), slices.Compare(a.writer[:], b.writer[:]))
	})
	out := make([]analytics.Point, len(rows))
	for i, r := range rows {
		out[i] = analytics.Point{Start: time.UnixMicro(r.start).UTC(), Visits: r.v}
	}
	return out, nil
}

// bucketSpanOf returns the partition span of a points table of the default
// tiers.
func bucketSpanOf(table string) time.Duration {
	for _, step := range []time.Duration{time.Minute, 5 * time.Minute, time.Hour, 24 * time.Hour, 7 * 24 * time.Hour} {
		if pointsTable(step) == table {
			return partitionSpan(step)
		}
	}
	panic("fake: unknown table " + table)
}

func (db *fakeDB) readTotals(ctx context.Context, key string, serial bool) (totals, error) {
	if err := ctx.Err(); err != nil {
		return totals{}, err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	t := totals{rows: make(map[gocql.UUID]analytics.Visits)}
	p := db.totals[key]
	if p == nil {
		return t, nil
	}
	t.base, t.version = p.base, p.version
	for w, c := range p.rows {
		if !c.dead {
			t.rows[w] = c.v
		}
	}
	return t, nil
}

func (db *fakeDB) fold(ctx context.Context, f foldOp) (bool, error) {
	var applied bool
	err := db.do(ctx, "fold", func() {
		p := db.partition(f.key)
		c, exists := p.rows[f.writer]
		if p.version != f.version || !exists || c.dead || c.v != f.row {
			return
		}
		p.base, p.version = f.base, f.version+1
		// The delete's timestamp is the cluster's clock: it shadows the
		// row only if later than the row's writes.
		p.rows[f.writer] = put(c, true, fakeCell{ts: db.now.UnixMicro(), dead: true})
		applied = true
	})
	return applied, err
}

func (db *fakeDB) close() {}

// liveTotalsRows returns how many unfolded rows key's totals partition holds.
func (db *fakeDB) liveTotalsRows(key string) int {
	db.mu.Lock()
	defer db.mu.Unlock()
	n := 0
	if p := db.totals[key]; p != nil {
		for _, c := range p.rows {
			if !c.dead {
				n++
			}
		}
	}
	return n
}
