package gateway

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/linkgate/linkgate/edge"
	"github.com/linkgate/linkgate/ja4"
	"github.com/linkgate/linkgate/problem"
)

// Go's HTTP/1 server reads a request that carries both Content-Length and
// Transfer-Encoding as chunked, drops the Content-Length header before the
// handler sees it, and keeps the connection open: the bytes after the last
// chunk are served as the next request. A hop in front of the gateway that
// framed the body by its Content-Length saw no such request, so it is
// smuggled past it. RFC 9112 §6.1: such a request ought to be handled as
// an error, and the connection closed after the answer.
//
// On HTTP/1.0 Go's server ignores Transfer-Encoding altogether and drops
// it: the body is framed by Content-Length, the chunk lines passed on as
// data, or, without Content-Length, the request has no body and the chunks
// are read as the next request. RFC 9112 §6.1: an HTTP/1.0 message with
// Transfer-Encoding has faulty framing; close the connection after it.
//
// Since the handler cannot see the dropped header, the connections Go's
// server reads are wrapped (on server.listen, over TCP or TLS, those
// h1serve hands over: its loop serves no request with a body and needs no
// scan; on server.internal_listen, all):
// framingConn reads along with the server and notes each request head
// that carries both fields, or Transfer-Encoding on HTTP/1.0 (its request
// line). A chunked or HTTP/1.0 request whose request line was so noted is
// answered 400 with the connection closed (refuseAmbiguousFraming). The
// scan sees exactly the bytes the server parses, in the same order; where
// it cannot frame a body it may note a line that is not a request line,
// which at worst refuses a later chunked request of the same connection
// with the same request line: the client's own.

// framingListener wraps the connections it accepts in framingConns.
type framingListener struct{ net.Listener }

func (l framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framingConn{Conn: c}, nil
}

// maxScanLine bounds what framingConn keeps of one line: the end of a
// request line (method, target, version) is what it compares.
const maxScanLine = 8 << 10

// framingConn is a connection whose request heads are scanned for both
// Content-Length and Transfer-Encoding.
type framingConn struct {
	net.Conn

	// Read's scan state; only the server's reading goroutine touches it.
	line       []byte // the current line so far (its last maxScanLine bytes)
	inHead     bool   // between a request line and the blank line ending the head
	head       []byte // the current head's request line (reused: a string would cost a request one allocation)
	cl, te     bool   // the current head has Content-Length, Transfer-Encoding
	overflowed bool   // line lost its start

	mu  sync.Mutex
	bad []string // request lines of heads with faulty framing, oldest first
}

// CloseWrite half-closes the connection: net/http does so after a 431 or
// a 400, so that the client reads the answer to its end before the close
// of a connection with unread bytes resets it.
func (c *framingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Unwrap returns the scanned connection.
func (c *framingConn) Unwrap() net.Conn { return c.Conn }

func (c *framingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.scan(p[:n])
	return n, err
}

func (c *framingConn) scan(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			c.appendLine(b)
			return
		}
		c.appendLine(b[:i])
		c.endLine()
		b = b[i+1:]
	}
}

func (c *framingConn) appendLine(b []byte) {
	c.line = append(c.line, b...)
	if len(c.line) > maxScanLine {
		c.line = append(c.line[:0], c.line[len(c.line)-maxScanLine:]...)
		c.overflowed = true
	}
}

// maxAmbiguous bounds the request lines a connection keeps noted.
const maxAmbiguous = 16

func (c *framingConn) endLine() {
	line := bytes.TrimSuffix(c.line, []byte{'\r'})
	overflowed := c.overflowed
	defer func() { c.line, c.overflowed = c.line[:0], false }()
	switch {
	case isRequestLine(line):
		c.inHead, c.head, c.cl, c.te = true, append(c.head[:0], line...), false, false
	case !c.inHead:
		// body bytes
	case len(line) == 0 && !overflowed:
		c.inHead = false
		if c.te && (c.cl || isHTTP10(c.head)) {
			c.mu.Lock()
			if len(c.bad) == maxAmbiguous {
				c.bad = c.bad[1:]
			}
			c.bad = append(c.bad, string(c.head))
			c.mu.Unlock()
		}
	default:
		name, _, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			return
		}
		name = bytes.TrimSpace(name)
		c.cl = c.cl || bytes.EqualFold(name, []byte("Content-Length"))
		c.te = c.te || bytes.EqualFold(name, []byte("Transfer-Encoding"))
	}
}

// isRequestLine reports whether line ends like an HTTP/1 request line:
// "METHOD target HTTP/1.x" (anything may come before the method: a body
// that did not end its last line).
func isRequestLine(line []byte) bool {
	line = bytes.TrimRight(line, " ")
	i := bytes.LastIndexByte(line, ' ')
	if i < 0 || !bytes.HasPrefix(line[i+1:], []byte("HTTP/1.")) {
		return false
	}
	rest := bytes.TrimRight(line[:i], " ")
	j := bytes.LastIndexByte(rest, ' ')
	return j > 0 && len(bytes.TrimSpace(rest[:j])) > 0
}

// isHTTP10 reports whether a request line noted by endLine is HTTP/1.0.
func isHTTP10(line []byte) bool {
	return bytes.HasSuffix(bytes.TrimRight(line, " "), []byte("HTTP/1.0"))
}

// ambiguous reports whether r's head had faulty framing (both
// Content-Length and Transfer-Encoding, or Transfer-Encoding on HTTP/1.0),
// forgetting the heads noted before it.
func (c *framingConn) ambiguous(r *http.Request) bool {
	want := r.Method + " " + r.RequestURI + " " + r.Proto
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, l := range c.bad {
		if strings.HasSuffix(l, want) || len(want) > len(l) && strings.HasSuffix(want, l) {
			c.bad = c.bad[i+1:]
			return true
		}
	}
	return false
}

type framingKey struct{}

// withFramingConn is the servers' ConnContext: it puts the connection's
// framing scan in the context of its requests, and the JA4 fingerprint of
// its TLS ClientHello when the edge terminated TLS on it. It looks for
// both down the connection's wrappers: net/http sees a connection h1serve
// handed over over TLS as its TLS state over the scan, over the bytes the
// loop had read, over the edge's connection.
func withFramingConn(ctx context.Context, c net.Conn) context.Context {
	var fc *framingConn
	for c != nil {
		if fp := edge.Fingerprint(c); fp != "" {
			ctx = ja4.NewContext(ctx, fp)
			break
		}
		if f, ok := c.(*framingConn); ok && fc == nil {
			fc = f
		}
		u, ok := c.(interface{ Unwrap() net.Conn })
		if !ok {
			break
		}
		c = u.Unwrap()
	}
	if fc != nil {
		return context.WithValue(ctx, framingKey{}, fc)
	}
	return ctx
}

// refuseAmbiguousFraming answers 400 and closes the connection for a
// chunked request whose head also carried Content-Length, and for an
// HTTP/1.0 request whose head carried Transfer-Encoding (which the server
// dropped, so only the scan knows of it).
func refuseAmbiguousFraming(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 && (len(r.TransferEncoding) > 0 || r.ProtoMinor == 0) {
			if fc, ok := r.Context().Value(framingKey{}).(*framingConn); ok && fc.ambiguous(r) {
				w.Header().Set("Connection", "close")
				detail := "a request may not carry both Content-Length and Transfer-Encoding (RFC 9112 section 6.1)"
				if r.ProtoMinor == 0 {
					detail = "an HTTP/1.0 request may not carry Transfer-Encoding (RFC 9112 section 6.1)"
				}
				problem.Write(w, http.StatusBadRequest, detail)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
