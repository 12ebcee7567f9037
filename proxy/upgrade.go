package proxy

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/linkgate/linkgate/h1wire"
	"github.com/linkgate/linkgate/ongoing"
)

var errBadUpgrade = errors.New("proxy: upgrade refused")

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
	stop := ongoing.AfterEnd(r.Context(), func() { up.Close(); conn.Close() })
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
