package memcached

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/limit"
)

// Tuning. They are constants, not configuration: the config file names only
// the servers and the timeout.
const (
	defaultTimeout = 100 * time.Millisecond
	flushInterval  = 5 * time.Millisecond   // how often pending increments are sent
	flushBatch     = 4096                   // pending increments that wake the flusher before its tick
	flushWorkers   = 4                      // counters sent in parallel per server during a flush
	probeInterval  = 200 * time.Millisecond // how often an open breaker asks the server for its version
	failThreshold  = 3                      // consecutive failures that open the breaker...
	failSpan       = time.Second            // ...when each comes within this long of the previous one
	maxPending     = 100_000                // pending increments kept per server; beyond, the oldest buckets go
	closeWait      = 2 * time.Second        // how long Close waits for the final flush
	loadAttempts   = 3                      // reads of one Load when flushes of its counter overlap them
	numShards      = 64                     // pending-increment shards per server; a power of two
	// reuseWindow is how long after its answer arrived a read of a counter
	// answers that counter's checks without another get (read.go): a fifth
	// of the flush interval, so it adds at most 1 ms to how late a gateway
	// sees the other gateways' increments (one flush plus a round trip
	// without it).
	reuseWindow = flushInterval / 5
)

// ErrUnavailable is wrapped by the errors of operations refused at once
// because the circuit breaker of the counter's server is open.
var ErrUnavailable = errors.New("memcached: unavailable (circuit breaker open)")

// ErrClosed is returned by operations on a closed Store.
var ErrClosed = errors.New("memcached: store closed")

// Store is a limit.Store on one or more memcached servers. Create it with
// New and stop it with Close. It is safe for concurrent use.
type Store struct {
	servers []*server
	seeds   []uint64 // rendezvous hashes of servers, same order
	log     *slog.Logger
	m       *Metrics

	seen      seenBoxes // the boxes Boxes lists (box.go)
	closed    atomic.Bool
	stop      chan struct{}
	done      chan struct{} // closed when every flusher has returned
	closeOnce sync.Once
	closeErr  error
}

var _ limit.Store = (*Store)(nil)

// New returns a Store on cfg.Servers ("host:port", or a path for a unix
// socket) with cfg.Timeout (default 100ms) as the read/write and dial timeout
// of each operation, keeping cfg.MaxIdleConns (default
// limit.DefaultMaxIdleConns) connections open to each server. It starts one
// flusher goroutine per server, and one that dials each server's
// connections in the background; Close stops them. New itself contacts no
// server, and host names are resolved at each dial, so a memcached that
// comes up after the gateway is simply used once it answers. m and log may
// be nil.
//
// cfg is the limiter.memcached section of a compiled limit.Plan
// (Plan.Store): limit.Compile refused servers listed twice, addresses that
// are neither host:port nor a socket path, and an empty list, so New has
// nothing to refuse.
func New(cfg limit.Memcached, m *Metrics, log *slog.Logger) *Store {
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	idle := cfg.MaxIdleConns
	if idle <= 0 {
		idle = limit.DefaultMaxIdleConns
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{log: log, m: m, stop: make(chan struct{}), done: make(chan struct{})}
	for _, a := range cfg.Servers {
		na := &staticAddr{network: "unix", addr: a}
		if !strings.Contains(a, "/") {
			na.network = "tcp"
		}
		c := memcache.NewFromSelector(oneServer{na})
		c.Timeout = timeout
		c.MaxIdleConns = idle
		sv := &server{
			addr: a, na: na, client: c, timeout: timeout, log: log.With("server", a), m: m,
			opGet: m.opCounter(opGet), opIncr: m.opCounter(opIncr), opAdd: m.opCounter(opAdd),
			opDelete: m.opCounter(opDelete), opProbe: m.opCounter(opProbe), opSet: m.opCounter(opSet),
			dials: m.dialCounter(a),
			kick:  make(chan struct{}, 1),
			spare: make(chan net.Conn, idle),
			reuse: int64(reuseWindow),
		}
		c.DialContext = sv.dial
		for i := range sv.shards {
			sv.shards[i].m = make(map[limit.Counter]*entry)
		}
		m.setBreaker(a, 0) // export the series at 0
		s.servers = append(s.servers, sv)
		s.seeds = append(s.seeds, serverSeed(a))
	}
	var wg sync.WaitGroup
	for _, sv := range s.servers {
		wg.Go(func() { sv.run(s.stop) })
		wg.Go(func() { sv.warm(s.stop) })
	}
	go func() { wg.Wait(); close(s.done) }()
	return s
}

// Close sends the pending increments (waiting at most 2 s), stops the
// flushers and closes the idle connections. Increments still pending are
// dropped and counted in linkgate_memcached_dropped_deltas_total. Operations
// after Close return ErrClosed.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.stop)
		select {
		case <-s.done:
		case <-time.After(closeWait):
			s.closeErr = errors.New("memcached: close: final flush did not finish in time")
		}
		for _, sv := range s.servers {
			sv.client.Close()
			sv.connGen.Add(1)
			sv.drainSpare()
			if sv.open.Load() {
				s.m.setBreaker(sv.addr, -1)
			}
		}
	})
	return s.closeErr
}

// locate returns the server and shard of c.
func (s *Store) locate(c limit.Counter) (*server, *shard) {
	h := counterHash(c)
	sv := s.servers[0]
	if len(s.servers) > 1 {
		sv = s.servers[pick(s.seeds, h)]
	}
	return sv, &sv.shards[mix(h)>>58&(numShards-1)]
}

// Client returns the memcached client of the server that a counter of
// rule name would live on, for the other state the gateways of a fleet
// share on the limiter's servers (the cache's purges): one client per
// server for the process, with the limiter's timeout, idle connections
// and dials (linkgate_memcached_dials_total). Every gateway naming the
// same servers picks the same one for name.
func (s *Store) Client(name string) *memcache.Client {
	sv, _ := s.locate(limit.Counter{Rule: name})
	return sv.client
}

// Server returns the address (as configured) of the server that holds the
// buckets of c.
func (s *Store) Server(c limit.Counter) string {
	sv, _ := s.locate(c)
	return sv.addr
}

// BreakerOpen reports whether the circuit breaker of server addr (as
// configured) is open.
func (s *Store) BreakerOpen(addr string) bool {
	for _, sv := range s.servers {
		if sv.addr == addr {
			return sv.open.Load()
		}
	}
	return false
}

// Load implements limit.Store. It reads the buckets with one get command to
// the counter's server, and adds the increments this Store has not yet had
// acknowledged. If a flush of the same counter overlaps the read, whether
// memcached had applied it is unknown, so Load waits for that flush's
// acknowledgement and reads again. After three overlapped reads (a counter
// flushed at every try) the last read stands and counts what is still in
// flight as unapplied: it may then be off by that flush's increments.
//
// ctx is checked before the read; the read itself is bounded by the
// configured timeout, not by ctx (a goroutine per check to watch ctx would
// cost more than the round trip it guards). While the breaker is open Load fails at once with ErrUnavailable.
func (s *Store) Load(ctx context.Context, c limit.Counter, buckets []limit.Bucket, counts []int64) error {
	if len(counts) < len(buckets) {
		return fmt.Errorf("memcached: load: %d counts for %d buckets", len(counts), len(buckets))
	}
	if err := s.check(ctx, "load"); err != nil {
		return err
	}
	if len(buckets) == 0 {
		return nil
	}
	sv, sh := s.locate(c)
	if sv.open.Load() {
		return fmt.Errorf("memcached: load: %w", ErrUnavailable)
	}
	// Up to loadAttempts reads, the last of which stands even if a flush
	// overlapped it; waiting for a flush on its way (at most loadAttempts
	// times) costs no read.
	for reads, waits := 1, 0; ; {
		final := reads == loadAttempts
		e, pin, inflight := sh.pin(c, buckets, counts, sv.reuse)
		if e == nil {
			s.noteRead(c, buckets, counts)
			return nil // answered from the last read (read.go)
		}
		if inflight != nil && waits < loadAttempts {
			waits++
			sh.unpin(e)
			sv.await(ctx, inflight)
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("memcached: load: %w", err)
			}
			continue
		}
		at, err := sv.getCounts(sh, e, pin, inflight == nil, c, buckets, counts)
		exact := sh.addLocal(e, pin, inflight == nil, buckets, counts, final, at, err == nil)
		if err != nil {
			return fmt.Errorf("memcached: load: %w", err)
		}
		if !exact && final {
			sv.inexact.Add(1)
		}
		if exact || final {
			s.noteRead(c, buckets, counts)
			return nil
		}
		reads++
	}
}

// Add implements limit.Store. It only records n in this process: the
// flusher sends each pending (counter, bucket) increment at most once per
// flush, every 5 ms, with increment, add, increment. Until memcached has
// acknowledged it, Load counts it. While the breaker is open Add fails at
// once with ErrUnavailable and records nothing.
func (s *Store) Add(ctx context.Context, c limit.Counter, buckets []limit.Bucket, n int64) error {
	if err := s.check(ctx, "add"); err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("memcached: add: negative count %d", n)
	}
	if n == 0 || len(buckets) == 0 {
		return nil
	}
	sv, sh := s.locate(c)
	if sv.open.Load() {
		return fmt.Errorf("memcached: add: %w", ErrUnavailable)
	}
	added := sh.add(c, buckets, n)
	if added > 0 {
		s.m.addPending(added)
		if sv.npending.Add(int64(added)) >= flushBatch {
			select {
			case sv.kick <- struct{}{}:
			default:
			}
		}
	}
	return nil
}

// AddNow implements limit.Store: it increments each bucket in memcached
// before returning (one to three round trips per bucket).
func (s *Store) AddNow(ctx context.Context, c limit.Counter, buckets []limit.Bucket, n int64) error {
	if err := s.check(ctx, "add now"); err != nil {
		return err
	}
	if n < 0 {
		return fmt.Errorf("memcached: add now: negative count %d", n)
	}
	if n == 0 {
		return nil
	}
	sv, sh := s.locate(c)
	defer sh.written(c)
	var buf [maxKeyLen]byte
	for _, b := range buckets {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("memcached: add now: %w", err)
		}
		key := string(appendBucket(appendCounter(buf[:0], c), b))
		if err := sv.incrAdd(key, n, b.TTL); err != nil {
			return fmt.Errorf("memcached: add now: %w", err)
		}
	}
	return nil
}

// Reset implements limit.Store. It drops this process's pending increments
// of the buckets, waits for any in flight to be acknowledged, then deletes
// the keys one by one. Increments other gateways have not yet flushed can
// still arrive after it.
func (s *Store) Reset(ctx context.Context, c limit.Counter, buckets []limit.Bucket) error {
	if err := s.check(ctx, "reset"); err != nil {
		return err
	}
	sv, sh := s.locate(c)
	defer sh.written(c)
	dropped, inflight := sh.drop(c, buckets)
	if dropped > 0 {
		sv.npending.Add(-int64(dropped))
		s.m.addPending(-dropped)
	}
	if inflight != nil {
		sv.await(ctx, inflight)
	}
	var buf [maxKeyLen]byte
	for _, b := range buckets {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("memcached: reset: %w", err)
		}
		key := string(appendBucket(appendCounter(buf[:0], c), b))
		if err := sv.delete(key); err != nil {
			return fmt.Errorf("memcached: reset: %w", err)
		}
		if b.Level == limit.BoxLevel {
			s.seen.forget(c)
		}
	}
	return nil
}

func (s *Store) check(ctx context.Context, op string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memcached: %s: %w", op, err)
	}
	return nil
}

// staticAddr is a server address resolved at each dial (net.Dial takes a
// host name), so DNS changes are followed and New needs no DNS.
type staticAddr struct{ network, addr string }

func (a *staticAddr) Network() string { return a.network }
func (a *staticAddr) String() string  { return a.addr }

// oneServer is the gomemcache selector of a client that talks to one server:
// the Store picks the server itself, once per counter, so every key of a
// counter goes to one server (the reads, getmulti.go, go to it too).
type oneServer struct{ addr net.Addr }

func (o oneServer) PickServer(string) (net.Addr, error) { return o.addr, nil }
func (o oneServer) Each(f func(net.Addr) error) error   { return f(o.addr) }

// server is one memcached server: its client, its circuit breaker and the
// increments pending for the counters it holds.
type server struct {
	addr    string
	na      *staticAddr
	client  *memcache.Client
	timeout time.Duration
	log     *slog.Logger
	m       *Metrics

	opGet, opIncr, opAdd, opDelete, opProbe, opSet prometheus.Counter
	dials                                          prometheus.Counter

	// spare holds connections dialed ahead of need (warm), and is the idle
	// pool of the reads (getmulti.go): the client's dials take them first.
	// gomemcache keeps the connections a burst used
	// (up to MaxIdleConns), but has none before the first burst nor after
	// an outage, when every request in flight would dial at once; on a
	// loaded machine, those dials are what miss the timeout.
	spare chan net.Conn
	// connGen counts the times the breaker (or Close) dropped the idle
	// connections: a read's connection of an older generation is closed
	// rather than put back in spare.
	connGen atomic.Uint64

	// The circuit breaker: open after failThreshold failures each within
	// failSpan of the previous; closed by a successful probe.
	open     atomic.Bool
	fails    atomic.Int32
	lastFail atomic.Int64 // unix nanoseconds

	shards   [numShards]shard
	npending atomic.Int64 // pending (counter, bucket) increments in all shards
	inexact  atomic.Int64 // Loads whose last read overlapped a flush (tests)
	kick     chan struct{}
	reuse    int64 // reuseWindow in nanoseconds; tests set their own
}

func inc(c prometheus.Counter) {
	if c != nil {
		c.Inc()
	}
}

// benign reports whether err is an answer from a healthy server (a miss, a
// lost add race, a rejected value) rather than a failure to reach it.
func benign(err error) bool {
	switch {
	case errors.Is(err, memcache.ErrCacheMiss), errors.Is(err, memcache.ErrNotStored),
		errors.Is(err, memcache.ErrCASConflict), errors.Is(err, memcache.ErrMalformedKey):
		return true
	}
	return strings.HasPrefix(err.Error(), "memcache: client error")
}

// result feeds the outcome of an operation to the breaker and returns err.
func (sv *server) result(op string, err error) error {
	if err == nil || benign(err) {
		if sv.fails.Load() != 0 {
			sv.fails.Store(0)
		}
		return err
	}
	sv.m.errorCounter(sv.addr, op)
	now := time.Now().UnixNano()
	last := sv.lastFail.Swap(now)
	var n int32
	if now-last > int64(failSpan) {
		n = 1
		sv.fails.Store(1)
	} else {
		n = sv.fails.Add(1)
	}
	if n >= failThreshold && sv.open.CompareAndSwap(false, true) {
		// Idle connections are to a server that failed (maybe a process
		// since killed): close them, so that after recovery no request
		// fails on a stale one.
		sv.client.Close()
		sv.connGen.Add(1)
		sv.drainSpare()
		sv.m.setBreaker(sv.addr, 1)
		sv.log.Warn("memcached: circuit breaker open: operations fail at once until a probe succeeds", "failures", n, "err", err)
	}
	return err
}

// parseCount parses a decimal count. memcached pads a value that incr
// shortened with spaces, so trailing spaces are ignored.
func parseCount(b []byte) (int64, bool) {
	for len(b) > 0 && b[len(b)-1] == ' ' {
		b = b[:len(b)-1]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' || n > (math.MaxInt64-int64(c-'0'))/10 {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// expiration is the memcached expiration of a bucket created now: ttl in
// whole seconds, rounded up, relative to now (memcached reads more than 30
// days as a unix time; limit TTLs are at most about 8 days).
func expiration(ttl time.Duration) int32 {
	const maxRelative = 30*24*3600 - 1
	s := (ttl + time.Second - 1) / time.Second
	switch {
	case s < 1:
		return 1
	case s > maxRelative:
		return maxRelative
	}
	return int32(s)
}

// incrAdd adds n to key: increment; when the key is missing, add it with n
// and its TTL; when another client added it first, increment again.
func (sv *server) incrAdd(key string, n int64, ttl time.Duration) error {
	if sv.open.Load() {
		return ErrUnavailable
	}
	inc(sv.opIncr)
	_, err := sv.client.Increment(key, uint64(n))
	if err = sv.result(opIncr, err); !errors.Is(err, memcache.ErrCacheMiss) {
		return err
	}
	inc(sv.opAdd)
	err = sv.client.Add(&memcache.Item{Key: key, Value: strconv.AppendInt(nil, n, 10), Expiration: expiration(ttl)})
	if err = sv.result(opAdd, err); !errors.Is(err, memcache.ErrNotStored) {
		return err
	}
	inc(sv.opIncr)
	_, err = sv.client.Increment(key, uint64(n))
	return sv.result(opIncr, err)
}

func (sv *server) delete(key string) error {
	if sv.open.Load() {
		return ErrUnavailable
	}
	inc(sv.opDelete)
	err := sv.result(opDelete, sv.client.Delete(key))
	if errors.Is(err, memcache.ErrCacheMiss) {
		return nil
	}
	return err
}

// probe asks the server for its version and closes the breaker if it answers.
func (sv *server) probe() {
	inc(sv.opProbe)
	if err := sv.client.Ping(); err != nil {
		sv.m.errorCounter(sv.addr, opProbe)
		sv.client.Close() // drop any stale idle connection before the next probe
		return
	}
	sv.fails.Store(0)
	if sv.open.Load() {
		// Every request in flight will want a connection the moment the
		// breaker closes: have them ready, or the recovery's burst of
		// dials times out and opens the breaker again.
		sv.warm(nil)
	}
	if sv.open.CompareAndSwap(true, false) {
		sv.m.setBreaker(sv.addr, -1)
		sv.log.Info("memcached: circuit breaker closed: server answers again")
	}
}

// dial is the client's DialContext: a spare connection if there is one,
// else a new one.
func (sv *server) dial(ctx context.Context, network, address string) (net.Conn, error) {
	select {
	case c := <-sv.spare:
		return c, nil
	default:
	}
	return sv.dialNew(ctx, network, address)
}

func (sv *server) dialNew(ctx context.Context, network, address string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, address)
	if err == nil {
		inc(sv.dials)
	}
	return c, err
}

// warm dials connections into spare until it holds MaxIdleConns, one after
// the other (about 0.1 ms each on a LAN), stopping at the first refusal
// (the server is not there: requests dial, and the breaker decides, as
// usual), at the third dial in a row that times out (a server that does
// not answer; a busy machine misses the timeout of a dial now and then,
// which must not leave the pool cold: the burst it is warmed for would
// dial at once) or when stop is closed.
func (sv *server) warm(stop <-chan struct{}) {
	timeouts := 0
	for len(sv.spare) < cap(sv.spare) {
		select {
		case <-stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), sv.timeout)
		c, err := sv.dialNew(ctx, sv.na.network, sv.na.addr)
		cancel()
		if err != nil {
			var ne net.Error
			if timeouts++; errors.As(err, &ne) && ne.Timeout() && timeouts < 3 {
				continue
			}
			return
		}
		timeouts = 0
		select {
		case sv.spare <- c:
		default:
			c.Close() // filled meanwhile by a concurrent warm
			return
		}
	}
}

// drainSpare closes the spare connections.
func (sv *server) drainSpare() {
	for {
		select {
		case c := <-sv.spare:
			c.Close()
		default:
			return
		}
	}
}

// await waits until inflight is closed, ctx is done or twice the timeout has
// passed (a flush of one counter is at most three operations).
func (sv *server) await(ctx context.Context, inflight <-chan struct{}) {
	t := time.NewTimer(2 * sv.timeout)
	defer t.Stop()
	select {
	case <-inflight:
	case <-ctx.Done():
	case <-t.C:
	}
}

// run is the flusher of sv: every flushInterval (or when kicked) it sends
// the pending increments; while the breaker is open it probes instead.
func (sv *server) run(stop <-chan struct{}) {
	tick := time.NewTicker(flushInterval)
	defer tick.Stop()
	var lastProbe time.Time
	for {
		select {
		case <-stop:
			if !sv.open.Load() {
				sv.flush()
			}
			if n := sv.npending.Swap(0); n > 0 {
				sv.m.addDropped(int(n))
				sv.m.addPending(-int(n))
				sv.log.Warn("memcached: pending increments dropped at close", "count", n)
			}
			return
		case <-tick.C:
		case <-sv.kick:
		}
		if sv.npending.Load() > maxPending {
			sv.trim(maxPending * 9 / 10)
		}
		if sv.open.Load() {
			if time.Since(lastProbe) >= probeInterval {
				lastProbe = time.Now()
				sv.probe()
			}
			if sv.open.Load() {
				continue
			}
		}
		sv.flush()
	}
}

// flush sends every pending increment of sv once.
func (sv *server) flush() {
	var work []limit.Counter
	var shardOf []*shard
	now := mono()
	for i := range sv.shards {
		sh := &sv.shards[i]
		sh.mu.Lock()
		for c, e := range sh.m {
			switch {
			case len(e.pending) > 0:
				work = append(work, c)
				shardOf = append(shardOf, sh)
			case e.readers == 0 && e.done == nil && (e.last.counts == nil || now-e.last.at >= sv.reuse):
				// Nothing pending, nobody reading, no answer that still
				// serves checks: the entry goes.
				delete(sh.m, c)
			}
		}
		sh.mu.Unlock()
	}
	if len(work) == 0 {
		return
	}
	workers := min(flushWorkers, (len(work)+15)/16)
	if workers <= 1 {
		for i, c := range work {
			sv.send(shardOf[i], c)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(work); i = int(next.Add(1) - 1) {
				sv.send(shardOf[i], work[i])
			}
		})
	}
	wg.Wait()
}

// send moves the pending increments of c to in flight, sends them and
// acknowledges them: those that failed go back to pending (at least once:
// an increment that timed out may have been applied and is then counted
// twice, which errs towards limiting).
func (sv *server) send(sh *shard, c limit.Counter) {
	sh.mu.Lock()
	e := sh.m[c]
	if e == nil || len(e.pending) == 0 || e.done != nil {
		sh.mu.Unlock()
		return
	}
	batch := e.pending
	e.pending, e.inflight = e.spare[:0], batch
	// The last read, if it still holds, holds on across the send: its
	// counts have none of the batch, which checks add while it is on
	// its way and which it takes in once acknowledged.
	carried := e.last.counts != nil && e.last.gen == e.gen && e.last.wgen == e.wgen
	e.gen++
	if carried {
		e.last.gen = e.gen
	}
	done := make(chan struct{})
	e.done = done
	sh.mu.Unlock()

	failed := sv.incrAll(c, batch) // incr.go

	sh.mu.Lock()
	if a := &e.last; a.counts != nil && a.gen == e.gen {
		if len(failed) == 0 {
			addDeltas(batch, a.buckets, a.counts)
		} else {
			a.counts = nil // memcached may or may not have what failed
		}
	}
	acked := len(batch)
	for _, d := range failed {
		if i := e.find(d.level, d.start); i >= 0 {
			e.pending[i].n += d.n
		} else {
			e.pending = append(e.pending, d)
			acked--
		}
	}
	e.inflight = nil
	e.spare = batch[:0]
	e.done = nil
	close(done)
	sh.mu.Unlock()
	sv.npending.Add(-int64(acked))
	sv.m.addPending(-acked)
}

// trim drops pending increments of the oldest buckets until at most keep
// remain.
func (sv *server) trim(keep int64) {
	var starts []int64
	for i := range sv.shards {
		sh := &sv.shards[i]
		sh.mu.Lock()
		for _, e := range sh.m {
			for _, d := range e.pending {
				starts = append(starts, d.start)
			}
		}
		sh.mu.Unlock()
	}
	excess := int64(len(starts)) - keep
	if excess <= 0 {
		return
	}
	slices.Sort(starts)
	cutoff := starts[excess-1]
	// Buckets older than the cutoff all go (fewer than excess of them),
	// then buckets at the cutoff until excess are gone.
	dropped := 0
	for _, older := range []bool{true, false} {
		for i := range sv.shards {
			sh := &sv.shards[i]
			sh.mu.Lock()
			for _, e := range sh.m {
				e.pending = slices.DeleteFunc(e.pending, func(d delta) bool {
					if (d.start < cutoff || !older && d.start == cutoff) && int64(dropped) < excess {
						dropped++
						return true
					}
					return false
				})
			}
			sh.mu.Unlock()
		}
	}
	sv.npending.Add(-int64(dropped))
	sv.m.addPending(-dropped)
	sv.m.addDropped(dropped)
	sv.log.Warn("memcached: pending increments of the oldest buckets dropped: server unavailable and buffer full", "count", dropped)
}

// shard holds the pending increments of some counters of one server.
type shard struct {
	mu    sync.Mutex
	m     map[limit.Counter]*entry
	reads map[readKey]*readState // the shared reads (read.go); nil until the first
	_     [40]byte               // keep shards on separate cache lines
}

// delta is a pending increment of one bucket.
type delta struct {
	level limit.Level
	start int64
	n     int64
	ttl   time.Duration
}

// entry is the local state of one counter.
type entry struct {
	pending  []delta // not yet sent; one per bucket
	inflight []delta // sent, not yet acknowledged
	spare    []delta // a drained slice to reuse
	gen      uint64  // incremented when a send of pending starts
	wgen     uint64  // incremented when an AddNow or a Reset of the counter through this Store ends
	done     chan struct{}
	readers  int // Loads between pin and addLocal; the entry stays while > 0
	last     answer
}

// answer is the last exact read of a counter (read.go): the counts
// memcached answered, without this Store's pending increments, the
// buckets they are of, when the answer arrived and the generations it was
// taken at. It answers the checks of the same buckets until reuseWindow
// after at, as long as gen and wgen are the entry's: every send of the
// counter's increments since was acknowledged whole, and the answer took
// it in (server.send; while one is on its way, gen is already the
// entry's and its increments are in flight), so that the counts plus the
// pending and in-flight increments are what memcached holds of this
// Store's increments; and no AddNow or Reset through this Store ended
// since.
type answer struct {
	key       bucketsKey
	buckets   []limit.Bucket // reused
	counts    []int64        // nil when there is no answer; reused
	at        int64          // mono() when the answer arrived
	gen, wgen uint64
}

// pinned is what a Load saw of its counter's entry when it pinned it.
type pinned struct{ gen, wgen uint64 }

// epoch is the origin of mono.
var epoch = time.Now()

// mono returns the monotonic time in nanoseconds since epoch.
func mono() int64 { return int64(time.Since(epoch)) }

func (e *entry) find(l limit.Level, start int64) int {
	for i := range e.pending {
		if e.pending[i].level == l && e.pending[i].start == start {
			return i
		}
	}
	return -1
}

// entryOf returns c's entry, made if it has none. The caller holds mu.
func (sh *shard) entryOf(c limit.Counter) *entry {
	e := sh.m[c]
	if e == nil {
		e = &entry{}
		sh.m[c] = e
	}
	return e
}

// add records n for each bucket of c and returns how many pending
// increments it created (others were coalesced into existing ones).
func (sh *shard) add(c limit.Counter, buckets []limit.Bucket, n int64) int {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entryOf(c)
	created := 0
	for _, b := range buckets {
		if i := e.find(b.Level, b.Start); i >= 0 {
			e.pending[i].n += n
			if b.TTL > e.pending[i].ttl {
				e.pending[i].ttl = b.TTL
			}
			continue
		}
		e.pending = append(e.pending, delta{level: b.Level, start: b.Start, n: n, ttl: b.TTL})
		created++
	}
	return created
}

// pin marks a Load of c as started and returns c's entry, its generations
// and the channel of its in-flight send (nil when none). If the last read
// of c's buckets still answers (answer; reuse is the window in
// nanoseconds), pin fills counts from it and the pending increments
// instead and returns a nil entry: the Load is done.
func (sh *shard) pin(c limit.Counter, buckets []limit.Bucket, counts []int64, reuse int64) (*entry, pinned, chan struct{}) {
	now := mono()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.entryOf(c)
	if a := &e.last; a.counts != nil && a.gen == e.gen && a.wgen == e.wgen &&
		now-a.at < reuse && a.key == keyOf(buckets) {
		copy(counts, a.counts)
		addDeltas(e.pending, buckets, counts)
		addDeltas(e.inflight, buckets, counts) // none unless a send the answer holds across is on its way
		return nil, pinned{}, nil
	}
	e.readers++
	return e, pinned{e.gen, e.wgen}, e.done
}

func (sh *shard) unpin(e *entry) {
	sh.mu.Lock()
	e.readers--
	sh.mu.Unlock()
}

// addLocal ends a Load pinned at p: it adds c's pending increments of
// buckets to counts, and the in-flight ones too if final. It reports
// whether the read was exact: nothing was in flight when it began and no
// send began during it, so memcached held every acknowledged increment and
// none of the pending ones. An exact read that succeeded (ok) and whose
// answer arrived at at becomes the counter's last answer, unless one as
// recent is there, or an AddNow or Reset of the counter ended during it.
func (sh *shard) addLocal(e *entry, p pinned, idle bool, buckets []limit.Bucket, counts []int64, final bool, at int64, ok bool) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e.readers--
	exact := idle && e.gen == p.gen
	if !exact && !final {
		return false
	}
	if exact && ok && e.wgen == p.wgen {
		a := &e.last
		k := keyOf(buckets)
		if a.counts == nil || a.key != k || a.gen != p.gen || a.wgen != p.wgen || at > a.at {
			a.key, a.at, a.gen, a.wgen = k, at, p.gen, p.wgen
			a.buckets = append(a.buckets[:0], buckets...)
			a.counts = append(a.counts[:0], counts[:len(buckets)]...)
		}
	}
	addDeltas(e.pending, buckets, counts)
	if !exact {
		addDeltas(e.inflight, buckets, counts)
	}
	return exact
}

func addDeltas(ds []delta, buckets []limit.Bucket, counts []int64) {
	for _, d := range ds {
		for i, b := range buckets {
			if b.Level == d.level && b.Start == d.start {
				counts[i] += d.n
			}
		}
	}
}

// written records that an AddNow or a Reset of c through this Store
// ended: the last read of c answers no more checks.
func (sh *shard) written(c limit.Counter) {
	sh.mu.Lock()
	if e := sh.m[c]; e != nil {
		e.wgen++
	}
	sh.mu.Unlock()
}

// drop removes the pending increments of buckets of c; it returns how many
// it removed and the channel of an in-flight send (nil when none).
func (sh *shard) drop(c limit.Counter, buckets []limit.Bucket) (int, chan struct{}) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.m[c]
	if e == nil {
		return 0, nil
	}
	n := len(e.pending)
	e.pending = slices.DeleteFunc(e.pending, func(d delta) bool {
		return slices.ContainsFunc(buckets, func(b limit.Bucket) bool { return b.Level == d.level && b.Start == d.start })
	})
	return n - len(e.pending), e.done
}
