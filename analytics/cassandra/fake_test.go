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
	"github.com/linkgate/linkgate/rollup"
)

// fakeDB models what the Store relies on from Cassandra: last write wins by
// write timestamp (a tombstone wins a tie), TTL expiry, lightweight
// transactions applied atomically, and faults that a real cluster
// produces but hardly on demand: an error before the write reaches a
// replica, an error after it was applied (a timeout whose answer was lost),
// and a write that succeeds and is applied once more later with its old
// timestamp (a gocql retry of a statement that had in fact been applied,
// arriving late). It is a model of the semantics, not of the protocol.
type fakeDB struct {
	mu       sync.Mutex
	now      time.Time // the cluster's clock: tombstones and TTL expiry
	points   map[fakePartition]map[fakeRow]fakeCell
	active   map[fakeQueue]map[string]time.Time // key → expiry
	marks    map[string]map[fakeMarkKey]fakeMark
	progress map[int]fakeProgress
	dims     map[fakeDimPart]map[fakeDimRow]fakeCell
	top      map[fakeTopPart]map[fakeTopRow]fakeCell
	leaders  map[fakeLeaderPart]map[fakeLeaderRow]fakeLeader // (tenant, day µs) → slots
	uniqs    map[fakeDimPart]map[[2]int64]fakeCell           // (day µs, reg) → rho
	holder   gocql.UUID
	leaseEnd time.Time
	late     []func()              // duplicates to apply later (applyLate)
	erasures map[string]erasureRow // erase_fake_test.go

	fault func(op string) fault // nil: no faults
	// follow, when set, is the cluster's clock: now is set from it at
	// every operation.
	follow func() time.Time

	partitionsRead int
	rowsRead       int // rows returned by readPoints: what reads and the rollup pay for
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

type fakeDimPart struct {
	key    string
	bucket int64
}

type fakeDimRow struct {
	dim    int
	day    int64
	value  string
	writer gocql.UUID
}

// writeLinks applies the partitions of a batch, each as one mutation: a
// fault fails or applies the whole batch.
func (db *fakeDB) writeLinks(ctx context.Context, parts []linkPart) (int, error) {
	for _, p := range parts {
		for _, r := range p.regs {
			if r.ttl <= 0 || r.key != p.key || !r.bucket.Equal(p.bucket) || !partitionOf(r.day, dimSpan).Equal(r.bucket) {
				panic("fake: a register without TTL, or in another partition than its part's")
			}
		}
		for _, r := range p.visits {
			if r.ttl <= 0 || r.ts <= 0 || r.count <= 0 || r.key != p.key || !partitionOf(r.day, dimSpan).Equal(p.bucket) {
				panic("fake: a link's visits without TTL, timestamp or count, or in another partition than its part's")
			}
		}
		for _, r := range p.dims {
			if r.ttl <= 0 || r.ts <= 0 {
				panic("fake: a breakdown row without TTL or timestamp")
			}
			if r.key != p.key || !r.bucket.Equal(p.bucket) || !partitionOf(r.day, dimSpan).Equal(r.bucket) {
				panic("fake: a breakdown in another partition than its part's, or in the wrong one")
			}
		}
	}
	return linkRowCount(parts), db.do(ctx, "dims", func() {
		for _, p := range parts {
			db.applyLink(p)
		}
	})
}

// linkRowCount is how many link_days rows a statement of parts writes,
// what cqlBackend.writeLinks returns.
func linkRowCount(parts []linkPart) int {
	rows := 0
	for _, p := range parts {
		rows += len(p.rows())
	}
	return rows
}

func (db *fakeDB) applyLink(p linkPart) {
	pk := fakeDimPart{p.key, p.bucket.UnixMicro()}
	if db.dims[pk] == nil {
		db.dims[pk] = map[fakeDimRow]fakeCell{}
	}
	if db.uniqs[pk] == nil {
		db.uniqs[pk] = map[[2]int64]fakeCell{}
	}
	for _, r := range p.regs {
		k := [2]int64{r.day.UnixMicro(), int64(r.reg)}
		c, exists := db.uniqs[pk][k]
		db.uniqs[pk][k] = put(c, exists, fakeCell{v: analytics.Visits{Human: int64(r.rho)}, ts: int64(r.rho), expires: db.expiry(r.ttl)})
	}
	for _, r := range p.dims {
		k := fakeDimRow{r.dim, r.day.UnixMicro(), r.value, r.writer}
		c, exists := db.dims[pk][k]
		db.dims[pk][k] = put(c, exists, fakeCell{v: analytics.Visits{Human: r.count}, ts: r.ts, expires: db.expiry(r.ttl)})
	}
	for _, r := range p.visits {
		k := fakeDimRow{fakeVisitsDim, r.day.UnixMicro(), "", r.writer}
		c, exists := db.dims[pk][k]
		db.dims[pk][k] = put(c, exists, fakeCell{v: analytics.Visits{Human: r.count}, ts: r.ts, expires: db.expiry(r.ttl)})
	}
}

// fakeVisitsDim is the dim of the fake's cell of a link_days row's visits.
const fakeVisitsDim = -1

func (db *fakeDB) readLinkVisits(ctx context.Context, bucket time.Time, keys []string, from, to time.Time) ([]topRow, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(keys) == 0 || len(keys) > maxTopKeys || !partitionOf(from, dimSpan).Equal(bucket) || to.After(bucket.Add(dimSpan)) {
		panic("fake: a read of links' visits without keys, or of too many, or across partitions")
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	db.tick()
	var out []topRow
	for _, key := range keys {
		for k, c := range db.dims[fakeDimPart{key, bucket.UnixMicro()}] {
			if k.dim == fakeVisitsDim && k.day >= from.UnixMicro() && k.day < to.UnixMicro() && !c.dead && db.live(c.expires) {
				out = append(out, topRow{day: time.UnixMicro(k.day).UTC(), key: key, writer: k.writer, count: c.v.Human})
			}
		}
	}
	return out, nil
}

func (db *fakeDB) readDims(ctx context.Context, key string, bucket time.Time, dim int, from, to time.Time) ([]dimReadRow, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	db.tick()
	db.partitionsRead++
	var out []dimReadRow
	for k, c := range db.dims[fakeDimPart{key, bucket.UnixMicro()}] {
		if k.dim == dim && k.day >= from.UnixMicro() && k.day < to.UnixMicro() && !c.dead && db.live(c.expires) {
			out = append(out, dimReadRow{day: time.UnixMicro(k.day).UTC(), value: k.value, writer: k.writer, count: c.v.Human})
		}
	}
	return out, nil
}

type fakeTopPart struct {
	day   int64
	shard int
}

type fakeTopRow struct {
	key    string
	writer gocql.UUID
}

// writeTop writes rows of top_days, which nothing writes any more: the
// rows a release before link_days' visits left, for the tests that read
// them.
func (db *fakeDB) writeTop(ctx context.Context, rows []topRow) error {
	p := fakeTopPart{rows[0].day.UnixMicro(), rows[0].shard}
	for _, r := range rows {
		if r.ttl <= 0 || r.ts <= 0 || (fakeTopPart{r.day.UnixMicro(), r.shard}) != p || shardOf(r.key) != r.shard {
			panic("fake: a top row without TTL or timestamp, or a batch across partitions")
		}
	}
	return db.do(ctx, "top", func() {
		if db.top[p] == nil {
			db.top[p] = map[fakeTopRow]fakeCell{}
		}
		for _, r := range rows {
			k := fakeTopRow{r.key, r.writer}
			c, exists := db.top[p][k]
			db.top[p][k] = put(c, exists, fakeCell{v: analytics.Visits{Human: r.count}, ts: r.ts, expires: db.expiry(r.ttl)})
		}
	})
}

func (db *fakeDB) readTopKeys(ctx context.Context, day time.Time, shard int, keys []string) ([]topRow, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(keys) == 0 || len(keys) > maxTopKeys {
		panic("fake: a read of top_days without keys, or of too many")
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	db.tick()
	var out []topRow
	for k, c := range db.top[fakeTopPart{day.UnixMicro(), shard}] {
		if slices.Contains(keys, k.key) && !c.dead && db.live(c.expires) {
			out = append(out, topRow{key: k.key, writer: k.writer, count: c.v.Human})
		}
	}
	return out, nil
}

type fakeLeaderPart struct {
	tenant string
	day    int64
}

type fakeLeaderRow struct {
	writer gocql.UUID
	slot   int
}

type fakeLeader struct {
	key string
	fakeCell
}

func (db *fakeDB) writeLeaders(ctx context.Context, rows []leaderRow) error {
	for _, r := range rows {
		if r.ttl <= 0 || r.ts <= 0 || !r.day.Equal(rows[0].day) || r.tenant != rows[0].tenant || r.slot < 0 || r.slot >= topLeaders {
			panic("fake: a top_leaders row without TTL or timestamp, out of the slots, or a batch across partitions")
		}
	}
	return db.do(ctx, "leaders", func() {
		day := fakeLeaderPart{rows[0].tenant, rows[0].day.UnixMicro()}
		if db.leaders[day] == nil {
			db.leaders[day] = map[fakeLeaderRow]fakeLeader{}
		}
		for _, r := range rows {
			k := fakeLeaderRow{r.writer, r.slot}
			c, exists := db.leaders[day][k]
			n := fakeLeader{r.key, fakeCell{v: analytics.Visits{Human: r.count}, ts: r.ts, expires: db.expiry(r.ttl)}}
			// Last write wins per cell; a tie goes to the greater value,
			// as Cassandra breaks it.
			if !exists || n.ts > c.ts || n.ts == c.ts && (n.key > c.key || n.key == c.key && n.v.Human > c.v.Human) {
				db.leaders[day][k] = n
			}
		}
	})
}

func (db *fakeDB) readLeaders(ctx context.Context, tenant string, day time.Time) ([]leaderRow, error) {
	return db.readLeader(ctx, tenant, day, gocql.UUID{})
}

// readLeader returns the slots of writer, or of all writers for the zero
// UUID, in clustering order.
func (db *fakeDB) readLeader(ctx context.Context, tenant string, day time.Time, writer gocql.UUID) ([]leaderRow, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	db.tick()
	var out []leaderRow
	for k, c := range db.leaders[fakeLeaderPart{tenant, day.UnixMicro()}] {
		if (writer == gocql.UUID{} || k.writer == writer) && db.live(c.expires) {
			out = append(out, leaderRow{tenant: tenant, day: day, writer: k.writer, slot: k.slot, key: c.key, count: c.v.Human})
		}
	}
	slices.SortFunc(out, func(a, b leaderRow) int {
		return cmp.Or(slices.Compare(a.writer[:], b.writer[:]), cmp.Compare(a.slot, b.slot))
	})
	return out, nil
}

func (db *fakeDB) readUniques(ctx context.Context, key string, bucket, from, to time.Time) ([]uniqRow, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	db.tick()
	var out []uniqRow
	for k, c := range db.uniqs[fakeDimPart{key, bucket.UnixMicro()}] {
		if k[0] >= from.UnixMicro() && k[0] < to.UnixMicro() && !c.dead && db.live(c.expires) {
			out = append(out, uniqRow{reg: int(k[1]), rho: int(c.v.Human)})
		}
	}
	return out, nil
}

type fakeQueue struct {
	step   int
	period int64
	shard  int
}

type fakeMarkKey struct {
	step  int
	start int64
	id    int64
}

type fakeMark struct {
	at      int64 // at_us, and the write timestamp
	ts      int64
	expires time.Time
	dead    bool
}

type fakeProgress struct {
	done time.Time
	ts   int64
}

var errFault = errors.New("fake: injected fault (timeout)")

func newFakeDB(now time.Time) *fakeDB {
	return &fakeDB{now: now, points: make(map[fakePartition]map[fakeRow]fakeCell), active: map[fakeQueue]map[string]time.Time{},
		marks: map[string]map[fakeMarkKey]fakeMark{}, progress: map[int]fakeProgress{}, dims: map[fakeDimPart]map[fakeDimRow]fakeCell{},
		top: map[fakeTopPart]map[fakeTopRow]fakeCell{}, leaders: map[fakeLeaderPart]map[fakeLeaderRow]fakeLeader{}, uniqs: map[fakeDimPart]map[[2]int64]fakeCell{}}
}

// do runs apply under the fault that the fault function picks for op.
func (db *fakeDB) do(ctx context.Context, op string, apply func()) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	db.tick()
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

// tick moves now to the followed clock. Call it holding mu.
func (db *fakeDB) tick() {
	if db.follow != nil {
		db.now = db.follow()
	}
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

// expiry returns when a cell written now with ttl seconds expires: never
// (the zero time) for 0.
func (db *fakeDB) expiry(ttl int) time.Time {
	if ttl < 0 {
		panic("fake: negative TTL")
	}
	if ttl == 0 {
		return time.Time{}
	}
	return db.now.Add(time.Duration(ttl) * time.Second)
}

// live says whether a cell that expires at exp is alive now.
func (db *fakeDB) live(exp time.Time) bool { return exp.IsZero() || db.now.Before(exp) }

func (db *fakeDB) writePoints(ctx context.Context, rows []pointRow) error {
	for _, r := range rows {
		if r.ts <= 0 {
			panic("fake: write without a timestamp")
		}
		if table := pointsTableOf(r.table); table.Expires() != (r.ttl > 0) {
			panic("fake: a TTL on a table that keeps forever, or none on one that expires: " + r.table)
		}
	}
	return db.do(ctx, "point", func() {
		for _, r := range rows {
			pk := fakePartition{r.table, r.key, r.bucket.UnixMicro()}
			if db.points[pk] == nil {
				db.points[pk] = make(map[fakeRow]fakeCell)
			}
			k := fakeRow{r.start.UnixMicro(), r.writer}
			c, exists := db.points[pk][k]
			db.points[pk][k] = put(c, exists, fakeCell{v: r.v, ts: r.ts, expires: db.expiry(r.ttl)})
		}
	})
}

func (db *fakeDB) writeActive(ctx context.Context, a activeRows) error {
	q := fakeQueue{a.step, a.period.UnixMicro(), a.shard}
	if a.ttl <= 0 {
		panic("fake: Active entries without TTL")
	}
	for _, k := range a.keys {
		if shardOf(k) != a.shard {
			panic("fake: an Active entry in the wrong shard")
		}
	}
	// One statement of one partition is one mutation: all of it or none.
	return db.do(ctx, "active", func() {
		if db.active[q] == nil {
			db.active[q] = map[string]time.Time{}
		}
		for _, k := range a.keys {
			db.active[q][k] = db.expiry(a.ttl)
		}
	})
}

func (db *fakeDB) readActive(ctx context.Context, step int, period time.Time, shard int, after string, limit int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	db.tick()
	var keys []string
	for k, exp := range db.active[fakeQueue{step, period.UnixMicro(), shard}] {
		if k > after && db.live(exp) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys[:min(limit, len(keys))], nil
}

func (db *fakeDB) writeMark(ctx context.Context, r markRow) error {
	if r.ttl <= 0 || r.at <= 0 {
		panic("fake: a mark without TTL or timestamp")
	}
	return db.do(ctx, "mark", func() {
		if db.marks[r.key] == nil {
			db.marks[r.key] = map[fakeMarkKey]fakeMark{}
		}
		k := fakeMarkKey{r.step, r.start.UnixMicro(), r.id}
		old, exists := db.marks[r.key][k]
		if exists && (old.ts > r.at || old.ts == r.at && old.dead) {
			return
		}
		db.marks[r.key][k] = fakeMark{at: r.at, ts: r.at, expires: db.expiry(r.ttl)}
	})
}

func (db *fakeDB) deleteMark(ctx context.Context, r markRow) error {
	return db.do(ctx, "unmark", func() {
		if db.marks[r.key] == nil {
			db.marks[r.key] = map[fakeMarkKey]fakeMark{}
		}
		k := fakeMarkKey{r.step, r.start.UnixMicro(), r.id}
		if old, exists := db.marks[r.key][k]; exists && old.ts > r.at {
			return // a later write: the tombstone is older
		}
		db.marks[r.key][k] = fakeMark{ts: r.at, dead: true}
	})
}

func (db *fakeDB) readMarks(ctx context.Context, key string) ([]rollup.Mark, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	db.tick()
	var out []rollup.Mark
	for k, m := range db.marks[key] {
		if !m.dead && db.live(m.expires) {
			out = append(out, rollup.Mark{Key: key, Step: time.Duration(k.step) * time.Second, Start: time.UnixMicro(k.start).UTC(),
				ID: uint64(k.id), At: time.UnixMicro(m.at).UTC()})
		}
	}
	return out, nil
}

func (db *fakeDB) writeProgress(ctx context.Context, step int, done time.Time) error {
	return db.do(ctx, "progress", func() {
		ts := done.UnixMicro()
		if old, ok := db.progress[step]; !ok || ts >= old.ts {
			db.progress[step] = fakeProgress{done: done.UTC(), ts: ts}
		}
	})
}

func (db *fakeDB) readProgress(ctx context.Context) (rollup.Progress, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	p := rollup.Progress{}
	for step, v := range db.progress {
		p[time.Duration(step)*time.Second] = v.done
	}
	return p, nil
}

func (db *fakeDB) lease(ctx context.Context, holder gocql.UUID, ttl int) (bool, error) {
	var held bool
	err := db.do(ctx, "lease", func() {
		if db.holder == holder || db.holder == (gocql.UUID{}) || !db.now.Before(db.leaseEnd) {
			db.holder, db.leaseEnd = holder, db.now.Add(time.Duration(ttl)*time.Second)
			held = true
		}
	})
	return held, err
}

// pointsTableOf returns the tier of a points table of the default tiers.
func pointsTableOf(table string) rollup.Tier {
	tiers := rollup.DefaultTiers()
	total, _ := rollup.TotalTier(tiers)
	for _, t := range append(tiers, total) {
		if pointsTable(t) == table {
			return t
		}
	}
	for _, t := range exactTiersForModel {
		if pointsTable(t) == table {
			return t
		}
	}
	panic("fake: unknown table " + table)
}

// exactTiersForModel are the conformance suite's RollupExact tiers, whose
// tables the model also serves.
var exactTiersForModel = []rollup.Tier{
	{Step: time.Minute, Retention: rollup.Day}, {Step: 5 * time.Minute, Retention: 2 * rollup.Day},
	{Step: time.Hour, Retention: 4 * rollup.Day}, {Step: 6 * time.Hour, Retention: 8 * rollup.Day},
	{Step: rollup.Day, Retention: rollup.Forever},
}

func (db *fakeDB) readPoints(ctx context.Context, table, key string, bucket, from, to time.Time) ([]analytics.Point, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	db.tick()
	db.partitionsRead++
	type row struct {
		start  int64
		writer gocql.UUID
		v      analytics.Visits
	}
	var rows []row
	for k, c := range db.points[fakePartition{table, key, bucket.UnixMicro()}] {
		if c.dead || !db.live(c.expires) || k.start < from.UnixMicro() || k.start >= to.UnixMicro() {
			continue
		}
		if got := tierPartition(pointsTableOf(table), time.UnixMicro(k.start)).UnixMicro(); got != bucket.UnixMicro() {
			panic("fake: row written to the wrong partition")
		}
		rows = append(rows, row{k.start, k.writer, c.v})
	}
	slices.SortFunc(rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(a.start, b.start), slices.Compare(a.writer[:], b.writer[:]))
	})
	db.rowsRead += len(rows)
	out := make([]analytics.Point, len(rows))
	for i, r := range rows {
		out[i] = analytics.Point{Start: time.UnixMicro(r.start).UTC(), Visits: r.v}
	}
	return out, nil
}

func (db *fakeDB) close() {}
