package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/linkgate/linkgate/h1wire"
	"github.com/linkgate/linkgate/ongoing"
)

// trip is one request sent on one connection and its answer streamed
// back: roundTrip's state, on its stack.
type trip struct {
	p      *Proxy
	w      http.ResponseWriter
	r      *http.Request
	t      *target
	st     *h1State
	c      *h1Conn
	start  time.Time // when the request was first tried
	upType string    // the protocol the request asks to switch to, if any
	expect bool      // the request waits for a 100 Continue before its body
	// bw copies the request body upstream; nil for a request without a
	// body, and until the body starts.
	bw *bodyWriter
}

// roundTrip sends the request on c and streams the answer to w; c is
// closed or put back. It returns an error only when nothing has been
// written to w.
func (p *Proxy) roundTrip(w http.ResponseWriter, r *http.Request, t *target, st *h1State, c *h1Conn, start time.Time, upType string) (err error) {
	x := trip{p: p, w: w, r: r, t: t, st: st, c: c, start: start, upType: upType}
	st.drain.Store(false)
	st.conn.Store(c)
	stop := ongoing.AfterEnd(r.Context(), st.cancel)
	reuse, streamed := false, false
	var headAt time.Time
	defer func() { x.end(stop, reuse, streamed, headAt) }()
	if err := x.send(); err != nil {
		if err == errNotSent {
			// The client left first: the connection is as it was.
			reuse = true
			return r.Context().Err()
		}
		return err
	}
	h, err := x.readAnswer()
	if err != nil {
		return err
	}
	if headAt, err = x.headRead(&h); err != nil {
		if st.drain.Load() && r.Context().Err() != nil {
			// The client left; the answer came: drop it, keep the
			// connection.
			reuse, streamed = x.drainAnswer(&h), true
		}
		return err
	}
	if h.Status == http.StatusSwitchingProtocols {
		x.bw.stop(w, false)
		return p.switchProtocols(w, r, c, st, h, upType)
	}
	reuse, streamed = x.answer(&h)
	return nil
}

// end disarms the exchange's abort, and puts the connection back when it
// can carry another request (reuse), as idle since the answer's head came
// or, when its body streamed after it, since now; else it closes it.
func (x *trip) end(stop func() bool, reuse, streamed bool, headAt time.Time) {
	aborted := !x.st.disarm(stop)
	x.st.conn.Store(nil)
	if aborted && reuse {
		// The abort has set (or is setting) the connection's deadlines:
		// once it is done, they are cleared for the next exchange.
		x.st.settle()
		x.c.rdl = time.Time{}
		x.c.nc.SetDeadline(time.Time{})
	}
	if !reuse {
		x.bw.stop(x.w, false) // not waited for yet on a failure or an abort
		x.t.h1.discard(x.c)
		return
	}
	if streamed || headAt.IsZero() { // or never sent
		headAt = time.Now()
	}
	x.t.h1.put(x.c, headAt)
}

// send writes the request head and sets the read deadline of the wait for
// the answer; a body goes on a goroutine of its own (bodyWriter) at once,
// or, for a request that asked "Expect: 100-continue", once the upstream
// asks for it or expectContinueTimeout has passed.
func (x *trip) send() error {
	ctx, c, r := x.r.Context(), x.c, x.r
	if ctx.Err() != nil {
		return errNotSent
	}
	if _, err := c.nc.Write(x.st.head); err != nil {
		if c.reused {
			return staleError{err}
		}
		return err
	}
	body := hasBody(r)
	x.expect = body && httpguts.HeaderValuesContainsToken(r.Header["Expect"], "100-continue")
	if body {
		c.rdl = time.Time{} // the body's writer sets deadlines of its own
	}
	switch {
	case x.expect:
		// Wait for the upstream's 100 (or its final answer, or a second)
		// before the body: reading the client's body is what makes the
		// server send the client its own 100 Continue.
		c.nc.SetReadDeadline(time.Now().Add(expectContinueTimeout))
	case body:
		// No deadline until the body is sent (the writer sets it then);
		// a connection put back may hold its last exchange's.
		c.nc.SetReadDeadline(time.Time{})
		x.sendBody()
	default:
		// From the request's start, or, on a connection dialed for it,
		// from when it was ready: as http.Transport's
		// ResponseHeaderTimeout, the wait counts from the request sent,
		// not the dial and handshake before it.
		c.armHeaderDeadline(later(x.start, c.dialed), x.p.rht)
		// After the deadline armed: an abort's comes last. The client
		// leaving from here on is the answer's drain's to see.
		x.st.drain.Store(true)
		return nil
	}
	return ctx.Err()
}

// errNotSent is send's error for a request whose client left before it
// was sent: it never is, and its connection is kept.
var errNotSent = errors.New("proxy: the request ended before it was sent")

// drainAnswer reads and drops the answer whose head h came after the
// client left, within drainTimeout and up to drainBytes, and reports
// whether the connection can carry another request.
func (x *trip) drainAnswer(h *h1wire.Response) bool {
	if h.Close || h.Status == http.StatusSwitchingProtocols {
		return false
	}
	x.c.rdl = time.Time{}
	x.c.nc.SetReadDeadline(time.Now().Add(drainTimeout))
	return x.st.drainBody(x.c, h)
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// sendBody starts the body's writer.
func (x *trip) sendBody() {
	// The answer may start while the body is still on its way (an echo,
	// a stream): the server must not take the body's unread rest away
	// from the writer when the answer's head goes out, as it does for a
	// handler that answers before reading.
	http.NewResponseController(x.w).EnableFullDuplex()
	x.bw = startBody(x.c.nc, x.r, x.p.rht)
}

// readAnswer reads response heads up to the final one: a 100 Continue
// sends the body that waited for it, other interim answers (103 Early
// Hints) are passed on.
func (x *trip) readAnswer() (h h1wire.Response, err error) {
	ctx, c := x.r.Context(), x.c
	gotAny := false
	for {
		if x.expect && x.bw == nil && x.continueTimedOut() {
			c.nc.SetReadDeadline(time.Time{})
			x.sendBody()
			if ctx.Err() != nil {
				return h, ctx.Err()
			}
			continue
		}
		h, err = x.st.hr.ReadResponse(c.br, x.r.Method, maxResponseHead, &c.last)
		if err != nil {
			return h, x.headFailed(h, err, gotAny)
		}
		gotAny = true
		switch {
		case h.Status == http.StatusContinue:
			if x.expect && x.bw == nil {
				c.nc.SetReadDeadline(time.Time{})
				x.sendBody()
			}
		case h.Status >= 100 && h.Status < 200 && h.Status != http.StatusSwitchingProtocols:
			x.passInterim(h.Status)
		default:
			return h, nil
		}
	}
}

// continueTimedOut waits for the answer to a request that waits for a
// 100 Continue, and reports whether expectContinueTimeout passed first:
// the body is then sent anyway, as http.Transport sends it.
func (x *trip) continueTimedOut() bool {
	_, err := x.c.br.Peek(1)
	if err == nil {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && x.r.Context().Err() == nil
}

// headFailed is the error of a response head that could not be read
// (h is what was read of it): the client's own failure first, then a
// kept-alive connection that the target had closed (staleError).
func (x *trip) headFailed(h h1wire.Response, err error, gotAny bool) error {
	ctx := x.r.Context()
	// A client gone before the writer is stopped (an HTTP/2 stream reset,
	// a closed connection) ended this read through the request's context;
	// stopping the writer may still cut its read of the body before the
	// client's own failure reaches it, and that cut is not the reason.
	gone := errors.Is(ctx.Err(), context.Canceled)
	x.bw.stop(x.w, false)
	// The client too slow comes first: its body's deadline passing also
	// ends the request's context, whose abort may end this read before
	// the body's writer has reported the failure.
	if bodyTimedOut(ctx) {
		return ErrBodyTimeout
	}
	if x.bw.cutShort() && !gone {
		return bodyCutError{err}
	}
	if clientBodyFailed(ctx) {
		return errClientBody
	}
	if !gotAny && x.c.reused && h.Status == 0 && isClosed(err) {
		return staleError{err}
	}
	return err
}

// passInterim passes an interim answer (103 Early Hints) on to the
// client, as httputil.ReverseProxy does.
func (x *trip) passInterim(status int) {
	hdr := x.w.Header()
	for _, f := range x.st.hr.Fields {
		hdr[f.Name] = append(hdr[f.Name], f.Value)
	}
	x.w.WriteHeader(status)
	for _, f := range x.st.hr.Fields {
		delete(hdr, f.Name)
	}
}

// headRead does what the final head's arrival implies, before it is
// answered: a body never sent leaves a connection that cannot carry
// another request, a body still to stream lifts the read deadline, the
// wait is timed, and a client body that failed meanwhile is answered as
// the client's failure. It returns when the head came.
func (x *trip) headRead(h *h1wire.Response) (time.Time, error) {
	ctx, c := x.r.Context(), x.c
	if x.bw == nil {
		// The body was never sent (the upstream answered without asking
		// for it): the connection cannot carry another request.
		h.Close = h.Close || hasBody(x.r)
	} else {
		x.bw.headersRead()
	}
	whole := h.ContentLength >= 0 && !h.Chunked && h.ContentLength <= int64(c.br.Buffered())
	if !h.NoBody && !whole || h.Status == http.StatusSwitchingProtocols || x.expect {
		// A body to stream, or a protocol switch: no deadline from here.
		// (A connection put back keeps its deadline: the next exchange
		// sets its own before reading.)
		c.rdl = time.Time{}
		c.nc.SetReadDeadline(time.Time{})
	}
	if ctx.Err() != nil {
		x.bw.stop(x.w, false)
		return time.Time{}, ctx.Err()
	}
	headAt := time.Now()
	if x.t.latency != nil {
		x.t.latency.Observe(headAt.Sub(x.start).Seconds())
	}
	// An upstream may answer a body that the client was too slow to send,
	// or framed badly, having read it cut short: the client gets 408 or
	// 400 instead.
	if x.bw != nil && (bodyTimedOut(ctx) || clientBodyFailed(ctx)) {
		x.bw.stop(x.w, false)
		if bodyTimedOut(ctx) {
			return headAt, ErrBodyTimeout
		}
		return headAt, errClientBody
	}
	return headAt, nil
}

// answer writes the final head and streams the body to the client, and
// reports whether the connection can carry another request, and whether
// the body was read after the head (maybe for long).
func (x *trip) answer(h *h1wire.Response) (reuse, streamed bool) {
	w, c := x.w, x.c
	eventStream := x.writeHead(h)
	complete := true
	if !h.NoBody {
		streamed = h.Chunked || h.ContentLength < 0 || h.ContentLength > int64(c.br.Buffered())
		complete = x.p.copyBody(w, x.r, c, x.st, h, eventStream)
	}
	bodySent := x.bw.stop(w, complete)
	return complete && bodySent && !h.Close, streamed
}
