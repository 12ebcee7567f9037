package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linkgate/linkgate/ja4"
)

// Listener terminates TLS on the connections of a net.Listener. Accept
// returns only connections whose handshake succeeded: the handshakes run
// concurrently, each under handshake_timeout, so that a slow client or an
// on-demand issuance never holds up the others. A connection that
// negotiated HTTP/2 is returned as the *tls.Conn (net/http hands it to the
// server's HTTP/2 handler: the gateway's is h2guard's, which reads it
// through its budgets); any other is passed through wrapHTTP1 (the
// gateway's count of connections not answered yet) and returned as a
// connection whose ConnectionState is the handshake's, so that requests on
// it carry their TLS state (h1serve's loop and net/http both read it).
type Listener struct {
	inner   net.Listener
	e       *Edge
	tlsCfg  *tls.Config
	timeout time.Duration
	wrap    func(net.Conn) net.Conn

	conns     chan net.Conn
	errc      chan error
	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	draining  atomic.Bool
	loopDone  chan struct{} // closed when acceptLoop returns
}

// Listen wraps inner. wrapHTTP1 may be nil.
func (e *Edge) Listen(inner net.Listener, wrapHTTP1 func(net.Conn) net.Conn) *Listener {
	cfg := e.TLSConfig()
	cfg.GetConfigForClient = fingerprint
	l := &Listener{
		inner: inner, e: e, tlsCfg: cfg,
		timeout: e.plan.Load().cfg.HandshakeTimeout,
		wrap:    wrapHTTP1,
		conns:   make(chan net.Conn), errc: make(chan error, 1), closed: make(chan struct{}),
		loopDone: make(chan struct{}),
	}
	go l.acceptLoop()
	return l
}

func (l *Listener) acceptLoop() {
	defer close(l.loopDone)
	var delay time.Duration
	for {
		c, err := l.inner.Accept()
		if err != nil {
			if l.draining.Load() {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			if isTemporary(err) {
				// Out of file descriptors, say: back off as net/http does.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(delay):
					continue
				case <-l.closed:
					return
				}
			}
			select {
			case l.errc <- err:
			case <-l.closed:
			}
			return
		}
		delay = 0
		l.wg.Add(1)
		go l.handshake(c)
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

func (l *Listener) handshake(raw net.Conn) {
	defer l.wg.Done()
	tc := tls.Server(&helloConn{Conn: raw}, l.tlsCfg)
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	raw.SetDeadline(time.Now().Add(l.timeout))
	err := tc.HandshakeContext(ctx)
	if err != nil {
		result := "failed"
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
			result = "timeout"
		}
		l.e.m.handshakes.WithLabelValues(result).Inc()
		l.e.log.Debug("TLS handshake failed", "remote", raw.RemoteAddr().String(), "err", err)
		raw.Close()
		return
	}
	raw.SetDeadline(time.Time{})
	l.e.m.handshakes.WithLabelValues("ok").Inc()
	var c net.Conn = tc
	state := tc.ConnectionState()
	if state.NegotiatedProtocol != "h2" {
		if l.wrap != nil {
			c = l.wrap(tc)
		}
		c = &http1Conn{Conn: c, state: state, ja4: Fingerprint(tc)}
	}
	select {
	case l.conns <- c:
	case <-l.closed:
		c.Close()
	}
}

// helloConn is a client connection as crypto/tls reads it: the handshake
// leaves the JA4 fingerprint of its ClientHello in ja4.
type helloConn struct {
	net.Conn
	ja4 string
}

// fingerprint is the listener's GetConfigForClient: it keeps the JA4
// fingerprint of the ClientHello on the connection, for the analytics
// (Fingerprint), and changes nothing in the handshake.
func fingerprint(h *tls.ClientHelloInfo) (*tls.Config, error) {
	if c, ok := h.Conn.(*helloConn); ok {
		c.ja4 = ja4.Fingerprint(ja4.FromClientHello(h))
	}
	return nil, nil
}

// Fingerprint returns the JA4 fingerprint of the ClientHello of a
// connection the Listener returned (an HTTP/1 one, or the *tls.Conn of an
// HTTP/2 one); "" for any other connection.
func Fingerprint(c net.Conn) string {
	switch cc := c.(type) {
	case *http1Conn:
		return cc.ja4
	case *tls.Conn:
		if h, ok := cc.NetConn().(*helloConn); ok {
			return h.ja4
		}
	}
	return ""
}

// http1Conn is a TLS connection serving HTTP/1: net/http reads its
// ConnectionState into Request.TLS.
type http1Conn struct {
	net.Conn
	state tls.ConnectionState
	ja4   string
}

func (c *http1Conn) ConnectionState() tls.ConnectionState { return c.state }

// Unwrap returns the wrapped connection.
func (c *http1Conn) Unwrap() net.Conn { return c.Conn }

// Accept returns the next connection whose handshake succeeded.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case err := <-l.errc:
		l.errc <- err
		return nil, err
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Drain stops accepting and waits, until ctx is done, for the handshakes
// in progress to end: Accept still returns the connections of those that
// succeed, so that a graceful stop serves them rather than closing them
// unanswered. Close after it.
func (l *Listener) Drain(ctx context.Context) error {
	l.draining.Store(true)
	l.inner.Close()
	done := make(chan struct{})
	go func() { <-l.loopDone; l.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops accepting; a handshake in progress ends with its
// connection closed.
func (l *Listener) Close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.closed)
		err = l.inner.Close()
	})
	return err
}

// Addr returns the inner listener's address.
func (l *Listener) Addr() net.Addr { return l.inner.Addr() }
