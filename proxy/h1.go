package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/h1serve"
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
	head   []byte    // the request head, written in one write
	raw    []byte    // the response head's names and values, back to back
	long   []byte    // a head line longer than the read buffer
	spans  []span    // where each field of raw is
	fields []field   // the response head's fields
	tried  []*target // targets a retry skips

	conn   atomic.Pointer[h1Conn] // the connection ctx's cancellation aborts
	cancel func()                 // st.abort, bound once
	// spoiled: an abort may still run (disarm came too late), and would
	// hit the connection of whatever exchange had st next: st is not put
	// back in the pool.
	spoiled bool
}

type span struct{ n0, n1, v0, v1 int }

type field struct{ name, value string }

var h1States = sync.Pool{New: func() any {
	st := &h1State{head: make([]byte, 0, 1024), raw: make([]byte, 0, 1024)}
	st.cancel = st.abort
	return st
}}

func (st *h1State) release() {
	if st.spoiled {
		return
	}
	clear(st.fields)
	clear(st.tried)
	st.fields, st.tried, st.spans = st.fields[:0], st.tried[:0], st.spans[:0]
	if cap(st.long) > 64<<10 {
		st.long = nil
	}
	if cap(st.raw) > 64<<10 {
		st.raw = make([]byte, 0, 1024)
	}
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

var (
	errMalformedResponse = errors.New("proxy: malformed HTTP response from upstream")
	errObsFold           = errors.New("proxy: upstream folded a header line (obs-fold, RFC 9112 section 5.2)")
	errHeadTooLarge      = errors.New("proxy: upstream response head too large")
	errBadFraming        = errors.New("proxy: upstream response has conflicting or unsupported framing")
	errBadUpgrade        = errors.New("proxy: upgrade refused")
)

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
	b = appendRequestURI(b, r.URL)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = appendValue(b, host)
	b = append(b, "\r\n"...)
	for k, vv := range r.Header {
		if isHopByHop(k) || k == "Content-Length" || k == "Host" ||
			len(conn) > 0 && listedByConnection(conn, k) || !pol.Passes(r.Header, k, f.ViaProxy) {
			continue
		}
		for _, v := range vv {
			b = appendField(b, k, v)
		}
	}
	for i, v := range [...]string{f.For, f.RealIP, f.Proto, f.Host} {
		if v != "" {
			b = appendField(b, forwardingNames[i], v)
		}
	}
	if headerHasToken(r.Header["Te"], "trailers") {
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

// appendField appends the field "k: v" and its line end to b.
func appendField(b []byte, k, v string) []byte {
	b = append(b, k...)
	b = append(b, ": "...)
	b = appendValue(b, v)
	return append(b, "\r\n"...)
}

// listedByConnection reports whether the Connection field values list
// the field k, which is then hop-by-hop (RFC 9110 section 7.6.1). The
// connection options close, keep-alive and upgrade name no field.
func listedByConnection(values []string, k string) bool {
	if strings.EqualFold(k, "close") {
		return false // keep-alive and upgrade are hop-by-hop fields anyway
	}
	return headerHasToken(values, k)
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
	expect := hasBody(r) && headerHasToken(r.Header["Expect"], "100-continue")
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

	var h respHead
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
		h, err = st.readHead(c, r.Method)
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
			if !gotAny && c.reused && h.status == 0 && isClosed(err) {
				return staleError{err}
			}
			return err
		}
		gotAny = true
		if h.status == http.StatusContinue {
			if expect && bw == nil {
				nc.SetReadDeadline(time.Time{})
				sendBody()
			}
			continue
		}
		if h.status >= 100 && h.status < 200 && h.status != http.StatusSwitchingProtocols {
			// An interim answer (103 Early Hints): passed on, as
			// httputil.ReverseProxy does.
			hdr := w.Header()
			for _, f := range st.fields {
				hdr[f.name] = append(hdr[f.name], f.value)
			}
			w.WriteHeader(h.status)
			for _, f := range st.fields {
				delete(hdr, f.name)
			}
			continue
		}
		break
	}
	if bw == nil {
		// The body was never sent (the upstream answered without asking
		// for it): the connection cannot carry another request.
		h.closeConn = h.closeConn || hasBody(r)
	} else {
		bw.headersRead()
	}
	if !h.noBody && !(h.cl >= 0 && !h.chunked && h.cl <= int64(c.br.Buffered())) || h.status == http.StatusSwitchingProtocols || expect {
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

	if h.status == http.StatusSwitchingProtocols {
		bw.stop(w, false)
		return p.switchProtocols(w, r, c, st, h, upType)
	}

	hdr := w.Header()
	st.copyFields(hdr, &h)
	if h.chunked && len(h.trailers) > 0 {
		hdr["Trailer"] = append(hdr["Trailer"], strings.Join(h.trailers, ", "))
	}
	w.WriteHeader(h.status)

	complete := true
	if !h.noBody {
		streamed = h.chunked || h.cl < 0 || h.cl > int64(c.br.Buffered())
		complete = p.copyBody(w, r, c, st, &h)
	}
	bodySent := bw.stop(w, complete)
	reuse = complete && bodySent && !h.closeConn
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

// respHead is a response head as readHead parsed it; its fields are in
// h1State.fields.
type respHead struct {
	status    int
	cl        int64 // Content-Length, -1 when none
	chunked   bool
	noBody    bool // HEAD, 1xx, 204, 304: no body whatever the headers say
	closeConn bool // the connection cannot carry another request
	trailers  []string
	upgrade   string
}

// readLine returns the next line of a head without its line ending. The
// line is valid until the next read of br.
func (st *h1State) readLine(br *bufio.Reader, budget *int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		st.long = append(st.long[:0], line...)
		for err == bufio.ErrBufferFull {
			if len(st.long) > *budget {
				return nil, errHeadTooLarge
			}
			line, err = br.ReadSlice('\n')
			st.long = append(st.long, line...)
		}
		line = st.long
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if *budget -= len(line); *budget < 0 {
		return nil, errHeadTooLarge
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// readHead reads one response head from c into h and st.fields.
func (st *h1State) readHead(c *h1Conn, method string) (h respHead, err error) {
	budget := maxResponseHead
	line, err := st.readLine(c.br, &budget)
	if err != nil {
		return h, err
	}
	minor := 0
	switch {
	case len(line) >= 12 && string(line[:9]) == "HTTP/1.1 ":
		minor = 1
	case len(line) >= 12 && string(line[:9]) == "HTTP/1.0 ":
	default:
		return h, fmt.Errorf("%w: status line %q", errMalformedResponse, clip(line))
	}
	code := line[9:12]
	if code[0] < '1' || code[0] > '9' || code[1] < '0' || code[1] > '9' || code[2] < '0' || code[2] > '9' || len(line) > 12 && line[12] != ' ' {
		return h, fmt.Errorf("%w: status line %q", errMalformedResponse, clip(line))
	}
	h.status = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	h.cl = -1
	if err := st.readFields(c.br, &budget, &c.last); err != nil {
		h.status = -1
		return h, err
	}

	// Framing: RFC 9112 section 6.3, as http.ReadResponse reads it.
	var connB, teB, clsB, trailerB [2]string
	conn, te, cls, trailer := connB[:0], teB[:0], clsB[:0], trailerB[:0]
	for _, f := range st.fields {
		switch f.name {
		case "Connection":
			conn = append(conn, f.value)
		case "Transfer-Encoding":
			te = append(te, f.value)
		case "Content-Length":
			cls = append(cls, f.value)
		case "Trailer":
			trailer = append(trailer, f.value)
		}
	}
	h.closeConn = headerHasToken(conn, "close") || minor == 0 && !headerHasToken(conn, "keep-alive")
	if h.status == http.StatusSwitchingProtocols && headerHasToken(conn, "upgrade") {
		for _, f := range st.fields {
			if f.name == "Upgrade" {
				h.upgrade = f.value
				break
			}
		}
	}
	h.noBody = method == http.MethodHead || h.status < 200 || h.status == http.StatusNoContent || h.status == http.StatusNotModified
	if len(te) > 0 && minor == 1 {
		if len(te) != 1 || !strings.EqualFold(strings.TrimSpace(te[0]), "chunked") {
			return h, fmt.Errorf("%w: Transfer-Encoding %q", errBadFraming, strings.Join(te, ", "))
		}
		h.chunked = true
		if len(cls) > 0 {
			// Both: the chunking wins, and the connection goes (it may
			// be an attempt at response splitting).
			cls = nil
			h.closeConn = true
		}
	}
	if len(cls) > 0 {
		first := strings.TrimSpace(cls[0])
		for _, v := range cls[1:] {
			if strings.TrimSpace(v) != first {
				return h, fmt.Errorf("%w: Content-Length %q", errBadFraming, strings.Join(cls, ", "))
			}
		}
		n, err := strconv.ParseUint(first, 10, 63)
		if err != nil || first == "" || first[0] == '+' {
			return h, fmt.Errorf("%w: Content-Length %q", errBadFraming, first)
		}
		h.cl = int64(n)
	}
	if h.chunked {
		for _, v := range trailer {
			for tok := range strings.SplitSeq(v, ",") {
				if tok = strings.TrimSpace(tok); tok == "" {
					continue
				}
				k := http.CanonicalHeaderKey(tok)
				switch k {
				case "Transfer-Encoding", "Trailer", "Content-Length":
					return h, fmt.Errorf("%w: trailer %q", errBadFraming, k)
				}
				h.trailers = append(h.trailers, k)
			}
		}
	}
	if !h.noBody && !h.chunked && h.cl < 0 {
		h.closeConn = true // read until the upstream closes
	}
	return h, nil
}

func clip(b []byte) []byte { return b[:min(len(b), 64)] }

// readFields reads header fields up to the empty line that ends them into
// st.fields, names in canonical form. A field name that is not a token, a
// value with control characters, and a folded line are errors, as for
// http.ReadResponse (which folds; RFC 9112 section 5.2 lets a proxy refuse
// instead). Fields the same as last's (a connection's last response head:
// an upstream sends much the same head every time) take last's strings.
func (st *h1State) readFields(br *bufio.Reader, budget *int, last *lastFields) error {
	raw := st.raw[:0]
	spans := st.spans[:0]
	for {
		line, err := st.readLine(br, budget)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return errObsFold
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return fmt.Errorf("%w: header line %q", errMalformedResponse, clip(line))
		}
		var s span
		s.n0 = len(raw)
		upper := true
		for _, c := range line[:colon] {
			if !isTokenChar(c) {
				return fmt.Errorf("%w: header name %q", errMalformedResponse, clip(line[:colon]))
			}
			if upper && 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			} else if !upper && 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			upper = c == '-'
			raw = append(raw, c)
		}
		s.n1 = len(raw)
		v := trimOWS(line[colon+1:])
		for _, c := range v {
			if c < ' ' && c != '\t' || c == 0x7f {
				return fmt.Errorf("%w: value of %q", errMalformedResponse, raw[s.n0:s.n1])
			}
		}
		s.v0 = len(raw)
		raw = append(raw, v...)
		s.v1 = len(raw)
		spans = append(spans, s)
	}
	st.raw, st.spans = raw, spans
	st.fields = st.fields[:0]
	if len(spans) == 0 {
		return nil
	}
	if last != nil && bytes.Equal(raw, last.raw) && slices.Equal(spans, last.spans) {
		st.fields = append(st.fields, last.fields...)
		return nil
	}
	all := string(raw) // one allocation holds every name and value
	for _, s := range spans {
		name, ok := commonHeaders[string(raw[s.n0:s.n1])]
		if !ok {
			name = all[s.n0:s.n1]
		}
		st.fields = append(st.fields, field{name, all[s.v0:s.v1]})
	}
	if last != nil && len(raw) <= maxLastFields {
		last.raw = append(last.raw[:0], raw...)
		last.spans = append(last.spans[:0], spans...)
		last.fields = append(last.fields[:0], st.fields...)
	}
	return nil
}

// lastFields is a connection's last response head's fields, as readFields
// read them: their names and values back to back, where each is, and the
// fields (strings).
type lastFields struct {
	raw    []byte
	spans  []span
	fields []field
}

// maxLastFields bounds the head a connection keeps (lastFields.raw).
const maxLastFields = 4 << 10

// commonHeaders interns the names most responses carry, so that their
// keys in the response's header map share one string.
var commonHeaders = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"Accept-Ranges", "Access-Control-Allow-Origin", "Age", "Cache-Control", "Connection",
		"Content-Disposition", "Content-Encoding", "Content-Language", "Content-Length",
		"Content-Location", "Content-Range", "Content-Security-Policy", "Content-Type", "Date", "Etag",
		"Expires", "Keep-Alive", "Last-Modified", "Link", "Location", "Pragma", "Referrer-Policy",
		"Retry-After", "Server", "Set-Cookie", "Strict-Transport-Security", "Trailer",
		"Transfer-Encoding", "Upgrade", "Vary", "Via", "Www-Authenticate", "X-Content-Type-Options",
		"X-Frame-Options", "X-Request-Id", "X-Xss-Protection",
	} {
		m[k] = k
	}
	return m
}()

// copyFields adds the response's end-to-end fields to hdr: all but the
// hop-by-hop ones and those its Connection fields list (RFC 9110 section
// 7.6.1), and Content-Length only when it frames the body. Values share
// one slice, allocated once.
func (st *h1State) copyFields(hdr http.Header, h *respHead) {
	var listed []string
	for _, f := range st.fields {
		if f.name == "Connection" {
			listed = append(listed, f.value)
		}
	}
	vals := make([]string, len(st.fields))
	// An empty header (no middleware set one) can only hold this
	// response's names: a name seen before in it is the one lookup needed.
	fresh := len(hdr) == 0
	for i, f := range st.fields {
		if isHopByHop(f.name) || f.name == "Content-Length" && (h.chunked || i > 0 && seen(st.fields[:i], f.name)) {
			continue
		}
		if len(listed) > 0 && headerHasToken(listed, f.name) {
			continue
		}
		if !fresh || seen(st.fields[:i], f.name) {
			if cur, ok := hdr[f.name]; ok {
				hdr[f.name] = append(cur, f.value)
				continue
			}
		}
		vals[i] = f.value
		hdr[f.name] = vals[i : i+1 : i+1]
	}
}

func seen(fs []field, name string) bool {
	for _, f := range fs {
		if f.name == name {
			return true
		}
	}
	return false
}

// copyBody streams the response body from c to w and reports whether it
// arrived whole. A body of unknown length (chunked or read to the close)
// or an event stream is flushed after every write, so that streams are
// not held back; a failure on either side aborts the response.
func (p *Proxy) copyBody(w http.ResponseWriter, r *http.Request, c *h1Conn, st *h1State, h *respHead) bool {
	br := c.br
	if h.cl >= 0 && !h.chunked {
		if h.cl <= int64(br.Buffered()) {
			// The whole body came with the head: write it from the read
			// buffer, no copy.
			b, _ := br.Peek(int(h.cl))
			if _, err := w.Write(b); err != nil {
				p.abort(r, err, "client")
			}
			br.Discard(int(h.cl))
			return true
		}
	}
	flush := h.cl < 0 || isEventStream(w.Header())
	f, _ := w.(http.Flusher)
	if !flush {
		f = nil
	}
	if f != nil && br.Buffered() == 0 {
		f.Flush() // the head now: the body may take its time
	}
	var src io.Reader = br
	switch {
	case h.chunked:
		src = httputil.NewChunkedReader(br)
	case h.cl >= 0:
		src = &io.LimitedReader{R: br, N: h.cl}
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
	case h.chunked:
		budget := maxResponseHead
		if err := st.readFields(br, &budget, nil); err != nil {
			p.abort(r, err, "upstream trailers")
		}
		if len(h.trailers) > 0 {
			// Force chunking, as httputil.ReverseProxy: a short body
			// would otherwise get a Content-Length.
			http.NewResponseController(w).Flush()
		}
		hdr := w.Header()
		for _, tf := range st.fields {
			switch tf.name {
			case "Host", "Transfer-Encoding", "Content-Length", "Trailer":
				p.abort(r, fmt.Errorf("%w: trailer %q", errBadFraming, tf.name), "upstream trailers")
			}
		}
		announced := true
		for _, tf := range st.fields {
			announced = announced && containsString(h.trailers, tf.name)
		}
		for _, tf := range st.fields {
			k := tf.name
			if !announced {
				k = http.TrailerPrefix + k
			}
			hdr[k] = append(hdr[k], tf.value)
		}
	case h.cl >= 0 && n < h.cl:
		p.abort(r, io.ErrUnexpectedEOF, "upstream")
	}
	return h.cl >= 0 || h.chunked
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
func (p *Proxy) switchProtocols(w http.ResponseWriter, r *http.Request, c *h1Conn, st *h1State, h respHead, upType string) error {
	if !isPrint(h.upgrade) {
		return fmt.Errorf("%w: upstream tried to switch to invalid protocol %q", errBadUpgrade, h.upgrade)
	}
	if !strings.EqualFold(upType, h.upgrade) {
		return fmt.Errorf("%w: upstream tried to switch protocol %q when %q was requested", errBadUpgrade, h.upgrade, upType)
	}
	hdr := w.Header()
	for _, f := range st.fields {
		hdr[f.name] = append(hdr[f.name], f.value)
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
				size := strconv.AppendUint(buf[:0:pre], uint64(n), 16)
				start := pre - len(size) - 2
				copy(buf[start:], size)
				buf[pre-2], buf[pre-1] = '\r', '\n'
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
		b := append(buf[:0], "0\r\n"...)
		for k, vv := range r.Trailer {
			for _, v := range vv {
				b = append(b, k...)
				b = append(b, ": "...)
				b = appendValue(b, v)
				b = append(b, "\r\n"...)
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

// headerHasToken reports whether the comma-separated values hold token,
// case-insensitively.
func headerHasToken(values []string, token string) bool {
	for _, v := range values {
		for v != "" {
			var tok string
			tok, v, _ = strings.Cut(v, ",")
			if strings.EqualFold(strings.TrimSpace(tok), token) {
				return true
			}
		}
	}
	return false
}

// upgradeType is the protocol a request or response asks to switch to, ""
// for none.
func upgradeType(h http.Header) string {
	if !headerHasToken(h["Connection"], "upgrade") {
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

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// isTokenChar reports whether c may be in a field name (RFC 9110 section
// 5.6.2).
func isTokenChar(c byte) bool {
	return c < 0x80 && tokenTable[c]
}

var tokenTable = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// appendValue appends a field value with any CR or LF made a space, as
// http.Header.Write does.
func appendValue(b []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c == '\r' || c == '\n' {
			c = ' '
		}
		b = append(b, c)
	}
	return b
}

// appendRequestURI appends u's request target as http.Transport writes it
// (url.URL.RequestURI), without allocating in the common case.
func appendRequestURI(b []byte, u *url.URL) []byte {
	if u.Opaque != "" {
		return append(b, u.RequestURI()...)
	}
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	b = append(b, p...)
	if u.ForceQuery || u.RawQuery != "" {
		b = append(b, '?')
		b = append(b, u.RawQuery...)
	}
	return b
}

// checkH1 sends the health check req through t's pool: a healthy target
// costs one kept-alive connection, not one per check.
func (p *Proxy) checkH1(req *http.Request, t *target) error {
	st := h1States.Get().(*h1State)
	defer st.release()
	b := append(st.head[:0], "GET "...)
	b = appendRequestURI(b, req.URL)
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
	var h respHead
	var err error
	for {
		if h, err = st.readHead(c, http.MethodGet); err != nil {
			st.disarm(stop)
			c.nc.Close()
			if c.reused && h.status == 0 && isClosed(err) {
				return 0, staleError{err}
			}
			return 0, err
		}
		if h.status >= 200 || h.status == http.StatusSwitchingProtocols {
			break
		}
	}
	// Drain a little so the connection can be reused.
	var src io.Reader = &io.LimitedReader{R: c.br, N: h.cl}
	switch {
	case h.noBody:
		src = http.NoBody
	case h.chunked:
		src = httputil.NewChunkedReader(c.br)
	case h.cl < 0:
		src = c.br
	}
	n, err := io.Copy(io.Discard, io.LimitReader(src, 64<<10))
	whole := err == nil && (h.noBody || h.cl >= 0 && n == h.cl)
	if h.chunked && err == nil {
		if _, err := src.Read(make([]byte, 1)); err == io.EOF {
			budget := maxResponseHead
			whole = st.readFields(c.br, &budget, nil) == nil
		}
	}
	if st.disarm(stop) && whole && !h.closeConn {
		t.h1.put(c, time.Now())
	} else {
		c.nc.Close()
	}
	return h.status, nil
}
