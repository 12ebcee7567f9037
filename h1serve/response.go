package h1serve

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/linkgate/linkgate/h1wire"
)

// bufferBeforeChunking is how much of a body is held before its head is
// written, as net/http's bufferBeforeChunkingSize: a handler that ends
// within it gets a Content-Length instead of chunking.
const bufferBeforeChunking = 2048

var errWriteAfterHandler = errors.New("h1serve: write after the handler returned")

var lastChunk = []byte(h1wire.LastChunk) // before the trailers and the final CRLF

// response is the loop's http.ResponseWriter. Its head is written as
// net/http's chunkWriter.writeHeader writes it: the handler's fields as
// they were at WriteHeader, then Date, Content-Length, Content-Type,
// Connection and Transfer-Encoding as net/http decides them.
type response struct {
	c   *conn
	hdr http.Header
	// relayed are the fields WriteHeaderFields took, written after hdr's:
	// a copy in the connection's scratch.
	relayed []h1wire.Field

	wroteHeader   bool  // the final status is set and the head built
	committed     bool  // the head is in the connection's buffer
	done          bool  // the handler returned
	status        int   // the final status
	contentLength int64 // declared or computed; -1: none
	written       int64 // body bytes the handler wrote
	staged        []byte
	head          []byte // status line and the handler's fields, built at WriteHeader
	chunking      bool
	closeAfter    bool
	werr          error // the first failed write to the connection

	isHEAD, wantsClose bool
	// Facts of the handler's fields at WriteHeader, for commit.
	hasCLField, haveType, hasCE, hasDate, trailers, dropConn bool
	te                                                       string // the first Transfer-Encoding
	trailerKeys                                              []string
}

func (w *response) Header() http.Header { return w.hdr }

// TakesFields: the loop's writer takes a head as a list (WriteHeaderFields).
func (w *response) TakesFields() bool { return true }

// WriteHeaderFields is WriteHeader for a head of the header map's fields
// and then fields (ongoing.FieldWriter): a relayed head's, written as they
// came, with no header map between. A 101's go into the map, where the
// protocol switch is read.
func (w *response) WriteHeaderFields(code int, fields []h1wire.Field) {
	if code == http.StatusSwitchingProtocols {
		for _, f := range fields {
			w.hdr[f.Name] = append(w.hdr[f.Name], f.Value)
		}
		w.WriteHeader(code)
		return
	}
	if !w.done && !w.wroteHeader {
		w.relayed = append(w.c.relayed[:0], fields...)
		w.c.relayed = w.relayed[:0]
	}
	w.WriteHeader(code)
	if code < 200 {
		w.relayed = nil // an interim head's
	}
}

// HeadField is the first value of the named field of the head: the
// header map's, else the relayed fields'.
func (w *response) HeadField(name string) string {
	if v := w.hdr[name]; len(v) > 0 {
		return v[0]
	}
	for _, f := range w.relayed {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// WriteHeader sends a 1xx at once; a final status fixes the head's
// fields (later changes to the header map are not sent, as in net/http).
func (w *response) WriteHeader(code int) {
	if w.done {
		return
	}
	if w.wroteHeader {
		w.c.s.logf("http: superfluous response.WriteHeader call")
		return
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		b := h1wire.AppendStatusLine(w.c.bw.AvailableBuffer(), code)
		b = w.appendFields(b, func(k string) bool { return k == "Content-Length" || k == "Transfer-Encoding" })
		b = append(b, crlf...)
		w.write(b)
		w.flush()
		return
	}
	w.wroteHeader = true
	w.status = code
	te, connection, invalidCL := w.readFields()
	w.buildHead(te, connection)
	if invalidCL {
		w.hdr.Del("Content-Length")
	}
}

// readFields notes the facts of the handler's fields that the head
// depends on, as net/http's chunkWriter.writeHeader reads them: the
// declared length (invalidCL: one that does not parse, which net/http
// takes out of the handler's map but keeps in the head it cloned before,
// unless chunking drops it), the first Transfer-Encoding and Connection,
// and the trailers declared.
func (w *response) readFields() (te, connection string, invalidCL bool) {
	h := w.hdr
	if cl := w.HeadField("Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.contentLength = v
		} else {
			w.c.s.logf("http: invalid Content-Length of %q", cl)
			invalidCL = true
		}
	}
	for k, vs := range h {
		if len(vs) == 0 {
			if k == "Trailer" {
				continue // declares nothing
			}
			vs = noValue
		}
		for i, v := range vs {
			w.noteField(k, v, i == 0, &te, &connection)
		}
	}
	for i, f := range w.relayed {
		first := true
		switch f.Name {
		case "Transfer-Encoding", "Content-Encoding", "Connection":
			first = len(h[f.Name]) == 0 && !h1wire.HasField(w.relayed[:i], f.Name)
		}
		w.noteField(f.Name, f.Value, first, &te, &connection)
	}
	return te, connection, invalidCL
}

// noValue stands for the values of a name the header map holds without
// any: one empty value, as net/http reads it.
var noValue = []string{""}

// noteField notes what the head depends on of one field, k: v, first
// telling whether v is k's first value (which net/http reads of most).
func (w *response) noteField(k, v string, first bool, te, connection *string) {
	switch k {
	case "Transfer-Encoding":
		if first {
			*te = v
		}
	case "Content-Length":
		w.hasCLField = true
	case "Content-Type":
		w.haveType = true
	case "Content-Encoding":
		if first {
			w.hasCE = v != ""
		}
	case "Date":
		w.hasDate = true
	case "Connection":
		if first {
			*connection = v
		}
	case "Trailer":
		w.trailers = true
		for f := range strings.SplitSeq(v, ",") {
			if k := http.CanonicalHeaderKey(strings.TrimSpace(f)); k != "" && httpguts.ValidTrailerHeader(k) {
				w.trailerKeys = append(w.trailerKeys, k)
			}
		}
	default:
		if strings.HasPrefix(k, http.TrailerPrefix) {
			w.trailers = true
		}
	}
}

// buildHead decides, as net/http's chunkWriter.writeHeader does, which
// of the handler's fields the head leaves out and whether the connection
// closes after the answer, and builds the head from the status line and
// the fields kept (commit adds what net/http adds).
func (w *response) buildHead(te, connection string) {
	code := w.status
	hasCL := w.contentLength != -1
	w.closeAfter = w.wantsClose || connection == "close" || !w.c.s.keepAlives()
	bodyAllowed := bodyAllowedForStatus(code)

	dropCL := !bodyAllowed || hasCL && te != "" && te != "identity"
	if dropCL && bodyAllowed {
		w.c.s.logf("http: WriteHeader called with both Transfer-Encoding of %q and a Content-Length of %d", te, w.contentLength)
		w.contentLength, hasCL = -1, false
	}
	if w.hasCLField && !w.isHEAD && bodyAllowed && code != http.StatusNoContent && !hasCL && te != "identity" {
		dropCL = true // an empty or invalid Content-Length, and the body chunked
	}
	dropType := code == http.StatusNotModified
	dropTE := true // unless chunking something other than chunked or identity
	if !w.isHEAD && bodyAllowed && code != http.StatusNoContent && !hasCL {
		switch {
		case te == "identity":
			w.closeAfter = true
		case te != "" && te != "chunked":
			dropTE = false
		}
	}
	dropConn := w.closeAfter && (!w.c.s.keepAlives() || !hasToken(connection, "close")) && !isProtocolSwitch(code, w.hdr)
	w.head = h1wire.AppendStatusLine(w.c.head[:0], code)
	w.head = w.appendFields(w.head, func(k string) bool {
		switch k {
		case "Content-Length":
			return dropCL
		case "Content-Type":
			return dropType
		case "Transfer-Encoding":
			return dropTE
		case "Connection":
			return dropConn
		}
		return strings.HasPrefix(k, http.TrailerPrefix)
	})
	w.te, w.dropConn = te, dropConn
}

// appendFields appends the handler's fields (the header map's, then the
// relayed ones) but those skip names, as http.Header.WriteSubset does:
// invalid names dropped, values as h1wire.AppendValue writes them.
func (w *response) appendFields(b []byte, skip func(string) bool) []byte {
	for k, vs := range w.hdr {
		if skip(k) || !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vs {
			b = h1wire.AppendField(b, k, v)
		}
	}
	for _, f := range w.relayed {
		if !skip(f.Name) && httpguts.ValidHeaderFieldName(f.Name) {
			b = h1wire.AppendField(b, f.Name, f.Value)
		}
	}
	return b
}

func (w *response) Write(p []byte) (int, error) {
	if w.done {
		return 0, errWriteAfterHandler
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !bodyAllowedForStatus(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.contentLength != -1 && w.written > w.contentLength {
		return 0, http.ErrContentLength
	}
	if !w.committed {
		if len(w.staged)+len(p) <= bufferBeforeChunking {
			w.staged = append(w.staged, p...)
			return len(p), nil
		}
		first := p
		if len(w.staged) > 0 {
			first = append(w.staged, p...)
		}
		w.commit(first)
		w.body(first)
		return len(p), w.werr
	}
	w.body(p)
	return len(p), w.werr
}

// body writes p to the connection as the head framed it.
func (w *response) body(p []byte) {
	switch {
	case w.isHEAD || len(p) == 0:
	case w.chunking:
		w.write(h1wire.AppendChunkSize(w.c.scratch[:0], len(p)))
		w.write(p)
		w.write(crlf)
	default:
		w.write(p)
	}
}

func (w *response) write(p []byte) {
	if w.werr == nil {
		_, w.werr = w.c.bw.Write(p)
	}
}

func (w *response) flush() {
	if w.werr == nil {
		w.werr = w.c.bw.Flush()
	}
}

// commit writes the head, first being the first bytes of the body (for
// sniffing, and for the length when the handler has returned).
func (w *response) commit(first []byte) {
	w.committed = true
	bodyAllowed := bodyAllowedForStatus(w.status)
	w.write(w.head)
	b := w.c.scratch[:0]
	if !w.hasDate {
		b = append(b, "Date: "...)
		b = append(b, w.c.dateValue()...)
		b = append(b, crlf...)
	}
	hasCL := w.contentLength != -1
	if w.done && !w.trailers && w.te == "" && bodyAllowed && !w.hasCLField && (!w.isHEAD || len(first) > 0) {
		w.contentLength, hasCL = int64(len(first)), true
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(first)), 10)
		b = append(b, crlf...)
	}
	if bodyAllowed && !w.hasCE && !w.haveType && w.te == "" && len(first) > 0 {
		b = append(b, "Content-Type: "...)
		b = append(b, http.DetectContentType(first)...)
		b = append(b, crlf...)
	}
	if w.dropConn {
		b = append(b, "Connection: close\r\n"...)
	}
	if !w.isHEAD && bodyAllowed && w.status != http.StatusNoContent && !hasCL && w.te != "identity" {
		w.chunking = true
		b = append(b, "Transfer-Encoding: chunked\r\n"...)
	}
	w.write(append(b, crlf...))
}

// Flush sends what the handler wrote so far (its head first).
func (w *response) Flush() { w.FlushError() }

// FlushError is Flush reporting the connection's error
// (http.ResponseController.Flush).
func (w *response) FlushError() error {
	if w.done {
		return errWriteAfterHandler
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.committed {
		w.commit(w.staged)
		w.body(w.staged)
		w.staged = w.staged[:0]
	}
	w.flush()
	return w.werr
}

// SetReadDeadline and SetWriteDeadline serve
// http.ResponseController's calls of the same names.
func (w *response) SetReadDeadline(t time.Time) error {
	if w.done {
		return errWriteAfterHandler
	}
	return w.c.setReadDeadline(t)
}
func (w *response) SetWriteDeadline(t time.Time) error {
	if w.done {
		return errWriteAfterHandler
	}
	w.c.wdlSet = true
	return w.c.nc.SetWriteDeadline(t)
}

// EnableFullDuplex serves http.ResponseController's: a request of the
// loop has no body to read along.
func (w *response) EnableFullDuplex() error { return nil }

// finish ends the answer once the handler returned: the head if not yet
// written (with the length of what was held), the held body, the last
// chunk and the trailers. A body shorter than its declared length closes
// the connection after it, as in net/http.
func (w *response) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.done = true
	if !w.committed {
		w.commit(w.staged)
		w.body(w.staged)
	}
	if w.chunking {
		w.write(lastChunk)
		if t := w.finalTrailers(); t != nil {
			if w.werr == nil {
				w.werr = t.Write(w.c.bw)
			}
		}
		w.write(crlf)
	}
	if !w.isHEAD && w.contentLength != -1 && bodyAllowedForStatus(w.status) && w.contentLength != w.written {
		w.closeAfter = true
	}
}

// finalTrailers is net/http's: the fields named with http.TrailerPrefix,
// then those the Trailer field declared.
func (w *response) finalTrailers() http.Header {
	var t http.Header
	for k, vv := range w.hdr {
		if kk, found := strings.CutPrefix(k, http.TrailerPrefix); found {
			if t == nil {
				t = make(http.Header)
			}
			t[kk] = vv
		}
	}
	for _, k := range w.trailerKeys {
		if t == nil {
			t = make(http.Header)
		}
		for _, v := range w.hdr[k] {
			t.Add(k, v)
		}
	}
	return t
}

func bodyAllowedForStatus(status int) bool {
	switch {
	case status >= 100 && status <= 199, status == http.StatusNoContent, status == http.StatusNotModified:
		return false
	}
	return true
}

// hasToken is net/http's: whether token appears in v, in any case,
// bounded by spaces, commas or the ends.
func hasToken(v, token string) bool {
	if len(token) > len(v) || token == "" {
		return false
	}
	if v == token {
		return true
	}
	for sp := 0; sp <= len(v)-len(token); sp++ {
		if b := v[sp]; b != token[0] && b|0x20 != token[0] {
			continue
		}
		if sp > 0 && !isTokenBoundary(v[sp-1]) {
			continue
		}
		if endPos := sp + len(token); endPos != len(v) && !isTokenBoundary(v[endPos]) {
			continue
		}
		if h1wire.EqualFold(v[sp:sp+len(token)], token) {
			return true
		}
	}
	return false
}

func isTokenBoundary(b byte) bool { return b == ' ' || b == ',' || b == '\t' }

func isProtocolSwitch(code int, h http.Header) bool {
	return code == http.StatusSwitchingProtocols && h.Get("Upgrade") != "" && httpguts.HeaderValuesContainsToken(h["Connection"], "Upgrade")
}
