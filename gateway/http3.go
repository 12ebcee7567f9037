package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linkgate/linkgate/cidroute"
	"github.com/linkgate/linkgate/ja4"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// h3RetryAbove is how many QUIC connections may be open before a new one
// from an address not validated yet must first echo a Retry token (RFC
// 9000 section 8.1.2): one round trip more for it, and none of the
// handshake's work for a spoofed source. Below it a client's first
// request costs one round trip, which is what HTTP/3 is for.
const h3RetryAbove = 4096

// h3 is the HTTP/3 server on the UDP socket of server.listen's address
// (server.http3): quic-go's, with the TLS edge's certificates (on-demand
// ones too), the gateway's handler (the limiter, visits, routes, stats as
// over HTTP/2), and the request's client address the UDP peer's.
//
// QUIC's own abuse cases: quic-go never sends more than three times what
// an address not validated yet sent (RFC 9000 section 8), and sends a
// Retry first once h3RetryAbove connections are open; a connection may
// have server.max_concurrent_streams requests open and its handshake
// must end within server.tls.handshake_timeout; 0-RTT is refused (its
// requests can be replayed, and a visit must be counted once), so a
// resumed connection's first request waits for the handshake, as over
// TLS 1.3 on TCP.
type h3 struct {
	conn        *cidroute.Conn
	tr          *quic.Transport
	srv         *http3.Server
	open        atomic.Int64  // QUIC connections open
	handshaking atomic.Int64  // QUIC connections not handed to the HTTP/3 server yet
	handingOver atomic.Bool   // a binary upgrade's: new connections go to the new process
	inflight    atomic.Int64  // requests being answered
	served      chan struct{} // closed when serve returns
	quit        chan struct{} // closed when stop begins

	mu      sync.Mutex
	ln      *quic.Listener // once serve listens
	stopped bool
}

// The JA4 fingerprint of an HTTP/3 connection. quic-go runs crypto/tls's
// QUIC handshake with the context its Transport's ConnContext returned, so
// the tls.ClientHelloInfo that GetConfigForClient gets (with the
// extension list, Go 1.24) carries it: h3HelloContext puts a place for
// the fingerprint in that context, h3Fingerprint's GetConfigForClient
// fills it, and h3ConnContext, called once the handshake is done (0-RTT is
// refused), puts it where the analytics read it (ja4.NewContext), once per
// connection.

type h3HelloKey struct{}

// h3HelloContext returns ctx with a place for its connection's
// fingerprint.
func h3HelloContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, h3HelloKey{}, new(atomic.Pointer[string]))
}

// h3Fingerprint returns a copy of cfg whose GetConfigForClient keeps the
// ClientHello's JA4 fingerprint (QUIC's: "q…") in the place
// h3HelloContext made, then asks cfg's own, if any.
func h3Fingerprint(cfg *tls.Config) *tls.Config {
	cfg = cfg.Clone()
	next := cfg.GetConfigForClient
	cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		if p, ok := h.Context().Value(h3HelloKey{}).(*atomic.Pointer[string]); ok {
			hello := ja4.FromClientHello(h)
			hello.QUIC = true
			fp := ja4.Fingerprint(hello)
			p.Store(&fp)
		}
		if next != nil {
			return next(h)
		}
		return nil, nil
	}
	return cfg
}

// h3ConnContext is the http3.Server's ConnContext: the connection's
// requests carry its fingerprint.
func h3ConnContext(ctx context.Context, _ *quic.Conn) context.Context {
	if p, ok := ctx.Value(h3HelloKey{}).(*atomic.Pointer[string]); ok {
		if fp := p.Load(); fp != nil {
			return ja4.NewContext(ctx, *fp)
		}
	}
	return ctx
}

// newH3 prepares the server on pc; serve starts it. Its connection IDs
// carry pc's tag, so that a binary upgrade's new process can pass this
// one its packets (package cidroute).
func (g *Gateway) newH3(pc *cidroute.Conn, tlsCfg *tls.Config, h http.Handler) *h3 {
	cfg := g.current().eff.Server
	s := &h3{conn: pc, served: make(chan struct{}), quit: make(chan struct{})}
	s.tr = &quic.Transport{
		Conn:                  pc,
		ConnectionIDGenerator: pc.IDs(),
		// Once handed over, a new connection reaches this process only with
		// a connection ID of its tag: a Retry's, or a forged one. It must
		// echo a Retry token first, which costs this process no more than
		// the new one pays for any unknown connection ID.
		VerifySourceAddress: func(net.Addr) bool { return s.open.Load() >= h3RetryAbove || s.handingOver.Load() },
		ConnContext: func(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
			s.open.Add(1)
			s.handshaking.Add(1)
			done := new(atomic.Bool) // the handshake ended: counted
			context.AfterFunc(ctx, func() {
				s.open.Add(-1)
				if done.CompareAndSwap(false, true) {
					s.handshaking.Add(-1)
					g.edgeM.Handshake(h3Failure(context.Cause(ctx)))
				}
			})
			return h3HelloContext(context.WithValue(ctx, h3HandshakeKey{}, done)), nil
		},
	}
	idle := cfg.IdleTimeout
	if idle == 0 {
		idle = 30 * time.Second // quic-go's default: a QUIC connection always has one
	}
	s.srv = &http3.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.inflight.Add(1)
			defer s.inflight.Add(-1)
			h.ServeHTTP(w, r)
		}),
		// Called once a connection's handshake is complete (0-RTT is
		// refused): counted ok there, failed or timeout when the
		// connection ends before.
		ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
			if done, ok := ctx.Value(h3HandshakeKey{}).(*atomic.Bool); ok && done.CompareAndSwap(false, true) {
				s.handshaking.Add(-1)
				g.edgeM.Handshake("ok")
			}
			return h3ConnContext(ctx, c)
		},
		TLSConfig:      http3.ConfigureTLSConfig(h3Fingerprint(tlsCfg)),
		MaxHeaderBytes: cfg.MaxHeaderBytes,
		IdleTimeout:    idle,
		QUICConfig: &quic.Config{
			Allow0RTT:            false,
			HandshakeIdleTimeout: cfg.TLS.HandshakeTimeout,
			MaxIdleTimeout:       idle,
			MaxIncomingStreams:   int64(cfg.MaxConcurrentStreams),
		},
		Logger: slog.New(g.log.Handler()).With("server", "http3"),
	}
	return s
}

// h3HandshakeKey is the context key of whether a QUIC connection's
// handshake was counted in linkgate_tls_handshakes_total.
type h3HandshakeKey struct{}

// h3Failure is the result of a QUIC handshake that the connection's end,
// cause, cut short: timeout when it ran past server.tls.handshake_timeout
// or the client went silent, else failed.
func h3Failure(cause error) string {
	var hto *quic.HandshakeTimeoutError
	var ito *quic.IdleTimeoutError
	if errors.As(cause, &hto) || errors.As(cause, &ito) {
		return "timeout"
	}
	return "failed"
}

// serve serves until stop, once ready is closed (the process this one
// replaces reads the socket no more).
func (s *h3) serve(ready <-chan struct{}, log *slog.Logger) {
	defer close(s.served)
	select {
	case <-ready:
	case <-s.quit: // stopped before it began
		return
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	ln, err := s.tr.Listen(s.srv.TLSConfig, s.srv.QUICConfig)
	s.ln = ln
	s.mu.Unlock()
	if err != nil {
		log.Error("http3: listening failed", "err", err)
		return
	}
	if err := s.srv.ServeListener(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, quic.ErrServerClosed) {
		log.Error("http3: serving failed", "err", err)
	}
}

// stop stops accepting connections and serves those made until their
// clients leave them. It sends a GOAWAY on them, waits, until ctx is done,
// for their clients to close them, or h3Grace and no request in flight: a
// client sends no new request on a connection once it read the GOAWAY (one
// it sent before is refused, and quic-go's client, as RFC 9114 section 5.2
// lets any, retries it on a new connection). Then it closes every
// connection.
//
// With ho (a binary upgrade), ho.release is called once this process
// reads its UDP socket no more: the new process reads it then. When the
// new process passes this one its packets (ho.relay, package cidroute),
// that is at once: this process reads them from the relay from then on,
// and its handshakes under way end here before the listener closes, as
// closing it refuses them (quic-go has no way to finish them and take no
// more). Otherwise (a new process without HTTP/3, or of an earlier
// version) the listener closes at once, refusing them, and the socket is
// released once stop is done.
func (s *h3) stop(ctx context.Context, ho *h3Handover, log *slog.Logger) {
	close(s.quit)
	release := func() {}
	if ho != nil {
		release = ho.release
	}
	if ho != nil && ho.relay {
		if err := s.conn.HandOver(); err != nil {
			log.Error("http3: handing over failed: the handshakes under way are refused", "err", err)
		} else {
			s.handingOver.Store(true)
			release()
			release = func() {}
			n := s.handshaking.Load()
			log.Info("http3: handed over: the new process reads the socket and passes this one its packets", "handshakes", n)
			s.wait(ctx, func() bool { return s.handshaking.Load() == 0 })
		}
	}
	s.mu.Lock()
	s.stopped = true
	if s.ln != nil {
		s.ln.Close() // Accept returns the connections made, then an error
	}
	s.mu.Unlock()
	select {
	case <-s.served: // every connection made was taken
	case <-ctx.Done():
	}
	shut := make(chan struct{})
	go func() { s.srv.Shutdown(ctx); close(shut) }()
	grace := time.NewTimer(h3Grace)
	defer grace.Stop()
	select {
	case <-shut:
	case <-grace.C:
	case <-ctx.Done():
	}
	// A request may still start on a connection whose client has not read
	// the GOAWAY yet.
	s.wait(ctx, func() bool { return s.inflight.Load() == 0 })
	s.srv.Close()
	s.tr.Close()
	release()
}

// h3Handover is how HTTP/3 hands over to a binary upgrade's new process.
type h3Handover struct {
	release func() // tells the new process to read the socket
	relay   bool   // it passes this process its packets (package cidroute)
}

// wait polls until done or ctx is done: what it waits for has no event.
func (s *h3) wait(ctx context.Context, done func() bool) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !done() && ctx.Err() == nil {
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

// h3Grace is how long stop gives a GOAWAY to reach the clients: a few
// round trips of a slow mobile network.
const h3Grace = time.Second

// altSvc advertises HTTP/3 at port on the answers of next (RFC 7838), for
// a day.
func altSvc(port int, next http.Handler) http.Handler {
	v := fmt.Sprintf(`h3=":%d"; ma=86400`, port)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Alt-Svc", v)
		next.ServeHTTP(w, r)
	})
}
