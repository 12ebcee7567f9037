package h1serve

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/linkgate/linkgate/h1wire"
	"github.com/linkgate/linkgate/internal/header"
	"github.com/linkgate/linkgate/ongoing"
)

// A connection's states, for Shutdown: it closes idle connections only.
const (
	stateActive int32 = iota // reading a head or serving a request
	stateIdle                // waiting for the next request
	stateClosed              // closed by Shutdown, or handed over
)

var aLongTimeAgo = time.Unix(1, 0)

type conn struct {
	s      *Server
	nc     net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	ctx    context.Context // the connection's values
	ctxEnd bool            // ctx can end (BaseContext's, ConnContext's)
	remote string
	tls    *tls.ConnectionState // the handshake's, over TLS; nil over TCP
	state  atomic.Int32

	// The watch for the client leaving while a handler runs.
	handlers atomic.Uint64 // handlers begun and ended: odd while one runs
	scanned  uint64        // handlers when the scanner looked last (its own)
	watched  uint64        // handlers when the scanner started a watch (its own)
	wmu      sync.Mutex
	wcond    sync.Cond
	watching bool // the watch is reading
	aborting bool // the loop cut the watch's read short
	gone     bool // the watch saw the client leave
	// The running request's context (nil: no handler runs, the watch does
	// not read), and the function AfterEnd arranged for it (stopHook,
	// bound once, stops it).
	req      *ongoing.RequestContext
	hook     func()
	stopHook func() bool

	// idleUntil is the read deadline armIdle set last (Unix ns), 0 when
	// another may have been set since (setReadDeadline).
	idleUntil atomic.Int64

	wdlSet bool     // the handler set a write deadline (http.ResponseController)
	seen   []string // intern's strings: Host, the target, the other fields' values
	// The header maps of a request and of its answer, and the request's
	// values, reused from request to request (cleared before each):
	// nothing of a request outlives its handler.
	reqHdr, respHdr http.Header
	vals            []string
	relayed         []h1wire.Field // an answer's relayed fields (response.relayed)
	head            []byte         // a response's head, reused
	staged          []byte         // a response's body before its head is written, reused
	date            []byte         // the Date value, formatted once a second
	dateSec         int64
	scratch         [256]byte // a chunk's size line, or the fields commit adds
}

func newConn(s *Server, nc net.Conn, ctx context.Context) *conn {
	c := &conn{s: s, nc: nc, remote: nc.RemoteAddr().String()}
	ctx = context.WithValue(ctx, http.LocalAddrContextKey, nc.LocalAddr())
	c.ctx = ongoing.WithEnder(ctx, c)
	c.ctxEnd = c.ctx.Done() != nil
	c.wcond.L = &c.wmu
	c.stopHook = c.unhook
	return c
}

// serve runs the loop until the connection closes or is handed over.
func (c *conn) serve() {
	handed := false
	defer func() {
		if v := recover(); v != nil { // the loop's own bug: the connection's end, not the process's
			c.s.logf("h1serve: panic serving %v: %v\n%s", c.remote, v, debug.Stack())
		}
		if !handed {
			c.nc.Close()
		}
		c.s.untrack(c)
	}()
	var serve bool
	if serve, handed = c.startTLS(); !serve {
		return
	}
	c.br = bufio.NewReaderSize(c.nc, 4<<10)
	c.bw = bufio.NewWriterSize(c.nc, 4<<10)
	// As net/http: a zero timeout falls back on ReadTimeout, and one not
	// positive means none.
	hdrTimeout := c.s.srv.ReadHeaderTimeout
	if hdrTimeout == 0 {
		hdrTimeout = c.s.srv.ReadTimeout
	}
	idleTimeout := c.s.srv.IdleTimeout
	if idleTimeout == 0 {
		idleTimeout = c.s.srv.ReadTimeout
	}
	if hdrTimeout > 0 {
		c.setReadDeadline(time.Now().Add(hdrTimeout))
	}
	for first := true; ; first = false {
		// Idle until the request's first byte (a new connection too: one
		// that says nothing does not hold Shutdown up).
		if !c.state.CompareAndSwap(stateActive, stateIdle) || c.s.shutting.Load() {
			return
		}
		if !first {
			if idleTimeout > 0 {
				c.armIdle(idleTimeout)
			} else {
				c.setReadDeadline(time.Time{})
			}
		}
		if _, err := c.br.Peek(1); err != nil {
			return
		}
		if !c.state.CompareAndSwap(stateIdle, stateActive) {
			return // Shutdown closed it
		}
		head, err := c.readHead(first, hdrTimeout)
		if err != nil {
			return
		}
		if c.s.shutting.Load() {
			return // as net/http: a request read during shutdown is not served
		}
		var r http.Request // the handler's is a copy with the request's context
		if !c.parse(head, &r) {
			handed = c.handOver()
			return
		}
		c.br.Discard(len(head))
		if d := c.s.srv.WriteTimeout; d > 0 {
			c.nc.SetWriteDeadline(time.Now().Add(d))
		}
		if !c.serveRequest(&r) {
			return
		}
		if c.s.srv.WriteTimeout > 0 || c.wdlSet {
			c.wdlSet = false
			c.nc.SetWriteDeadline(time.Time{})
		}
	}
}

// armIdle bounds the wait for the next request to d from now (the idle
// timeout) with the least work: the read deadline is set to now+d+d/16
// only when the one armIdle set last is not already between now+d and
// that, so that a busy connection sets it about once every d/16 rather
// than once a request (a deadline costs a runtime timer update). The
// connection may thus stay idle up to d/16 longer than d.
func (c *conn) armIdle(d time.Duration) {
	want := time.Now().Add(d).UnixNano()
	slack := int64(d / 16)
	if cur := c.idleUntil.Load(); cur >= want && cur <= want+slack {
		return
	}
	c.nc.SetReadDeadline(time.Unix(0, want+slack))
	c.idleUntil.Store(want + slack)
}

// setReadDeadline sets the connection's read deadline to t; the next
// armIdle sets its own.
func (c *conn) setReadDeadline(t time.Time) error {
	c.idleUntil.Store(0)
	return c.nc.SetReadDeadline(t)
}

// readHead returns the next request's head (through its blank line) as it
// sits in the read buffer, not consumed. A head that does not fit in the
// buffer is returned as nil with no error: it is handed over. Once the
// head's first bytes are in, the rest of it must come within
// ReadHeaderTimeout (the first request's deadline was set when the
// connection was accepted).
func (c *conn) readHead(first bool, hdrTimeout time.Duration) ([]byte, error) {
	deadlineSet := first
	for {
		buf, _ := c.br.Peek(c.br.Buffered())
		end, bare := h1wire.HeadEnd(buf)
		if end > 0 {
			return buf[:end], nil
		}
		if bare || len(buf) == c.br.Size() || !maybeOurs(buf) {
			return nil, nil // handed over without waiting for the rest
		}
		if !deadlineSet {
			deadlineSet = true
			if hdrTimeout > 0 {
				c.setReadDeadline(time.Now().Add(hdrTimeout))
			} else {
				c.setReadDeadline(time.Time{})
			}
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			return nil, err
		}
	}
}

// maybeOurs reports whether a head starting with b may be one the loop
// serves: it starts as a GET or HEAD does.
func maybeOurs(b []byte) bool {
	for _, m := range [...]string{"GET /", "HEAD /"} {
		n := min(len(b), len(m))
		if string(b[:n]) == m[:n] {
			return true
		}
	}
	return false
}

// handOver gives the connection, with what the loop read and did not
// consume, to the net/http server.
func (c *conn) handOver() bool {
	if !c.state.CompareAndSwap(stateActive, stateClosed) {
		return false
	}
	pending, _ := c.br.Peek(c.br.Buffered())
	var rc net.Conn = &replayConn{Conn: c.nc, pending: bytes.Clone(pending)}
	if c.s.wrap != nil {
		rc = c.s.wrap(rc)
	}
	if c.tls != nil {
		rc = &tlsHanded{Conn: rc, state: c.tls}
	}
	c.setReadDeadline(time.Time{})
	c.nc.SetWriteDeadline(time.Time{})
	return c.s.hand.give(rc)
}

// parse builds the request of head when the loop serves it: a GET or HEAD
// in origin form, HTTP/1.1, CRLF line ends, a single valid Host, every
// field name a token and every value valid, no Content-Length,
// Transfer-Encoding, Expect or Upgrade, no obs-fold. Anything else is
// handed to net/http, which answers it as it always does.
func (c *conn) parse(head []byte, r *http.Request) bool {
	if head == nil {
		return false
	}
	line, rest, _ := bytes.Cut(head, crlf)
	m, target, version, ok := h1wire.ParseRequestLine(line)
	if !ok || string(version) != "HTTP/1.1" || target[0] != '/' {
		return false
	}
	var method string
	switch string(m) {
	case http.MethodGet:
		method = http.MethodGet
	case http.MethodHead:
		method = http.MethodHead
	default:
		return false
	}
	h := c.reqHdr
	if len(h) > maxReusedFields || h == nil {
		h = make(http.Header, 8)
		c.reqHdr = h
	}
	clear(h)
	vals := c.vals[:0]
	host := ""
	hosts, i := 0, 2 // i: intern's position of the next field not Host (0: Host, 1: the target)
	for len(rest) > 2 {
		var l []byte
		l, rest, _ = bytes.Cut(rest, crlf)
		name, value, ok := h1wire.ParseFieldLine(l)
		if !ok {
			return false // obs-fold, a space before the colon, a bad byte
		}
		key := h1wire.CanonicalKey(name)
		switch key {
		case "Content-Length", "Transfer-Encoding", "Expect", "Upgrade":
			return false
		case "Host":
			hosts++
			host = c.intern(0, value)
			continue
		}
		v := c.intern(i, value)
		if cur, ok := h[key]; ok {
			h[key] = append(cur, v)
		} else {
			// Each name's values a slice of vals of their own, capped: an
			// append copies them rather than writing over the next one.
			vals = append(vals, v)
			h[key] = vals[len(vals)-1 : len(vals) : len(vals)]
		}
		i++
	}
	c.vals = vals
	if hosts != 1 || !httpguts.ValidHostHeader(host) {
		return false
	}
	uri := c.intern(1, target)
	u, err := url.ParseRequestURI(uri)
	if err != nil || u.Host != "" {
		return false
	}
	if hp := h["Pragma"]; len(hp) > 0 && hp[0] == "no-cache" {
		if _, ok := h["Cache-Control"]; !ok {
			h["Cache-Control"] = []string{"no-cache"}
		}
	}
	*r = http.Request{
		Method: method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: http.NoBody, Host: host, RemoteAddr: c.remote, RequestURI: uri, TLS: c.tls,
		Close: httpguts.HeaderValuesContainsToken(h["Connection"], "close"),
	}
	return true
}

var crlf = []byte("\r\n")

// maxReusedFields bounds the header map a connection keeps for its next
// request: clearing a map costs as much as the most it ever held.
const maxReusedFields = 32

// intern returns b as a string: the one of the connection's previous
// request at the same position when equal, as a client sends the same
// Host and most of the same fields on every request of a connection.
func (c *conn) intern(i int, b []byte) string {
	if i < len(c.seen) && c.seen[i] == string(b) {
		return c.seen[i]
	}
	s := string(b)
	switch {
	case i < len(c.seen):
		c.seen[i] = s
	case i == len(c.seen) && i < 32:
		c.seen = append(c.seen, s)
	}
	return s
}

// serveRequest runs the handler on r and finishes its answer; false when
// the connection is to close.
func (c *conn) serveRequest(parsed *http.Request) (keep bool) {
	x := &exchange{}
	x.ctx.Init(c.ctx, time.Now())
	r := parsed.WithContext(&x.ctx)
	if len(c.respHdr) > maxReusedFields || c.respHdr == nil {
		c.respHdr = make(http.Header)
	}
	clear(c.respHdr)
	x.w = response{c: c, hdr: c.respHdr, contentLength: -1, isHEAD: r.Method == http.MethodHead,
		wantsClose: r.Close || hasToken(header.First(r.Header, "Connection"), "close"), staged: c.staged[:0]}
	w := &x.w
	if c.ctxEnd { // as a context derived from the connection's
		defer context.AfterFunc(c.ctx, x.ctx.Cancel)()
	}
	c.startWatch(&x.ctx)
	defer func() {
		if v := recover(); v != nil {
			x.ctx.Cancel()
			c.stopWatch()
			if v != http.ErrAbortHandler {
				c.s.logf("http: panic serving %v: %v\n%s", c.remote, v, debug.Stack())
			}
			c.bw.Flush() // what was committed, as net/http's final flush
			keep = false
		}
	}()
	c.s.handler().ServeHTTP(w, r)
	x.ctx.Cancel()
	c.stopWatch()
	w.finish()
	if cap(w.head) <= 16<<10 {
		c.head = w.head[:0]
	}
	if cap(w.staged) <= bufferBeforeChunking*2 {
		c.staged = w.staged[:0]
	}
	if c.bw.Flush() != nil || w.werr != nil {
		return false
	}
	return !w.closeAfter && !c.gone
}

// exchange is what the loop allocates for a request besides the
// http.Request, in one piece: its context and its response writer.
type exchange struct {
	ctx ongoing.RequestContext
	w   response
}

// startWatch arms the watch for the client leaving the request whose
// context is ctx: the server's scanner starts it once the handler has run
// for a while (Server.scan).
func (c *conn) startWatch(ctx *ongoing.RequestContext) {
	c.wmu.Lock()
	c.req = ctx
	c.wmu.Unlock()
	c.handlers.Add(1)
	c.s.scanning()
}

// stopWatch disarms the watch, cutting its read short if it started, once
// the handler returned and its context ended; an AfterEnd function not
// stopped runs then, as context.AfterFunc's would.
func (c *conn) stopWatch() {
	c.handlers.Add(1)
	c.wmu.Lock()
	c.req = nil
	if c.watching {
		c.aborting = true
		c.setReadDeadline(aLongTimeAgo)
		for c.watching {
			c.wcond.Wait()
		}
		c.aborting = false
	}
	c.runHook()
	c.wmu.Unlock()
}

// runHook starts the AfterEnd function, if one waits; under wmu.
func (c *conn) runHook() {
	if f := c.hook; f != nil {
		c.hook = nil
		go f()
	}
}

// watch reads from the connection while a handler runs: an error other
// than stopWatch's deadline means the client left, and cancels the
// request's context. A byte that arrives (the next request, pipelined)
// stays in the buffer and ends the watch, as in net/http.
func (c *conn) watch() {
	c.wmu.Lock()
	if c.req == nil || c.watching {
		c.wmu.Unlock()
		return
	}
	c.watching = true
	c.setReadDeadline(time.Time{})
	c.wmu.Unlock()
	_, err := c.br.Peek(1)
	c.wmu.Lock()
	if err != nil && !c.aborting {
		c.gone = true
		c.req.Cancel()
		c.runHook()
	}
	c.watching = false
	c.wcond.Broadcast()
	c.wmu.Unlock()
}

// dateValue returns the Date field's value for now.
func (c *conn) dateValue() []byte {
	now := time.Now()
	if sec := now.Unix(); sec != c.dateSec || c.date == nil {
		c.dateSec = sec
		c.date = now.UTC().AppendFormat(c.date[:0], http.TimeFormat)
	}
	return c.date
}
