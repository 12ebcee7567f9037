package h1wire

import (
	"bytes"
	"net/url"
)

// HeadEnd returns the length of the head b starts with, through the CRLF
// of its empty line (0: not all in b yet), and whether a line of it ends
// in a bare LF, which RFC 9112 section 2.2 lets a recipient take as a
// line end and a strict reader refuses.
func HeadEnd(b []byte) (n int, bareLF bool) {
	lineStart := 0
	for {
		i := bytes.IndexByte(b[lineStart:], '\n')
		if i < 0 {
			return 0, false
		}
		i += lineStart
		if i == 0 || b[i-1] != '\r' {
			return 0, true
		}
		if i == lineStart+1 && lineStart > 0 {
			return i + 1, false
		}
		lineStart = i + 1
	}
}

// ParseRequestLine splits a request line (RFC 9112 section 3), without
// its line end, into its method, target and version. ok is false unless
// the method is a token, the target is one or more visible ASCII
// characters, the version is "HTTP/" DIGIT "." DIGIT, and single spaces
// part them. What the target means (url.ParseRequestURI) is the
// server's to decide.
func ParseRequestLine(line []byte) (method, target, version []byte, ok bool) {
	method, rest, ok := bytes.Cut(line, []byte{' '})
	if !ok || !ValidName(method) {
		return nil, nil, nil, false
	}
	i := bytes.LastIndexByte(rest, ' ')
	if i < 0 {
		return nil, nil, nil, false
	}
	target, version = rest[:i], rest[i+1:]
	if len(target) == 0 || !validVersion(version) {
		return nil, nil, nil, false
	}
	for _, c := range target {
		if c <= ' ' || c >= 0x7f {
			return nil, nil, nil, false
		}
	}
	return method, target, version, true
}

// validVersion reports whether v is an HTTP version as
// http.ParseHTTPVersion takes it: "HTTP/" DIGIT "." DIGIT.
func validVersion(v []byte) bool {
	return len(v) == 8 && string(v[:5]) == "HTTP/" && isDigit(v[5]) && v[6] == '.' && isDigit(v[7])
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// AppendRequestTarget appends u's request target in origin form, as
// http.Transport writes it (url.URL.RequestURI), without allocating in
// the common case.
func AppendRequestTarget(b []byte, u *url.URL) []byte {
	if u.Opaque != "" {
		return append(b, u.RequestURI()...)
	}
	p := u.EscapedPath()
	if p == "" {
		p = "/"
	}
	b = append(b, p...)
	if u.ForceQuery || u.RawQuery != "" {
		b = append(b, '?')
		b = append(b, u.RawQuery...)
	}
	return b
}
