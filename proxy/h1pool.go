package proxy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/linkgate/linkgate/h1wire"
)

// h1Pool is the kept-alive connections to one target, for the proxy's
// own HTTP/1.1 client (client.go): plain TCP to an http:// target, TLS to
// an https:// one. Idle connections are a stack: the most recently used
// one is the likeliest to be alive and warm. No goroutine watches an
// idle connection; one that the target closed while it sat idle is
// noticed when it is taken (peerClosed) or when the request sent on it
// fails before any byte of a response came back, and a request that may
// be sent twice is then sent again on a new connection.
//
// At most maxOpen connections to the target are open (idle, in use or
// being dialed): a request that finds none idle and every one taken waits
// up to dial_timeout for one to be put back or closed, and is refused
// (errPoolBusy, a 503) when none is, so that a burst of requests, or of
// streams a client resets, never opens more than maxOpen connections.
//
// A Proxy built on reload (Renew) shares the pools of the targets it keeps
// with the same connection settings, so that a reload keeps their
// connections. It is safe for concurrent use.
type h1Pool struct {
	key    poolKey
	dialer *net.Dialer
	tls    *tls.Config // an https:// target's, ServerName set; nil for http://
	// h2: the target chose HTTP/2 when offered it (TLS's ALPN): its
	// requests go through http.Transport (Proxy.serveTransport).
	h2      atomic.Bool
	opened  *atomic.Int64 // shared with the Proxies using the pool
	m       *Metrics
	maxIdle int
	maxOpen int

	mu   sync.Mutex
	idle []*h1Conn // guarded by mu; the last is the most recently used
	// open counts the connections open, idle or in use, and the dials
	// under way; guarded by mu.
	open int
	// waiters are the requests waiting for a connection, first come first
	// served: each gets one put back, or nil, a slot to dial in; guarded
	// by mu.
	waiters []chan *h1Conn
	refs    int  // guarded by mu: Proxies using the pool
	closed  bool // guarded by mu
}

// poolKey is what makes two targets' connections interchangeable: the
// address and the settings a connection is opened and kept with.
type poolKey struct {
	addr        string // host:port
	https       bool
	dialTimeout time.Duration
	maxIdle     int
	maxOpen     int
	tls         tlsKey // an https:// target's TLS settings; zero for http://
}

// tlsKey is a pool's TLS settings as the config and its files give them:
// a reload after a file changed makes new connections.
type tlsKey struct {
	cfg   TLS
	files [sha256.Size]byte // of the CA bundle, the client certificate and its key
}

// tlsHandshakeTimeout bounds the TLS handshake with a target, as
// http.Transport's TLSHandshakeTimeout in transport.go.
const tlsHandshakeTimeout = 10 * time.Second

// errPoolBusy is the error of a request that found maxOpen connections
// to its target open, none put back within dial_timeout: 503.
var errPoolBusy = errors.New("proxy: every connection to the target is in use")

// errH2 is the error of a connection on which the target chose HTTP/2:
// its requests go through http.Transport from then on.
var errH2 = errors.New("proxy: the target speaks HTTP/2")

// idleTimeout is how long an idle upstream connection is kept, as
// http.Transport's IdleConnTimeout in transport.go.
const idleTimeout = 90 * time.Second

// staleCheckAfter is how long a connection may sit idle before it is
// checked for a close by the target when taken from the pool. A
// connection reused within it is taken as it is: servers close idle
// connections after seconds, and a request that may be sent twice is sent
// again when the connection turns out closed.
const staleCheckAfter = 10 * time.Millisecond

// h1Conn is one upstream connection. It is used by one request at a time.
type h1Conn struct {
	nc     net.Conn
	br     *bufio.Reader
	raw    syscall.RawConn // nil when nc has none
	idleAt time.Time       // when it was put back
	reused bool            // it has carried a request before
	// dialed is when the connection was ready (its TLS handshake done):
	// the wait for its first answer's head starts no earlier.
	dialed time.Time
	last   h1wire.LastFields // its last response head's fields
	// rdl is the read deadline armHeaderDeadline set last, zero when
	// another may have been set since.
	rdl time.Time
}

// armHeaderDeadline bounds the wait for the response head of a request
// sent at start to rht (response_header_timeout) with the least work: the
// read deadline is set to start+rht+rht/16 only when the one it set last
// is not already between start+rht and that, so that a busy connection
// sets it about once every rht/16 rather than once a request (a deadline
// costs a runtime timer update). A head may thus be waited for up to
// rht/16 longer than rht. Every other setter of c's read deadline must
// clear rdl.
func (c *h1Conn) armHeaderDeadline(start time.Time, rht time.Duration) {
	want := start.Add(rht)
	if !c.rdl.Before(want) && !c.rdl.After(want.Add(rht/16)) {
		return
	}
	c.rdl = want.Add(rht / 16)
	c.nc.SetReadDeadline(c.rdl)
}

// newH1Pool returns the pool of connections to the target of key; tc is
// an https:// target's TLS settings (nil: Go's defaults), unused for an
// http:// one.
func newH1Pool(key poolKey, tc *tls.Config, opened *atomic.Int64, m *Metrics) *h1Pool {
	p := &h1Pool{
		key:     key,
		dialer:  &net.Dialer{Timeout: key.dialTimeout, KeepAlive: 30 * time.Second},
		opened:  opened,
		m:       m,
		maxIdle: key.maxIdle,
		maxOpen: key.maxOpen,
	}
	if key.https {
		// As http.Transport sets them: the target's host as the name to
		// send and verify unless the config names one, and HTTP/2 offered
		// (a target that takes it is served by http.Transport).
		if tc == nil {
			tc = &tls.Config{}
		}
		p.tls = tc.Clone()
		if p.tls.ServerName == "" {
			host, _, _ := net.SplitHostPort(key.addr)
			p.tls.ServerName = host
		}
		p.tls.NextProtos = []string{"h2", "http/1.1"}
	}
	return p
}

// speaksH2 reports whether the target chose HTTP/2.
func (p *h1Pool) speaksH2() bool { return p.h2.Load() }

// get returns an idle connection, or nil when there is none worth using.
// check asks for every connection to be checked for a close by the target,
// however briefly it was idle (a request that cannot be sent twice).
func (p *h1Pool) get(now time.Time, check bool) *h1Conn {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			return nil
		}
		c := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		idle := now.Sub(c.idleAt)
		if idle > idleTimeout {
			p.discard(c)
			continue
		}
		if check || idle >= staleCheckAfter {
			// The last exchange's read deadline may have passed: the peek
			// would fail on it, not on the socket.
			c.rdl = time.Time{}
			c.nc.SetReadDeadline(time.Time{})
			if c.peerClosed() {
				p.discard(c)
				continue
			}
		}
		return c
	}
}

// take returns a connection for a request: an idle one (get; none when
// idle is false, for a request sent again after a kept-alive connection
// failed), else a new one while fewer than maxOpen are open, else the
// first one put back or slot freed within dial_timeout: errPoolBusy when
// none comes, ctx's error when it ends first. A health check (wait false)
// does not wait: it dials at once, over maxOpen if need be, so that a
// target whose every connection is busy is not taken for down.
func (p *h1Pool) take(ctx context.Context, now time.Time, check, idle, wait bool) (*h1Conn, error) {
	if idle {
		if c := p.get(now, check); c != nil {
			return c, nil
		}
	}
	p.mu.Lock()
	if p.open < p.maxOpen || !wait {
		p.open++
		p.mu.Unlock()
		return p.dial(ctx)
	}
	ch := make(chan *h1Conn, 1)
	p.waiters = append(p.waiters, ch)
	p.mu.Unlock()
	timer := time.NewTimer(p.key.dialTimeout)
	defer timer.Stop()
	var err error
	select {
	case c := <-ch:
		if c != nil {
			return c, nil
		}
		return p.dial(ctx) // a slot freed
	case <-timer.C:
		err = errPoolBusy
	case <-ctx.Done():
		err = ctx.Err()
	}
	p.mu.Lock()
	if i := slices.Index(p.waiters, ch); i >= 0 {
		p.waiters = slices.Delete(p.waiters, i, i+1)
		p.mu.Unlock()
		return nil, err
	}
	p.mu.Unlock()
	// Handed a connection or a slot as the wait ended: pass it on.
	if c := <-ch; c != nil {
		p.put(c, c.idleAt)
	} else {
		p.free()
	}
	return nil, err
}

// free gives a closed connection's slot to the first waiter, or counts
// it free.
func (p *h1Pool) free() {
	p.mu.Lock()
	if len(p.waiters) > 0 {
		ch := p.waiters[0]
		p.waiters = slices.Delete(p.waiters, 0, 1)
		p.mu.Unlock()
		ch <- nil
		return
	}
	p.open--
	p.mu.Unlock()
}

// discard closes c and frees its slot.
func (p *h1Pool) discard(c *h1Conn) {
	c.nc.Close()
	p.free()
}

// dial opens a new connection to the target in a slot take counted,
// counting it, and for an https:// target shakes hands over it. It
// returns errH2 when the target chose HTTP/2. A dial that fails frees
// its slot.
func (p *h1Pool) dial(ctx context.Context) (*h1Conn, error) {
	nc, err := p.dialer.DialContext(ctx, "tcp", p.key.addr)
	if err != nil {
		p.free()
		return nil, err
	}
	p.opened.Add(1)
	p.m.connOpened()
	c := &h1Conn{nc: nc}
	if sc, ok := nc.(syscall.Conn); ok {
		c.raw, _ = sc.SyscallConn() // the socket, under TLS too: peerClosed peeks at it
	}
	if p.tls != nil {
		tc := tls.Client(nc, p.tls)
		hctx, cancel := context.WithTimeout(ctx, tlsHandshakeTimeout)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			nc.Close()
			p.free()
			return nil, err
		}
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			p.h2.Store(true)
			tc.Close()
			p.free()
			return nil, errH2
		}
		c.nc = tc
	}
	c.br = bufio.NewReaderSize(c.nc, 4<<10)
	c.dialed = time.Now()
	return c, nil
}

// put hands c to the first waiter, or returns it to the pool, or closes
// it when the pool is full or closed.
func (p *h1Pool) put(c *h1Conn, now time.Time) {
	c.idleAt = now
	c.reused = true
	p.mu.Lock()
	if len(p.waiters) > 0 && !p.closed {
		ch := p.waiters[0]
		p.waiters = slices.Delete(p.waiters, 0, 1)
		p.mu.Unlock()
		ch <- c
		return
	}
	if p.closed || len(p.idle) >= p.maxIdle {
		p.mu.Unlock()
		p.discard(c)
		return
	}
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

// prune closes the connections idle for longer than idleTimeout. The
// health loop calls it, so that connections are not held open for ever
// by a target that gets no more requests.
func (p *h1Pool) prune(now time.Time) {
	p.mu.Lock()
	keep := p.idle[:0]
	var old []*h1Conn
	for _, c := range p.idle {
		if now.Sub(c.idleAt) > idleTimeout {
			old = append(old, c)
		} else {
			keep = append(keep, c)
		}
	}
	clear(p.idle[len(keep):])
	p.idle = keep
	p.mu.Unlock()
	for _, c := range old {
		p.discard(c)
	}
}

// closeIdle closes every idle connection and refuses to keep more.
func (p *h1Pool) closeIdle() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, c := range idle {
		p.discard(c)
	}
}

// idleCount is the number of idle connections (tests).
func (p *h1Pool) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// acquire counts one more Proxy using p.
func (p *h1Pool) acquire() {
	p.mu.Lock()
	p.refs++
	p.mu.Unlock()
}

// release counts one Proxy less using p, and closes p's connections when
// it was the last.
func (p *h1Pool) release() {
	p.mu.Lock()
	p.refs--
	last := p.refs == 0
	p.mu.Unlock()
	if last {
		p.closeIdle()
	}
}
