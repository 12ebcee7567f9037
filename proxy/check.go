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
