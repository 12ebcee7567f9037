package h2serve

import (
	"errors"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"

	"github.com/linkgate/linkgate/ongoing"
)

// stream is one request and its answer.
type stream struct {
	c    *conn
	id   uint32
	ctx  ongoing.RequestContext // the request's: canceled when the stream ends
	body *body                  // nil when the request has none
	rw   responseWriter

	reset atomic.Bool // RST_STREAM sent or received: writes fail
	// endSent: the answer's END_STREAM is written, set under the writer's
	// mutex, so before the client can have it.
	endSent  atomic.Bool
	timedOut atomic.Bool // reset for its write deadline

	// under c.mu
	sendWin int64 // how much DATA the server may still send
	recvWin int64 // how much DATA the client may still send
	unacked int64 // DATA consumed and not yet given back
	rstSent bool
	// recvDone: END_STREAM (or a reset) was received; under c.mu.
	recvDone bool

	// reader's
	declLen int64 // content-length, or -1
	gotLen  int64 // DATA bytes received
	trailer http.Header

	wmu sync.Mutex  // wdl
	wdl *time.Timer // the write deadline's
}

var (
	errClientReset = errors.New("h2serve: client reset the stream")
	errStreamReset = errors.New("h2serve: stream reset")
	errConnClosed  = errors.New("h2serve: connection closed")
)

// writeErr is the error of a write on a stream that can no longer be
// written.
func (st *stream) writeErr() error {
	if st.timedOut.Load() {
		return os.ErrDeadlineExceeded
	}
	return errStreamReset
}

// onHeaders opens a stream with a request's HEADERS, or takes a stream's
// trailers.
func (c *conn) onHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id%2 == 0 { // RFC 9113 section 5.1.1: a client's streams are odd
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.mu.Lock()
	if st := c.streams[id]; st != nil {
		closed := st.recvDone && st.endSent.Load() // closed, its handler not yet returned
		c.mu.Unlock()
		if closed { // RFC 9113 section 5.1: a frame on a closed stream
			return http2.ConnectionError(http2.ErrCodeStreamClosed)
		}
		return c.onTrailers(st, f)
	}
	if id <= c.maxID { // a closed stream, or one that went down
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	c.maxID = id
	refused := c.goingAway || len(c.streams) >= int(c.s.maxStreams())
	c.mu.Unlock()
	if f.HasPriority() && f.Priority.StreamDep == id { // RFC 9113 section 5.3.1
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	if refused {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeRefusedStream}
	}
	st := &stream{c: c, id: id, declLen: -1}
	var r http.Request
	if err := c.newRequest(st, f, &r); err != nil {
		return err
	}
	if c.idleArmed {
		c.idleArmed = false
		c.nc.SetReadDeadline(time.Time{})
	}
	st.ctx.Init(c.ctx, time.Now())
	st.rw = responseWriter{st: st, isHead: r.Method == http.MethodHead}
	c.mu.Lock()
	st.sendWin, st.recvWin = c.peerWin, initialStreamWindow
	st.recvDone = st.body == nil
	c.streams[id] = st
	c.mu.Unlock()
	if c.ctx.Err() != nil { // ended after endRequests looked
		st.ctx.Cancel()
	}
	if d := c.s.WriteTimeout; d > 0 {
		st.setWriteDeadline(time.Now().Add(d))
	}
	h := c.handler
	if h == nil {
		h = c.s.handler()
	}
	if f.Truncated { // over MaxHeaderBytes
		h = http.HandlerFunc(headerListTooLong)
	}
	req := r.WithContext(&st.ctx)
	c.s.workers.run(func() { c.runHandler(st, req, h) })
	return nil
}

// headerListTooLong answers a request whose header list was over
// MaxHeaderBytes, as x/net/http2 does.
func headerListTooLong(w http.ResponseWriter, r *http.Request) {
	const statusRequestHeaderFieldsTooLarge = 431 // only in Go 1.6+
	w.WriteHeader(statusRequestHeaderFieldsTooLarge)
	w.Write([]byte("<h1>HTTP Error 431</h1><p>Request Header Field(s) Too Large</p>"))
}

// onTrailers takes the trailers that end st's body (RFC 9113 section
// 8.1): they end the stream and carry no pseudo-header field.
func (c *conn) onTrailers(st *stream, f *http2.MetaHeadersFrame) error {
	c.mu.Lock()
	done := st.recvDone
	c.mu.Unlock()
	if done {
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeStreamClosed}
	}
	if !f.StreamEnded() || len(f.PseudoFields()) > 0 {
		return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
	}
	// The request's Trailer map is the handler's: the values wait in the
	// body until a read of it ends (net/http's rule), so that a handler
	// reading the map before then does not race with this goroutine.
	var got http.Header
	for _, hf := range f.RegularFields() {
		key := canonicalKey(hf.Name)
		if !httpguts.ValidTrailerHeader(key) {
			return http2.StreamError{StreamID: st.id, Code: http2.ErrCodeProtocol}
		}
		if st.trailer != nil {
			if got == nil {
				got = http.Header{}
			}
			got[key] = append(got[key], hf.Value)
		}
	}
	st.body.setTrailers(got)
	return c.endBody(st)
}

// errMalformed is a request RFC 9113 section 8.1.1 calls malformed: a
// stream error of type PROTOCOL_ERROR.
func errMalformed(id uint32) error {
	return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
}

// newRequest builds r of f's fields (RFC 9113 section 8.3), and st's body.
func (c *conn) newRequest(st *stream, f *http2.MetaHeadersFrame, r *http.Request) error {
	var method, path, scheme, authority string
	for _, hf := range f.PseudoFields() {
		switch hf.Name {
		case ":method":
			method = hf.Value
		case ":path":
			path = hf.Value
		case ":scheme":
			scheme = hf.Value
		case ":authority":
			authority = hf.Value
		default: // :protocol (no extended CONNECT here), :status, or unknown
			return errMalformed(st.id)
		}
	}
	isConnect := method == http.MethodConnect
	if isConnect && (path != "" || scheme != "" || authority == "") ||
		!isConnect && (method == "" || path == "" || scheme == "") {
		return errMalformed(st.id)
	}
	h, err := requestHeader(f.RegularFields())
	if err != nil {
		return errMalformed(st.id)
	}
	if authority == "" {
		authority = h.Get("Host")
	}
	delete(h, "Host")
	var u *url.URL
	uri := path
	if isConnect {
		u, uri = &url.URL{Host: authority}, authority
	} else if u, err = url.ParseRequestURI(path); err != nil {
		return errMalformed(st.id)
	}
	*r = http.Request{Method: method, URL: u, Proto: "HTTP/2.0", ProtoMajor: 2, Header: h,
		Host: authority, RemoteAddr: c.remote, RequestURI: uri, TLS: c.tls, Body: http.NoBody}
	if vv := h["Content-Length"]; len(vv) > 0 {
		n, err := strconv.ParseUint(vv[0], 10, 63)
		if err != nil || len(vv) > 1 && !allEqual(vv) {
			return errMalformed(st.id)
		}
		st.declLen = int64(n)
	}
	if f.StreamEnded() {
		if st.declLen > 0 { // RFC 9113 section 8.1.1: a length the body does not have
			return errMalformed(st.id)
		}
		return nil
	}
	r.ContentLength = st.declLen
	r.Trailer = declaredTrailers(h)
	st.trailer = r.Trailer
	st.body = &body{st: st, wake: make(chan struct{}, 1),
		expect: httpguts.HeaderValuesContainsToken(h["Expect"], "100-continue")}
	r.Body = st.body
	return nil
}

// allEqual says whether the values of vv (at least one) are all the same.
func allEqual(vv []string) bool {
	for _, v := range vv[1:] {
		if v != vv[0] {
			return false
		}
	}
	return true
}

// requestHeader returns the header of a request's regular fields; an
// error for a connection-specific field (RFC 9113 section 8.2.2).
// Cookie fields are joined into one (section 8.2.3).
func requestHeader(fields []hpackField) (http.Header, error) {
	h := make(http.Header, len(fields))
	vals := make([]string, len(fields)) // the values of each name, sliced out of one array
	cookies := 0
	for i, hf := range fields {
		switch hf.Name {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return nil, errConnSpecific
		case "te":
			if hf.Value != "trailers" {
				return nil, errConnSpecific
			}
		case "cookie":
			cookies++
		}
		key := canonicalKey(hf.Name)
		if cur, ok := h[key]; ok {
			h[key] = append(cur, hf.Value)
			continue
		}
		vals[i] = hf.Value
		h[key] = vals[i : i+1 : i+1]
	}
	if cookies > 1 {
		h["Cookie"] = []string{strings.Join(h["Cookie"], "; ")}
	}
	return h, nil
}

var errConnSpecific = errors.New("h2serve: connection-specific header field")

// declaredTrailers is the request's Trailer map: the names its Trailer
// field declares, with no values yet; nil when it declares none.
func declaredTrailers(h http.Header) http.Header {
	var t http.Header
	for _, v := range h["Trailer"] {
		for _, name := range strings.Split(v, ",") {
			name = textproto.CanonicalMIMEHeaderKey(textproto.TrimString(name))
			if name == "" || !httpguts.ValidTrailerHeader(name) {
				continue
			}
			if t == nil {
				t = make(http.Header)
			}
			t[name] = nil
		}
	}
	return t
}

// onData takes a request body's DATA: flow control (RFC 9113 section
// 6.9) and the declared length (section 8.1.1).
func (c *conn) onData(f *http2.DataFrame) error {
	id, n := f.StreamID, int64(f.Length)
	c.mu.Lock()
	st := c.streams[id]
	if st == nil && c.idle(id) {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if n > c.recvWin {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	c.recvWin -= n
	if st == nil || st.recvDone || n > st.recvWin {
		c.creditLocked(nil, n) // dropped: given back to the connection at once
		sent := st != nil && st.rstSent
		code := http2.ErrCodeStreamClosed
		switch {
		case st != nil && !st.recvDone:
			code = http2.ErrCodeFlowControl
		case st == nil && c.cutShort(id, int64(len(f.Data())), f.StreamEnded()):
			code = http2.ErrCodeProtocol
		}
		c.mu.Unlock()
		if sent {
			return nil
		}
		return http2.StreamError{StreamID: id, Code: code}
	}
	st.recvWin -= n
	data := f.Data()
	c.creditLocked(st, n-int64(len(data))) // padding
	st.gotLen += int64(len(data))
	end := f.StreamEnded()
	bad := st.declLen >= 0 && (st.gotLen > st.declLen || end && st.gotLen != st.declLen)
	c.mu.Unlock()
	if bad {
		c.credit(nil, int64(len(data)))
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	if len(data) > 0 && !st.body.put(data) {
		c.credit(nil, int64(len(data))) // the handler closed the body
	}
	if end {
		return c.endBody(st)
	}
	return nil
}

// endBody ends st's body with io.EOF, the client's END_STREAM.
func (c *conn) endBody(st *stream) error {
	c.mu.Lock()
	st.recvDone = true
	c.mu.Unlock()
	st.body.end(nil)
	return nil
}

// credit gives n bytes of DATA consumed back to the client, on the
// connection and on st (nil: the connection only), with WINDOW_UPDATE
// once a quarter of the window is owed, so that a body read in small
// pieces does not cost a frame per read.
func (c *conn) credit(st *stream, n int64) {
	c.mu.Lock()
	c.creditLocked(st, n)
	c.mu.Unlock()
}

// creditLocked is credit under mu.
func (c *conn) creditLocked(st *stream, n int64) {
	if n <= 0 || c.closed {
		return
	}
	var connInc, streamInc int64
	c.unacked += n
	if c.unacked >= connWindow/4 {
		connInc, c.unacked = c.unacked, 0
		c.recvWin += connInc
	}
	if st != nil && !st.recvDone {
		st.unacked += n
		if st.unacked >= initialStreamWindow/4 {
			streamInc, st.unacked = st.unacked, 0
			st.recvWin += streamInc
		}
	}
	if connInc == 0 && streamInc == 0 {
		return
	}
	c.w.mu.Lock()
	if connInc > 0 {
		c.w.fr.WriteWindowUpdate(0, uint32(connInc))
	}
	if streamInc > 0 {
		c.w.fr.WriteWindowUpdate(st.id, uint32(streamInc))
	}
	c.w.mu.Unlock()
	c.w.kick()
}

// runHandler runs h on r, finishes the answer and closes the stream.
func (c *conn) runHandler(st *stream, r *http.Request, h http.Handler) {
	defer c.endStream(st)
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				c.s.logf("h2serve: panic serving %v: %v\n%s", c.remote, v, debug.Stack())
			}
			c.resetStream(st, st.id, http2.ErrCodeInternal)
		}
	}()
	h.ServeHTTP(&st.rw, r)
	st.rw.finish()
}

// endStream closes st once its handler has returned: its context ends,
// a body the client is still sending is refused with RST_STREAM NO_ERROR
// (RFC 9113 section 8.1) and its unread bytes are given back to the
// connection; the last stream of a connection going away with NO_ERROR
// closes it (after a connection error's GOAWAY, connError does).
func (c *conn) endStream(st *stream) {
	st.ctx.Cancel()
	st.rw.release()
	st.stopWriteDeadline()
	c.mu.Lock()
	delete(c.streams, st.id)
	stillSending := !st.recvDone && !st.reset.Load()
	if stillSending && st.declLen >= 0 {
		c.cut[c.cutNext%len(c.cut)] = cutBody{st.id, st.declLen, st.gotLen}
		c.cutNext++
	}
	st.recvDone = true
	last := c.closeOnLast && len(c.streams) == 0
	c.mu.Unlock()
	if stillSending {
		c.resetStream(nil, st.id, http2.ErrCodeNo)
	}
	if n := st.body.discard(); n > 0 {
		c.credit(nil, int64(n))
	}
	if last {
		c.w.closeWhenFlushed()
	}
}

// setWriteDeadline resets the stream at t if its answer is not written
// by then (WriteTimeout, http.ResponseController.SetWriteDeadline); the
// zero t removes the deadline.
func (st *stream) setWriteDeadline(t time.Time) {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if st.wdl != nil {
		st.wdl.Stop()
		st.wdl = nil
	}
	if t.IsZero() {
		return
	}
	st.wdl = time.AfterFunc(time.Until(t), func() {
		st.timedOut.Store(true)
		st.c.resetStream(st, st.id, http2.ErrCodeInternal)
	})
}

// stopWriteDeadline stops the write deadline's timer, the stream ended.
func (st *stream) stopWriteDeadline() {
	st.wmu.Lock()
	if st.wdl != nil {
		st.wdl.Stop()
	}
	st.wmu.Unlock()
}

// cutBody is a request body of declared length whose stream ended
// (RST_STREAM NO_ERROR) before the client sent all of it: its DATA still
// in flight is checked against the length.
type cutBody struct {
	id        uint32
	decl, got int64
}

// cutShort counts n bytes of DATA for a closed stream whose body was cut
// short, and says whether they break its declared length (RFC 9113
// section 8.1.1): a handler that answers without reading the body must
// not turn a malformed request into a well-formed one (STREAM_CLOSED
// rather than PROTOCOL_ERROR) only by being quick. Under mu.
func (c *conn) cutShort(id uint32, n int64, end bool) bool {
	for i := range c.cut {
		if b := &c.cut[i]; b.id == id && id != 0 {
			b.got += n
			return b.got > b.decl || end && b.got != b.decl
		}
	}
	return false
}
