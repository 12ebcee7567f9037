// Package h2guard serves HTTP/2 with package h2serve on connections
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

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"golang.org/x/net/http2"

	"github.com/linkgate/linkgate/h2serve"
	"github.com/linkgate/linkgate/logthrottle"
)

// Configure makes srv serve HTTP/2 with package h2serve, each connection
// read through a Conn: h2 over TLS, which net/http hands over as a
// *tls.Conn after ALPN, and h2c with prior knowledge when srv.Protocols
// has unencrypted HTTP/2. srv.Shutdown sends the HTTP/2 connections
// GOAWAY at once and lets their streams end. The server and the budgets
// follow srv as it is when Configure is called: streams from
// srv.HTTP2.MaxConcurrentStreams (250 when unset), frames from
// srv.HTTP2.MaxReadFrameSize, header lists from srv.MaxHeaderBytes, the
// idle and write timeouts from srv's, header blocks' from
// srv.ReadHeaderTimeout (none when 0). m counts the connections cut and
// log gets a line per reason now and then; either may be nil.
func Configure(srv *http.Server, m *Metrics, log *slog.Logger) error {
	streams, frame := 250, 0
	if srv.HTTP2 != nil {
		if srv.HTTP2.MaxConcurrentStreams > 0 {
			streams = srv.HTTP2.MaxConcurrentStreams
		}
		frame = srv.HTTP2.MaxReadFrameSize
	}
	g := &guard{
		resets:        perSecond(streams, 2*streams),
		overhead:      perSecond(overheadRate, overheadBurst),
		headerTimeout: srv.ReadHeaderTimeout,
		m:             m,
		log:           log,
	}
	h2 := &h2serve.Server{
		HTTPServer:           srv,
		MaxConcurrentStreams: uint32(streams),
		MaxReadFrameSize:     uint32(frame),
		MaxHeaderBytes:       srv.MaxHeaderBytes,
		IdleTimeout:          srv.IdleTimeout,
		ReadHeaderTimeout:    srv.ReadHeaderTimeout,
		WriteTimeout:         srv.WriteTimeout,
		ErrorLog:             srv.ErrorLog,
	}
	if srv.TLSNextProto == nil {
		srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	srv.TLSNextProto[http2.NextProtoTLS] = func(hs *http.Server, c *tls.Conn, h http.Handler) {
		gc := &tlsConn{Conn: g.newConn(c, len(http2.ClientPreface)), state: c.ConnectionState()}
		h2.ServeConnHandler(baseContext(h), gc, h, false)
	}
	// net/http hands an h2c connection over wrapped in a *tls.Conn that is
	// not one, the preface read (net/http's "unencrypted_http2" key).
	srv.TLSNextProto["unencrypted_http2"] = func(hs *http.Server, c *tls.Conn, h http.Handler) {
		u, ok := c.NetConn().(interface{ UnencryptedNetConn() net.Conn })
		if !ok {
			c.Close()
			return
		}
		h2.ServeConnHandler(baseContext(h), g.newConn(u.UnencryptedNetConn(), 0), h, true)
	}
	if srv.TLSConfig != nil && !slices.Contains(srv.TLSConfig.NextProtos, http2.NextProtoTLS) {
		srv.TLSConfig.NextProtos = append(srv.TLSConfig.NextProtos, http2.NextProtoTLS)
	}
	srv.RegisterOnShutdown(func() { h2.Shutdown(context.Background()) })
	return nil
}

// baseContext is the connection's base context net/http passes with its
// handler (ConnContext's values), through an unexported method of h.
func baseContext(h http.Handler) context.Context {
	if bc, ok := h.(interface{ BaseContext() context.Context }); ok {
		return bc.BaseContext()
	}
	return context.Background()
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
