// Package h1wire is the HTTP/1.1 wire format (RFC 9112) as linkgate's
// own server loop (h1serve) and its upstream client (proxy) both speak
// it: the grammar of field names and values, through
// golang.org/x/net/http/httpguts as net/http's own, the request line and
// the end of a request head, the response head with its framing, and
// chunked framing. It reads and writes bytes, and decides nothing a head
// means to a server or a proxy: which requests the loop serves, which
// fields are hop-by-hop, are theirs.
//
// Its readers are net/http's rules, as strict or stricter: a head h1wire
// takes is one net/http takes and reads the same (the fuzzers hold it
// over random heads, and TestResponseAgainstNetHTTP over a table), but
// for the differences response.go's ReadResponse lists.
package h1wire

import (
	"bytes"
	"net/textproto"
	"unsafe"

	"golang.org/x/net/http/httpguts"
)

// Field is one field of a head: its name in canonical form
// (textproto.CanonicalMIMEHeaderKey's) and its value without the
// whitespace around it.
type Field struct{ Name, Value string }

// HasField reports whether fs holds a field named name (canonical).
func HasField(fs []Field, name string) bool {
	for _, f := range fs {
		if f.Name == name {
			return true
		}
	}
	return false
}

// ValidName reports whether b is a field name: a token (RFC 9110 section
// 5.1), as httpguts.ValidHeaderFieldName has it.
func ValidName(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !httpguts.IsTokenRune(rune(c)) {
			return false
		}
	}
	return true
}

// ValidValue reports whether b may be a field value (RFC 9110 section
// 5.5): no control character but the horizontal tab, obs-text allowed, as
// httpguts.ValidHeaderFieldValue has it.
func ValidValue(b []byte) bool {
	// httpguts reads a string: b, not copied, for the length of the call.
	return httpguts.ValidHeaderFieldValue(unsafe.String(unsafe.SliceData(b), len(b)))
}

// ParseFieldLine splits a field line (RFC 9112 section 5), without its
// line end, into its name and its value, the optional whitespace around
// the value left out. ok is false unless the name is a token that ends at
// the colon (no space before it, no obs-fold) and the value is valid.
func ParseFieldLine(line []byte) (name, value []byte, ok bool) {
	name, value, ok = bytes.Cut(line, []byte{':'})
	if !ok || !ValidName(name) {
		return nil, nil, false
	}
	value = trimOWS(value)
	if !ValidValue(value) {
		return nil, nil, false
	}
	return name, value, true
}

// trimOWS is b without the spaces and tabs at its ends (OWS, RFC 9110
// section 5.6.3).
func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// AppendCanonical appends the canonical form of the token name to b:
// its first letter and every letter after a hyphen upper case, the
// others lower case, as textproto.CanonicalMIMEHeaderKey gives it.
func AppendCanonical(b, name []byte) []byte {
	upper := true
	for _, c := range name {
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		} else if !upper && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		upper = c == '-'
		b = append(b, c)
	}
	return b
}

// CanonicalKey returns the canonical form of the token name, as
// textproto.CanonicalMIMEHeaderKey does, without an allocation for the
// names heads usually carry (CommonName).
func CanonicalKey(name []byte) string {
	// The names requests carry most, as clients write them: a comparison
	// in place, no copy, no hash.
	switch string(name) {
	case "Host", "host":
		return "Host"
	case "User-Agent", "user-agent":
		return "User-Agent"
	case "Accept", "accept":
		return "Accept"
	case "Accept-Encoding", "accept-encoding":
		return "Accept-Encoding"
	case "Accept-Language", "accept-language":
		return "Accept-Language"
	case "Connection", "connection":
		return "Connection"
	case "Referer", "referer":
		return "Referer"
	case "Cookie", "cookie":
		return "Cookie"
	case "X-Forwarded-For", "x-forwarded-for":
		return "X-Forwarded-For"
	}
	var buf [64]byte
	if len(name) > len(buf) {
		return textproto.CanonicalMIMEHeaderKey(string(name))
	}
	k := AppendCanonical(buf[:0], name)
	if s, ok := CommonName(k); ok {
		return s
	}
	return string(k)
}

// CommonName returns, for a canonical name that requests or responses
// usually carry, a string of it shared by every head, so that a name
// costs no allocation and a header map's keys share their strings.
func CommonName(canonical []byte) (string, bool) {
	s, ok := commonNames[string(canonical)]
	return s, ok
}

var commonNames = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		// Requests'.
		"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Cookie", "Host",
		"If-Modified-Since", "If-None-Match", "Origin", "Referer", "Sec-Fetch-Dest", "Sec-Fetch-Mode",
		"Sec-Fetch-Site", "Upgrade-Insecure-Requests", "User-Agent", "X-Forwarded-For",
		"X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip",
		// Responses'.
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

// AppendValue appends the field value v as it goes on the wire: its line
// breaks made spaces and its ends trimmed of whitespace, as
// http.Header.Write writes it. A field value neither starts nor ends with
// whitespace (RFC 9110 section 5.5: field-value has no leading or
// trailing whitespace, and a CR or LF in it must be rejected or replaced
// with SP before it is sent on).
func AppendValue(b []byte, v string) []byte {
	i, j := 0, len(v)
	for i < j && isSpace(v[i]) {
		i++
	}
	for j > i && isSpace(v[j-1]) {
		j--
	}
	v = v[i:j]
	start := len(b)
	b = append(b, v...)
	for k := start; k < len(b); k++ {
		if b[k] == '\r' || b[k] == '\n' {
			b[k] = ' '
		}
	}
	return b
}

// isSpace is textproto.TrimString's whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// AppendField appends the field line "name: value" and its line end,
// the value as AppendValue writes it.
func AppendField(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, ": "...)
	b = AppendValue(b, value)
	return append(b, "\r\n"...)
}

// EqualFold reports whether a and b are equal under ASCII case folding,
// as net/http compares tokens: never Unicode folding ("chunKed" with a
// Kelvin sign is not "chunked").
func EqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		if lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
