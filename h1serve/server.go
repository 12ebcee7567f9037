// Package h1serve serves HTTP/1.1 on a listener with a loop of its own for
// the request a tiny-URL gateway sees most: a GET or HEAD whose head is
// small, well formed and carries no body, no upgrade and no expectation.
// Every other connection is handed, from its first request that is not
// such a request, to a net/http server configured as the caller wants, so
// that everything unusual (bodies, chunked framing, 100-continue,
// upgrades, HTTP/1.0, malformed or oversized heads and their error
// answers) is served exactly as net/http serves it.
//
// net/http's server costs about a third of a proxied request's CPU on
// loopback: a goroutine per request to watch for the client leaving, a
// header clone and sort per response, a second buffer before the
// connection's. The loop here reads a request head straight from the
// connection's buffer (in the grammar of package h1wire, which the
// proxy's upstream client speaks too), answers through one buffered
// writer and watches for the client leaving only while a handler runs
// longer than 10 to 20 ms (scanEvery). Its requests and responses follow net/http's rules (the
// differential tests hold both to the same answers): the same header
// validation (anything net/http would refuse is handed to it), Host moved
// out of the header, Pragma: no-cache implying Cache-Control, the same
// Content-Length, chunking, Content-Type sniffing, Date, Connection:
// close and trailer rules, the same timeouts (ReadHeaderTimeout,
// IdleTimeout, WriteTimeout) and the same context values
// (http.ServerContextKey, http.LocalAddrContextKey, ConnContext's).
//
// Over TLS (a *tls.Conn, or a connection handshaken before it was accepted
// that says its ConnectionState), the loop serves HTTP/1 as over TCP, with
// the request's TLS state; a handshake that chose h2 hands the connection
// to the net/http server's TLSNextProto (tls.go).
//
// Not the same, and what the gateway needs of none of it:
//   - response header fields are written in map order, not sorted (RFC
//     9110 section 5.3: the order of fields with different names carries
//     no meaning);
//   - the loop's response writer cannot be hijacked (no request it serves
//     asks for an upgrade) and has no ReadFrom, WriteString or
//     CloseNotify: a body copied with io.Copy that ends within 2 KiB gets
//     a Content-Length, as one written with Write does, where net/http
//     would chunk it;
//   - a handler that panics after writing part of a body has all it wrote
//     sent before the connection is cut (net/http may hold back the last
//     2 KiB); the client sees a cut answer either way;
//   - srv.SetKeepAlivesEnabled(false) is not seen (Shutdown is);
//   - with a BaseContext or ConnContext that can end, context.Cause of a
//     request's context that ended as its handler returned is nil (the
//     base's cause, which has none), where net/http's says
//     context.Canceled as Err does.
package h1serve

import (
	"context"
	"errors"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves a listener as srv would, with the loop for the common
// request. srv's Handler, ReadHeaderTimeout, ReadTimeout (as the idle
// timeout when IdleTimeout is 0), WriteTimeout, IdleTimeout, BaseContext,
// ConnContext and ErrorLog apply to both; srv serves the connections
// handed over.
type Server struct {
	srv  *http.Server
	hand *handoff
	wrap func(net.Conn) net.Conn // HandOver's

	mu       sync.Mutex
	ln       net.Listener
	conns    map[*conn]struct{}
	active   sync.WaitGroup // the loop's connections
	shutting atomic.Bool
	scanner  atomic.Bool // scan runs
	scanIdle int         // scanIdle, or fewer in the tests
	scanEnds func()      // when set, runs as the scanner decides to end (the tests)
}

// New returns a Server serving like srv.
func New(srv *http.Server) *Server {
	return &Server{srv: srv, conns: make(map[*conn]struct{}), scanIdle: scanIdle}
}

// HandOver has f wrap every connection the loop hands to srv, before srv
// sees it. The connection f wraps reads first what the loop had read and
// not consumed, from the start of the request handed over, so that a
// wrapper reading along with srv (a scan of request heads) sees exactly
// the bytes srv parses, and none of those the loop served. Call it before
// Serve.
func (s *Server) HandOver(f func(net.Conn) net.Conn) { s.wrap = f }

// Serve accepts connections on l until Shutdown or Close, and returns
// http.ErrServerClosed then (or the listener's error).
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.shutting.Load() || s.ln != nil {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.ln = l
	s.hand = newHandoff(l.Addr())
	s.mu.Unlock()
	go s.srv.Serve(s.hand) // ends with Shutdown or Close

	base := context.Background()
	if s.srv.BaseContext != nil {
		if base = s.srv.BaseContext(l); base == nil {
			panic("h1serve: BaseContext returned a nil context")
		}
	}
	base = context.WithValue(base, http.ServerContextKey, s.srv)
	var delay time.Duration // how long to sleep on accept failure, as net/http
	for {
		nc, err := l.Accept()
		if err != nil {
			if s.shutting.Load() {
				return http.ErrServerClosed
			}
			// As net/http: a temporary failure (EMFILE, ENFILE, ...) is
			// waited out, not the end of serving.
			var te interface{ Temporary() bool }
			if errors.As(err, &te) && te.Temporary() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.logf("http: Accept error: %v; retrying in %v", err, delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		ctx := base
		if cc := s.srv.ConnContext; cc != nil {
			if ctx = cc(ctx, nc); ctx == nil {
				panic("h1serve: ConnContext returned nil")
			}
		}
		c := newConn(s, nc, ctx)
		if !s.track(c) {
			nc.Close()
			return http.ErrServerClosed
		}
		go c.serve()
	}
}

func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	s.active.Add(1)
	return true
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.active.Done()
}

// Shutdown stops accepting, closes the loop's idle connections, lets the
// requests in flight end (their answers say Connection: close), and shuts
// srv down beside them, so that the HTTP/2 connections srv serves hear
// GOAWAY at once rather than after the loop's last request; ctx bounds
// the whole.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stop()
	srvDone := make(chan error, 1)
	go func() { srvDone <- s.srv.Shutdown(ctx) }()
	done := make(chan struct{})
	go func() { s.active.Wait(); close(done) }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for waiting := true; waiting; {
		s.closeIdle()
		select {
		case <-done:
			waiting = false
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return <-srvDone
}

// Close closes the listener and every connection, in flight or not.
func (s *Server) Close() error {
	s.stop()
	s.mu.Lock()
	for c := range s.conns {
		c.nc.Close()
	}
	s.mu.Unlock()
	return s.srv.Close()
}

func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Swap(true) {
		return
	}
	if s.ln != nil {
		s.ln.Close()
	}
	if s.hand == nil {
		s.hand = newHandoff(nil) // Serve never ran: srv.Shutdown must not wait for it
	}
}

func (s *Server) closeIdle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) {
			c.nc.Close()
		}
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.srv.ErrorLog != nil {
		s.srv.ErrorLog.Printf(format, args...)
	} else {
		log.Printf(format, args...)
	}
}

// handler is srv's Handler, or http.DefaultServeMux as net/http has it.
func (s *Server) handler() http.Handler {
	if s.srv.Handler == nil {
		return http.DefaultServeMux
	}
	return s.srv.Handler
}

func (s *Server) keepAlives() bool { return !s.shutting.Load() }

// handoff is the listener srv serves: the connections the loop hands over.
type handoff struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newHandoff(addr net.Addr) *handoff {
	return &handoff{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.ch:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

func (h *handoff) Close() error {
	h.once.Do(func() { close(h.done) })
	return nil
}

func (h *handoff) Addr() net.Addr { return h.addr }

// give passes c to srv; false when srv no longer accepts.
func (h *handoff) give(c net.Conn) bool {
	select {
	case h.ch <- c:
		return true
	case <-h.done:
		return false
	}
}

// replayConn is a connection handed over with the bytes the loop had
// read from it and not consumed: they are read first.
type replayConn struct {
	net.Conn
	pending []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// Unwrap returns the connection accepted (a ConnContext looks for its own
// wrapper there).
func (c *replayConn) Unwrap() net.Conn { return c.Conn }

// CloseWrite half-closes the connection when it can: net/http does so
// after a 431 or 400 so that the client reads the answer before the
// close resets the connection.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
