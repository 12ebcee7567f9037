package cassandra

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// backend is the few operations the Store does on the cluster, one
// statement each. cqlBackend does them with gocql; the unit tests use a
// model of their semantics that can fail and delay them.
type backend interface {
	// writePoints overwrites bucket rows, each with its ttl (0: none) and
	// ts, of any tables and partitions, in one statement: an unlogged
	// batch when there are several (pack.go).
	writePoints(ctx context.Context, rows []pointRow) error
	// readPoints returns the rows of one partition of a tier table whose
	// start is in [from, to), one per (start, writer), in start order.
	readPoints(ctx context.Context, table, key string, bucket, from, to time.Time) ([]analytics.Point, error)
	// writeActive stores rollup.Active entries of one partition (step,
	// period, shard), all with the TTL a.ttl, in one statement.
	writeActive(ctx context.Context, a activeRows) error
	// readActive returns up to limit keys of one partition of the active
	// table after the key after, in key order.
	readActive(ctx context.Context, step int, period time.Time, shard int, after string, limit int) ([]string, error)
	// writeMark stores one mark, with r.ttl and the write timestamp
	// r.at (µs).
	writeMark(ctx context.Context, r markRow) error
	// deleteMark deletes one mark with the write timestamp r.at: the
	// same as its write's, which a tombstone wins, whatever the clocks.
	deleteMark(ctx context.Context, r markRow) error
	// readMarks returns key's marks.
	readMarks(ctx context.Context, key string) ([]rollup.Mark, error)
	// writeProgress records a queue's progress with the write timestamp
	// done (µs): a later done wins whatever order the writes land in.
	writeProgress(ctx context.Context, step int, done time.Time) error
	// readProgress returns every queue's progress.
	readProgress(ctx context.Context) (rollup.Progress, error)
	// writeLinks writes the breakdown counts and the links' visits (each
	// a cell with its ttl and ts: the newest wins) and the sketch
	// registers (the largest rho of a register wins) of one or more
	// partitions (link, bucket) of link_days, in one statement: a batch
	// when there are several rows. It returns the rows the statement
	// wrote.
	writeLinks(ctx context.Context, parts []linkPart) (int, error)
	// readDims returns the counts of one dimension in one partition
	// (link, bucket) whose day is in [from, to), one per day, value and
	// writer generation, or two when both link_days and the dims table
	// it replaced hold one.
	readDims(ctx context.Context, key string, bucket time.Time, dim int, from, to time.Time) ([]dimReadRow, error)
	// readLinkVisits returns the visits of keys (short_key IN keys) in
	// their partitions of link_days of bucket whose day is in [from, to):
	// one row per link, day and writer generation that has them.
	readLinkVisits(ctx context.Context, bucket time.Time, keys []string, from, to time.Time) ([]topRow, error)
	// readTopKeys returns the rows of keys in one partition of top_days,
	// which link_days replaced (one per link and writer generation, their
	// day not set): short_key IN keys.
	readTopKeys(ctx context.Context, day time.Time, shard int, keys []string) ([]topRow, error)
	// writeLeaders overwrites slots of top_leaders of one partition (day),
	// or of tenant_leaders (tenant, day) when the rows' tenant is not "".
	writeLeaders(ctx context.Context, rows []leaderRow) error
	// readLeaders returns the slots of one partition of top_leaders (tenant
	// ""), or of tenant_leaders.
	readLeaders(ctx context.Context, tenant string, day time.Time) ([]leaderRow, error)
	// readLeader returns the slots of one writer generation in a
	// partition of top_leaders (tenant ""), or of tenant_leaders.
	readLeader(ctx context.Context, tenant string, day time.Time, writer gocql.UUID) ([]leaderRow, error)
	// readUniques returns the registers of one partition (link, bucket)
	// whose day is in [from, to), a register possibly several times.
	readUniques(ctx context.Context, key string, bucket, from, to time.Time) ([]uniqRow, error)
	// lease takes the rollup lease for holder, or renews it when holder
	// holds it, for ttl seconds, and reports whether holder holds it:
	// lightweight transactions.
	lease(ctx context.Context, holder gocql.UUID, ttl int) (bool, error)
	// readErasures returns the rows of the erasures table.
	readErasures(ctx context.Context) ([]erasureRow, error)
	// writeErasure writes a row of the erasures table USING TIMESTAMP
	// its epoch: the larger epoch wins.
	writeErasure(ctx context.Context, r erasureRow) error
	// deletePartition deletes the partition (key, bucket) of a points
	// table or of link_days, or key's partition of rollup_marks.
	deletePartition(ctx context.Context, table, key string, bucket time.Time) error
	close()
}

type pointRow struct {
	table         string
	key           string
	bucket, start time.Time
	writer        gocql.UUID
	v             analytics.Visits
	ttl           int   // seconds; 0: none (the all-time tier)
	ts            int64 // write timestamp, µs
}

// activeRows are Active entries of one partition of rollup_active: the
// keys of (step, period, shard), which expire together.
type activeRows struct {
	step   int // seconds; 0 for the marks queue
	period time.Time
	shard  int
	ttl    int
	keys   []string
}

type markRow struct {
	key   string
	step  int // seconds
	start time.Time
	id    int64
	at    int64 // µs: the write timestamp of the mark, and of its deletion
	ttl   int
}

// leaseName is the one row of the lease table.
const leaseName = "rollup"

// The statements, with the keyspace and table filled in once at connection
// (fmt verbs), bind markers for everything else, so that gocql prepares each
// once per connection.
const (
	insertPointCQL = `INSERT INTO %s.%s (short_key, bucket, start, writer, human, bot) VALUES (?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?`
	// A row whose bots are split by class: insertPointCQL with
	// classColumns, which a row without any leaves out (not null: no cell,
	// no tombstone).
	insertClassesCQL = `INSERT INTO %s.%s (short_key, bucket, start, writer, human, bot, preview, scanner, prefetch, internal) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?`
	selectPointsCQL  = `SELECT start, writer, human, bot, preview, scanner, prefetch, internal FROM %s.%s WHERE short_key = ? AND bucket = ? AND start >= ? AND start < ?`
	// The finest tier's sharded table (shards.go).
	insertShardPointCQL   = `INSERT INTO %s.%s (shard, bucket, short_key, start, writer, human, bot) VALUES (?, ?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?`
	insertShardClassesCQL = `INSERT INTO %s.%s (shard, bucket, short_key, start, writer, human, bot, preview, scanner, prefetch, internal) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?`
	selectShardPointsCQL  = `SELECT start, writer, human, bot, preview, scanner, prefetch, internal FROM %s.%s WHERE shard = ? AND bucket IN ? AND short_key = ? AND start >= ? AND start < ?`
	updateActiveCQL       = `UPDATE %s.rollup_active USING TTL ? SET listed = true WHERE step = ? AND period = ? AND shard = ? AND short_key IN ?`
	selectActiveCQL       = `SELECT short_key FROM %s.rollup_active WHERE step = ? AND period = ? AND shard = ? AND short_key > ? LIMIT ?`
	insertMarkCQL         = `INSERT INTO %s.rollup_marks (short_key, step, start, id, at_us) VALUES (?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?`
	deleteMarkCQL         = `DELETE FROM %s.rollup_marks USING TIMESTAMP ? WHERE short_key = ? AND step = ? AND start = ? AND id = ?`
	selectMarksCQL        = `SELECT step, start, id, at_us FROM %s.rollup_marks WHERE short_key = ?`
	insertProgressCQL     = `INSERT INTO %s.rollup_progress (name, step, done) VALUES ('rollup', ?, ?) USING TIMESTAMP ?`
	selectProgressCQL     = `SELECT step, done FROM %s.rollup_progress WHERE name = 'rollup'`
	// The lease: taken when nobody holds it, renewed by its holder, both
	// lightweight transactions; the TTL ends it when the holder stops.
	takeLeaseCQL  = `INSERT INTO %s.rollup_lease (name, holder) VALUES ('` + leaseName + `', ?) IF NOT EXISTS USING TTL ?`
	renewLeaseCQL = `UPDATE %s.rollup_lease USING TTL ? SET holder = ? WHERE name = '` + leaseName + `' IF holder = ?`
)

// cqlBackend is the backend on a gocql session, which the Pool owns.
type cqlBackend struct {
	s      *gocql.Session
	cons   gocql.Consistency
	serial gocql.SerialConsistency
	retry  gocql.RetryPolicy

	insertPoint, insertClasses, selectPoints map[string]string // by table
	// The finest tier, whose rows the sharded table holds, and its
	// statements.
	finest                                                  rollup.Tier
	finestTable                                             string // pointsTable(finest)
	insertShardPoint, insertShardClasses, selectShardPoints string
	updateActive, selectActive,
	insertMark, delMark, selectMarks,
	insertProgress, selectProgress,
	takeLease, renewLease,
	updateLinkDay, updateLinkVisits, selectLinkDims, selectLinkRegs, selectLinkVisits,
	selectShardDims, selectShardRegs, selectShardVisits,
	selectDims,
	selectTopKeys,
	insertLeader, selectLeaders, selectLeader,
	insertTenantLeader, selectTenantLeaders, selectTenantLeader,
	selectUniqs string

	insertErasure, selectErasures string
	deletePartitions              map[string]string // by table
}

func newCQL(s *gocql.Session, ks string, tiers []rollup.Tier, cons gocql.Consistency, serial gocql.SerialConsistency) *cqlBackend {
	b := &cqlBackend{
		s: s, cons: cons, serial: serial,
		retry:          &retryPolicy{gocql.ExponentialBackoffRetryPolicy{NumRetries: 3, Min: 100 * time.Millisecond, Max: 2 * time.Second}},
		insertPoint:    make(map[string]string),
		insertClasses:  make(map[string]string),
		selectPoints:   make(map[string]string),
		updateActive:   fmt.Sprintf(updateActiveCQL, ks),
		selectActive:   fmt.Sprintf(selectActiveCQL, ks),
		insertMark:     fmt.Sprintf(insertMarkCQL, ks),
		delMark:        fmt.Sprintf(deleteMarkCQL, ks),
		selectMarks:    fmt.Sprintf(selectMarksCQL, ks),
		insertProgress: fmt.Sprintf(insertProgressCQL, ks),
		selectProgress: fmt.Sprintf(selectProgressCQL, ks),
		takeLease:      fmt.Sprintf(takeLeaseCQL, ks),
		renewLease:     fmt.Sprintf(renewLeaseCQL, ks),
		updateLinkDay:  fmt.Sprintf(updateLinkDayCQL, ks),
		selectLinkDims: fmt.Sprintf(selectLinkDimsCQL, ks),
		selectLinkRegs: fmt.Sprintf(selectLinkRegsCQL, ks),
		selectDims:     fmt.Sprintf(selectDimsCQL, ks),
		selectTopKeys:  fmt.Sprintf(selectTopKeysCQL, ks),

		updateLinkVisits: fmt.Sprintf(updateLinkVisitsCQL, ks),
		selectLinkVisits: fmt.Sprintf(selectLinkVisitsCQL, ks),

		selectShardDims:   fmt.Sprintf(selectShardDimsCQL, ks),
		selectShardRegs:   fmt.Sprintf(selectShardRegsCQL, ks),
		selectShardVisits: fmt.Sprintf(selectShardVisitsCQL, ks),
		insertLeader:      fmt.Sprintf(insertLeaderCQL, ks),
		selectLeaders:     fmt.Sprintf(selectLeadersCQL, ks),
		selectLeader:      fmt.Sprintf(selectLeaderCQL, ks),

		insertTenantLeader:  fmt.Sprintf(insertTenantLeaderCQL, ks),
		selectTenantLeaders: fmt.Sprintf(selectTenantLeadersCQL, ks),
		selectTenantLeader:  fmt.Sprintf(selectTenantLeaderCQL, ks),
		selectUniqs:         fmt.Sprintf(selectUniqsCQL, ks),

		insertErasure:    fmt.Sprintf(insertErasureCQL, ks),
		selectErasures:   fmt.Sprintf(selectErasuresCQL, ks),
		deletePartitions: deletePartitionCQL(ks, tiers),
	}
	b.finest, b.finestTable = tiers[0], pointsTable(tiers[0])
	sharded := shardedTable(b.finestTable)
	b.insertShardPoint = fmt.Sprintf(insertShardPointCQL, ks, sharded)
	b.insertShardClasses = fmt.Sprintf(insertShardClassesCQL, ks, sharded)
	b.selectShardPoints = fmt.Sprintf(selectShardPointsCQL, ks, sharded)
	for _, t := range tiers {
		table := pointsTable(t)
		b.insertPoint[table] = fmt.Sprintf(insertPointCQL, ks, table)
		b.insertClasses[table] = fmt.Sprintf(insertClassesCQL, ks, table)
		b.selectPoints[table] = fmt.Sprintf(selectPointsCQL, ks, table)
	}
	return b
}

// query is stmt with the Store's consistency and retry policy, marked
// idempotent. Writes are marked so though gocql v1's retry policy does not
// look at it (only speculative execution does): overwrites pinned to a
// timestamp are what make every retry safe.
func (b *cqlBackend) query(ctx context.Context, stmt string, args ...any) *gocql.Query {
	return b.s.Query(stmt, args...).WithContext(ctx).Consistency(b.cons).RetryPolicy(b.retry).Idempotent(true)
}

// batch is an unlogged batch with the Store's consistency and retry
// policy.
func (b *cqlBackend) batch(ctx context.Context) *gocql.Batch {
	batch := b.s.NewBatch(gocql.UnloggedBatch).WithContext(ctx)
	batch.SetConsistency(b.cons)
	batch.RetryPolicy(b.retry)
	return batch
}

func (b *cqlBackend) writePoints(ctx context.Context, rows []pointRow) error {
	a := newBatchArgs(len(rows), 13) // room for the classes, the TTL and the timestamp
	stmt := func(r *pointRow) (string, []any) {
		at := a.list(13)
		var q, classes string
		if r.table == b.finestTable {
			q, classes = b.insertShardPoint, b.insertShardClasses
			at = append(at, shared(a, 0, linkShard(r.key)), shared(a, 1, partitionOf(r.start, shardSpan(b.finest.Step))), r.key)
		} else {
			q, classes = b.insertPoint[r.table], b.insertClasses[r.table]
			at = append(at, r.key, shared(a, 1, r.bucket))
		}
		at = append(at, shared(a, 2, r.start), shared(a, 3, r.writer), r.v.Human, r.v.Bot)
		if r.v.Split() {
			o := &r.v.Other
			q, at = classes, append(at, o[0], o[1], o[2], o[3])
		}
		return q, append(at, shared(a, 4, r.ttl), shared(a, 5, r.ts))
	}
	if len(rows) == 1 {
		q, args := stmt(&rows[0])
		return b.query(ctx, q, args...).Exec()
	}
	batch := b.batch(ctx)
	batch.Entries = make([]gocql.BatchEntry, 0, len(rows))
	for i := range rows {
		q, args := stmt(&rows[i])
		batch.Entries = append(batch.Entries, gocql.BatchEntry{Stmt: q, Args: args, Idempotent: true})
	}
	return b.s.ExecuteBatch(batch)
}

// readPoints reads the rows of a partition of table; of the finest tier,
// those of its sharded table inside it too, a bucket's row of a writer
// once (shards.go).
func (b *cqlBackend) readPoints(ctx context.Context, table, key string, bucket, from, to time.Time) ([]analytics.Point, error) {
	type row struct {
		p      analytics.Point
		writer gocql.UUID
	}
	var rows []row
	read := func(q *gocql.Query) error {
		it := q.Iter()
		var r row
		o := &r.p.Other
		for it.Scan(&r.p.Start, &r.writer, &r.p.Human, &r.p.Bot, &o[0], &o[1], &o[2], &o[3]) {
			r.p.Start = r.p.Start.UTC()
			rows = append(rows, r)
		}
		return it.Close()
	}
	if err := read(b.query(ctx, b.selectPoints[table], key, bucket, from, to)); err != nil {
		return nil, err
	}
	if table == b.finestTable {
		old := len(rows)
		buckets := shardBuckets(from, to, shardSpan(b.finest.Step))
		if err := read(b.query(ctx, b.selectShardPoints, linkShard(key), buckets, key, from, to)); err != nil {
			return nil, err
		}
		if old > 0 {
			type id struct {
				start  int64
				writer gocql.UUID
			}
			seen := map[id]bool{}
			rows = slices.DeleteFunc(rows, func(r row) bool {
				k := id{r.p.Start.UnixMicro(), r.writer}
				dup := seen[k]
				seen[k] = true
				return dup
			})
		}
		slices.SortStableFunc(rows, func(x, y row) int { return x.p.Start.Compare(y.p.Start) })
	}
	out := make([]analytics.Point, len(rows))
	for i, r := range rows {
		out[i] = r.p
	}
	return out, nil
}

// writeActive writes the rows with one UPDATE of the clustering keys IN
// the list: one mutation on each replica, as an unlogged batch of one
// partition is, but a single statement for Cassandra to parse and check
// and for gocql to marshal, where a batch holds one per row. The row's
// only regular cell, listed, carries the TTL; rows an earlier release
// inserted (a row marker, no cell) read the same.
func (b *cqlBackend) writeActive(ctx context.Context, a activeRows) error {
	return b.query(ctx, b.updateActive, a.ttl, a.step, a.period, a.shard, a.keys).Exec()
}

func (b *cqlBackend) readActive(ctx context.Context, step int, period time.Time, shard int, after string, limit int) ([]string, error) {
	it := b.query(ctx, b.selectActive, step, period, shard, after, limit).Iter()
	var keys []string
	var k string
	for it.Scan(&k) {
		keys = append(keys, k)
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return keys, nil
}

func (b *cqlBackend) writeMark(ctx context.Context, r markRow) error {
	return b.query(ctx, b.insertMark, r.key, r.step, r.start, r.id, r.at, r.ttl, r.at).Exec()
}

func (b *cqlBackend) deleteMark(ctx context.Context, r markRow) error {
	return b.query(ctx, b.delMark, r.at, r.key, r.step, r.start, r.id).Exec()
}

func (b *cqlBackend) readMarks(ctx context.Context, key string) ([]rollup.Mark, error) {
	it := b.query(ctx, b.selectMarks, key).Iter()
	var (
		out   []rollup.Mark
		step  int
		start time.Time
		id    int64
		at    int64
	)
	for it.Scan(&step, &start, &id, &at) {
		out = append(out, rollup.Mark{Key: key, Step: time.Duration(step) * time.Second, Start: start.UTC(), ID: uint64(id), At: time.UnixMicro(at).UTC()})
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return out, nil
}

func (b *cqlBackend) writeProgress(ctx context.Context, step int, done time.Time) error {
	return b.query(ctx, b.insertProgress, step, done, done.UnixMicro()).Exec()
}

func (b *cqlBackend) readProgress(ctx context.Context) (rollup.Progress, error) {
	it := b.query(ctx, b.selectProgress).Iter()
	p := rollup.Progress{}
	var (
		step int
		done time.Time
	)
	for it.Scan(&step, &done) {
		p[time.Duration(step)*time.Second] = done.UTC()
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return p, nil
}

func (b *cqlBackend) lease(ctx context.Context, holder gocql.UUID, ttl int) (bool, error) {
	cur := map[string]any{}
	applied, err := b.query(ctx, b.takeLease, holder, ttl).SerialConsistency(b.serial).MapScanCAS(cur)
	if err != nil || applied {
		return applied, err
	}
	if h, ok := cur["holder"].(gocql.UUID); !ok || h != holder {
		return false, nil // held by another gateway
	}
	clear(cur)
	return b.query(ctx, b.renewLease, ttl, holder, holder).SerialConsistency(b.serial).MapScanCAS(cur)
}

// close does nothing: the session is the Pool's.
func (b *cqlBackend) close() {}
