package h1wire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

var (
	// ErrMalformed is the error of a head that is not HTTP/1.1: a status
	// line or a field line that does not parse.
	ErrMalformed = errors.New("h1wire: malformed HTTP response head")
	// ErrObsFold is the error of a folded field line: RFC 9112 section
	// 5.2 lets a proxy refuse it (with a 502) rather than unfold it.
	ErrObsFold = errors.New("h1wire: folded header line (obs-fold, RFC 9112 section 5.2)")
	// ErrTooLarge is the error of a head longer than its reader's limit.
	ErrTooLarge = errors.New("h1wire: response head too large")
	// ErrFraming is the error of a head whose framing fields conflict or
	// ask for what is not supported (RFC 9112 section 6).
	ErrFraming = errors.New("h1wire: conflicting or unsupported framing")
)

// Response is what a response head says of its message: its status and
// its framing (RFC 9112 section 6.3). Its fields are in the HeadReader's
// Fields.
type Response struct {
	// Status is the status code, 0 when the status line was not read
	// whole (nothing of a response came, or not a status line).
	Status int
	// ContentLength is the length the head declares, -1 for none (a
	// chunked body, or one read to the connection's end).
	ContentLength int64
	Chunked       bool
	// NoBody: a response to HEAD, a 1xx, 204 or 304 has no body, whatever
	// its fields say.
	NoBody bool
	// Close: the connection cannot carry another message (Connection:
	// close, HTTP/1.0 without keep-alive, a body read to the end, or both
	// Content-Length and chunking).
	Close bool
	// Trailers are the names, canonical, that the Trailer field announces
	// for a chunked body.
	Trailers []string
	// Upgrade is the protocol a 101 switches to ("" unless the response
	// is a 101 whose Connection lists upgrade).
	Upgrade string
}

// HeadReader reads heads from a connection's reader into scratch it keeps
// from head to head. The zero value is ready to use; it is not safe for
// concurrent use.
type HeadReader struct {
	// Fields are the fields of the head read last, in their order. Their
	// strings stay valid; the slice is reused by the next read.
	Fields []Field

	raw   []byte // the head's names and values, back to back
	long  []byte // a line longer than the connection's read buffer
	spans []span // where each field of raw is
}

type span struct{ n0, n1, v0, v1 int }

// Reset lets go of the fields read last, and of scratch grown past what
// a usual head needs, so that a pooled reader holds no large buffer.
func (hr *HeadReader) Reset() {
	clear(hr.Fields)
	hr.Fields, hr.spans = hr.Fields[:0], hr.spans[:0]
	if cap(hr.long) > 64<<10 {
		hr.long = nil
	}
	if cap(hr.raw) > 64<<10 {
		hr.raw = nil
	}
}

// LastFields is a connection's last head's fields, as a HeadReader read
// them: an upstream sends much the same head every time, and a head whose
// names and values are byte for byte the last one's takes that one's
// strings (no allocation). The zero value holds none.
type LastFields struct {
	raw    []byte
	spans  []span
	fields []Field
}

// maxLastFields bounds the head a LastFields keeps.
const maxLastFields = 4 << 10

// ReadResponse reads one response head from br, of a response to a
// request of the given method, into the Response it returns and
// hr.Fields. The head may be up to max bytes long; last, when not nil, is
// the connection's LastFields. It reads net/http's way
// (http.ReadResponse), but:
//   - only HTTP/1.0 and HTTP/1.1, and a status line of exactly three
//     digits after a single space;
//   - a folded line is ErrObsFold, not unfolded;
//   - a response with both Content-Length and chunking also closes its
//     connection (it may be an attempt at response splitting: RFC 9112
//     section 6.3).
func (hr *HeadReader) ReadResponse(br *bufio.Reader, method string, max int, last *LastFields) (Response, error) {
	h := Response{ContentLength: -1}
	budget := max
	line, err := hr.readLine(br, &budget)
	if err != nil {
		return h, err
	}
	minor, status, ok := parseStatusLine(line)
	if !ok {
		return h, fmt.Errorf("%w: status line %q", ErrMalformed, clip(line))
	}
	h.Status = status
	if err := hr.readFields(br, &budget, last); err != nil {
		return h, err
	}
	return h, h.frame(hr.Fields, minor, method)
}

// parseStatusLine reads "HTTP/1.x DDD[ reason]".
func parseStatusLine(line []byte) (minor, status int, ok bool) {
	switch {
	case len(line) >= 12 && string(line[:9]) == "HTTP/1.1 ":
		minor = 1
	case len(line) >= 12 && string(line[:9]) == "HTTP/1.0 ":
	default:
		return 0, 0, false
	}
	code := line[9:12]
	if code[0] < '1' || code[0] > '9' || !isDigit(code[1]) || !isDigit(code[2]) || len(line) > 12 && line[12] != ' ' {
		return 0, 0, false
	}
	return minor, int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0'), true
}

// frame sets h's framing from the head's fields: RFC 9112 section 6.3, as
// http.ReadResponse reads it (transfer.go's readTransfer).
func (h *Response) frame(fields []Field, minor int, method string) error {
	var connB, teB, clsB, trailerB [2]string
	conn, te, cls, trailer := connB[:0], teB[:0], clsB[:0], trailerB[:0]
	for _, f := range fields {
		switch f.Name {
		case "Connection":
			conn = append(conn, f.Value)
		case "Transfer-Encoding":
			te = append(te, f.Value)
		case "Content-Length":
			cls = append(cls, f.Value)
		case "Trailer":
			trailer = append(trailer, f.Value)
		}
	}
	h.Close = httpguts.HeaderValuesContainsToken(conn, "close") ||
		minor == 0 && !httpguts.HeaderValuesContainsToken(conn, "keep-alive")
	if h.Status == http.StatusSwitchingProtocols && httpguts.HeaderValuesContainsToken(conn, "upgrade") {
		for _, f := range fields {
			if f.Name == "Upgrade" {
				h.Upgrade = f.Value
				break
			}
		}
	}
	h.NoBody = method == http.MethodHead || h.Status < 200 || h.Status == http.StatusNoContent || h.Status == http.StatusNotModified
	if len(te) > 0 && minor == 1 { // HTTP/1.0 has no Transfer-Encoding (net/http's issue 12785)
		// As nginx and net/http: one field, "chunked", and nothing else.
		if len(te) != 1 || !EqualFold(te[0], "chunked") {
			return fmt.Errorf("%w: Transfer-Encoding %q", ErrFraming, strings.Join(te, ", "))
		}
		h.Chunked = true
	}
	if len(cls) > 0 {
		n, err := contentLength(cls)
		if err != nil {
			return err
		}
		if h.Chunked {
			// Both: the chunking wins, and the connection goes.
			h.Close = true
		} else {
			h.ContentLength = n
		}
	}
	if h.Chunked {
		for _, v := range trailer {
			for tok := range strings.SplitSeq(v, ",") {
				if tok = textproto.TrimString(tok); tok == "" {
					continue
				}
				k := http.CanonicalHeaderKey(tok)
				switch k {
				case "Transfer-Encoding", "Trailer", "Content-Length":
					return fmt.Errorf("%w: trailer %q", ErrFraming, k)
				}
				h.Trailers = append(h.Trailers, k)
			}
		}
	}
	if !h.NoBody && !h.Chunked && h.ContentLength < 0 {
		h.Close = true // read until the connection's end
	}
	return nil
}

// contentLength is the length the Content-Length fields cls declare: all
// the same number (RFC 9110 section 8.6), as net/http's fixLength and
// parseContentLength take them.
func contentLength(cls []string) (int64, error) {
	first := textproto.TrimString(cls[0])
	for _, v := range cls[1:] {
		if textproto.TrimString(v) != first {
			return 0, fmt.Errorf("%w: Content-Length %q", ErrFraming, strings.Join(cls, ", "))
		}
	}
	n, err := strconv.ParseUint(first, 10, 63)
	if err != nil || first == "" {
		return 0, fmt.Errorf("%w: Content-Length %q", ErrFraming, first)
	}
	return int64(n), nil
}

func clip(b []byte) []byte { return b[:min(len(b), 64)] }

// ReadFields reads the field lines up to the empty line that ends them (a
// chunked body's trailers) into hr.Fields, in up to max bytes.
func (hr *HeadReader) ReadFields(br *bufio.Reader, max int) error {
	return hr.readFields(br, &max, nil)
}

// readLine returns the next line of a head without its line end (CRLF,
// or a bare LF as net/http takes it), counting it against budget. The
// line is valid until the next read of br.
func (hr *HeadReader) readLine(br *bufio.Reader, budget *int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		hr.long = append(hr.long[:0], line...)
		for err == bufio.ErrBufferFull {
			if len(hr.long) > *budget {
				return nil, ErrTooLarge
			}
			line, err = br.ReadSlice('\n')
			hr.long = append(hr.long, line...)
		}
		line = hr.long
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if *budget -= len(line); *budget < 0 {
		return nil, ErrTooLarge
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// readFields reads field lines up to the empty line that ends them into
// hr.Fields, names in canonical form. A name that is not a token, a value
// with control characters and a folded line are errors, as for
// http.ReadResponse (which unfolds; RFC 9112 section 5.2 lets a proxy
// refuse instead). Fields the same as last's take last's strings.
func (hr *HeadReader) readFields(br *bufio.Reader, budget *int, last *LastFields) error {
	raw := hr.raw[:0]
	if raw == nil {
		raw = make([]byte, 0, 1024)
	}
	spans := hr.spans[:0]
	for {
		line, err := hr.readLine(br, budget)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return ErrObsFold
		}
		name, value, ok := ParseFieldLine(line)
		if !ok {
			return fmt.Errorf("%w: header line %q", ErrMalformed, clip(line))
		}
		var s span
		s.n0 = len(raw)
		raw = AppendCanonical(raw, name)
		s.n1 = len(raw)
		s.v0 = len(raw)
		raw = append(raw, value...)
		s.v1 = len(raw)
		spans = append(spans, s)
	}
	hr.raw, hr.spans = raw, spans
	hr.Fields = hr.Fields[:0]
	if len(spans) == 0 {
		return nil
	}
	if last != nil && bytes.Equal(raw, last.raw) && slices.Equal(spans, last.spans) {
		hr.Fields = append(hr.Fields, last.fields...)
		return nil
	}
	all := string(raw) // one allocation holds every name and value
	for _, s := range spans {
		name, ok := CommonName(raw[s.n0:s.n1])
		if !ok {
			name = all[s.n0:s.n1]
		}
		hr.Fields = append(hr.Fields, Field{name, all[s.v0:s.v1]})
	}
	if last != nil && len(raw) <= maxLastFields {
		last.raw = append(last.raw[:0], raw...)
		last.spans = append(last.spans[:0], spans...)
		last.fields = append(last.fields[:0], hr.Fields...)
	}
	return nil
}

// AppendStatusLine appends the status line of code, as net/http's server
// writes it: "HTTP/1.1 404 Not Found", or "HTTP/1.1 599 status code 599"
// for a code without a text.
func AppendStatusLine(b []byte, code int) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	if text := http.StatusText(code); text != "" {
		b = append(b, ' ')
		b = append(b, text...)
	} else {
		b = append(b, " status code "...)
		b = strconv.AppendInt(b, int64(code), 10)
	}
	return append(b, "\r\n"...)
}
