package h2serve

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/linkgate/linkgate/h1wire"
	"github.com/linkgate/linkgate/ongoing"
)

// hpackField is a decoded header field.
type hpackField = hpack.HeaderField

// responseWriter is a stream's http.ResponseWriter. Like x/net/http2's,
// it keeps the first bufSize bytes of the body until the handler writes
// more, flushes or returns, so that a short answer gets its Content-Length
// and sniffed Content-Type and leaves in one HEADERS and one DATA frame.
// It takes a relayed head as a list of fields (ongoing.FieldWriter).
// Its methods are for the handler's goroutine.
type responseWriter struct {
	st     *stream
	isHead bool

	hdr         http.Header // the handler's
	status      int
	wroteHeader bool // the final status is set
	sentHeader  bool // its HEADERS frame is written
	handlerDone bool
	buf         []byte   // the body not yet written
	wrote       int64    // body bytes the handler wrote
	declLen     int64    // the Content-Length sent, or -1
	trailers    []string // the trailer names declared
	err         error    // a write's error: the next fail too

	// head is the fields sent, as they were at WriteHeader: hdr's, then
	// (from head.relayed on) those WriteHeaderFields took; nil for none.
	// Its strings are the handler's, not copied: a list rather than a
	// clone of hdr, given back when the stream ends.
	head                     *headFields
	hasLen, hasType, hasDate bool // head names the field, even with no value
}

// bufSize is how much of a body the writer keeps before writing it.
const bufSize = 4 << 10

var (
	_ http.ResponseWriter = (*responseWriter)(nil)
	_ http.Flusher        = (*responseWriter)(nil)
	_ ongoing.FieldWriter = (*responseWriter)(nil)
)

// headFields is the list of an answer's head fields (responseWriter.head).
type headFields struct {
	list    []h1wire.Field
	relayed int // where WriteHeaderFields' fields begin
}

// headLists holds the lists of the streams that ended, for the next
// answers.
var headLists = sync.Pool{New: func() any { return new(headFields) }}

// Header returns the header map of the answer.
func (w *responseWriter) Header() http.Header {
	if w.hdr == nil {
		w.hdr = make(http.Header)
	}
	return w.hdr
}

// WriteHeader sends a 1xx interim answer at once, or sets the final
// status; the header fields are those of the map now.
func (w *responseWriter) WriteHeader(code int) {
	if code < 100 || code > 999 { // as net/http
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if w.wroteHeader {
		w.st.c.s.logf("h2serve: superfluous response.WriteHeader call (status %d)", code)
		return
	}
	if code < 200 {
		if code != http.StatusSwitchingProtocols { // RFC 9113 section 8.6: no 101
			w.writeInterim(code, w.hdr, nil)
		}
		return
	}
	w.setHead(code, nil)
}

// TakesFields: the writer takes a head as a list (WriteHeaderFields).
func (w *responseWriter) TakesFields() bool { return true }

// WriteHeaderFields is WriteHeader for a head of the header map's fields
// and then fields (ongoing.FieldWriter): a relayed head's, sent after the
// map's by the same rules, with no header map between. An interim head's
// are sent at once and not kept.
func (w *responseWriter) WriteHeaderFields(code int, fields []h1wire.Field) {
	if code < 100 || code > 999 || w.wroteHeader {
		w.WriteHeader(code)
		return
	}
	if code < 200 {
		if code != http.StatusSwitchingProtocols {
			w.writeInterim(code, w.hdr, fields)
		}
		return
	}
	w.setHead(code, fields)
}

// HeadField is the first value of the named field of the head: the
// header map's, else the relayed fields'.
func (w *responseWriter) HeadField(name string) string {
	if v := w.hdr[name]; len(v) > 0 {
		return v[0]
	}
	if w.head != nil {
		for _, f := range w.head.list[w.head.relayed:] {
			if f.Name == name {
				return f.Value
			}
		}
	}
	return ""
}

// setHead sets the final status and the head's fields: the header map's
// as it is now (later changes to it are not sent, as in net/http), then
// relayed.
func (w *responseWriter) setHead(code int, relayed []h1wire.Field) {
	w.wroteHeader, w.status, w.declLen = true, code, -1
	if len(w.hdr) == 0 && len(relayed) == 0 {
		return
	}
	hf := headLists.Get().(*headFields)
	for k, vv := range w.hdr {
		w.noteName(k)
		for _, v := range vv {
			hf.list = append(hf.list, h1wire.Field{Name: k, Value: v})
		}
	}
	hf.relayed = len(hf.list)
	for _, f := range relayed {
		w.noteName(f.Name)
	}
	hf.list = append(hf.list, relayed...)
	w.head = hf
}

// noteName notes a name of the head whose mere presence counts.
func (w *responseWriter) noteName(k string) {
	switch k {
	case "Content-Length":
		w.hasLen = true
	case "Content-Type":
		w.hasType = true
	case "Date":
		w.hasDate = true
	}
}

// release gives the head's list back once the stream has ended.
func (w *responseWriter) release() {
	hf := w.head
	if hf == nil {
		return
	}
	w.head = nil
	if cap(hf.list) > 64 {
		return
	}
	clear(hf.list) // its strings are the handler's
	hf.list = hf.list[:0]
	headLists.Put(hf)
}

// writeContinue sends 100 Continue, before the first read of a body that
// expects it.
func (w *responseWriter) writeContinue() {
	if !w.wroteHeader {
		w.writeInterim(http.StatusContinue, nil, nil)
	}
}

// writeInterim writes a 1xx answer with h's fields and then fields, but
// the connection-specific ones and Content-Length.
func (w *responseWriter) writeInterim(code int, h http.Header, fields []h1wire.Field) {
	c := w.st.c
	c.writeFrames(w.st, func(*http2.Framer) {
		c.w.hbuf.Reset()
		c.w.encodeStatus(code)
		c.w.encodeHeader(h)
		c.w.encodeFields(fields)
		c.w.writeBlock(w.st.id, false)
	})
}

// Write writes part of the body.
func (w *responseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.err != nil {
		return 0, w.err
	}
	w.wrote += int64(len(p))
	if w.declLen >= 0 && w.wrote > w.declLen {
		return 0, http.ErrContentLength
	}
	if len(w.buf)+len(p) <= bufSize {
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	if len(w.buf) > 0 {
		if w.err = w.writeChunk(w.buf); w.err != nil {
			return 0, w.err
		}
		w.buf = w.buf[:0]
	}
	if len(p) > bufSize {
		if w.err = w.writeChunk(p); w.err != nil {
			return 0, w.err
		}
		return len(p), nil
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// WriteString is Write of a string.
func (w *responseWriter) WriteString(s string) (int, error) {
	return w.Write([]byte(s))
}

// Flush writes what was written (the header at least) to the client.
func (w *responseWriter) Flush() { w.FlushError() }

// FlushError is Flush, with its error (http.ResponseController).
func (w *responseWriter) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return w.err
	}
	w.err = w.writeChunk(w.buf)
	w.buf = w.buf[:0]
	return w.err
}

// SetReadDeadline bounds the reads of the request's body
// (http.ResponseController).
func (w *responseWriter) SetReadDeadline(t time.Time) error {
	if b := w.st.body; b != nil {
		b.setDeadline(t)
	}
	return nil
}

// SetWriteDeadline resets the stream at t if the answer is not written by
// then (http.ResponseController).
func (w *responseWriter) SetWriteDeadline(t time.Time) error {
	w.st.setWriteDeadline(t)
	return nil
}

// EnableFullDuplex does nothing: over HTTP/2, a handler may always read
// the body after writing (http.ResponseController).
func (w *responseWriter) EnableFullDuplex() error { return nil }

// finish ends the answer once the handler returned: the header if not
// sent, what the body still holds, the trailers, END_STREAM.
func (w *responseWriter) finish() {
	w.handlerDone = true
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.promoteTrailers()
	if w.err == nil {
		w.err = w.writeChunk(w.buf)
	}
}

// writeChunk writes p: the HEADERS frame first if not yet written, then
// p as DATA, then, once the handler is done, the trailers or END_STREAM.
// It follows x/net/http2's rules for the fields it adds.
func (w *responseWriter) writeChunk(p []byte) error {
	if !w.sentHeader {
		w.sentHeader = true
		if end, err := w.writeHead(p); end || err != nil {
			return err
		}
	}
	if w.isHead || len(p) == 0 && !w.handlerDone {
		return nil
	}
	trailers := w.hasTrailerValues()
	end := w.handlerDone && !trailers
	if len(p) > 0 || end {
		if err := w.st.c.writeData(w.st, p, end); err != nil {
			return err
		}
	}
	if w.handlerDone && trailers {
		return w.writeTrailers()
	}
	return nil
}

// writeHead writes the answer's HEADERS frame, p the body's first bytes
// (all of it when the handler is done), and says whether it ended the
// stream.
func (w *responseWriter) writeHead(p []byte) (end bool, err error) {
	var fields []h1wire.Field
	if w.head != nil {
		fields = w.head.list
	}
	// The first value of each name is the map's, else the relayed one.
	var clen, ctype, date, cenc, conn string
	var sawLen, sawEnc, sawConn bool
	for _, f := range fields {
		switch f.Name {
		case "Content-Length":
			if !sawLen {
				sawLen = true
				if n, err := strconv.ParseUint(f.Value, 10, 63); err == nil {
					clen, w.declLen = f.Value, int64(n)
				}
			}
		case "Content-Encoding":
			if !sawEnc {
				sawEnc, cenc = true, f.Value
			}
		case "Connection":
			if !sawConn {
				sawConn, conn = true, f.Value
			}
		case "Trailer":
			for name := range strings.SplitSeq(f.Value, ",") {
				w.declareTrailer(strings.TrimSpace(name))
			}
		}
	}
	if !w.hasLen && clen == "" && w.handlerDone && bodyAllowed(w.status) && (len(p) > 0 || !w.isHead) {
		clen = strconv.Itoa(len(p))
	}
	if !w.hasType && cenc == "" && bodyAllowed(w.status) && len(p) > 0 {
		ctype = http.DetectContentType(p)
	}
	if !w.hasDate {
		date = dateValue()
	}
	// A handler's Connection: close closes the connection once idle, as
	// over HTTP/1 (x/net/http2 does the same).
	if conn == "close" {
		go w.st.c.goAway(http2.ErrCodeNo)
	}
	end = w.isHead || w.handlerDone && len(w.trailers) == 0 && len(p) == 0
	c := w.st.c
	err = c.writeFrames(w.st, func(*http2.Framer) {
		c.w.hbuf.Reset()
		c.w.encodeStatus(w.status)
		c.w.encodeFields(fields)
		c.w.encodeField("content-length", clen)
		c.w.encodeField("content-type", ctype)
		c.w.encodeField("date", date)
		c.w.writeBlock(w.st.id, end)
		if end {
			w.st.endSent.Store(true)
		}
	})
	return end, err
}

// declareTrailer adds name to the trailers sent, if a valid trailer.
func (w *responseWriter) declareTrailer(name string) {
	name = http.CanonicalHeaderKey(name)
	if name == "" || !httpguts.ValidTrailerHeader(name) {
		return
	}
	for _, t := range w.trailers {
		if t == name {
			return
		}
	}
	w.trailers = append(w.trailers, name)
}

// promoteTrailers declares the fields named with http.TrailerPrefix as
// trailers, under their names without it.
func (w *responseWriter) promoteTrailers() {
	for k, vv := range w.hdr {
		if !strings.HasPrefix(k, http.TrailerPrefix) {
			continue
		}
		name := http.CanonicalHeaderKey(strings.TrimPrefix(k, http.TrailerPrefix))
		w.declareTrailer(name)
		w.hdr[name] = vv
	}
}

// hasTrailerValues says whether a declared trailer has a value.
func (w *responseWriter) hasTrailerValues() bool {
	for _, t := range w.trailers {
		if len(w.hdr[t]) > 0 {
			return true
		}
	}
	return false
}

// writeTrailers writes the trailers, ending the stream.
func (w *responseWriter) writeTrailers() error {
	c := w.st.c
	return c.writeFrames(w.st, func(*http2.Framer) {
		c.w.hbuf.Reset()
		for _, t := range w.trailers {
			for _, v := range w.hdr[t] {
				c.w.encodeValid(lowerKey(t), v)
			}
		}
		c.w.writeBlock(w.st.id, true)
		w.st.endSent.Store(true)
	})
}

// bodyAllowed says whether an answer of status may have a body (RFC 9110
// sections 15.2, 15.3.5 and 15.4.5).
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// encodeStatus encodes the :status field; under mu.
func (w *writer) encodeStatus(code int) {
	s := ""
	if code >= 100 && code < 600 {
		s = statusText[code]
	} else {
		s = strconv.Itoa(code)
	}
	w.enc.WriteField(hpack.HeaderField{Name: ":status", Value: s})
}

// encodeHeader encodes h's fields but those notSent drops; under mu.
func (w *writer) encodeHeader(h http.Header) {
	for k, vv := range h {
		if notSent(k) {
			continue
		}
		name := lowerKey(k)
		for _, v := range vv {
			w.encodeValid(name, v)
		}
	}
}

// encodeFields encodes fields but those notSent drops, as encodeHeader
// encodes a header map's; under mu.
func (w *writer) encodeFields(fields []h1wire.Field) {
	for _, f := range fields {
		if !notSent(f.Name) {
			w.encodeValid(lowerKey(f.Name), f.Value)
		}
	}
}

// notSent says whether a field of the handler's named k is left out of
// a head: the connection-specific ones (RFC 9113 section 8.2.2), and
// Content-Length, which the writer adds as it decides.
func notSent(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade", "Content-Length":
		return true
	}
	return false
}

// encodeValid encodes a field, unless its name or value are invalid (as
// x/net/http2, which drops them); under mu.
func (w *writer) encodeValid(name, value string) {
	if !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(value) {
		return
	}
	w.enc.WriteField(hpack.HeaderField{Name: name, Value: value})
}

// encodeField encodes a field the server adds, unless its value is
// empty; under mu.
func (w *writer) encodeField(name, value string) {
	if value != "" {
		w.enc.WriteField(hpack.HeaderField{Name: name, Value: value})
	}
}

// statusText is the :status value of each code from 100 to 599.
var statusText = func() (s [600]string) {
	for i := 100; i < 600; i++ {
		s[i] = strconv.Itoa(i)
	}
	return s
}()

// lowerKey is the field name on the wire (RFC 9113 section 8.2.1) of a
// header map's key.
func lowerKey(k string) string {
	if l, ok := commonLower[k]; ok {
		return l
	}
	return strings.ToLower(k)
}

// canonicalKey is the header map's key of a field name read.
func canonicalKey(name string) string {
	if k, ok := commonCanonical[name]; ok {
		return k
	}
	return http.CanonicalHeaderKey(name)
}

var commonLower, commonCanonical = func() (map[string]string, map[string]string) {
	names := []string{"Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language", "Accept-Ranges",
		"Age", "Access-Control-Allow-Origin", "Allow", "Authorization", "Cache-Control", "Content-Disposition",
		"Content-Encoding", "Content-Language", "Content-Length", "Content-Location", "Content-Range",
		"Content-Type", "Cookie", "Date", "Etag", "Expect", "Expires", "From", "Host", "If-Match",
		"If-Modified-Since", "If-None-Match", "If-Unmodified-Since", "Last-Modified", "Link", "Location",
		"Max-Forwards", "Origin", "Priority", "Proxy-Authenticate", "Proxy-Authorization", "Range", "Referer",
		"Refresh", "Retry-After", "Server", "Set-Cookie", "Strict-Transport-Security", "Te", "Trailer",
		"User-Agent", "Vary", "Via", "Www-Authenticate", "X-Forwarded-For", "X-Forwarded-Proto",
		"X-Request-Id", "X-Content-Type-Options", "X-Frame-Options", "Sec-Fetch-Site", "Sec-Fetch-Mode",
		"Sec-Fetch-Dest", "Sec-Fetch-User", "Upgrade-Insecure-Requests", "Dnt", "Sec-Ch-Ua",
		"Sec-Ch-Ua-Mobile", "Sec-Ch-Ua-Platform"}
	lower, canon := make(map[string]string, len(names)), make(map[string]string, len(names))
	for _, n := range names {
		l := strings.ToLower(n)
		lower[n], canon[l] = l, n
	}
	return lower, canon
}()

// dateValue is the Date field's value for now, formatted once a second.
func dateValue() string {
	now := time.Now()
	if d := cachedDate.Load(); d != nil && d.sec == now.Unix() {
		return d.value
	}
	d := &date{sec: now.Unix(), value: now.UTC().Format(http.TimeFormat)}
	cachedDate.Store(d)
	return d.value
}

type date struct {
	sec   int64
	value string
}

var cachedDate atomic.Pointer[date]
