package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/linkgate/linkgate/h1wire"
	"github.com/linkgate/linkgate/ongoing"
)

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
		c, err := t.h1.take(ctx, time.Now(), false, !fresh, false)
		if err != nil {
			return err
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

// checkOn sends the health check in st.head on c, and returns the
// status of its answer; c is put back when it can carry another request.
func (p *Proxy) checkOn(ctx context.Context, st *h1State, c *h1Conn, t *target) (int, error) {
	st.conn.Store(c)
	stop := ongoing.AfterEnd(ctx, st.cancel)
	defer st.conn.Store(nil)
	c.rdl = time.Time{}
	c.nc.SetReadDeadline(time.Time{}) // ctx bounds the check; a connection put back may hold a past deadline
	if _, err := c.nc.Write(st.head); err != nil {
		st.disarm(stop)
		t.h1.discard(c)
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
			t.h1.discard(c)
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
	whole := st.drainBody(c, &h)
	if st.disarm(stop) && whole && !h.Close {
		t.h1.put(c, time.Now())
	} else {
		t.h1.discard(c)
	}
	return h.Status, nil
}

// drainBytes is the most of an answer's body read to keep its connection
// when no one wants the body (a health check's, a request whose client
// left): a longer one closes the connection.
const drainBytes = 64 << 10

// drainBody reads and drops the body of the answer whose head h was just
// read from c, up to drainBytes and within c's read deadline, and reports
// whether it was read whole: c can then carry another request, unless h
// closes it.
func (st *h1State) drainBody(c *h1Conn, h *h1wire.Response) bool {
	var src io.Reader = &io.LimitedReader{R: c.br, N: h.ContentLength}
	switch {
	case h.NoBody:
		return true
	case h.Chunked:
		src = h1wire.NewChunkedReader(c.br)
	case h.ContentLength < 0:
		return false // read to the close: the connection ends with it
	}
	n, err := io.Copy(io.Discard, io.LimitReader(src, drainBytes))
	if err != nil {
		return false
	}
	if !h.Chunked {
		return n == h.ContentLength
	}
	if _, err := src.Read(make([]byte, 1)); err != io.EOF {
		return false
	}
	return st.hr.ReadFields(c.br, maxResponseHead) == nil
}
