package h1serve

import (
	"crypto/tls"
	"io"
	"net"
	"time"
)

// HTTP/1 over TLS. The loop serves a connection over TLS as one over TCP,
// with the request's TLS field set to the handshake's state, when it is a
// *tls.Conn (the loop completes its handshake first, as net/http does) or
// a connection whose ConnectionState method gives the state of a handshake
// done before it was accepted (a TLS listener that handshakes on its own,
// as the gateway's edge does). A *tls.Conn whose handshake chose another
// protocol than HTTP/1 (h2, say) goes to the net/http server as it is,
// which hands it to its TLSNextProto handler, as it does today; a
// connection handed over from the loop keeps its ConnectionState, so that
// net/http's requests on it carry the TLS state too.

// connectionStater is a connection that knows its TLS state.
type connectionStater interface {
	ConnectionState() tls.ConnectionState
}

// startTLS completes the handshake of a *tls.Conn and notes the TLS state
// of the connection. It returns false when the loop does not serve the
// connection: the handshake failed (the connection is closed), or it chose
// a protocol other than HTTP/1 (the connection is handed to srv; handed
// says so).
func (c *conn) startTLS() (serve, handed bool) {
	switch tc := c.nc.(type) {
	case *tls.Conn:
		if d := c.s.tlsHandshakeTimeout(); d > 0 {
			dl := time.Now().Add(d)
			tc.SetReadDeadline(dl)
			tc.SetWriteDeadline(dl)
		}
		if err := tc.HandshakeContext(c.ctx); err != nil {
			c.handshakeFailed(tc, err)
			return false, false
		}
		tc.SetReadDeadline(time.Time{})
		tc.SetWriteDeadline(time.Time{})
		st := tc.ConnectionState()
		switch st.NegotiatedProtocol {
		case "", "http/1.1", "http/1.0":
		default:
			// As net/http: its TLSNextProto handler serves it, or
			// nothing does.
			if !c.state.CompareAndSwap(stateActive, stateClosed) {
				return false, false
			}
			return false, c.s.hand.give(tc)
		}
		c.tls = &st
	case connectionStater:
		st := tc.ConnectionState()
		c.tls = &st
	}
	return true, false
}

// tlsHandshakeTimeout is net/http's: the least of the server's positive
// ReadHeaderTimeout, ReadTimeout and WriteTimeout, or none.
func (s *Server) tlsHandshakeTimeout() time.Duration {
	var d time.Duration
	for _, v := range [...]time.Duration{s.srv.ReadHeaderTimeout, s.srv.ReadTimeout, s.srv.WriteTimeout} {
		if v > 0 && (d == 0 || v < d) {
			d = v
		}
	}
	return d
}

// handshakeFailed logs a failed handshake as net/http does, answering a
// client that spoke plain HTTP to the TLS port with a 400 in plain text.
func (c *conn) handshakeFailed(tc *tls.Conn, err error) {
	reason := err.Error()
	if re, ok := err.(tls.RecordHeaderError); ok && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
		io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
		re.Conn.Close()
		reason = "client sent an HTTP request to an HTTPS server"
	}
	c.s.logf("http: TLS handshake error from %s: %v", tc.RemoteAddr(), reason)
}

// looksLikeHTTP reports whether the first bytes of a TLS record are those
// of a plain HTTP request (net/http's test).
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// tlsHanded is a connection over TLS handed to net/http: it says the
// handshake's state, so that net/http's requests on it carry it.
type tlsHanded struct {
	net.Conn
	state *tls.ConnectionState
}

func (c *tlsHanded) ConnectionState() tls.ConnectionState { return *c.state }

// Unwrap returns the wrapped connection.
func (c *tlsHanded) Unwrap() net.Conn { return c.Conn }

// CloseWrite half-closes the connection when it can (net/http does after
// a 400 or 431).
func (c *tlsHanded) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
