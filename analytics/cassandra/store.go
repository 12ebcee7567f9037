// Package cassandra is the analytics store on Apache Cassandra, through
// gocql: the store several gateway processes share.
//
// # Schema
//
// Open creates the keyspace (SimpleStrategy with the configured
// replication_factor; operators who need NetworkTopologyStrategy create it
// themselves, see configs/cassandra.cql) and the tables when they are
// missing. SchemaCQL prints the same CQL.
//
// Each tier has a table of its own, points_<step> (points_1m … points_1w),
// rather than one table with the step in the key: every cell of a table
// then carries the same TTL, the tier's retention (set per write with USING
// TTL, counted from the end of the bucket), so TimeWindowCompactionStrategy
// drops whole expired SSTables instead of keeping a five-year week row
// alive in an SSTable of two-day minute rows. A row is
//
//	PRIMARY KEY ((short_key, bucket), start, writer) → human, bot,
//	    preview, scanner, prefetch, internal
//
// where bot counts every visit that is not a person's and the last four
// split it by class (analytics.Visits.Other): they are written only in a
// row that has such visits, so the row of an all-human or declared-bot
// bucket is what it was before classes were counted, and a row of then
// reads as its bots all declared (Open adds the columns to tables an
// earlier release made: migrations),
// where start is the bucket's start and bucket the start of a period that
// holds a bounded number of buckets (partitionSpan): a day of minutes, a
// week of 5 minutes, 30 days of hours, 366 days of days, 521 weeks of weeks.
// So no partition grows without bound (≤ 2,016 rows per writer), load
// spreads by short_key, and a one-year daily curve reads at most two
// partitions. Points also clamps the range to the tier's retention around
// now, so no query reads more than a handful of partitions however long
// the range. The all-time tier's table, points_total, has no TTL and one
// partition per link. The finest tier's rows are written to a table of
// the same columns partitioned by shards of links, which readers read
// beside it (shards.go). The rollup's own tables are described below.
//
// # Retry safety: one writer id per batch
//
// Flushes write the finest tier only (and, for the odd count too old for
// it, the coarser tier that still keeps it: rollup.Plan.Place). Cassandra
// counters can neither be retried safely nor carry a TTL. Instead each
// batch is written under a writer id of its own, derived from the batch's
// identity (analytics.Batch Writer and Seq, and First for a batch folding
// several intervals) as a name-based UUID (version 5, SHA-1, writerSpace), and each of its counts is one plain INSERT of
// the batch's delta into the row (link, bucket, start, that writer id).
// Writing the same batch again, whether a gocql retry, a resend by the
// flusher after a failed Write, or a replay of the journal by another
// process after a crash, overwrites the same rows with the same values:
// it can never count twice, and no process keeps any state about what it
// wrote. (The flusher resends a failed batch with the same Counts, so the
// rows are the same; see analytics.Writer.) A batch without an identity
// gets a random writer id: it is applied every time it is sent.
//
// Every such statement carries USING TIMESTAMP pinned to the batch's At in
// microseconds; the rows of one batch are written with the same values
// whenever they are written, so the order in which copies land does not
// matter. gocql v1's retry policy does not look at Query.Idempotent (only
// speculative execution does); statements are marked idempotent for what
// it is worth, but it is the row-per-batch design that makes retries safe.
//
// Readers sum the rows of all writers of a bucket: counts from several
// gateway processes, and from every flush of each, add up. The price is
// rows: a link visited in every flush interval gets one row per interval in
// each of its minutes (6 with 10 s flushes, 60 with 1 s), where a
// cumulative row per process held one. Reads of the minute tier and the
// rollup of minutes into 5 minutes read that many more rows, in the same
// partitions and the same statements (TestStatementsPerVisit measures
// both); the coarser tiers, written by the rollup, have one row per bucket
// as before. The scheme it replaces kept a cumulative row per process and
// bucket and the row's committed value in memory, which a process
// replaying another's journal cannot know: it counted a replayed interval
// twice when the lost write had in fact been applied.
//
// # Rollup
//
// The Store is a rollup.Store: the rollup worker reads the finer tiers
// (Points), lists the links to roll from rollup_active, and writes each
// coarse bucket as one row under a fixed writer id (rollupWriter), beside
// the flushed rows of the same bucket that readers sum with it.
//
// Several gateways share one cluster, so several workers could roll the
// same bucket from different snapshots of the finer tier, and their writes
// land in any order. A rolled row is therefore written USING TIMESTAMP the
// bucket's end in microseconds plus its visits (human + bot): counts only
// grow, so a value computed from fresher data has more visits and a later
// timestamp, and last-write-wins keeps it whatever the order of arrival (a
// bucket's visits add at most seconds to its end for any realistic count,
// so TimeWindowCompactionStrategy still files the row by its time). A
// value computed after the finer tier began to expire is smaller and loses
// the same way. No lightweight transaction is needed for correctness; the
// lease (rollup_lease, LWTs with a TTL) only keeps the gateways from doing
// the same work at once: the worker of the gateway holding it rolls, the
// others stand by and take over within the lease's TTL when it stops.
//
// The Active entries that list a period's links are written once per link
// and batch period per process (the flusher remembers what it stored), in
// statements of one partition (up to maxPartitionRows, 500, entries each,
// an UPDATE of the keys IN a list):
// with the default tiers a link visited every 10 s costs one such row an
// hour, not one per flush. Their partitions are (step, period, shard), the
// shard a hash of the link (16 shards), so a period's links spread over 16
// partitions and the worker reads each in pages; rows expire (USING TTL)
// once the data they point to has. Marks live in rollup_marks, one
// partition per link, read by every stats query of the link (usually
// empty); a mark's row is written and deleted USING TIMESTAMP its own
// creation time, so the delete always shadows it (a tombstone wins a
// timestamp tie) whatever the clocks, and a mark made meanwhile for the
// same bucket, with another id, stays. rollup_progress rows are written
// USING TIMESTAMP their value, so progress never goes back.
//
// All-time totals are the all-time tier (points_total, no TTL, one
// partition per link) summed with what is not rolled into it yet: see
// analytics.NewReader. Nothing is written per link per flush for them.
//
// # Connection
//
// Open returns at once; the session is connected in the background with
// retries and backoff, so a gateway starts while Cassandra is still
// booting. Until then Write and the readers return an error wrapping
// ErrNotConnected (the flusher keeps the counts and retries; the stats API
// answers 503). Host selection is token aware over round robin, statements
// are prepared (gocql prepares every statement with bind markers once per
// connection), consistency comes from the configuration (lightweight
// transactions use LOCAL_SERIAL with LOCAL_* consistencies, SERIAL
// otherwise) and failed statements are retried 3 times with exponential
// backoff by gocql (retryPolicy). A Write runs its statements concurrently,
// at most 32 at a time, the Active entries and marks before the counts they
// announce. The counts go several rows a statement (pack.go), a shard's
// partition of them together (shards.go); the Active entries of one
// partition in a statement. Statements() counts what was sent, by kind.
package cassandra

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/internal/cqlsession"
	"github.com/linkgate/linkgate/rollup"
)

const (
	// parallel bounds the statements of one Write in flight at once.
	parallel = 32
	// maxTTL is Cassandra's largest TTL, 20 years, in seconds.
	maxTTL = 20 * 365 * 24 * 3600
)

// maxExpiry is the last second at which Cassandra 4.0 can make a cell
// expire: it keeps the expiry in 32-bit seconds and refuses a write whose
// TTL ends later (CASSANDRA-14092), whatever the TTL. So a TTL ends a day
// before it at the latest (ttlLimit): the node's clock may differ from
// ours, and a statement may be retried later.
var maxExpiry = time.Unix(math.MaxInt32-1, 0)

// ttlLimit is the largest TTL a write made now may carry, in seconds.
func ttlLimit(now time.Time) int64 {
	return min(maxTTL, int64(maxExpiry.Sub(now)/time.Second)-24*3600)
}

var (
	// ErrNotConnected is wrapped by the errors of a Store whose session is
	// not connected, or whose schema is not created, yet.
	ErrNotConnected = cqlsession.ErrNotConnected
	// ErrClosed is returned by a Store after Close.
	ErrClosed = errors.New("cassandra: store closed")
)

var (
	_ analytics.Store = (*Store)(nil)
	_ rollup.Store    = (*Store)(nil)
	_ rollup.Readier  = (*Store)(nil)
	_ rollup.Leaser   = (*Store)(nil)
)

// rollupWriter is the writer id of rolled rows. Random writer ids are
// version 4 UUIDs; this one has version 0, so no process ever draws it.
var rollupWriter = gocql.UUID{'l', 'i', 'n', 'k', 'g', 'a', 't', 'e', 'r', 'o', 'l', 'l', 'u', 'p', 0, 0}

// Store is the analytics store on Cassandra. It is safe for concurrent use;
// Writes are serialized (the flusher makes one at a time anyway). Use Open.
type Store struct {
	plan  *rollup.Plan // the tiers, the all-time one included
	tiers map[time.Duration]rollup.Tier
	log   *slog.Logger
	now   func() time.Time // the clock Points clamps ranges with and Apply's TTLs count from
	id    gocql.UUID       // this process, as the lease's holder

	conn *cqlsession.Handle // the cluster's session; nil for a Store on a test backend
	cons gocql.Consistency
	ser  gocql.SerialConsistency
	ks   string

	mu     sync.RWMutex
	be     backend // nil until connected
	closed bool

	stmts statements

	wmu sync.Mutex // serializes Write

	dimRetention atomic.Int64                             // how long breakdowns are kept, ns
	tenantKeep   atomic.Pointer[map[string]time.Duration] // tenants' retentions (retention.go)

	leaders leaderSets // the top lists this Store writes (top.go)

	erased eraseState // the erasures, and the epochs they put keys in (erase.go)
}

// writerSpace is the namespace of the batch writer ids (the name-based
// UUIDs of RFC 9562, section 5.5): a fixed random UUID, so that every
// process derives the same id from the same batch identity.
var writerSpace = gocql.UUID{0x6c, 0x2e, 0x93, 0x1a, 0x47, 0x0b, 0x4f, 0x8d, 0x9a, 0x51, 0x3c, 0xe2, 0x70, 0x16, 0xd8, 0x5b}

// batchWriter returns the writer id of the rows of the batch (writer,
// first, seq): a version 5 UUID of them, the same in every process. A
// batch of one interval (first == seq) hashes (writer, seq) only; a batch
// folding the intervals first to seq hashes first too, so that it never
// shares rows with a batch of one of them.
func batchWriter(writer string, first, seq uint64) gocql.UUID {
	h := sha1.New()
	h.Write(writerSpace[:])
	h.Write(binary.AppendUvarint(nil, uint64(len(writer)))) // no two (writer, seq) hash the same bytes
	h.Write([]byte(writer))
	h.Write(binary.BigEndian.AppendUint64(nil, seq))
	if first != seq {
		h.Write(binary.BigEndian.AppendUint64(nil, first))
	}
	var u gocql.UUID
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // the RFC variant
	return u
}

// Timeout bounds each statement the Store sends (gocql retries a failed
// one 3 times: retryPolicy), and each dial.
const Timeout = 5 * time.Second

// Open returns a Store for the keyspace that cfg names, with the tiers of
// plan, on the session pool holds for cfg's cluster (a pool of its own
// when nil), which connects in the background, retrying with backoff, and
// creates the keyspace and tables when missing. It does not wait for the
// network, and ctx only bounds Open itself. cfg and plan are those of a
// compiled analytics.Plan: analytics.Compile checked the keyspace name
// (which the schema's CQL holds unquoted), the hosts, the replication
// factor, the consistency and the tiers, so Open fails only when ctx is
// done. A nil log discards. The caller must call Close.
func Open(ctx context.Context, pool *cqlsession.Pool, cfg analytics.Cassandra, plan *rollup.Plan, log *slog.Logger) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cassandra: open: %w", err)
	}
	cons, err := gocql.ParseConsistencyWrapper(cfg.Consistency)
	if err != nil {
		return nil, fmt.Errorf("cassandra: consistency: %w", err)
	}
	s := newStore(plan, log)
	s.cons, s.ks = cons, cfg.Keyspace
	if cons == gocql.LocalQuorum || cons == gocql.LocalOne {
		s.ser = gocql.LocalSerial
	}
	if pool == nil {
		pool = cqlsession.NewPool(log)
	}
	s.conn = pool.Open(cqlsession.Config{Hosts: cfg.Hosts, Timeout: Timeout}, "analytics",
		append(schema(cfg.Keyspace, cfg.ReplicationFactor, plan.Retention()), migrations(cfg.Keyspace, plan.Retention())...))
	return s, nil
}

// newStore returns a Store that is not connected, with no session.
func newStore(plan *rollup.Plan, log *slog.Logger) *Store {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Store{
		plan:  plan,
		tiers: make(map[time.Duration]rollup.Tier, len(plan.Tiers())),
		log:   log.With("store", "cassandra"),
		now:   time.Now,
		id:    gocql.MustRandomUUID(),
		cons:  gocql.Quorum,
		ser:   gocql.Serial,
	}
	for _, t := range plan.Tiers() {
		s.tiers[t.Step] = t
	}
	s.dimRetention.Store(int64(analytics.DefaultDimRetentionDays * rollup.Day))
	return s
}

// retryPolicy retries a statement 3 times with exponential backoff: on the
// same coordinator when the cluster answered a timeout, a write failure
// (replicas timing out among themselves) or Unavailable (the coordinator is
// fine; the replicas were slow or down), on the next host
// otherwise. gocql's ExponentialBackoffRetryPolicy always asks for the next
// host, so on a one-node cluster, or once every replica was tried, it would
// never retry at all. Retrying a write is safe here whatever its outcome:
// see the package documentation.
type retryPolicy struct {
	gocql.ExponentialBackoffRetryPolicy
}

func (r *retryPolicy) GetRetryType(err error) gocql.RetryType {
	switch err.(type) {
	case *gocql.RequestErrWriteTimeout, *gocql.RequestErrReadTimeout, *gocql.RequestErrWriteFailure, *gocql.RequestErrUnavailable:
		return gocql.Retry
	}
	return gocql.RetryNextHost
}

// Ready returns nil once the store is connected and its schema is in place,
// or the reason it is not: for readiness probes.
func (s *Store) Ready() error {
	_, err := s.backend()
	return err
}

// State says whether the store is connected and, when not, why, as the
// embedded store says it: the gateway's health detail reads it. The
// connection's part is its cluster's, which the certificate storage
// shares when it names the same one. Open stays set after Close.
func (s *Store) State() analytics.StoreState {
	_, err := s.backend()
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := analytics.StoreState{Open: s.be != nil, Err: err}
	if s.conn != nil {
		cs := s.conn.State()
		st.Open = st.Open || cs.Connected
		st.Attempts = cs.Attempts
	}
	return st
}

// backend returns the connected backend, counting the statements sent
// through it.
func (s *Store) backend() (backend, error) {
	s.mu.RLock()
	be, closed := s.be, s.closed
	s.mu.RUnlock()
	switch {
	case closed:
		return nil, ErrClosed
	case be != nil:
		return counted{be, &s.stmts}, nil
	case s.conn == nil:
		return nil, fmt.Errorf("%w: no session", ErrNotConnected)
	}
	sess, err := s.conn.Session()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.be == nil && !s.closed {
		s.be = newCQL(sess, s.ks, s.plan.Tiers(), s.cons, s.ser)
		s.log.Info("cassandra connected")
	}
	be, closed = s.be, s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	return counted{be, &s.stmts}, nil
}

// Close releases the store's session (closed once no store of the
// gateway uses it). It reports no error. Calls after the first do
// nothing.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.closed = true
	s.mu.Unlock()
	if !closed && s.conn != nil {
		s.conn.Close()
	}
	return nil
}

// Write implements analytics.Writer: see the package documentation. The
// Active entries and marks are written first, the counts once they all
// succeeded.
func (s *Store) Write(ctx context.Context, b analytics.Batch) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cassandra: write: %w", err)
	}
	be, err := s.backend()
	if err != nil {
		return err
	}
	if b.At.IsZero() {
		return errors.New("cassandra: write: batch without a flush time (At)")
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if b, err = s.unerased(ctx, be, b); err != nil {
		return fmt.Errorf("cassandra: write: %w", err)
	}
	first, err := s.announce(b.Active, b.Marks, b.At)
	if err != nil {
		return fmt.Errorf("cassandra: write: %w", err)
	}
	ops, err := s.prepare(b)
	if err != nil {
		return err
	}
	if be, err = s.backend(); err != nil {
		return err // closed while this Write waited
	}
	// The links' statements are prepared while the Active entries and the
	// counts are sent: at 100,000 links that is about a second of this
	// process's work, which the cluster would otherwise wait for.
	var (
		lops   []op
		lerr   error
		linked = make(chan struct{})
	)
	go func() {
		defer close(linked)
		lops, lerr = s.prepareLinks(ctx, be, b)
	}()
	run := func(list []op) error {
		return runAll(ctx, len(list), func(ctx context.Context, i int) error { return list[i](ctx, be) })
	}
	err = run(first)
	if err == nil {
		err = run(ops)
	}
	<-linked
	if lerr != nil {
		return lerr
	}
	if err == nil {
		err = run(lops)
	}
	if n := len(first) + len(ops) + len(lops); err != nil {
		if timedOut(err) {
			return fmt.Errorf("cassandra: write %d rows: %w: %w", n, analytics.ErrTimeout, err)
		}
		return fmt.Errorf("cassandra: write %d rows: %w", n, err)
	}
	return nil
}

// WritesParts implements analytics.PartWriter: a part of a batch writes
// the rows the whole writes (under the batch's writer id), no others.
func (s *Store) WritesParts() {}

var _ analytics.PartWriter = (*Store)(nil)

// timedOut says whether err is the cluster running out of time (its
// replicas' write or read timeout, replicas failing a write by timing out
// among themselves, a request never answered, the Write's deadline) rather
// than refusing.
func timedOut(err error) bool {
	var wt *gocql.RequestErrWriteTimeout
	var rt *gocql.RequestErrReadTimeout
	var wf *gocql.RequestErrWriteFailure
	switch {
	case errors.As(err, &wt), errors.As(err, &rt), errors.Is(err, gocql.ErrTimeoutNoResponse), errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.As(err, &wf):
		// "Operation failed - received 1 responses and 2 failures:
		// TIMEOUT from /127.0.0.12:7000, ...": overloaded replicas.
		return strings.Contains(wf.Message(), "TIMEOUT")
	}
	return false
}

// op is one statement.
type op func(context.Context, backend) error

// announce returns the statements that store Active entries and marks made
// at at: the entries of one partition (step, period, shard) up to
// maxPartitionRows a statement, so that announcing every link at the first
// flush of an hour costs a few hundred statements; marks one statement each
// (they are rare: late counts only).
func (s *Store) announce(as []rollup.Active, ms []rollup.Mark, at time.Time) ([]op, error) {
	type partition struct {
		step   int
		period int64 // ms, as Cassandra keeps a timestamp
		shard  int
		ttl    int // the same for a partition's entries: a function of step, period and at
	}
	type entry struct {
		partition
		key string
	}
	entries := make([]entry, 0, len(as))
	for _, a := range as {
		src, span, err := s.source(a.Step)
		if err != nil {
			return nil, fmt.Errorf("active %q: %w", a.Key, err)
		}
		e := entry{partition{seconds(a.Step), a.Period.UnixMilli(), shardOf(a.Key), ttlOf(a.Period.Add(span+src.Retention).Sub(at) + span)}, a.Key}
		if e.ttl <= 0 {
			continue // its data has expired: nothing left to roll (and TTL 0 would keep it forever)
		}
		entries = append(entries, e)
	}
	var ops []op
	keys := make([]string, 0, len(entries)) // every statement's keys, cut from one array
	for _, part := range groupByPartition(entries, func(e entry) partition { return e.partition }) {
		for _, chunk := range chunks(part) {
			p, from := chunk[0].partition, len(keys)
			for _, e := range chunk {
				keys = append(keys, e.key)
			}
			a := activeRows{step: p.step, period: time.UnixMilli(p.period).UTC(), shard: p.shard, ttl: p.ttl, keys: keys[from:len(keys):len(keys)]}
			ops = append(ops, func(ctx context.Context, be backend) error { return be.writeActive(ctx, a) })
		}
	}
	for _, m := range ms {
		src, _, err := s.source(m.Step)
		if err != nil || m.Step == rollup.MarksQueue {
			return nil, fmt.Errorf("mark of %q: step %v is not a tier the rollup writes", m.Key, m.Step)
		}
		t := s.tiers[m.Step]
		r := markRow{key: m.Key, step: seconds(m.Step), start: m.Start.UTC(), id: int64(m.ID), at: m.At.UnixMicro(),
			ttl: ttlOf(m.Start.Add(t.Step + src.Retention).Sub(at))}
		if r.ttl <= 0 {
			continue // its source has expired: nothing left to roll again
		}
		ops = append(ops, func(ctx context.Context, be backend) error { return be.writeMark(ctx, r) })
	}
	return ops, nil
}

// source returns the tier that the rollup queue of step rolls from (the
// finest for the marks queue) and the queue's period.
func (s *Store) source(step time.Duration) (rollup.Tier, time.Duration, error) {
	tiers := s.plan.Tiers()
	if step == rollup.MarksQueue {
		return tiers[0], s.plan.MarkPeriod(), nil
	}
	i, ok := s.plan.Level(step)
	if !ok || i == 0 {
		return rollup.Tier{}, 0, fmt.Errorf("step %v is not a tier the rollup writes", step)
	}
	return tiers[i-1], s.plan.Batch(i), nil
}

func seconds(d time.Duration) int { return int(d / time.Second) }

// ttlOf returns d in whole seconds, rounded up, at most what Cassandra
// takes now (ttlLimit); 0 or less when d is. Rows whose retention ends
// after 2038-01-18 expire then: Cassandra 4.0 can keep nothing longer.
func ttlOf(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int(min(int64((d+time.Second-1)/time.Second), ttlLimit(time.Now())))
}

// prepare returns the statements that write b's counts: one row per
// bucket under the batch's writer id (counts of one bucket in the batch
// add up).
func (s *Store) prepare(b analytics.Batch) ([]op, error) {
	writer := gocql.MustRandomUUID()
	if b.Writer != "" {
		writer = batchWriter(b.Writer, b.FirstSeq(), b.Seq)
	}
	ts := b.At.UnixMicro()
	at := b.At.UTC()
	type row struct {
		key   string
		t     rollup.Tier
		start time.Time
	}
	sums := make(map[row]analytics.Visits, len(b.Counts))
	order := make([]row, 0, len(b.Counts))
	for _, c := range b.Counts {
		t, ok := s.tiers[c.Step]
		if !ok {
			return nil, fmt.Errorf("cassandra: write: %q: no tier with step %v", c.Key, c.Step)
		}
		start := c.Start.UTC()
		if !rollup.Align(start, t.Step).Equal(start) {
			return nil, fmt.Errorf("cassandra: write: %q: %v is not the start of a %v bucket", c.Key, start, rollup.FormatDuration(t.Step))
		}
		r := row{c.Key, t, start}
		v, seen := sums[r]
		if !seen {
			order = append(order, r)
		}
		sums[r] = v.Add(c.Visits)
	}
	rows := make([]pointRow, 0, len(order))
	var table string // of the tier of the row before: most are of one
	var tier rollup.Tier
	for _, r := range order {
		v := sums[r]
		ttl, keep := s.tierTTL(r.key, r.t, r.start, at)
		if v == (analytics.Visits{}) || !keep {
			continue // nothing to add, or expired already
		}
		if r.t != tier { // no tier is the zero Tier
			table, tier = pointsTable(r.t), r.t
		}
		rows = append(rows, pointRow{table, r.key, tierPartition(r.t, r.start), r.start, writer, v, ttl, ts})
	}
	return pointOps(rows, s.plan.Tiers()[0]), nil
}

// pointOps returns the statements that write rows, several a statement
// (pack.go): a partition's together, those of the finest tier by their
// partition of its sharded table (shards.go).
func pointOps(rows []pointRow, finest rollup.Tier) []op {
	type partition struct {
		table, key string
		shard      int
		bucket     int64
	}
	sharded := pointsTable(finest)
	part := func(r pointRow) partition {
		if r.table == sharded {
			return partition{table: r.table, shard: linkShard(r.key), bucket: partitionOf(r.start, shardSpan(finest.Step)).Unix()}
		}
		return partition{table: r.table, key: r.key, bucket: r.bucket.Unix()}
	}
	var ops []op
	for _, g := range byPartition(rows, part, pointSize) {
		ops = append(ops, func(ctx context.Context, be backend) error { return be.writePoints(ctx, g) })
	}
	return ops
}

// ttlSeconds returns the TTL of a row of the bucket of tier t that starts
// at start, written at at: the seconds until its end plus the retention,
// or 0 (no TTL) for the all-time tier. keep is false when the bucket has
// expired already.
func ttlSeconds(t rollup.Tier, start, at time.Time) (ttl int, keep bool) {
	if !t.Expires() {
		return 0, true
	}
	ttl = ttlOf(start.Add(t.Step + t.Retention).Sub(at))
	return ttl, ttl > 0
}

// runAll calls f(ctx, i) for every i in [0, n), at most parallel at a time,
// and returns nil only if every call returned nil. The first error cancels
// the calls not yet started.
func runAll(ctx context.Context, n int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next, ok atomic.Int64
		mu       sync.Mutex
		errs     []error
		wg       sync.WaitGroup
	)
	for range min(parallel, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(ctx, i); err != nil {
					mu.Lock()
					if len(errs) < 3 {
						errs = append(errs, err)
					}
					mu.Unlock()
					cancel()
					return
				}
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	if int(ok.Load()) == n {
		return nil
	}
	if len(errs) == 0 {
		return context.Cause(ctx)
	}
	return errors.Join(errs...)
}

// Points implements analytics.Source and rollup.Store. The range is first
// clamped to the tier's retention (plus a step) on either side of now:
// nothing outside it can be stored, and so the partitions read stay few
// however long the range (at most about 2 × retention / partitionSpan + 2).
// The all-time tier is one partition per link.
func (s *Store) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]analytics.Point, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cassandra: points: %w", err)
	}
	t, ok := s.tiers[step]
	if !ok {
		return nil, fmt.Errorf("cassandra: points: no tier with step %v", step)
	}
	be, err := s.backend()
	if err != nil {
		return nil, err
	}
	if key, err = s.readKey(ctx, be, key); err != nil {
		return nil, fmt.Errorf("cassandra: points: %w", err)
	}
	from, to = from.UTC(), to.UTC()
	if t.Expires() {
		now := s.now().UTC()
		from, to = latest(from, now.Add(-t.Retention-t.Step)), earliest(to, now.Add(t.Retention+t.Step))
	}
	if !from.Before(to) {
		return nil, nil
	}
	var out []analytics.Point
	for _, p := range partitions(from, to, t) {
		lo, hi := from, to
		if t.Expires() {
			lo, hi = latest(from, p), earliest(to, p.Add(tierSpan(t)))
		}
		rows, err := be.readPoints(ctx, pointsTable(t), key, p, lo, hi)
		if err != nil {
			return nil, fmt.Errorf("cassandra: points: %w", err)
		}
		out = sumWriters(out, rows)
	}
	return out, nil
}

// sumWriters appends rows, which are in time order, to out, adding up the
// rows of the same bucket (one per writer).
func sumWriters(out, rows []analytics.Point) []analytics.Point {
	for _, r := range rows {
		r.Start = r.Start.UTC()
		if n := len(out); n > 0 && out[n-1].Start.Equal(r.Start) {
			out[n-1].Visits = out[n-1].Visits.Add(r.Visits)
			continue
		}
		out = append(out, r)
	}
	return out
}

// Active implements rollup.Store: the keys of (step, period) in the order
// of their shard, then of the key.
func (s *Store) Active(ctx context.Context, step time.Duration, period time.Time, after string, limit int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cassandra: active: %w", err)
	}
	be, err := s.backend()
	if err != nil {
		return nil, err
	}
	shard := 0
	if after != "" {
		shard = shardOf(after)
	}
	var keys []string
	for ; shard < activeShards && len(keys) < limit; shard++ {
		from := ""
		if after != "" && shard == shardOf(after) {
			from = after
		}
		ks, err := be.readActive(ctx, seconds(step), period.UTC(), shard, from, limit-len(keys))
		if err != nil {
			return nil, fmt.Errorf("cassandra: active: %w", err)
		}
		keys = append(keys, ks...)
	}
	return keys, nil
}

// Marks implements rollup.Store and analytics.Source: one partition.
func (s *Store) Marks(ctx context.Context, key string) ([]rollup.Mark, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cassandra: marks: %w", err)
	}
	be, err := s.backend()
	if err != nil {
		return nil, err
	}
	pk, err := s.readKey(ctx, be, key)
	if err != nil {
		return nil, fmt.Errorf("cassandra: marks: %w", err)
	}
	ms, err := be.readMarks(ctx, pk)
	if err != nil {
		return nil, fmt.Errorf("cassandra: marks: %w", err)
	}
	for i := range ms {
		ms[i].Key = key
	}
	return ms, nil
}

// Apply implements rollup.Store: rows, Active entries and marks first, the
// deletes of the done marks once they all succeeded. Rows are written
// USING TIMESTAMP their bucket's end plus their visits (see the package
// documentation), so that the larger value wins.
func (s *Store) Apply(ctx context.Context, u rollup.Update) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cassandra: apply: %w", err)
	}
	be, err := s.backend()
	if err != nil {
		return err
	}
	now := s.now().UTC()
	first, err := s.announce(u.Active, u.Marks, now)
	if err != nil {
		return fmt.Errorf("cassandra: apply: %w", err)
	}
	var rows []pointRow
	for _, r := range u.Rows {
		t, ok := s.tiers[r.Step]
		if i, _ := s.plan.Level(r.Step); !ok || i == 0 {
			return fmt.Errorf("cassandra: apply: %q: step %v is not a tier the rollup writes", r.Key, r.Step)
		}
		start := r.Start.UTC()
		if !rollup.Align(start, t.Step).Equal(start) {
			return fmt.Errorf("cassandra: apply: %q: %v is not the start of a %v bucket", r.Key, start, rollup.FormatDuration(t.Step))
		}
		ttl, keep := s.tierTTL(r.Key, t, start, now)
		if !keep {
			continue
		}
		rows = append(rows, pointRow{pointsTable(t), r.Key, tierPartition(t, start), start, rollupWriter, r.Visits, ttl,
			start.Add(t.Step).UnixMicro() + r.Human + r.Bot})
	}
	first = append(first, pointOps(rows, s.plan.Tiers()[0])...)
	if err := runAll(ctx, len(first), func(ctx context.Context, i int) error { return first[i](ctx, be) }); err != nil {
		return fmt.Errorf("cassandra: apply: %w", err)
	}
	err = runAll(ctx, len(u.Done), func(ctx context.Context, i int) error {
		m := u.Done[i]
		return be.deleteMark(ctx, markRow{key: m.Key, step: seconds(m.Step), start: m.Start.UTC(), id: int64(m.ID), at: m.At.UnixMicro()})
	})
	if err != nil {
		return fmt.Errorf("cassandra: apply: delete marks: %w", err)
	}
	return nil
}

// Progress implements rollup.Store and analytics.Source.
func (s *Store) Progress(ctx context.Context) (rollup.Progress, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cassandra: progress: %w", err)
	}
	be, err := s.backend()
	if err != nil {
		return nil, err
	}
	p, err := be.readProgress(ctx)
	if err != nil {
		return nil, fmt.Errorf("cassandra: progress: %w", err)
	}
	return p, nil
}

// Advance implements rollup.Store.
func (s *Store) Advance(ctx context.Context, step time.Duration, done time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cassandra: advance: %w", err)
	}
	if _, _, err := s.source(step); err != nil {
		return fmt.Errorf("cassandra: advance: %w", err)
	}
	be, err := s.backend()
	if err != nil {
		return err
	}
	if err := be.writeProgress(ctx, seconds(step), done.UTC()); err != nil {
		return fmt.Errorf("cassandra: advance: %w", err)
	}
	return nil
}

// Lease implements rollup.Leaser with lightweight transactions on the
// rollup_lease row: taken when nobody holds it, renewed by its holder, for
// ttl (at least a second).
func (s *Store) Lease(ctx context.Context, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("cassandra: lease: %w", err)
	}
	be, err := s.backend()
	if err != nil {
		return false, err
	}
	held, err := be.lease(ctx, s.id, max(1, ttlOf(ttl)))
	if err != nil {
		return false, fmt.Errorf("cassandra: lease: %w", err)
	}
	return held, nil
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
