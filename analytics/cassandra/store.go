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
//	PRIMARY KEY ((short_key, bucket), start, writer) → human, bot
//
// where start is the bucket's start and bucket the start of a period that
// holds a bounded number of buckets (partitionSpan): a day of minutes, a
// week of 5 minutes, 30 days of hours, 366 days of days, 521 weeks of weeks.
// So no partition grows without bound (≤ 2,016 rows per writer), load
// spreads by short_key, and a one-year daily curve reads at most two
// partitions. Points also clamps the range to the tier's retention around
// now, so no query reads more than a handful of partitions however long
// the range.
//
// # Retry safety: cumulative counts per writer
//
// Cassandra counters can neither be retried safely nor carry a TTL. Instead
// every Store has a writer id, a random UUID new at every start, and writes
// its own cumulative count of each bucket under it with a plain INSERT (an
// overwrite). The store remembers, per (link, tier, bucket) still open, the
// count its row holds after the last successful write ("committed"). Write
// sends committed + the batch's delta and, only when every statement of the
// batch succeeded, makes that the new committed count. After a failed Write
// nothing is committed, and the flusher sends the same counts again merged
// into a later batch: the row is then overwritten with committed + all the
// deltas, whether or not parts of the failed Write reached the cluster. So a
// timeout, a retry by gocql or a resend by the flusher never counts twice.
//
// Every statement carries USING TIMESTAMP pinned to the batch's flush time
// (Batch.At in microseconds, forced to increase strictly within a process;
// totals rows use a sequence number instead, see below), so a late retry of
// an older flush (gocql retrying a statement whose answer was lost) can
// never overwrite the newer count of a later flush.
// gocql v1's retry policy does not look at Query.Idempotent (only
// speculative execution does); statements are marked idempotent for what
// it is worth, but it is the overwrite design that makes retries safe.
//
// Readers sum the rows of all writers of a bucket: counts from several
// gateway processes, and from earlier runs of one, add up.
//
// The remembered state is bounded: a bucket's entry is dropped once the
// bucket ended more than pointGrace ago (by Batch.At) and its last write
// succeeded. Counts that come later for it (a flusher that was failing for a
// long time) must not overwrite the row with a smaller cumulative count, so
// whenever entries are dropped the store switches to a fresh writer id: a
// late count starts a new row, never seen before, from zero. An entry whose
// last write failed is never dropped, so its resend overwrites the same row.
//
// # All-time totals
//
// Totals never expire, and use the same scheme in the totals table, one
// row per (short_key, writer) holding that writer's cumulative count, plus
// a base in static columns (base_human, base_bot, base_version):
//
//	Total(key) = base + Σ rows of the partition
//
// read in one single-partition query. To keep partitions small, a writer's
// row is folded into the base once its entry is dropped (the link had no
// visits for totalsIdle and the last write succeeded; a fresh writer id
// takes over, as above) and when the store is closed. Folding is a
// conditional batch on the key's partition, a lightweight transaction:
//
//	UPDATE base = base + row, base_version = v+1 IF base_version = v
//	DELETE row IF human = row.human AND bot = row.bot
//
// Both happen or neither does, so the sum is the same before and after;
// base_version makes concurrent folds of one link by several processes
// serialize. When a fold's answer is lost the store reads the partition
// again at SERIAL consistency: the row being gone means the fold happened.
// A conditional statement cannot carry USING TIMESTAMP: the delete's
// timestamp is the coordinator's clock, in microseconds since 1970. To be
// sure it shadows every write of the row, whatever the gateway and
// Cassandra clocks say, totals rows are not timestamped with the flush time
// but with a sequence number that the Store increments at every Write (1, 2,
// 3, …: its rows are its own, so their writes only need to be ordered among
// themselves). A late gocql retry of one of them cannot bring a folded row
// back either. Rows of a process that crashed are not folded; they stay
// correct, only Total reads one more small row for each. (A maintenance
// job folding rows of writers known to be gone is future work.)
//
// Exactness holds as long as the flusher resends a failed Write's counts to
// the same Store. If a process exits while a write is unacknowledged (a
// timeout whose outcome is unknown) and the counts are resent by the next
// process (the flusher's spill file), they are written under a new writer
// id and count twice if the lost write had in fact been applied.
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
// at most 32 at a time; partitions are distinct per statement in the
// common case, so batching them would only add coordinator work.
package cassandra

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

const (
	// pointGrace is how long after a bucket's end its entry is kept: counts
	// for it normally arrive within a flush interval of its end.
	pointGrace = 5 * time.Minute
	// totalsIdle is how long a link's totals entry is kept without visits
	// before its row is folded into the base.
	totalsIdle = 10 * time.Minute
	// gcEvery spaces the scans that drop old entries (by Batch.At).
	gcEvery = time.Minute
	// parallel bounds the statements of one Write in flight at once.
	parallel = 32
	// maxFoldsPerWrite bounds the folds a Write does after writing.
	maxFoldsPerWrite = 1024
	// closeFoldTimeout bounds the folds Close does.
	closeFoldTimeout = 5 * time.Second
	// maxTTL is Cassandra's largest TTL, 20 years, in seconds.
	maxTTL = 20 * 365 * 24 * 3600
)

var (
	// ErrNotConnected is wrapped by the errors of a Store whose session is
	// not connected yet.
	ErrNotConnected = errors.New("cassandra: not connected")
	// ErrClosed is returned by a Store after Close.
	ErrClosed = errors.New("cassandra: store closed")
)

var _ analytics.Store = (*Store)(nil)

// Store is the analytics store on Cassandra. It is safe for concurrent use;
// Writes are serialized (the flusher makes one at a time anyway). Use Open.
type Store struct {
	tiers map[time.Duration]rollup.Tier
	log   *slog.Logger
	now   func() time.Time // the clock Points clamps ranges with

	mu      sync.RWMutex
	be      backend // nil until connected
	connErr error   // why it is not connected yet
	closed  bool

	cancel    context.CancelFunc // stops connecting
	done      chan struct{}      // closed when connecting has stopped
	closeOnce sync.Once

	wmu     sync.Mutex // serializes Write, and guards what follows
	writer  gocql.UUID // the writer id new entries use
	lastTS  int64      // the last point write timestamp used, µs
	seq     int64      // the last totals write timestamp used: a sequence number
	lastGC  time.Time
	points  map[pointKey]*entry
	totals  map[string]*entry
	pending []fold // totals rows waiting to be folded
}

// pointKey names one bucket of one tier of one link.
type pointKey struct {
	key   string
	step  time.Duration
	start int64 // unix µs
}

// entry is what the store knows of one row it writes: the row's writer id
// and the cumulative count it holds.
type entry struct {
	writer    gocql.UUID
	committed analytics.Visits // what the row holds after the last successful write
	attempt   analytics.Visits // what the Write in progress sends
	failed    bool             // the last write failed: the row may hold any value sent since committed
	lastAt    time.Time        // Batch.At of the last successful write
}

// fold is a totals row whose writer will not write it again.
type fold struct {
	key    string
	writer gocql.UUID
	v      analytics.Visits
}

// Open returns a Store for the keyspace that cfg names, with the given
// tiers (the retention setting), and starts connecting to the cluster in
// the background, creating the keyspace and tables when missing, retrying
// with backoff until it succeeds or Close is called. It returns an error
// only for a configuration it cannot use; it does not wait for the network,
// and ctx only bounds Open itself. A nil log discards. The caller must call
// Close.
func Open(ctx context.Context, cfg analytics.Cassandra, tiers []rollup.Tier, log *slog.Logger) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cassandra: open: %w", err)
	}
	if !keyspaceName.MatchString(cfg.Keyspace) {
		return nil, fmt.Errorf("cassandra: keyspace %q: want a letter then up to 47 letters, digits or underscores", cfg.Keyspace)
	}
	if len(cfg.Hosts) == 0 {
		return nil, fmt.Errorf("cassandra: no hosts")
	}
	if cfg.ReplicationFactor < 1 {
		return nil, fmt.Errorf("cassandra: replication_factor %d: must be at least 1", cfg.ReplicationFactor)
	}
	cons, err := gocql.ParseConsistencyWrapper(cfg.Consistency)
	if err != nil {
		return nil, fmt.Errorf("cassandra: consistency: %w", err)
	}
	s, err := newStore(tiers, log)
	if err != nil {
		return nil, err
	}
	serial := gocql.Serial
	if cons == gocql.LocalQuorum || cons == gocql.LocalOne {
		serial = gocql.LocalSerial
	}
	c := gocql.NewCluster(cfg.Hosts...)
	c.ProtoVersion = 4
	c.Consistency = cons
	c.SerialConsistency = serial
	c.Timeout = 5 * time.Second
	c.ConnectTimeout = 5 * time.Second
	c.RetryPolicy = &retryPolicy{gocql.ExponentialBackoffRetryPolicy{NumRetries: 3, Min: 100 * time.Millisecond, Max: 2 * time.Second}}
	c.Logger = gocqlLogger{s.log}
	ddl := schema(cfg.Keyspace, cfg.ReplicationFactor, tiers)

	cctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.done = make(chan struct{})
	s.connErr = errors.New("connecting")
	go s.connect(cctx, func(ctx context.Context) (backend, error) {
		// A fresh policy per attempt: gocql panics when one is shared by two
		// sessions, even when the first one failed to connect.
		c.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.RoundRobinHostPolicy())
		sess, err := c.CreateSession()
		if err != nil {
			return nil, err
		}
		for _, q := range ddl {
			if err := sess.Query(q).WithContext(ctx).Exec(); err != nil {
				sess.Close()
				return nil, fmt.Errorf("create schema: %w", err)
			}
		}
		return newCQL(sess, cfg.Keyspace, tiers, serial), nil
	})
	return s, nil
}

// newStore returns a Store that is not connected, with no connect loop.
func newStore(tiers []rollup.Tier, log *slog.Logger) (*Store, error) {
	if err := rollup.ValidateTiers(tiers); err != nil {
		return nil, fmt.Errorf("cassandra: %w", err)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Store{
		tiers:  make(map[time.Duration]rollup.Tier, len(tiers)),
		log:    log.With("store", "cassandra"),
		now:    time.Now,
		writer: gocql.MustRandomUUID(),
		points: make(map[pointKey]*entry),
		totals: make(map[string]*entry),
		cancel: func() {},
		done:   make(chan struct{}),
	}
	close(s.done)
	for _, t := range tiers {
		s.tiers[t.Step] = t
	}
	return s, nil
}

// connect calls dial until it succeeds or ctx is done, backing off from
// half a second to 30 s between attempts.
func (s *Store) connect(ctx context.Context, dial func(context.Context) (backend, error)) {
	defer close(s.done)
	wait := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		be, err := dial(ctx)
		if err == nil {
			s.mu.Lock()
			closed := s.closed
			if !closed {
				s.be, s.connErr = be, nil
			}
			s.mu.Unlock()
			if closed {
				be.close()
			} else {
				s.log.Info("cassandra connected", "attempts", attempt)
			}
			return
		}
		s.mu.Lock()
		s.connErr = err
		s.mu.Unlock()
		s.log.Warn("cassandra not reachable yet; retrying", "attempt", attempt, "retry_in", wait, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// gocqlLogger passes gocql's log lines (hosts going down and up, dial
// errors) to the store's logger.
type gocqlLogger struct{ log *slog.Logger }

func (l gocqlLogger) Print(v ...any) {
	l.log.Info(strings.TrimSpace(fmt.Sprint(v...)), "source", "gocql")
}
func (l gocqlLogger) Printf(format string, v ...any) {
	l.log.Info(strings.TrimSpace(fmt.Sprintf(format, v...)), "source", "gocql")
}
func (l gocqlLogger) Println(v ...any) {
	l.log.Info(strings.TrimSpace(fmt.Sprintln(v...)), "source", "gocql")
}

// retryPolicy retries a statement 3 times with exponential backoff: on the
// same coordinator when the cluster answered a timeout or Unavailable (the
// coordinator is fine; the replicas were slow or down), on the next host
// otherwise. gocql's ExponentialBackoffRetryPolicy always asks for the next
// host, so on a one-node cluster, or once every replica was tried, it would
// never retry at all. Retrying a write is safe here whatever its outcome:
// see the package documentation.
type retryPolicy struct {
	gocql.ExponentialBackoffRetryPolicy
}

func (r *retryPolicy) GetRetryType(err error) gocql.RetryType {
	switch err.(type) {
	case *gocql.RequestErrWriteTimeout, *gocql.RequestErrReadTimeout, *gocql.RequestErrUnavailable:
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

func (s *Store) backend() (backend, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	switch {
	case s.closed:
		return nil, ErrClosed
	case s.be == nil:
		return nil, fmt.Errorf("%w: %v", ErrNotConnected, s.connErr)
	}
	return s.be, nil
}

// Close stops connecting, folds the totals rows of this writer that it can
// within a few seconds (those whose last write succeeded), and closes the
// session. Rows left unfolded stay counted (see the package documentation),
// so Close reports no error. Calls after the first do nothing.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		<-s.done
		s.wmu.Lock()
		defer s.wmu.Unlock()
		s.mu.Lock()
		be := s.be
		s.closed, s.be = true, nil
		s.mu.Unlock()
		if be == nil {
			return
		}
		for k, e := range s.totals {
			if !e.failed {
				delete(s.totals, k)
				s.pending = append(s.pending, fold{k, e.writer, e.committed})
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), closeFoldTimeout)
		defer cancel()
		if n := s.foldSome(ctx, be, len(s.pending)); n > 0 {
			s.log.Info("cassandra: totals rows left unfolded at close", "rows", n)
		}
		be.close()
	})
	return nil
}

// Write implements analytics.Writer: see the package documentation.
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
	if _, err := s.backend(); err != nil {
		return err // closed while this Write waited: its rows may be folded
	}
	ops, touched, err := s.plan(b)
	if err != nil {
		return err
	}
	if err := runAll(ctx, len(ops), func(ctx context.Context, i int) error { return ops[i](ctx, be) }); err != nil {
		for _, e := range touched {
			e.failed = true
		}
		return fmt.Errorf("cassandra: write %d rows: %w", len(ops), err)
	}
	for _, e := range touched {
		e.committed, e.failed, e.lastAt = e.attempt, false, b.At
	}
	s.collect(b.At)
	if n := s.foldSome(ctx, be, maxFoldsPerWrite); n > 0 {
		s.log.Debug("cassandra: totals rows waiting to be folded", "rows", n)
	}
	return nil
}

// op is one statement of a Write.
type op func(context.Context, backend) error

// plan returns the statements that write b and the entries they update,
// whose attempt it sets; the caller commits them when all succeed. It adds
// entries for buckets and links it has none for. Called with wmu held.
func (s *Store) plan(b analytics.Batch) ([]op, []*entry, error) {
	ts := b.At.UnixMicro()
	if ts <= s.lastTS {
		ts = s.lastTS + 1
	}
	s.lastTS = ts
	s.seq++
	seq := s.seq
	at := b.At.UTC()
	var ops []op
	var touched []*entry
	seen := make(map[*entry]bool, len(b.Counts)+len(b.Totals))
	touch := func(e *entry, d analytics.Visits) bool {
		first := !seen[e]
		if first {
			seen[e] = true
			e.attempt = e.committed
			touched = append(touched, e)
		}
		e.attempt.Human += d.Human
		e.attempt.Bot += d.Bot
		return first
	}
	for _, c := range b.Counts {
		t, ok := s.tiers[c.Step]
		if !ok {
			return nil, nil, fmt.Errorf("cassandra: write: %q: no tier with step %v", c.Key, c.Step)
		}
		start := c.Start.UTC()
		if !rollup.Align(start, t.Step).Equal(start) {
			return nil, nil, fmt.Errorf("cassandra: write: %q: %v is not the start of a %v bucket", c.Key, start, rollup.FormatDuration(t.Step))
		}
		ttl := ttlSeconds(t, start, at)
		if c.Visits == (analytics.Visits{}) || ttl <= 0 {
			continue // nothing to add, or expired already
		}
		k := pointKey{c.Key, t.Step, start.UnixMicro()}
		e := s.points[k]
		if e == nil {
			e = &entry{writer: s.writer}
			s.points[k] = e
		}
		if !touch(e, c.Visits) {
			continue
		}
		key, table, bucket := c.Key, pointsTable(t.Step), partitionOf(start, partitionSpan(t.Step))
		ops = append(ops, func(ctx context.Context, be backend) error {
			return be.writePoint(ctx, pointRow{table, key, bucket, start, e.writer, e.attempt, ttl, ts})
		})
	}
	for _, c := range b.Totals {
		if c.Visits == (analytics.Visits{}) {
			continue
		}
		e := s.totals[c.Key]
		if e == nil {
			e = &entry{writer: s.writer}
			s.totals[c.Key] = e
		}
		if !touch(e, c.Visits) {
			continue
		}
		key := c.Key
		ops = append(ops, func(ctx context.Context, be backend) error {
			return be.writeTotal(ctx, totalRow{key, e.writer, e.attempt, seq})
		})
	}
	return ops, touched, nil
}

// ttlSeconds returns how many seconds after at the bucket of tier t that
// starts at start expires: its end plus the retention. Zero or less means
// it has expired already.
func ttlSeconds(t rollup.Tier, start, at time.Time) int {
	d := start.Add(t.Step + t.Retention).Sub(at)
	if d <= 0 {
		return 0
	}
	return int(min((d+time.Second-1)/time.Second, maxTTL))
}

// collect drops the entries of buckets that ended more than pointGrace ago
// and of links idle for totalsIdle, queuing the latter's rows for folding,
// and switches to a fresh writer id when it dropped any. Entries whose last
// write failed are kept: their resend must overwrite the same row. Called
// with wmu held.
func (s *Store) collect(at time.Time) {
	if at.Sub(s.lastGC) < gcEvery {
		return
	}
	s.lastGC = at
	dropped := false
	for k, e := range s.points {
		if !e.failed && !time.UnixMicro(k.start).Add(k.step+pointGrace).After(at) {
			delete(s.points, k)
			dropped = true
		}
	}
	for k, e := range s.totals {
		if !e.failed && !e.lastAt.Add(totalsIdle).After(at) {
			delete(s.totals, k)
			s.pending = append(s.pending, fold{k, e.writer, e.committed})
			dropped = true
		}
	}
	if dropped {
		s.writer = gocql.MustRandomUUID()
	}
}

// foldSome folds up to n queued totals rows into their bases, keeps those
// it could not fold queued, and returns how many stay queued. Called with
// wmu held.
func (s *Store) foldSome(ctx context.Context, be backend, n int) int {
	n = min(n, len(s.pending))
	if n == 0 {
		return len(s.pending)
	}
	batch := s.pending[:n]
	keep := make([]bool, n)
	for i := range keep {
		keep[i] = true // until folded: runAll skips calls once ctx is done
	}
	_ = runAll(ctx, n, func(ctx context.Context, i int) error {
		if err := foldRow(ctx, be, batch[i]); err != nil {
			s.log.Warn("cassandra: fold totals row", "short_key", batch[i].key, "err", err)
			return nil // one failed fold does not stop the others
		}
		keep[i] = false
		return nil
	})
	var rest []fold
	for i, f := range batch {
		if keep[i] {
			rest = append(rest, f)
		}
	}
	s.pending = append(rest, s.pending[n:]...)
	return len(s.pending)
}

// foldRow moves the totals row of f into its key's base in one conditional
// batch: see the package documentation.
func foldRow(ctx context.Context, be backend, f fold) error {
	var last error
	for range 4 {
		p, err := be.readTotals(ctx, f.key, true)
		if err != nil {
			return err
		}
		row, ok := p.rows[f.writer]
		if !ok {
			return nil // folded, by an attempt whose answer was lost
		}
		if row != f.v {
			// Not what this writer last wrote: leave it alone (it is still
			// counted) rather than fold a value nobody vouches for.
			return fmt.Errorf("row holds %+v, not the %+v written last; left unfolded", row, f.v)
		}
		base := analytics.Visits{Human: p.base.Human + row.Human, Bot: p.base.Bot + row.Bot}
		applied, err := be.fold(ctx, foldOp{key: f.key, writer: f.writer, row: row, base: base, version: p.version})
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return err
			}
			last = err // outcome unknown: read again
		case applied:
			return nil
		default:
			last = errors.New("base changed concurrently")
		}
	}
	return last
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

// Points implements analytics.Reader. The range is first clamped to the
// tier's retention (plus a step) on either side of now: nothing outside it
// can be stored, and so the partitions read stay few however long the
// range (at most about 2 × retention / partitionSpan + 2).
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
	now := s.now().UTC()
	from, to = latest(from.UTC(), now.Add(-t.Retention-t.Step)), earliest(to.UTC(), now.Add(t.Retention+t.Step))
	if !from.Before(to) {
		return nil, nil
	}
	span := partitionSpan(step)
	var out []analytics.Point
	for _, p := range partitions(from, to, step) {
		rows, err := be.readPoints(ctx, pointsTable(step), key, p, latest(from, p), earliest(to, p.Add(span)))
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
			out[n-1].Human += r.Human
			out[n-1].Bot += r.Bot
			continue
		}
		out = append(out, r)
	}
	return out
}

// Total implements analytics.Reader: the base plus the rows of every
// writer, read from the key's one partition.
func (s *Store) Total(ctx context.Context, key string) (analytics.Visits, error) {
	if err := ctx.Err(); err != nil {
		return analytics.Visits{}, fmt.Errorf("cassandra: total: %w", err)
	}
	be, err := s.backend()
	if err != nil {
		return analytics.Visits{}, err
	}
	p, err := be.readTotals(ctx, key, false)
	if err != nil {
		return analytics.Visits{}, fmt.Errorf("cassandra: total: %w", err)
	}
	v := p.base
	for _, r := range p.rows {
		v.Human += r.Human
		v.Bot += r.Bot
	}
	return v, nil
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
