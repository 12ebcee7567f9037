// Package h2guard serves HTTP/2 with golang.org/x/net/http2 on connections
// read through per-connection budgets, so that a client's frames cost the
// gateway what they give the client, as nginx's and Envoy's flood checks
// do and Go's own server does not:
//
//   - streams reset before their answer: RST_STREAM frames (rapid reset,
//     CVE-2023-44487) and streams the server reset for the client's
//     protocol errors (MadeYouReset, CVE-2025-8671): twice the
//     connection's MaxConcurrentStreams at once, MaxConcurrentStreams a
//     second after that;
//   - frames that carry nothing a request needs: empty CONTINUATION (the
//     flood Go's server reads without end), empty DATA without
//     END_STREAM, PRIORITY, PING, SETTINGS, RST_STREAM after the answer,
//     unknown types, and WINDOW_UPDATE beyond ten per DATA frame sent: a
//     thousand at once, a hundred a second after that, and one more per
//     stream opened;
//   - a header block (HEADERS and its CONTINUATION frames, however split)
//     open for the server's ReadHeaderTimeout (checked every quarter of
//     it: cut before it is open for a quarter more).
//
// Past a budget the client gets GOAWAY ENHANCE_YOUR_CALM and the
// connection is closed. Its SETTINGS frames are also fixed up in passing:
// a setting repeated in one frame is allowed by RFC 9113, the last value
// holding, where Go's server closes the connection (dedupeSettings).
package h2guard

//lint:file-ignore SA1019 x/net/http2's Server is deprecated for net/http's, but net/http (Go 1.26) cannot serve HTTP/2 on a connection wrapped by its caller; x/net/http2's ServeConn still does, and on Go 1.27 wraps net/http's server to do it.

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/http2"

	"github.com/linkgate/linkgate/logthrottle"
)

// Configure makes srv serve HTTP/2 with golang.org/x/net/http2, each
// connection read through a Conn: h2 over TLS, which net/http hands over
// as a *tls.Conn after ALPN, and h2c with prior knowledge when
// srv.Protocols has unencrypted HTTP/2. It is http2.ConfigureServer (which
// also has srv.Shutdown send GOAWAY to the HTTP/2 connections and wait for
// their streams) with the connections wrapped. The budgets follow srv as
// it is when Configure is called: resets from
// srv.HTTP2.MaxConcurrentStreams (250 when unset, x/net/http2's default),
// header blocks from srv.ReadHeaderTimeout (none when 0). m counts the
// connections cut and log gets a line per reason now and then; either
// may be nil.
func Configure(srv *http.Server, m *Metrics, log *slog.Logger) error {
	streams := 250
	if srv.HTTP2 != nil && srv.HTTP2.MaxConcurrentStreams > 0 {
		streams = srv.HTTP2.MaxConcurrentStreams
	}
	g := &guard{
		resets:        perSecond(streams, 2*streams),
		overhead:      perSecond(overheadRate, overheadBurst),
		headerTimeout: srv.ReadHeaderTimeout,
		m:             m,
		log:           log,
	}
	h2 := new(http2.Server)
	if err := http2.ConfigureServer(srv, h2); err != nil {
		return err
	}
	srv.TLSNextProto[http2.NextProtoTLS] = func(hs *http.Server, c *tls.Conn, h http.Handler) {
		gc := &tlsConn{Conn: g.newConn(c, len(http2.ClientPreface)), state: c.ConnectionState()}
		serve(h2, hs, gc, h, false)
	}
	// net/http hands an h2c connection over wrapped in a *tls.Conn that is
	// not one, the preface read (net/http's "unencrypted_http2" key, which
	// http2.ConfigureServer also sets).
	srv.TLSNextProto["unencrypted_http2"] = func(hs *http.Server, c *tls.Conn, h http.Handler) {
		u, ok := c.NetConn().(interface{ UnencryptedNetConn() net.Conn })
		if !ok {
			c.Close()
			return
		}
		serve(h2, hs, g.newConn(u.UnencryptedNetConn(), 0), h, true)
	}
	return nil
}

// serve serves one HTTP/2 connection as http2.ConfigureServer's own
// handler does: net/http passes the connection's base context through an
// unexported method of h.
func serve(h2 *http2.Server, hs *http.Server, c net.Conn, h http.Handler, sawPreface bool) {
	var ctx context.Context
	if bc, ok := h.(interface{ BaseContext() context.Context }); ok {
		ctx = bc.BaseContext()
	}
	h2.ServeConn(c, &http2.ServeConnOpts{Context: ctx, Handler: grownStack{h}, BaseConfig: hs, SawClientPreface: sawPreface})
}

// guard is what the connections of one server share.
type guard struct {
	resets        limit
	overhead      limit
	headerTimeout time.Duration
	m             *Metrics
	log           *slog.Logger
	logs          logthrottle.Throttle[Reason]
}

// report counts and logs the connection c cut for r.
func (g *guard) report(c *Conn, r Reason) {
	if g.m != nil {
		g.m.cut[r].Inc()
	}
	if g.log == nil {
		return
	}
	if suppressed, ok := g.logs.Allow(r, time.Now()); ok {
		g.log.Info("HTTP/2 connection cut: GOAWAY ENHANCE_YOUR_CALM", "reason", r.String(), "remote", c.RemoteAddr().String(), "suppressed", suppressed)
	}
}
