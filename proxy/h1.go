package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/h1serve"
	"github.com/linkgate/linkgate/h1wire"
)

// The proxy's own HTTP/1.1 client, used for plans whose targets are all
// http:// (https targets stay on http.Transport: see New). Beside
// net/http's server, as Traefik's pkg/proxy/fast is, but unlike
// http.Transport it keeps no goroutine per connection and hands nothing
// between goroutines: the request head is written in one write from a
// pooled buffer, and the response is read on the handler's own goroutine,
// its head parsed straight into the ResponseWriter's header (the only copy
// of the upstream's headers), its body streamed through a pooled buffer. A
// request body is copied upstream by a goroutine of the request's own, so
// that an upstream that answers before reading it all cannot stall the
// exchange.
//
// It does what httputil.ReverseProxy over http.Transport did, and
// proxy_h1_test.go runs the same cases against both: hop-by-hop and
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
	tried []*target         // targets a retry skips

	conn   atomic.Pointer[h1Conn] // the connection ctx's cancellation aborts
	cancel func()                 // st.abort, bound once
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
	clear(st.tried)
	st.tried = st.tried[:0]
	h1States.Put(st)
}

// abort makes the pending read or write of the exchange fail at once: the
// request's context ended.
func (st *h1State) abort() {
	if c := st.conn.Load(); c != nil {
		c.nc.SetDeadline(aLongTimeAgo)
	}
}

var aLongTimeAgo = time.Unix(1, 0)

// disarm stops the abort that context.AfterFunc registered for the
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

var errBadUpgrade = errors.New("proxy: upgrade refused")

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
		if r.Host == "" {
			// An HTTP/1.0 request without Host: the target's name, as
			// http.Transport sends it.
			st.writeHead(r, t.url.Host, p.trust, p.headers)
		}
		err := p.exchange(w, r, t, st, upType, replay)
		if err == nil {
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

// writeHead writes into st.head the request head that goes upstream for
// r: its request line, host (as the client sent it), the client's headers
// less the hop-by-hop ones (and those its Connection field lists) and
// those forwarded.Policy.Passes refuses, the forwarding headers of
// forwarded.Trust.Forwarding, and the framing of the body: the head that
// SetHeaders gives over a header map, written without one. It returns the
// protocol r asks to switch to, if any.
func (st *h1State) writeHead(r *http.Request, host string, trust *forwarded.Trust, pol forwarded.Policy) (upType string, err error) {
	upType = upgradeType(r.Header)
	if !isPrint(upType) {
		return "", fmt.Errorf("proxy: client tried to switch to invalid protocol %q", upType)
	}
	f := trust.Forwarding(r)
	conn := r.Header["Connection"]

	b := append(st.head[:0], r.Method...)
	b = append(b, ' ')
	b = h1wire.AppendRequestTarget(b, r.URL)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = h1wire.AppendValue(b, host)
	b = append(b, "\r\n"...)
	for k, vv := range r.Header {
		if isHopByHop(k) || k == "Content-Length" || k == "Host" ||
			len(conn) > 0 && listedByConnection(conn, k) || !pol.Passes(r.Header, k, f.ViaProxy) {
			continue
		}
		for _, v := range vv {
			b = h1wire.AppendField(b, k, v)
		}
	}
	for i, v := range [...]string{f.For, f.RealIP, f.Proto, f.Host} {
		if v != "" {
			b = h1wire.AppendField(b, forwardingNames[i], v)
		}
	}
	if httpguts.HeaderValuesContainsToken(r.Header["Te"], "trailers") {
		b = append(b, "Te: trailers\r\n"...)
	}
	if upType != "" {
		b = append(b, "Connection: Upgrade\r\nUpgrade: "...)
		b = append(b, upType...)
		b = append(b, "\r\n"...)
	}
	switch {
	case r.Body != nil && r.Body != http.NoBody && r.ContentLength > 0:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, r.ContentLength, 10)
		b = append(b, "\r\n"...)
	case r.Body != nil && r.Body != http.NoBody && r.ContentLength < 0:
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
		if len(r.Trailer) > 0 {
			b = append(b, "Trailer: "...)
			i := 0
			for k := range r.Trailer {
				if i > 0 {
					b = append(b, ", "...)
				}
				b = append(b, k...)
				i++
			}
			b = append(b, "\r\n"...)
		}
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		// As http.Transport: many servers expect a length on every
		// request that may have a body.
		b = append(b, "Content-Length: 0\r\n"...)
	}
	st.head = append(b, "\r\n"...)
	return upType, nil
}

// forwardingNames are the names of forwarded.Forwarding's headers, in the
// order writeHead writes them.
var forwardingNames = [...]string{"X-Forwarded-For", "X-Real-Ip", "X-Forwarded-Proto", "X-Forwarded-Host"}

// listedByConnection reports whether the Connection field values list
// the field k, which is then hop-by-hop (RFC 9110 section 7.6.1). The
// connection options close, keep-alive and upgrade name no field.
func listedByConnection(values []string, k string) bool {
	if strings.EqualFold(k, "close") {
		return false // keep-alive and upgrade are hop-by-hop fields anyway
	}
	return httpguts.HeaderValuesContainsToken(values, k)
}

// hasBody reports whether r's body is sent upstream (an empty one is not).
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
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
		var c *h1Conn
		if !fresh {
			c = t.h1.get(start, !replay)
		}
		if c == nil {
			var err error
			if c, err = t.h1.dial(ctx); err != nil {
				return err
			}
		}
		err := p.roundTrip(w, r, t, st, c, start, upType)
		if se, ok := err.(staleError); ok && replay && !fresh && ctx.Err() == nil {
			p.log.Debug("upstream closed a kept-alive connection; sending again on a new one", "target", t.name, "err", se.err)
			fresh = true
			continue
		}
		return err
	}
}

// roundTrip sends the request on c and streams the answer to w; c is
// closed or put back.
func (p *Proxy) roundTrip(w http.ResponseWriter, r *http.Request, t *target, st *h1State, c *h1Conn, start time.Time, upType string) (err error) {
	ctx := r.Context()
	st.conn.Store(c)
	stop, ok := h1serve.AfterGone(ctx, st.cancel) // the plain listener's requests
	if !ok {
		stop = context.AfterFunc(ctx, st.cancel)
	}
	reuse := false
	var bw *bodyWriter
	var headAt time.Time
	streamed := false // the body was read after the head, maybe for long
	defer func() {
		if !st.disarm(stop) {
			reuse = false // the cancellation has set (or is setting) the connection's deadline
		}
		st.conn.Store(nil)
		if !reuse {
			bw.stop(w, false) // not waited for yet on a failure or an abort
		}
		if reuse && err == nil {
			if streamed {
				headAt = time.Now()
			} // else the answer came whole with its head: idle since then
			t.h1.put(c, headAt)
			return
		}
		c.nc.Close()
	}()
	nc := c.nc
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if _, err := nc.Write(st.head); err != nil {
		if c.reused {
			return staleError{err}
		}
		return err
	}

	// The body, if any, goes on a goroutine of its own (bodyWriter).
	expect := hasBody(r) && httpguts.HeaderValuesContainsToken(r.Header["Expect"], "100-continue")
	sendBody := func() {
		// The answer may start while the body is still on its way (an
		// echo, a stream): the server must not take the body's unread
		// rest away from the writer when the answer's head goes out, as
		// it does for a handler that answers before reading.
		http.NewResponseController(w).EnableFullDuplex()
		bw = startBody(nc, r, p.rht)
	}
	rht := p.rht
	if expect || hasBody(r) {
		c.rdl = time.Time{} // the body's writer sets deadlines of its own
	}
	switch {
	case expect:
		// Wait for the upstream's 100 (or its final answer, or a second)
		// before the body: reading the client's body is what makes the
		// server send the client its own 100 Continue.
		nc.SetReadDeadline(time.Now().Add(expectContinueTimeout))
	case hasBody(r):
		// No deadline until the body is sent (the writer sets it then);
		// a connection put back may hold its last exchange's.
		nc.SetReadDeadline(time.Time{})
		sendBody()
	default:
		c.armHeaderDeadline(start, rht)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}

	var h h1wire.Response
	gotAny := false
	for {
		if expect && bw == nil {
			if _, perr := c.br.Peek(1); perr != nil {
				var ne net.Error
				if errors.As(perr, &ne) && ne.Timeout() && ctx.Err() == nil {
					nc.SetReadDeadline(time.Time{})
					sendBody()
					if ctx.Err() != nil {
						return ctx.Err()
					}
					continue
				}
			}
		}
		h, err = st.hr.ReadResponse(c.br, r.Method, maxResponseHead, &c.last)
		if err != nil {
			bw.stop(w, false)
			// The client too slow comes first: its body's deadline passing
			// also ends the request's context, whose abort may end this
			// read before the body's writer has reported the failure.
			if bodyTimedOut(ctx) {
				return ErrBodyTimeout
			}
			if bw.cutShort() {
				return bodyCutError{err}
			}
			if clientBodyFailed(ctx) {
				return errClientBody
			}
			if !gotAny && c.reused && h.Status == 0 && isClosed(err) {
				return staleError{err}
			}
			return err
		}
		gotAny = true
		if h.Status == http.StatusContinue {
			if expect && bw == nil {
				nc.SetReadDeadline(time.Time{})
				sendBody()
			}
			continue
		}
		if h.Status >= 100 && h.Status < 200 && h.Status != http.StatusSwitchingProtocols {
			// An interim answer (103 Early Hints): passed on, as
			// httputil.ReverseProxy does.
			hdr := w.Header()
			for _, f := range st.hr.Fields {
				hdr[f.Name] = append(hdr[f.Name], f.Value)
			}
			w.WriteHeader(h.Status)
			for _, f := range st.hr.Fields {
				delete(hdr, f.Name)
			}
			continue
		}
		break
	}
	if bw == nil {
		// The body was never sent (the upstream answered without asking
		// for it): the connection cannot carry another request.
		h.Close = h.Close || hasBody(r)
	} else {
		bw.headersRead()
	}
	if !h.NoBody && !(h.ContentLength >= 0 && !h.Chunked && h.ContentLength <= int64(c.br.Buffered())) || h.Status == http.StatusSwitchingProtocols || expect {
		// A body to stream, or a protocol switch: no deadline from here.
		// (A connection put back keeps its deadline: the next exchange
		// sets its own before reading.)
		c.rdl = time.Time{}
		nc.SetReadDeadline(time.Time{})
	}
	if ctx.Err() != nil {
		bw.stop(w, false)
		return ctx.Err()
	}
	headAt = time.Now()
	if t.latency != nil {
		t.latency.Observe(headAt.Sub(start).Seconds())
	}
	// An upstream may answer a body that the client was too slow to send,
	// or framed badly, having read it cut short: the client gets 408 or
	// 400 instead.
	if bw != nil && (bodyTimedOut(ctx) || clientBodyFailed(ctx)) {
		bw.stop(w, false)
		if bodyTimedOut(ctx) {
			return ErrBodyTimeout
		}
		return errClientBody
	}

	if h.Status == http.StatusSwitchingProtocols {
		bw.stop(w, false)
		return p.switchProtocols(w, r, c, st, h, upType)
	}

	hdr := w.Header()
	st.copyFields(hdr, &h)
	if h.Chunked && len(h.Trailers) > 0 {
		hdr["Trailer"] = append(hdr["Trailer"], strings.Join(h.Trailers, ", "))
	}
	w.WriteHeader(h.Status)

	complete := true
	if !h.NoBody {
		streamed = h.Chunked || h.ContentLength < 0 || h.ContentLength > int64(c.br.Buffered())
		complete = p.copyBody(w, r, c, st, &h)
	}
	bodySent := bw.stop(w, complete)
	reuse = complete && bodySent && !h.Close
	return nil
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

// copyFields adds the response's end-to-end fields to hdr: all but the
// hop-by-hop ones and those its Connection fields list (RFC 9110 section
// 7.6.1), and Content-Length only when it frames the body. Values share
// one slice, allocated once.
func (st *h1State) copyFields(hdr http.Header, h *h1wire.Response) {
	var listed []string
	for _, f := range st.hr.Fields {
		if f.Name == "Connection" {
			listed = append(listed, f.Value)
		}
	}
	vals := make([]string, len(st.hr.Fields))
	// An empty header (no middleware set one) can only hold this
	// response's names: a name seen before in it is the one lookup needed.
	fresh := len(hdr) == 0
	for i, f := range st.hr.Fields {
		if isHopByHop(f.Name) || f.Name == "Content-Length" && (h.Chunked || i > 0 && seen(st.hr.Fields[:i], f.Name)) {
			continue
		}
		if len(listed) > 0 && httpguts.HeaderValuesContainsToken(listed, f.Name) {
			continue
		}
		if !fresh || seen(st.hr.Fields[:i], f.Name) {
			if cur, ok := hdr[f.Name]; ok {
				hdr[f.Name] = append(cur, f.Value)
				continue
			}
		}
		vals[i] = f.Value
		hdr[f.Name] = vals[i : i+1 : i+1]
	}
}

func seen(fs []h1wire.Field, name string) bool {
	for _, f := range fs {
		if f.Name == name {
			return true
		}
	}
	return false
}

// copyBody streams the response body from c to w and reports whether it
// arrived whole. A body of unknown length (chunked or read to the close)
// or an event stream is flushed after every write, so that streams are
// not held back; a failure on either side aborts the response.
func (p *Proxy) copyBody(w http.ResponseWriter, r *http.Request, c *h1Conn, st *h1State, h *h1wire.Response) bool {
	br := c.br
	if h.ContentLength >= 0 && !h.Chunked {
		if h.ContentLength <= int64(br.Buffered()) {
			// The whole body came with the head: write it from the read
			// buffer, no copy.
			b, _ := br.Peek(int(h.ContentLength))
			if _, err := w.Write(b); err != nil {
				p.abort(r, err, "client")
			}
			br.Discard(int(h.ContentLength))
			return true
		}
	}
	flush := h.ContentLength < 0 || isEventStream(w.Header())
	f, _ := w.(http.Flusher)
	if !flush {
		f = nil
	}
	if f != nil && br.Buffered() == 0 {
		f.Flush() // the head now: the body may take its time
	}
	var src io.Reader = br
	switch {
	case h.Chunked:
		src = h1wire.NewChunkedReader(br)
	case h.ContentLength >= 0:
		src = &io.LimitedReader{R: br, N: h.ContentLength}
	}
	bufp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bufp)
	buf := *bufp
	var n int64
	for {
		m, rerr := src.Read(buf)
		if m > 0 {
			n += int64(m)
			if _, werr := w.Write(buf[:m]); werr != nil {
				p.abort(r, werr, "client")
			}
			if f != nil {
				f.Flush()
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			p.abort(r, rerr, "upstream")
		}
	}
	switch {
	case h.Chunked:
		if err := st.hr.ReadFields(br, maxResponseHead); err != nil {
			p.abort(r, err, "upstream trailers")
		}
		if len(h.Trailers) > 0 {
			// Force chunking, as httputil.ReverseProxy: a short body
			// would otherwise get a Content-Length.
			http.NewResponseController(w).Flush()
		}
		hdr := w.Header()
		for _, tf := range st.hr.Fields {
			switch tf.Name {
			case "Host", "Transfer-Encoding", "Content-Length", "Trailer":
				p.abort(r, fmt.Errorf("%w: trailer %q", h1wire.ErrFraming, tf.Name), "upstream trailers")
			}
		}
		announced := true
		for _, tf := range st.hr.Fields {
			announced = announced && containsString(h.Trailers, tf.Name)
		}
		for _, tf := range st.hr.Fields {
			k := tf.Name
			if !announced {
				k = http.TrailerPrefix + k
			}
			hdr[k] = append(hdr[k], tf.Value)
		}
	case h.ContentLength >= 0 && n < h.ContentLength:
		p.abort(r, io.ErrUnexpectedEOF, "upstream")
	}
	return h.ContentLength >= 0 || h.Chunked
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
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

// switchProtocols joins the client's connection and c after a 101
// answer to a request that asked to switch protocols (RFC 9110 section
// 7.8), as httputil.ReverseProxy does.
func (p *Proxy) switchProtocols(w http.ResponseWriter, r *http.Request, c *h1Conn, st *h1State, h h1wire.Response, upType string) error {
	if !isPrint(h.Upgrade) {
		return fmt.Errorf("%w: upstream tried to switch to invalid protocol %q", errBadUpgrade, h.Upgrade)
	}
	if !strings.EqualFold(upType, h.Upgrade) {
		return fmt.Errorf("%w: upstream tried to switch protocol %q when %q was requested", errBadUpgrade, h.Upgrade, upType)
	}
	hdr := w.Header()
	for _, f := range st.hr.Fields {
		hdr[f.Name] = append(hdr[f.Name], f.Value)
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return fmt.Errorf("proxy: switching protocols: %w", err)
	}
	defer conn.Close()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	hdr.Write(brw)
	brw.WriteString("\r\n")
	// Bytes the upstream sent after its answer, then the stream.
	if n := c.br.Buffered(); n > 0 {
		b, _ := c.br.Peek(n)
		brw.Write(b)
	}
	if err := brw.Flush(); err != nil {
		return nil // the client is gone; the response was ours to write
	}
	up := c.nc
	stop := context.AfterFunc(r.Context(), func() { up.Close(); conn.Close() })
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The client's bytes the server had read ahead, then the rest.
		if n := brw.Reader.Buffered(); n > 0 {
			b, _ := brw.Reader.Peek(n)
			if _, err := up.Write(b); err != nil {
				return
			}
		}
		io.Copy(up, conn)
		if cw, ok := up.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	}()
	io.Copy(conn, up)
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	<-done
	return nil
}

// bodyWriter copies a request body upstream on a goroutine of the
// request's own. A nil *bodyWriter is a request without a body.
type bodyWriter struct {
	nc   net.Conn
	rht  time.Duration
	done chan error
	eof  atomic.Bool // the client's body was read to its end
	cl   int64       // the body's length, -1 when chunked
	sent atomic.Int64

	mu          sync.Mutex
	headersSeen bool // guarded by mu

	// cut: stop cut the writer's read of the client's body short, and
	// that is why the read failed: the server has ended the request's
	// context and will close the connection after the answer, and the
	// body's failure is the proxy's doing, not the client's. Set and read
	// by the handler's goroutine only, once the writer has ended.
	cut bool
	// cutting: stop is about to cut the read. ownFailure: the client's
	// read failed before that (a malformed chunk, the client gone), which
	// is then the client's failure even if stop cut the read too.
	cutting, ownFailure atomic.Bool
}

func startBody(nc net.Conn, r *http.Request, rht time.Duration) *bodyWriter {
	bw := &bodyWriter{nc: nc, rht: rht, done: make(chan error, 1), cl: r.ContentLength}
	go func() {
		err := bw.copy(r)
		if errors.Is(err, errClientRead) {
			if !bw.cutting.Load() {
				bw.ownFailure.Store(true)
			}
			// The client's body failed (too slow, malformed, the client
			// gone): nothing more will be sent, so no answer is waited
			// for unless it has begun (an upstream that answered early).
			bw.mu.Lock()
			if !bw.headersSeen {
				nc.SetReadDeadline(aLongTimeAgo)
			}
			bw.mu.Unlock()
		}
		bw.done <- err
	}()
	return bw
}

// errClientRead wraps the error of reading the client's body.
var errClientRead = errors.New("proxy: reading the request body")

func (bw *bodyWriter) copy(r *http.Request) error {
	bufp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bufp)
	chunked := r.ContentLength < 0
	// Room for a chunk's size line before the data and its CRLF after,
	// so that each chunk is one write.
	const pre = 18
	buf := *bufp
	data := buf[pre : len(buf)-2]
	if !chunked {
		data = buf
	}
	for {
		n, rerr := r.Body.Read(data)
		if n > 0 {
			bw.sent.Add(int64(n)) // before the write: the upstream may answer as soon as it has them
			var werr error
			if chunked {
				size := h1wire.AppendChunkSize(buf[:0:pre], n)
				start := pre - len(size)
				copy(buf[start:], size)
				buf[pre+n], buf[pre+n+1] = '\r', '\n'
				_, werr = bw.nc.Write(buf[start : pre+n+2])
			} else {
				_, werr = bw.nc.Write(data[:n])
			}
			if werr != nil {
				return werr
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("%w: %w", errClientRead, rerr)
		}
	}
	bw.eof.Store(true)
	if chunked {
		b := append(buf[:0], h1wire.LastChunk...)
		for k, vv := range r.Trailer {
			for _, v := range vv {
				b = h1wire.AppendField(b, k, v)
			}
		}
		b = append(b, "\r\n"...)
		if _, err := bw.nc.Write(b); err != nil {
			return err
		}
	}
	// The whole request is sent: the wait for the response head starts.
	bw.mu.Lock()
	if !bw.headersSeen {
		bw.nc.SetReadDeadline(time.Now().Add(bw.rht))
	}
	bw.mu.Unlock()
	return nil
}

// cutShort reports whether stop cut the client's body short (false for a
// nil bw).
func (bw *bodyWriter) cutShort() bool { return bw != nil && bw.cut }

// bodyCutError is an upstream failure that came while the client's body
// was still arriving: the proxy stopped reading it (bodyWriter.cut). It is
// answered as the failure it wraps, on a connection that then closes.
type bodyCutError struct{ err error }

func (e bodyCutError) Error() string { return e.err.Error() }
func (e bodyCutError) Unwrap() error { return e.err }

// headersRead tells the writer the response head is in: no deadline
// for it any more.
func (bw *bodyWriter) headersRead() {
	bw.mu.Lock()
	bw.headersSeen = true
	bw.mu.Unlock()
}

// stop waits for the writer and reports whether the whole body was sent.
// An upstream that answered before the body was read whole gets no more
// of it: the writer's read of the client's body is cut short (the client
// connection closes after the answer) and its connection is not reused.
// A nil bw reports true. Unless complete, the connection is not reused
// whatever is reported.
func (bw *bodyWriter) stop(w http.ResponseWriter, complete bool) bool {
	if bw == nil {
		return true
	}
	select {
	case err := <-bw.done:
		bw.done <- err
		return err == nil
	default:
	}
	// All of a body of known length is sent when the upstream knows it
	// has it all; a chunked body, when its last chunk is, which is
	// written only after the client's body ended (eof).
	allSent := bw.eof.Load() || bw.cl > 0 && bw.sent.Load() == bw.cl
	if !allSent || !complete {
		bw.nc.SetWriteDeadline(aLongTimeAgo)
		if !allSent {
			// The writer may be waiting for the client's next bytes. Once
			// it has them all it only writes upstream, and the client's
			// connection must not be touched: a past read deadline there
			// would fail the server's next read and end the contexts of
			// this request and of every later one on the connection.
			bw.cutting.Store(true)
			rc := http.NewResponseController(w)
			rc.SetReadDeadline(aLongTimeAgo)
			// A reader of the body that sets deadlines of its own
			// (BodyDeadline) sets one over the cut when the writer reads
			// again: cut again until the writer has ended.
			tick := time.NewTicker(10 * time.Millisecond)
		wait:
			for {
				select {
				case err := <-bw.done:
					bw.done <- err
					break wait
				case <-tick.C:
					rc.SetReadDeadline(aLongTimeAgo)
				}
			}
			tick.Stop()
		}
		err := <-bw.done
		bw.done <- err
		// The writer's own failure first (its failed read set the
		// upstream's deadline that ended the wait for the answer) is the
		// client's, as when stop did not cut.
		bw.cut = !allSent && !bw.ownFailure.Load()
		return false
	}
	// The last bytes are on their way: wait for them, not for ever.
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case err := <-bw.done:
		bw.done <- err
		return err == nil
	case <-t.C:
		bw.nc.SetWriteDeadline(aLongTimeAgo)
		err := <-bw.done
		bw.done <- err
		return false
	}
}

// hopHeaders are the hop-by-hop fields (RFC 9110 section 7.6.1), as
// httputil.ReverseProxy removes them.
func isHopByHop(k string) bool {
	switch k {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade":
		return true
	}
	return false
}

// upgradeType is the protocol a request or response asks to switch to, ""
// for none.
func upgradeType(h http.Header) string {
	if !httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade") {
		return ""
	}
	return h.Get("Upgrade")
}

func isPrint(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// checkH1 sends the health check req through t's pool: a healthy target
// costs one kept-alive connection, not one per check.
func (p *Proxy) checkH1(req *http.Request, t *target) error {
	st := h1States.Get().(*h1State)
	defer st.release()
	b := append(st.head[:0], "GET "...)
	b = h1wire.AppendRequestTarget(b, req.URL)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, req.URL.Host...)
	b = append(b, "\r\nUser-Agent: linkgate-health-check\r\n\r\n"...)
	st.head = b
	ctx := req.Context()
	for fresh := false; ; fresh = true {
		var c *h1Conn
		if !fresh {
			c = t.h1.get(time.Now(), false)
		}
		if c == nil {
			var err error
			if c, err = t.h1.dial(ctx); err != nil {
				return err
			}
		}
		status, err := p.checkOn(ctx, st, c, t)
		if _, ok := err.(staleError); ok && !fresh && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return err
		}
		if status < 200 || status > 299 {
			return fmt.Errorf("health check answered %d", status)
		}
		return nil
	}
}

func (p *Proxy) checkOn(ctx context.Context, st *h1State, c *h1Conn, t *target) (int, error) {
	st.conn.Store(c)
	stop := context.AfterFunc(ctx, st.cancel)
	defer st.conn.Store(nil)
	c.rdl = time.Time{}
	c.nc.SetReadDeadline(time.Time{}) // ctx bounds the check; a connection put back may hold a past deadline
	if _, err := c.nc.Write(st.head); err != nil {
		st.disarm(stop)
		c.nc.Close()
		if c.reused {
			return 0, staleError{err}
		}
		return 0, err
	}
	var h h1wire.Response
	var err error
	for {
		if h, err = st.hr.ReadResponse(c.br, http.MethodGet, maxResponseHead, &c.last); err != nil {
			st.disarm(stop)
			c.nc.Close()
			if c.reused && h.Status == 0 && isClosed(err) {
				return 0, staleError{err}
			}
			return 0, err
		}
		if h.Status >= 200 || h.Status == http.StatusSwitchingProtocols {
			break
		}
	}
	// Drain a little so the connection can be reused.
	var src io.Reader = &io.LimitedReader{R: c.br, N: h.ContentLength}
	switch {
	case h.NoBody:
		src = http.NoBody
	case h.Chunked:
		src = h1wire.NewChunkedReader(c.br)
	case h.ContentLength < 0:
		src = c.br
	}
	n, err := io.Copy(io.Discard, io.LimitReader(src, 64<<10))
	whole := err == nil && (h.NoBody || h.ContentLength >= 0 && n == h.ContentLength)
	if h.Chunked && err == nil {
		if _, err := src.Read(make([]byte, 1)); err == io.EOF {
			whole = st.hr.ReadFields(c.br, maxResponseHead) == nil
		}
	}
	if st.disarm(stop) && whole && !h.Close {
		t.h1.put(c, time.Now())
	} else {
		c.nc.Close()
	}
	return h.Status, nil
}
