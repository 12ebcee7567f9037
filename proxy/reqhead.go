package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/h1wire"
)

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
	b = appendFraming(b, r)
	st.head = append(b, "\r\n"...)
	return upType, nil
}

// appendFraming appends the fields that frame r's body upstream: its
// length, or chunking with the trailers it announces, or, for a method
// that may have a body and has none, a length of 0.
func appendFraming(b []byte, r *http.Request) []byte {
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
	return b
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

// isHopByHop reports whether k is a hop-by-hop field (RFC 9110 section
// 7.6.1), as httputil.ReverseProxy removes them.
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
