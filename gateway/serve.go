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
)

// Listen binds the client listener (server.listen) and, when configured,
// the admin listener (admin.listen). Serve calls it when it has not been
// called; call it first to learn the addresses (Addr, AdminAddr) of
// listeners on port 0.
func (g *Gateway) Listen() error {
	if g.ln != nil {
		return nil
	}
	var err error
	g.ln, g.aln, err = listen(g.current().eff)
	return err
}

// listen binds the listeners cfg names: the client listener, and the admin
// listener when there is one (else aln is nil).
func listen(cfg *config.Config) (ln, aln net.Listener, err error) {
	ln, err = net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("gateway: server.listen: %w", err)
	}
	ln = framingListener{ln}
	if cfg.Admin.Listen != "" {
		aln, err = net.Listen("tcp", cfg.Admin.Listen)
		if err != nil {
			ln.Close()
			return nil, nil, fmt.Errorf("gateway: admin.listen: %w", err)
		}
	}
	return ln, aln, nil
}

// closeListeners closes the listeners Listen bound, if any.
func (g *Gateway) closeListeners() {
	for _, l := range []net.Listener{g.ln, g.aln} {
		if l != nil {
			l.Close()
		}
	}
}

// Addr returns the client listener's address, nil before Listen.
func (g *Gateway) Addr() net.Addr { return addrOf(g.ln) }

// AdminAddr returns the admin listener's address, nil before Listen or
// without an admin listener.
func (g *Gateway) AdminAddr() net.Addr { return addrOf(g.aln) }

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
	srv := &http.Server{
		Handler:           g,
		ReadHeaderTimeout: cfg.Server.ReadHeaderTimeout,
		// server.read_timeout and body_timeout bound the body per request
		// (proxy.BodyDeadline): http.Server's ReadTimeout would also cut
		// off long responses, as its background read then fails.
		WriteTimeout:   cfg.Server.WriteTimeout,
		IdleTimeout:    cfg.Server.IdleTimeout,
		MaxHeaderBytes: cfg.Server.MaxHeaderBytes,
		ConnContext:    withFramingConn,
		ErrorLog:       slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
	}
	servers := []*http.Server{srv}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(g.ln) }()
	g.log.Info("listening", "server", "gateway", "addr", g.ln.Addr().String(), "version", g.opts.Version)
	if g.aln != nil {
		asrv := &http.Server{Handler: g.AdminHandler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute,
			ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelDebug)}
		servers = append(servers, asrv)
		go func() { errc <- asrv.Serve(g.aln) }()
		g.log.Info("listening", "server", "admin", "addr", g.aln.Addr().String())
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
