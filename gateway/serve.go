package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/h1serve"
	"github.com/linkgate/linkgate/h2guard"
)

// Listen binds the client listener (server.listen), the admin listener
// (admin.listen) and, when configured, the plain HTTP listener beside TLS
// (server.http_listen) and the internal h2c listener (server.internal_listen),
// unless New bound them already (Options.Listen), then starts the TLS edge,
// which needs their ports. Serve calls it when it has not been called; call
// it first to learn the addresses (Addr, AdminAddr, HTTPAddr, InternalAddr)
// of listeners on port 0.
func (g *Gateway) Listen() error {
	if g.started {
		return nil
	}
	if g.ln == nil {
		if err := g.bind(g.current().eff); err != nil {
			return err
		}
	}
	if err := g.startEdge(g.current().plan); err != nil {
		g.closeListeners()
		return err
	}
	g.started = true
	return nil
}

// bind binds the listeners cfg names. When one cannot be bound, none of
// them stays bound.
func (g *Gateway) bind(cfg *config.Config) (err error) {
	defer func() {
		if err != nil {
			g.closeListeners()
		}
	}()
	bind := func(field, addr string) (net.Listener, error) {
		if addr == "" {
			return nil, nil
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("gateway: %s: %w", field, err)
		}
		return l, nil
	}
	if g.ln, err = bind("server.listen", cfg.Server.Listen); err != nil {
		return err
	}
	if g.aln, err = bind("admin.listen", cfg.Admin.Listen); err != nil {
		return err
	}
	if g.hln, err = bind("server.http_listen", cfg.Server.HTTPListen); err != nil {
		return err
	}
	g.cln, err = bind("server.internal_listen", cfg.Server.InternalListen)
	return err
}

// closeListeners closes the listeners bound, if any.
func (g *Gateway) closeListeners() {
	for _, l := range []net.Listener{g.ln, g.aln, g.hln, g.cln} {
		if l != nil {
			l.Close()
		}
	}
	g.ln, g.aln, g.hln, g.cln = nil, nil, nil, nil
}

// Addr returns the client listener's address, nil before Listen.
func (g *Gateway) Addr() net.Addr { return addrOf(g.ln) }

// AdminAddr returns the admin listener's address, nil before Listen or
// without an admin listener.
func (g *Gateway) AdminAddr() net.Addr { return addrOf(g.aln) }

// HTTPAddr returns the address of the plain listener beside TLS
// (server.http_listen), nil before Listen or without one.
func (g *Gateway) HTTPAddr() net.Addr { return addrOf(g.hln) }

// InternalAddr returns the address of the internal h2c listener
// (server.internal_listen), nil before Listen or without one.
func (g *Gateway) InternalAddr() net.Addr { return addrOf(g.cln) }

// server is what Serve starts and stops: an *http.Server, or h1serve's.
type server interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

func addrOf(l net.Listener) net.Addr {
	if l == nil {
		return nil
	}
	return l.Addr()
}

// Serve serves the listeners until ctx is done, reloading on the
// triggers of its Options meanwhile, then shuts down in order: stop
// accepting and drain the requests in flight (up to
// server.shutdown_timeout), cut off those still running, then Close (the
// final analytics flush, the stores). It returns the error that stopped
// it early, if any, and an *analytics.LostError when the final flush lost
// visits; Close's other errors are logged.
func (g *Gateway) Serve(ctx context.Context) error {
	if err := g.Listen(); err != nil {
		g.Close(context.Background())
		return err
	}
	cfg := g.current().eff
	newServer := func(h http.Handler) *http.Server {
		return &http.Server{
			Handler:           h,
			ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
			// server.read_timeout and body_timeout bound the body per request
			// (proxy.BodyDeadline): http.Server's ReadTimeout would also cut
			// off long responses, as its background read then fails.
			WriteTimeout:   cfg.Server.WriteTimeout,
			IdleTimeout:    cfg.Server.IdleTimeout,
			MaxHeaderBytes: cfg.Server.MaxHeaderBytes,
			ConnContext:    withFramingConn,
			ErrorLog:       slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
			// HTTP/2 (over TLS, or h2c on server.internal_listen) takes the same
			// header size (MaxHeaderBytes sets its header list limit), idle
			// and write timeouts, and the handler's body deadlines. Its frames
			// are RFC 9113's default size at most (x/net/http2's default is
			// 1 MB): the largest a client can make the server buffer for one
			// frame, which a header block needs no more of.
			HTTP2: &http.HTTP2Config{MaxConcurrentStreams: cfg.Server.MaxConcurrentStreams, MaxReadFrameSize: 16 << 10},
		}
	}
	// withH2 serves HTTP/2 on srv through the guard's budgets (h2guard).
	withH2 := func(srv *http.Server) *http.Server {
		if err := h2guard.Configure(srv, g.h2M, g.log); err != nil {
			panic(err) // only for a TLSConfig with ciphers HTTP/2 forbids: never set here
		}
		return srv
	}
	var servers []server
	errc := make(chan error, 4)
	start := func(name string, srv server, l net.Listener) {
		servers = append(servers, srv)
		go func() { errc <- srv.Serve(l) }()
		g.log.Info("listening", "server", name, "addr", l.Addr().String(), "version", g.opts.Version)
	}
	if g.edge != nil {
		// The edge handshakes (certificates, ACME, ALPN); net/http hands
		// the *tls.Conn of an h2 connection to h2guard, and serves HTTP/1
		// on the rest through the framing scan.
		srv := withH2(newServer(g.edge.HSTS(g)))
		start("gateway", srv, g.edge.Listen(g.ln, func(c net.Conn) net.Conn { return &framingConn{Conn: c} }))
		if g.hln != nil {
			hsrv := newServer(g.loop.refuse(g.edge.RedirectHandler(portOf(g.ln.Addr()))))
			hsrv.ConnContext = nil
			start("http", hsrv, g.hln)
		}
	} else {
		// Plain HTTP/1.1: the common request (a bodiless GET or HEAD) is
		// served by h1serve's loop, every other connection by net/http.
		hs := h1serve.New(newServer(g))
		hs.HandOver(func(c net.Conn) net.Conn { return &framingConn{Conn: c} })
		start("gateway", hs, g.ln)
	}
	if g.cln != nil {
		csrv := newServer(g)
		csrv.Protocols = new(http.Protocols)
		csrv.Protocols.SetHTTP1(true)
		csrv.Protocols.SetUnencryptedHTTP2(true)
		start("h2c", withH2(csrv), framingListener{g.cln})
	}
	if g.aln != nil {
		asrv := &http.Server{Handler: g.AdminHandler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute,
			ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelDebug)}
		start("admin", asrv, g.aln)
	}

	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { g.watch(wctx); close(watched) }()

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	stopWatch()
	<-watched
	// shutdown_timeout may have changed by reload since the start.
	timeout := g.current().eff.Server.ShutdownTimeout
	g.log.Info("shutting down", "drain_timeout", timeout)
	dctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	g.streams.Close() // live streams never go idle: the drain would wait for them
	for _, s := range servers {
		if err := s.Shutdown(dctx); err != nil {
			// Requests still running past the deadline are cut off, so that
			// none records anything after the final flush.
			g.log.Warn("drain incomplete: closing the connections of requests still running", "err", err)
			s.Close()
		}
	}
	// Close gets a deadline of its own: a drain that used all of its time
	// must not leave the final flush none.
	cctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	closeErr := g.Close(cctx)
	if closeErr != nil {
		g.log.Error("shutdown", "err", closeErr)
	}
	g.log.Info("stopped")
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	// Visits the final flush could neither write nor journal are lost:
	// that must not look like a clean exit (cmd/gateway exits 1).
	if lost := (*analytics.LostError)(nil); errors.As(closeErr, &lost) {
		return errors.Join(serveErr, lost)
	}
	return serveErr
}
