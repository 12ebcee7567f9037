package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/cidroute"
	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/h1serve"
	"github.com/linkgate/linkgate/h2guard"
	"github.com/linkgate/linkgate/upgrade"
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
		var l net.Listener
		var err error
		if g.opts.Upgrade != nil {
			l, err = g.opts.Upgrade.Listen(field, addr) // the socket handed over, if any
		} else {
			l, err = net.Listen("tcp", addr)
		}
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
	if g.cln, err = bind("server.internal_listen", cfg.Server.InternalListen); err != nil {
		return err
	}
	if cfg.Server.HTTP3 && cfg.Server.TLS.Enabled() {
		// The UDP port of the TCP listener's address, its port once bound
		// when server.listen asks for any.
		addr := g.ln.Addr().String()
		var pc net.PacketConn
		var relay *os.File // the relay to the process this one replaces, if any
		if g.opts.Upgrade != nil {
			pc, err = g.opts.Upgrade.ListenPacket("server.http3", addr)
			relay = g.opts.Upgrade.Inherit(relayName)
		} else {
			pc, err = net.ListenPacket("udp", addr)
		}
		if err != nil {
			if relay != nil {
				relay.Close()
			}
			return fmt.Errorf("gateway: server.http3: %w", err)
		}
		g.uln, err = cidroute.New(pc.(*net.UDPConn), relay)
		if err != nil && g.uln != nil {
			// Served all the same: the old process's packets are not relayed.
			g.log.Warn("http3: the relay from the process this one replaces is not used", "err", err)
			err = nil
		}
		if err != nil {
			pc.Close()
			return fmt.Errorf("gateway: server.http3: %w", err)
		}
		g.m.relay.conn.Store(g.uln)
		if g.uln.Relaying() {
			g.opts.Upgrade.TakesPackets() // the old process hands its packets over at once
		}
	}
	return nil
}

// relayName names the relay (package cidroute) among the files a binary
// upgrade hands over.
const relayName = "server.http3.relay"

// closeListeners closes the listeners bound, if any.
func (g *Gateway) closeListeners() {
	for _, l := range []net.Listener{g.ln, g.aln, g.hln, g.cln} {
		if l != nil {
			l.Close()
		}
	}
	if g.uln != nil {
		g.uln.Close()
	}
	g.ln, g.aln, g.hln, g.cln, g.uln = nil, nil, nil, nil, nil
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

// Serve serves the listeners until ctx is done, or a binary upgrade
// (Options.Upgrades) handed them over to a new process, reloading on the
// triggers of its Options meanwhile, then shuts down in order: stop
// accepting, answer every connection accepted once, drain the requests
// in flight (up to server.shutdown_timeout), cut off those still running,
// then Close (the final analytics flush, the stores). It returns the error
// that stopped it early, if any, and an *analytics.LostError when the
// final flush lost visits; Close's other errors are logged.
func (g *Gateway) Serve(ctx context.Context) error {
	if err := g.Listen(); err != nil {
		g.Close(context.Background())
		return err
	}
	run := g.startServers()
	if up := g.opts.Upgrade; up != nil {
		// The process this one replaces stops accepting now; systemd
		// learns that this one serves, and is its main process.
		if err := up.Ready(); err != nil {
			g.log.Warn("saying that the gateway serves failed", "err", err)
		}
	}

	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { g.watch(wctx); close(watched) }()

	var serveErr error
	var next *upgrade.Successor // the new process this one hands over to
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case serveErr = <-run.errc:
			break wait
		case <-g.opts.Upgrades:
			if next = g.upgrade(ctx); next != nil {
				break wait
			}
		}
	}
	stopWatch()
	<-watched
	// shutdown_timeout may have changed by reload since the start.
	timeout := g.current().eff.Server.ShutdownTimeout
	g.log.Info("shutting down", "drain_timeout", timeout, "handed_over", next != nil)
	if next == nil && g.opts.Upgrade != nil {
		g.opts.Upgrade.Notify("STOPPING=1")
	}
	g.streams.Close() // live streams never go idle: the drain would wait for them
	var ho *h3Handover
	if next != nil {
		ho = &h3Handover{release: func() { next.ReleasePackets() }, relay: next.TakesPackets}
		if !next.TakesPackets && g.uln != nil {
			g.uln.Withdraw() // a successor without HTTP/3, or of an earlier version
		}
	}
	run.drain(timeout, g.log, ho)
	// Close gets a deadline of its own: a drain that used all of its time
	// must not leave the final flush none.
	cctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	closeErr := g.Close(cctx)
	if closeErr != nil {
		g.log.Error("shutdown", "err", closeErr)
	}
	if next != nil {
		// The journal and the embedded store are closed: the new process
		// may open them.
		next.Close()
		g.log.Info("stopped: handed over", "pid", next.Pid)
	} else {
		g.log.Info("stopped")
	}
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

// running is the servers Serve started, and how to stop them gracefully.
type running struct {
	servers []server
	// stops stop the listeners accepting, before the servers shut down.
	stops []func(context.Context) error
	fresh freshConns
	errc  chan error // each server's Serve's error
	h3    *h3        // nil without server.http3
}

// closedChan is a channel closed from the start.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// startServers starts a server on each listener bound, with the settings
// of the running config's server section. It is one function over 80
// lines so that every listener's server is built in one place from the
// same newServer: the settings they share (timeouts, header size, HTTP/2
// budgets) cannot drift apart between the listeners.
func (g *Gateway) startServers() *running {
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
	r := &running{errc: make(chan error, 8)}
	start := func(name string, srv server, l net.Listener) {
		r.servers = append(r.servers, srv)
		go func() { r.errc <- srv.Serve(l) }()
		g.log.Info("listening", "server", name, "addr", l.Addr().String(), "version", g.opts.Version)
	}
	if g.edge != nil {
		// The edge handshakes (certificates, ACME, ALPN); h1serve's loop
		// serves HTTP/1 over TLS as it does over TCP, handing the rest to
		// net/http through the framing scan, and net/http hands the
		// *tls.Conn of an h2 connection to h2guard.
		var h http.Handler = g.edge.HSTS(g)
		if g.uln != nil {
			r.h3 = g.newH3(g.uln, g.edge.TLSConfig(), h)
			var ready <-chan struct{} = closedChan
			if g.opts.Upgrade != nil {
				ready = g.opts.Upgrade.PacketsReleased()
			}
			go r.h3.serve(ready, g.log)
			g.log.Info("listening", "server", "http3", "addr", g.uln.LocalAddr().String(), "version", g.opts.Version)
			h = altSvc(portOf(g.uln.LocalAddr()), h)
		}
		hs := h1serve.New(withH2(newServer(h)))
		hs.HandOver(func(c net.Conn) net.Conn { return &framingConn{Conn: c} })
		tl := g.edge.Listen(g.ln, r.fresh.track)
		r.stops = append(r.stops, tl.Drain)
		start("gateway", hs, tl)
		if g.hln != nil {
			hsrv := newServer(g.loop.refuse(g.edge.RedirectHandler(portOf(g.ln.Addr()))))
			hsrv.ConnContext = nil
			start("http", hsrv, r.accepting(g.hln))
		}
	} else {
		// Plain HTTP/1.1: the common request (a bodiless GET or HEAD) is
		// served by h1serve's loop, every other connection by net/http.
		hs := h1serve.New(newServer(g))
		hs.HandOver(func(c net.Conn) net.Conn { return &framingConn{Conn: c} })
		start("gateway", hs, r.accepting(g.ln))
	}
	if g.cln != nil {
		csrv := newServer(g)
		csrv.Protocols = new(http.Protocols)
		csrv.Protocols.SetHTTP1(true)
		csrv.Protocols.SetUnencryptedHTTP2(true)
		start("h2c", withH2(csrv), framingListener{r.accepting(g.cln)})
	}
	if g.aln != nil {
		asrv := &http.Server{Handler: g.AdminHandler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute,
			ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelDebug)}
		start("admin", asrv, r.accepting(g.aln))
	}
	return r
}

// accepting wraps l so that its connections are answered once before a
// graceful stop shuts its server down (freshConns), and notes how to stop
// it accepting.
func (r *running) accepting(l net.Listener) net.Listener {
	fl := r.fresh.listener(l)
	r.stops = append(r.stops, func(context.Context) error { return fl.Close() })
	return fl
}

// drain stops the servers gracefully within timeout: it stops accepting
// (handshakes in progress end, and are served), lets every connection
// accepted be answered once (freshConns says why), then shuts the servers
// down, cutting off the requests still running at the deadline so that
// none records anything after the final flush. HTTP/3 stops beside
// them, handing over to a binary upgrade's new process with ho (h3.stop).
func (r *running) drain(timeout time.Duration, log *slog.Logger, ho *h3Handover) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	h3done := make(chan struct{})
	go func() {
		defer close(h3done)
		if r.h3 != nil {
			r.h3.stop(ctx, ho, log)
		} else if ho != nil {
			ho.release()
		}
	}()
	defer func() { <-h3done }()
	for _, stop := range r.stops {
		stop(ctx)
	}
	if err := r.fresh.wait(ctx); err != nil {
		log.Warn("drain: connections accepted but not answered yet at the deadline", "err", err)
	}
	for _, s := range r.servers {
		if err := s.Shutdown(ctx); err != nil {
			log.Warn("drain incomplete: closing the connections of requests still running", "err", err)
			s.Close()
		}
	}
}

// upgrade starts a new process of the binary with the listening sockets
// (package upgrade) and returns it once it serves; nil when it failed,
// which is logged with the reason and counted, this process serving on.
func (g *Gateway) upgrade(ctx context.Context) *upgrade.Successor {
	up := g.opts.Upgrade
	if up == nil {
		return nil
	}
	g.log.Info("binary upgrade: starting a new process of the binary")
	socks, err := g.sockets()
	var next *upgrade.Successor
	if err == nil {
		timeout := g.opts.UpgradeTimeout
		if timeout <= 0 {
			timeout = DefaultUpgradeTimeout
		}
		next, err = up.Start(ctx, socks, timeout)
	}
	for _, s := range socks {
		s.File.Close() // the new process has its own copies
	}
	if err != nil && g.uln != nil {
		g.uln.Withdraw()
	}
	if err != nil {
		g.m.upgrades.WithLabelValues("failed").Inc()
		g.log.Error("binary upgrade failed: this process serves on", "err", err)
		return nil
	}
	g.m.upgrades.WithLabelValues("ok").Inc()
	g.log.Info("binary upgrade: the new process serves; this one stops accepting, drains and exits", "pid", next.Pid)
	return next
}

// sockets returns the listening sockets to hand over, named by the fields
// that configure them, and with HTTP/3 the relay its new process passes
// this one's QUIC packets on (package cidroute).
func (g *Gateway) sockets() ([]upgrade.Socket, error) {
	type named struct {
		name string
		l    any
	}
	var socks []upgrade.Socket
	ls := []named{{"server.listen", g.ln}, {"admin.listen", g.aln}, {"server.http_listen", g.hln}, {"server.internal_listen", g.cln}}
	if g.uln != nil { // a nil pointer in an any is not nil
		ls = append(ls, named{"server.http3", g.uln})
	}
	for _, l := range ls {
		if l.l == nil { // a nil interface converted to any is nil
			continue
		}
		c, ok := l.l.(syscall.Conn)
		var s upgrade.Socket
		var err error
		if ok {
			s, err = upgrade.SocketOf(l.name, c)
		} else {
			err = fmt.Errorf("gateway: %s: a %T has no descriptor to hand over", l.name, l.l)
		}
		if err != nil {
			for _, s := range socks {
				s.File.Close()
			}
			return nil, err
		}
		socks = append(socks, s)
	}
	if g.uln != nil {
		relay, err := g.uln.Offer()
		if err != nil {
			for _, s := range socks {
				s.File.Close()
			}
			return nil, fmt.Errorf("gateway: server.http3: %w", err)
		}
		socks = append(socks, upgrade.Socket{Name: relayName, File: relay})
	}
	return socks, nil
}
