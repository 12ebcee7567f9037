// Package cqlsession owns a gateway's gocql sessions: one per Cassandra
// cluster (its contact points and request timeout), however many stores
// use it. The analytics store and the certificate storage of a gateway
// pointed at the same cluster share one connection pool, one background
// connect with retries and backoff, and one connection health, where each
// used to hold a session and connection code of its own.
//
// A store asks a Pool for a Handle with the CQL that creates its keyspace
// and tables. The cluster's one goroutine connects (half a second between
// attempts at first, doubling up to 30 s), then runs each handle's schema
// statements once, again with backoff when they fail; a handle is ready
// once both are done. The session closes when the last handle closes.
//
// Statements set their own consistency, serial consistency and retry
// policy: a session carries no store's defaults.
package cqlsession

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gocql/gocql"
)

// Config is what identifies a cluster: stores with the same contact
// points (in any order) and timeout share a session.
type Config struct {
	Hosts []string
	// Timeout bounds each request and each dial.
	Timeout time.Duration
}

func (c Config) key() string {
	hs := slices.Clone(c.Hosts)
	for i, h := range hs {
		hs[i] = strings.ToLower(strings.TrimSpace(h))
	}
	slices.Sort(hs)
	return strings.Join(hs, ",") + "|" + c.Timeout.String()
}

// ErrNotConnected is wrapped by the errors of a Handle whose session is
// not connected, or whose schema is not created, yet.
var ErrNotConnected = errors.New("cassandra: not connected")

// ErrClosed is returned by a Handle after Close.
var ErrClosed = errors.New("cassandra: closed")

// Pool holds the sessions of one process (a gateway), one per cluster. The
// zero value is not usable: use NewPool. Safe for concurrent use.
type Pool struct {
	log      *slog.Logger
	dial     func(ctx context.Context, c Config) (*gocql.Session, error)
	mu       sync.Mutex
	clusters map[string]*cluster
}

// NewPool returns a Pool whose sessions log to log (gocql's own lines
// throttled: see Logger); nil discards.
func NewPool(log *slog.Logger) *Pool {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pool{log: log, clusters: map[string]*cluster{}}
	p.dial = p.createSession
	return p
}

// createSession connects to c: protocol v4, token-aware host selection,
// gocql's lines through Logger.
func (p *Pool) createSession(_ context.Context, c Config) (*gocql.Session, error) {
	cc := gocql.NewCluster(c.Hosts...)
	cc.ProtoVersion = 4
	cc.Timeout = c.Timeout
	cc.ConnectTimeout = c.Timeout
	cc.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.RoundRobinHostPolicy())
	cc.Logger = NewLogger(p.log, time.Now)
	sess, err := cc.CreateSession()
	if err != nil {
		return nil, fmt.Errorf("connect %v: %w", c.Hosts, err)
	}
	return sess, nil
}

// Handle is one store's use of a cluster's session. Safe for concurrent
// use.
type Handle struct {
	c     *cluster
	name  string   // the store, in logs
	ddl   []string // its keyspace and tables, run once connected
	ready chan struct{}

	// guarded by c.mu
	done   bool  // ddl ran
	err    error // why it is not ready, when the session is there
	closed bool
}

// Open returns a Handle on cfg's cluster for a store named name (in logs),
// starting the cluster's connection when no other handle holds it. ddl
// (CREATE ... IF NOT EXISTS statements) runs once the session is
// connected, before the Handle is ready. It does not wait for the
// network. The caller must Close the Handle.
func (p *Pool) Open(cfg Config, name string, ddl []string) *Handle {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := cfg.key()
	c := p.clusters[k]
	if c == nil {
		ctx, cancel := context.WithCancel(context.Background())
		c = &cluster{pool: p, key: k, cfg: cfg, cancel: cancel, done: make(chan struct{}), wake: make(chan struct{}, 1),
			connErr: errors.New("connecting")}
		p.clusters[k] = c
		go c.run(ctx)
	}
	h := &Handle{c: c, name: name, ddl: ddl, ready: make(chan struct{})}
	c.mu.Lock()
	c.handles = append(c.handles, h)
	c.mu.Unlock()
	c.poke()
	return h
}

// cluster is one session and the loop that connects it.
type cluster struct {
	pool   *Pool
	key    string
	cfg    Config
	cancel context.CancelFunc
	done   chan struct{} // closed when run returned
	wake   chan struct{} // a handle was added

	mu       sync.Mutex
	sess     *gocql.Session // nil until connected
	connErr  error          // why not connected yet
	attempts int            // failed attempts to connect
	handles  []*Handle      // open ones
}

func (c *cluster) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// backoff is the wait after the n-th failure in a row: half a second,
// doubling, at most 30 s.
func backoff(n int) time.Duration {
	d := 500 * time.Millisecond
	for ; n > 1 && d < 30*time.Second; n-- {
		d *= 2
	}
	return min(d, 30*time.Second)
}

// run connects, then runs the schema of each handle as handles come, until
// ctx is done (the last handle closed). Its one goroutine per cluster is
// why a cluster's stores have one connection health.
func (c *cluster) run(ctx context.Context) {
	defer close(c.done)
	log := c.pool.log.With("cassandra", strings.Join(c.cfg.Hosts, ","))
	for attempt := 1; ; attempt++ {
		t0 := time.Now()
		sess, err := c.pool.dial(ctx, c.cfg)
		if err == nil {
			c.mu.Lock()
			c.sess, c.connErr = sess, nil
			c.mu.Unlock()
			log.Info("cassandra connected", "attempts", attempt, "took", time.Since(t0).Round(time.Millisecond).String())
			break
		}
		c.mu.Lock()
		c.connErr, c.attempts = err, attempt
		c.mu.Unlock()
		log.Warn("cassandra not reachable yet; retrying", "attempt", attempt, "retry_in", backoff(attempt), "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff(attempt)):
		}
	}
	failures := 0
	for {
		pending := c.pending()
		failed := false
		for _, h := range pending {
			t0 := time.Now()
			err := h.createSchema(ctx, c.sess)
			c.mu.Lock()
			if err == nil {
				h.done, h.err = true, nil
				close(h.ready)
			} else {
				h.err = err
			}
			c.mu.Unlock()
			if err != nil {
				failed = true
				if ctx.Err() == nil {
					log.Warn("cassandra: creating the schema failed; retrying", "store", h.name, "retry_in", backoff(failures+1), "err", err)
				}
				continue
			}
			log.Info("cassandra schema ready", "store", h.name, "statements", len(h.ddl), "took", time.Since(t0).Round(time.Millisecond).String())
		}
		wait := make(<-chan time.Time)
		if failed {
			failures++
			wait = time.After(backoff(failures))
		} else {
			failures = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-c.wake:
		case <-wait:
		}
	}
}

// pending returns the open handles whose schema has not run.
func (c *cluster) pending() []*Handle {
	c.mu.Lock()
	defer c.mu.Unlock()
	var hs []*Handle
	for _, h := range c.handles {
		if !h.done && !h.closed {
			hs = append(hs, h)
		}
	}
	return hs
}

func (h *Handle) createSchema(ctx context.Context, sess *gocql.Session) error {
	for _, q := range h.ddl {
		if err := sess.Query(q).WithContext(ctx).Exec(); err != nil && !columnExists(q, err) {
			return fmt.Errorf("create schema: %w", err)
		}
	}
	return nil
}

// columnExists reports whether err is Cassandra's refusal of q, an ALTER
// TABLE … ADD, because a column it adds exists: the migration ran already
// (Cassandra 4.0 has no ADD IF NOT EXISTS, and adds none of a statement's
// columns when one exists).
func columnExists(q string, err error) bool {
	var re gocql.RequestError
	return strings.HasPrefix(q, "ALTER TABLE ") && strings.Contains(q, " ADD ") &&
		errors.As(err, &re) && re.Code() == gocql.ErrCodeInvalid &&
		strings.HasPrefix(re.Message(), "Column with name ") && strings.HasSuffix(re.Message(), " already exists")
}

// Session returns the cluster's session once it is connected and the
// Handle's schema created; otherwise an error wrapping ErrNotConnected
// with the reason, or ErrClosed. The session belongs to the Pool: never
// close it.
func (h *Handle) Session() (*gocql.Session, error) {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case h.closed:
		return nil, ErrClosed
	case c.sess == nil:
		return nil, fmt.Errorf("%w: %v", ErrNotConnected, c.connErr)
	case !h.done && h.err != nil:
		return nil, fmt.Errorf("%w: %v", ErrNotConnected, h.err)
	case !h.done:
		return nil, fmt.Errorf("%w: creating the schema", ErrNotConnected)
	}
	return c.sess, nil
}

// Ready is closed once Session succeeds.
func (h *Handle) Ready() <-chan struct{} { return h.ready }

// State is a Handle's connection health: the cluster's, shared by every
// store on it, and its own schema's.
type State struct {
	// Connected is set once the session connected, even if the cluster
	// went away later (gocql reconnects by itself).
	Connected bool
	// Attempts counts the failed attempts to connect so far.
	Attempts int
	// Err is why Session fails now; nil when it succeeds.
	Err error
}

// State returns the Handle's State.
func (h *Handle) State() State {
	_, err := h.Session()
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return State{Connected: c.sess != nil, Attempts: c.attempts, Err: err}
}

// Close releases the Handle; the last one of a cluster stops its
// connecting and closes its session. Calls after the first do nothing.
func (h *Handle) Close() {
	c := h.c
	p := c.pool
	p.mu.Lock()
	c.mu.Lock()
	if h.closed {
		c.mu.Unlock()
		p.mu.Unlock()
		return
	}
	h.closed = true
	c.handles = slices.DeleteFunc(c.handles, func(x *Handle) bool { return x == h })
	last := len(c.handles) == 0
	if last {
		delete(p.clusters, c.key)
	}
	c.mu.Unlock()
	p.mu.Unlock()
	if !last {
		return
	}
	c.cancel()
	<-c.done
	c.mu.Lock()
	sess := c.sess
	c.mu.Unlock()
	if sess != nil {
		sess.Close()
	}
}
