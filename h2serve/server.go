// Package h2serve serves HTTP/2 (RFC 9113) on a connection with a loop of
// its own: over TLS once ALPN chose "h2", or in clear text (h2c) with prior
// knowledge. Frames are parsed and written with x/net/http2's Framer and
// header blocks coded with its hpack package; the serving is this
// package's.
//
// x/net/http2's server spends about 45 µs of CPU per request on its
// machinery: a serve goroutine fed by channels from the reader and from
// every handler, a frame-writer goroutine, and a write (a TLS record) per
// response. Here one reader goroutine per connection reads frames and
// answers the connection's own (SETTINGS, PING, WINDOW_UPDATE, RST_STREAM)
// itself; each request runs its handler on a goroutine of its own (one
// reused from a pool, its stack already grown), which writes its frames
// straight into the connection's buffer under a mutex; and a flusher
// goroutine writes the buffer out when woken, so that the answers of many
// streams ready together leave in one write. A redirect costs 15 µs of CPU
// where net/http's server takes 51 (h2load -c4 -m32 over TLS, loopback).
//
// Its requests follow net/http's HTTP/2 server: Proto "HTTP/2.0", the URL
// from :path, Host from :authority, RequestURI, ContentLength from
// content-length (-1 with a body of unknown length, 0 and http.NoBody
// without one), TLS, RemoteAddr, and a context carrying
// http.ServerContextKey, http.LocalAddrContextKey and ConnContext's values
// and the request's start (an ongoing.RequestContext), canceled when the
// stream is reset, the handler returns or the connection ends. Its responses follow the same rules: a Date field, Content-Type
// sniffed when the handler wrote a body without one, Content-Length when
// the handler wrote its whole body before returning, trailers (the
// Trailer field and http.TrailerPrefix), 1xx interim answers,
// http.ResponseController's Flush, SetReadDeadline, SetWriteDeadline and
// EnableFullDuplex.
//
// Not the same:
//   - no server push, no RFC 7540 or RFC 9218 priorities (PRIORITY frames
//     are validated and ignored): the streams' DATA frames go out in the
//     order their handlers write them, each within the flow-control
//     windows;
//   - response header fields are written in map order, not sorted;
//   - ReadTimeout is not a field: a handler that wants a bound on its body
//     sets one with http.ResponseController.SetReadDeadline;
//   - no limit on the control frames (PING, SETTINGS, RST_STREAM) a client
//     may send: package h2guard budgets them in front of the server.
package h2serve

import (
	"context"
	"crypto/tls"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Server serves HTTP/2 connections. Its fields are read when a connection
// starts and must not change after. The zero Server serves
// http.DefaultServeMux with the defaults each field states. A Server is
// safe for concurrent use.
type Server struct {
	// Handler answers the requests; nil means http.DefaultServeMux.
	Handler http.Handler

	// HTTPServer is what the requests' contexts hold under
	// http.ServerContextKey; nil: one made of this Server's fields.
	HTTPServer *http.Server

	// MaxConcurrentStreams is the number of streams a client may have
	// open at once (SETTINGS_MAX_CONCURRENT_STREAMS); a stream over it is
	// refused (RST_STREAM REFUSED_STREAM). 0 means 250.
	MaxConcurrentStreams uint32

	// MaxReadFrameSize is the largest frame payload the server reads, in
	// bytes (SETTINGS_MAX_FRAME_SIZE); 0 means 16 KiB, the least allowed.
	MaxReadFrameSize uint32

	// MaxHeaderBytes bounds a request's header list, in bytes as RFC 9113
	// counts them (name, value and 32 per field). A request over it is
	// answered 431 without reaching the Handler. 0 means
	// http.DefaultMaxHeaderBytes.
	MaxHeaderBytes int

	// IdleTimeout closes a connection that has had no open stream for
	// this long (with GOAWAY NO_ERROR); 0 means none.
	IdleTimeout time.Duration

	// ReadHeaderTimeout bounds the wait for the client's preface and
	// first SETTINGS frame (and, over TLS, the handshake when ServeConn
	// does it); 0 means none.
	ReadHeaderTimeout time.Duration

	// WriteTimeout bounds each response, from the request's arrival to
	// its last frame: a stream still writing then is reset. 0 means none.
	WriteTimeout time.Duration

	// ConnContext may derive the context of a connection from its base;
	// nil leaves it as is.
	ConnContext func(ctx context.Context, c net.Conn) context.Context

	// ErrorLog logs handler panics and connection errors; nil means the
	// log package's standard logger.
	ErrorLog *log.Logger

	mu       sync.Mutex
	conns    map[*conn]struct{}
	shutting atomic.Bool
	active   sync.WaitGroup // the connections served
	httpSrv  *http.Server   // HTTPServer, or the one made for it
	once     sync.Once
	workers  workers // the handlers' goroutines
}

// Defaults of the Server's fields.
const (
	defaultMaxStreams   = 250
	defaultMaxFrameSize = 16 << 10
	// initialStreamWindow is the receive window the server gives each
	// stream (SETTINGS_INITIAL_WINDOW_SIZE), connWindow the connection's:
	// a request body may be this far ahead of its handler's reads.
	initialStreamWindow = 1 << 20
	connWindow          = 4 << 20
)

// ServeConn serves nc as an HTTP/2 connection until it ends, and closes
// it. ctx is the connection's base context (ConnContext derives from it);
// sawPreface says the caller has read the client's connection preface
// already (an h2c upgrade, or a sniffing listener), so that the first
// bytes expected are the client's SETTINGS frame. A *tls.Conn is
// handshaken first if it was not.
func (s *Server) ServeConn(ctx context.Context, nc net.Conn, sawPreface bool) {
	s.ServeConnHandler(ctx, nc, nil, sawPreface)
}

// ServeConnHandler is ServeConn with h, when not nil, answering the
// connection's requests in place of Handler: net/http hands each
// connection it passes on (TLSNextProto) a handler of its own. A
// connection that is not a *tls.Conn but says its ConnectionState (a
// wrapper of one already handshaken) gives its requests that state.
func (s *Server) ServeConnHandler(ctx context.Context, nc net.Conn, h http.Handler, sawPreface bool) {
	if s.ConnContext != nil {
		if ctx = s.ConnContext(ctx, nc); ctx == nil {
			panic("h2serve: ConnContext returned nil")
		}
	}
	ctx = context.WithValue(ctx, http.ServerContextKey, s.httpServer())
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, nc.LocalAddr())
	c := newConn(ctx, s, nc)
	c.handler = h
	if st, ok := nc.(interface{ ConnectionState() tls.ConnectionState }); ok {
		if _, raw := nc.(*tls.Conn); !raw {
			state := st.ConnectionState()
			c.tls = &state
		}
	}
	if !s.track(c) {
		nc.Close()
		return
	}
	defer s.untrack(c)
	if tc, ok := nc.(*tls.Conn); ok && !s.handshake(ctx, tc, c) {
		nc.Close()
		return
	}
	c.serve(sawPreface)
}

// handshake runs tc's handshake, bounded by ReadHeaderTimeout, and keeps
// its state for the requests.
func (s *Server) handshake(ctx context.Context, tc *tls.Conn, c *conn) bool {
	if d := s.ReadHeaderTimeout; d > 0 {
		tc.SetDeadline(time.Now().Add(d))
		defer tc.SetDeadline(time.Time{})
	}
	if err := tc.HandshakeContext(ctx); err != nil {
		return false
	}
	st := tc.ConnectionState()
	c.tls = &st
	return true
}

// httpServer is the *http.Server the requests' contexts hold.
func (s *Server) httpServer() *http.Server {
	s.once.Do(func() {
		s.httpSrv = s.HTTPServer
		if s.httpSrv == nil {
			s.httpSrv = &http.Server{
				Handler: s.Handler, MaxHeaderBytes: s.MaxHeaderBytes, IdleTimeout: s.IdleTimeout,
				ReadHeaderTimeout: s.ReadHeaderTimeout, WriteTimeout: s.WriteTimeout,
				ConnContext: s.ConnContext, ErrorLog: s.ErrorLog,
			}
		}
	})
	return s.httpSrv
}

// Shutdown refuses new connections, tells every connection GOAWAY (NO_ERROR, with
// the last stream it took), lets their open streams end and closes them;
// ctx bounds the wait, and Shutdown returns ctx's error when it ends
// first (the connections left are closed then).
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutting.Store(true)
	s.mu.Lock()
	for c := range s.conns {
		c.goAway(0)
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.active.Wait(); close(done) }()
	select {
	case <-done:
		s.workers.stop()
		return nil
	case <-ctx.Done():
		s.Close()
		return ctx.Err()
	}
}

// Close closes every connection at once.
func (s *Server) Close() error {
	s.shutting.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		c.nc.Close()
	}
	s.workers.stop()
	return nil
}

// track adds c to the connections Shutdown waits for; false after
// Shutdown.
func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Load() {
		return false
	}
	if s.conns == nil {
		s.conns = make(map[*conn]struct{})
	}
	s.conns[c] = struct{}{}
	s.active.Add(1)
	return true
}

// untrack removes c, ended, from the connections Shutdown waits for.
func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.active.Done()
}

// handler is Handler, or http.DefaultServeMux as net/http has it.
func (s *Server) handler() http.Handler {
	if s.Handler == nil {
		return http.DefaultServeMux
	}
	return s.Handler
}

// maxStreams is MaxConcurrentStreams or its default.
func (s *Server) maxStreams() uint32 {
	if s.MaxConcurrentStreams == 0 {
		return defaultMaxStreams
	}
	return s.MaxConcurrentStreams
}

// maxReadFrameSize is MaxReadFrameSize when RFC 9113 allows it (16 KiB
// to 16 MiB - 1), or the default.
func (s *Server) maxReadFrameSize() uint32 {
	if v := s.MaxReadFrameSize; v >= defaultMaxFrameSize && v <= 1<<24-1 {
		return v
	}
	return defaultMaxFrameSize
}

// maxHeaderListSize is the header list size advertised and enforced:
// MaxHeaderBytes and, as x/net/http2 allows, the per-field overhead of ten
// typical fields.
func (s *Server) maxHeaderListSize() uint32 {
	n := s.MaxHeaderBytes
	if n <= 0 {
		n = http.DefaultMaxHeaderBytes
	}
	return uint32(n + 10*32)
}

// logf logs to ErrorLog, or the standard logger.
func (s *Server) logf(format string, args ...any) {
	if s.ErrorLog != nil {
		s.ErrorLog.Printf(format, args...)
	} else {
		log.Printf(format, args...)
	}
}
