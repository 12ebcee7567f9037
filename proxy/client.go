package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linkgate/linkgate/h1wire"
)

// The proxy's own HTTP/1.1 client (client.go and the files it names),
// over TCP to http:// targets and over TLS to https:// ones (an https://
// target that chooses HTTP/2 is served by http.Transport: see New). Beside net/http's server, as Traefik's
// pkg/proxy/fast is, but unlike http.Transport it keeps no goroutine per
// connection and hands nothing between goroutines: the request head is
// written in one write from a pooled buffer (reqhead.go), and the
// response is read on the handler's own goroutine (roundtrip.go), its
// head parsed by h1wire straight into the ResponseWriter's header (the
// only copy of the upstream's headers), its body streamed through a
// pooled buffer (response.go). A request body is copied upstream by a
// goroutine of the request's own (reqbody.go), so that an upstream that
// answers before reading it all cannot stall the exchange. Connections
// are pooled per target (h1pool.go); a protocol switch joins both
// connections (upgrade.go); health checks go through the same pools
// (check.go).
//
// It does what httputil.ReverseProxy over http.Transport did, and
// h1_test.go runs the same cases against both: hop-by-hop and
// Connection-listed headers removed both ways (RFC 9110 section 7.6.1),
// Te: trailers and Upgrade passed on, Expect: 100-continue (the body is
// sent once the upstream asks for it, or after a second), chunked bodies
// and trailers both ways, no body for HEAD, 1xx, 204 and 304 whatever
// their headers say (RFC 9112 section 6.3), bodies of unknown length
// flushed as they come, protocol switches (WebSocket) joined both ways,
// response_header_timeout, and a request that may be sent twice sent
// again on a new connection when a kept-alive one turns out closed.

// h1State is the scratch of one proxied request, pooled.
type h1State struct {
	head  []byte            // the request head, written in one write
	hr    h1wire.HeadReader // the response head's fields
	kept  []h1wire.Field    // those relayed (endToEnd)
	tried []*target         // targets a retry skips

	conn   atomic.Pointer[h1Conn] // the connection ctx's cancellation aborts
	cancel func()                 // st.abort, bound once
	// drain: the request is sent whole, and its answer may yet come: an
	// abort gives the answer drainTimeout to come, so that the
	// connection can be kept, rather than cutting it.
	drain atomic.Bool
	// aborting is held by an abort while it sets the connection's
	// deadlines: settle waits for one under way.
	aborting sync.Mutex
	// spoiled: an abort may still run (disarm came too late), and would
	// hit the connection of whatever exchange had st next: st is not put
	// back in the pool.
	spoiled bool
}

var h1States = sync.Pool{New: func() any {
	st := &h1State{head: make([]byte, 0, 1024)}
	st.cancel = st.abort
	return st
}}

func (st *h1State) release() {
	if st.spoiled {
		return
	}
	st.hr.Reset()
	clear(st.kept)
	st.kept = st.kept[:0]
	st.drain.Store(false)
	clear(st.tried)
	st.tried = st.tried[:0]
	h1States.Put(st)
}

// abort ends the exchange whose request's context ended: the pending
// read or write fails at once, but for a request sent whole (drain),
// whose answer is given drainTimeout to come, to be read and dropped
// (trip.drain): the connection is then kept, and the client's leaving
// costs the target no connection.
func (st *h1State) abort() {
	st.aborting.Lock()
	defer st.aborting.Unlock()
	c := st.conn.Load()
	switch {
	case c == nil:
	case st.drain.Load():
		c.nc.SetReadDeadline(time.Now().Add(drainTimeout))
	default:
		c.nc.SetDeadline(aLongTimeAgo)
	}
}

// settle waits for an abort under way to be done with the exchange's
// connection; one not yet begun finds none (st.conn is nil by then).
func (st *h1State) settle() {
	st.aborting.Lock()
	//lint:ignore SA2001 an empty critical section: a barrier
	st.aborting.Unlock()
}

var aLongTimeAgo = time.Unix(1, 0)

// drainTimeout is how long the answer to a request whose client left is
// waited for, to keep its connection; one that takes longer closes it.
const drainTimeout = time.Second

// disarm stops the abort that ongoing.AfterEnd registered for the
// exchange (stop is what it returned) and says whether it did. When the
// context ended first, the abort has started on a goroutine of its own and
// may not have read st.conn yet: st is spoiled, so that the abort cannot
// reach the connection of a later exchange that takes st from the pool (a
// health check timing out under load once cut a proxied request short
// with a 504 that way).
func (st *h1State) disarm(stop func() bool) bool {
	if stop() {
		return true
	}
	st.spoiled = true
	return false
}

// copyBuffers are the 32 KiB buffers bodies are copied through.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// Limits of a response head, as http.Transport's (MaxResponseHeaderBytes).
const maxResponseHead = 1 << 20

// expectContinueTimeout is how long the body of a request that asked
// "Expect: 100-continue" waits for the upstream's 100 before it is sent
// anyway, as http.Transport's ExpectContinueTimeout in transport.go.
const expectContinueTimeout = time.Second

// staleError is the error of a request on a kept-alive connection that
// the target had closed: not one byte of a response came back. A request
// that may be sent twice is sent again on a new connection.
type staleError struct{ err error }

func (e staleError) Error() string { return e.err.Error() }
func (e staleError) Unwrap() error { return e.err }

// serveH1 forwards r through the proxy's own client. It answers every
// request, errors included.
func (p *Proxy) serveH1(w http.ResponseWriter, r *http.Request) {
	st := h1States.Get().(*h1State)
	defer st.release()
	upType, err := st.writeHead(r, r.Host, p.trust, p.headers)
	if err != nil {
		closeBody(r)
		p.fail(w, r, nil, err)
		return
	}
	replay := replayable(r) && (r.Body == nil || r.Body == http.NoBody)
	t := p.pool.pick()
	for {
		if t == nil {
			closeBody(r)
			p.fail(w, r, nil, ErrNoHealthyTarget)
			return
		}
		if t.h1.speaksH2() {
			p.serveTransport(w, r, t)
			return
		}
		if r.Host == "" {
			// An HTTP/1.0 request without Host: the target's name, as
			// http.Transport sends it.
			st.writeHead(r, t.url.Host, p.trust, p.headers)
		}
		err := p.exchange(w, r, t, st, upType, replay)
		if err == nil {
			return
		}
		if err == errH2 { // learnt on this request's connection: nothing was sent
			p.serveTransport(w, r, t)
			return
		}
		if !isDialError(err) || r.Context().Err() != nil {
			p.fail(w, r, t, err)
			return
		}
		p.connectFailed(t, err)
		if !replay {
			p.fail(w, r, t, err)
			return
		}
		st.tried = append(st.tried, t)
		next := p.pool.pickExcept(st.tried)
		if next != nil {
			p.m.retried()
			p.log.Debug("upstream retry", "from", t.name, "to", next.name, "method", r.Method, "err", err)
		}
		t = next
	}
}

// exchange sends the prepared request to t and streams the answer to w.
// It returns an error only when nothing has been written to w: once the
// response has begun, a failure aborts it (http.ErrAbortHandler), as
// httputil.ReverseProxy does.
func (p *Proxy) exchange(w http.ResponseWriter, r *http.Request, t *target, st *h1State, upType string, replay bool) error {
	ctx := r.Context()
	start := time.Now()
	fresh := false
	for {
		c, err := t.h1.take(ctx, start, !replay, !fresh, true)
		if err != nil {
			return err
		}
		err = p.roundTrip(w, r, t, st, c, start, upType)
		if se, ok := err.(staleError); ok && replay && !fresh && ctx.Err() == nil {
			p.log.Debug("upstream closed a kept-alive connection; sending again on a new one", "target", t.name, "err", se.err)
			fresh = true
			continue
		}
		return err
	}
}

// isClosed reports whether err is what reading from a connection the peer
// closed returns.
func isClosed(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.As(err, new(*net.OpError))
}

// abort ends a response that has begun and cannot be finished: the
// client's connection is cut, as httputil.ReverseProxy cuts it
// (http.ErrAbortHandler) when a body copy fails.
func (p *Proxy) abort(r *http.Request, err error, side string) {
	p.log.Debug("proxied response cut short", "side", side, "method", r.Method, "path", r.URL.Path, "err", err)
	if r.Context().Value(http.ServerContextKey) == nil {
		// Not under an http.Server, which would recover the panic (a
		// test calling ServeHTTP): the response just ends.
		panic(errAbortNoServer)
	}
	panic(http.ErrAbortHandler)
}

// errAbortNoServer is abort's panic outside an http.Server; serveH1's
// caller recovers it.
var errAbortNoServer = errors.New("proxy: response aborted")
