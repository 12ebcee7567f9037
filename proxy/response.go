package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/linkgate/linkgate/h1wire"
	"github.com/linkgate/linkgate/ongoing"
)

// writeHead writes the final head of the response h: its end-to-end
// fields as a list to a writer that takes one (ongoing.FieldWriter: the
// gateway's HTTP/1 and HTTP/2 loops), else through the header map. It reports whether
// the answer is an event stream.
func (x *trip) writeHead(h *h1wire.Response) (eventStream bool) {
	if h.Chunked && len(h.Trailers) > 0 {
		hdr := x.w.Header()
		hdr["Trailer"] = append(hdr["Trailer"], strings.Join(h.Trailers, ", "))
	}
	if fw, ok := ongoing.AsFieldWriter(x.w); ok {
		fw.WriteHeaderFields(h.Status, x.st.endToEndFields(h))
		return isEventStream(fw.HeadField("Content-Type"))
	}
	hdr := x.w.Header()
	x.st.copyFields(hdr, h)
	x.w.WriteHeader(h.Status)
	return isEventStream(hdr.Get("Content-Type"))
}

// endToEndFields returns the fields of the response head h that are
// relayed (endToEnd), in st.kept.
func (st *h1State) endToEndFields(h *h1wire.Response) []h1wire.Field {
	var buf [2]string
	listed := st.connectionValues(buf[:0])
	for i, f := range st.hr.Fields {
		if st.endToEnd(i, listed, h) {
			st.kept = append(st.kept, f)
		}
	}
	return st.kept
}

// connectionValues appends the values of the head's Connection fields.
func (st *h1State) connectionValues(dst []string) []string {
	for _, f := range st.hr.Fields {
		if f.Name == "Connection" {
			dst = append(dst, f.Value)
		}
	}
	return dst
}

// endToEnd reports whether the i-th field of the response head h goes on
// to the client: not a hop-by-hop one nor one its Connection fields (whose
// values are listed) name (RFC 9110 section 7.6.1), and a Content-Length
// only when it frames the body, once.
func (st *h1State) endToEnd(i int, listed []string, h *h1wire.Response) bool {
	f := st.hr.Fields[i]
	if isHopByHop(f.Name) || f.Name == "Content-Length" && (h.Chunked || i > 0 && h1wire.HasField(st.hr.Fields[:i], f.Name)) {
		return false
	}
	return len(listed) == 0 || !httpguts.HeaderValuesContainsToken(listed, f.Name)
}

// copyFields adds the response's end-to-end fields (endToEnd) to hdr.
// Values share one slice, allocated once.
func (st *h1State) copyFields(hdr http.Header, h *h1wire.Response) {
	var buf [2]string
	listed := st.connectionValues(buf[:0])
	vals := make([]string, len(st.hr.Fields))
	// An empty header (no middleware set one) can only hold this
	// response's names: a name seen before in it is the one lookup needed.
	fresh := len(hdr) == 0
	for i, f := range st.hr.Fields {
		if !st.endToEnd(i, listed, h) {
			continue
		}
		if !fresh || h1wire.HasField(st.hr.Fields[:i], f.Name) {
			if cur, ok := hdr[f.Name]; ok {
				hdr[f.Name] = append(cur, f.Value)
				continue
			}
		}
		vals[i] = f.Value
		hdr[f.Name] = vals[i : i+1 : i+1]
	}
}

// copyBody streams the response body from c to w and reports whether it
// arrived whole. A body of unknown length (chunked or read to the close)
// or an event stream is flushed after every write, so that streams are
// not held back; a failure on either side aborts the response.
func (p *Proxy) copyBody(w http.ResponseWriter, r *http.Request, c *h1Conn, st *h1State, h *h1wire.Response, eventStream bool) bool {
	br := c.br
	if h.ContentLength >= 0 && !h.Chunked {
		if h.ContentLength <= int64(br.Buffered()) {
			// The whole body came with the head: write it from the read
			// buffer, no copy.
			b, _ := br.Peek(int(h.ContentLength))
			if _, err := w.Write(b); err != nil {
				p.abort(r, err, "client")
			}
			br.Discard(int(h.ContentLength))
			return true
		}
	}
	flush := h.ContentLength < 0 || eventStream
	f, _ := w.(http.Flusher)
	if !flush {
		f = nil
	}
	if f != nil && br.Buffered() == 0 {
		f.Flush() // the head now: the body may take its time
	}
	var src io.Reader = br
	switch {
	case h.Chunked:
		src = h1wire.NewChunkedReader(br)
	case h.ContentLength >= 0:
		src = &io.LimitedReader{R: br, N: h.ContentLength}
	}
	bufp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bufp)
	buf := *bufp
	var n int64
	for {
		m, rerr := src.Read(buf)
		if m > 0 {
			n += int64(m)
			if _, werr := w.Write(buf[:m]); werr != nil {
				p.abort(r, werr, "client")
			}
			if f != nil {
				f.Flush()
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			p.abort(r, rerr, "upstream")
		}
	}
	switch {
	case h.Chunked:
		p.copyTrailers(w, r, br, st, h)
	case h.ContentLength >= 0 && n < h.ContentLength:
		p.abort(r, io.ErrUnexpectedEOF, "upstream")
	}
	return h.ContentLength >= 0 || h.Chunked
}

// copyTrailers reads the trailer section that ends a chunked body and
// adds its fields to w's header as trailers: under their names when the
// response announced them all (Trailer), else with http.TrailerPrefix, as
// httputil.ReverseProxy passes them on. A framing field among them aborts
// the response.
func (p *Proxy) copyTrailers(w http.ResponseWriter, r *http.Request, br *bufio.Reader, st *h1State, h *h1wire.Response) {
	if err := st.hr.ReadFields(br, maxResponseHead); err != nil {
		p.abort(r, err, "upstream trailers")
	}
	if len(h.Trailers) > 0 {
		// Force chunking, as httputil.ReverseProxy: a short body would
		// otherwise get a Content-Length.
		http.NewResponseController(w).Flush()
	}
	for _, tf := range st.hr.Fields {
		switch tf.Name {
		case "Host", "Transfer-Encoding", "Content-Length", "Trailer":
			p.abort(r, fmt.Errorf("%w: trailer %q", h1wire.ErrFraming, tf.Name), "upstream trailers")
		}
	}
	announced := true
	for _, tf := range st.hr.Fields {
		announced = announced && slices.Contains(h.Trailers, tf.Name)
	}
	hdr := w.Header()
	for _, tf := range st.hr.Fields {
		k := tf.Name
		if !announced {
			k = http.TrailerPrefix + k
		}
		hdr[k] = append(hdr[k], tf.Value)
	}
}

// isEventStream reports whether the Content-Type ct is text/event-stream.
func isEventStream(ct string) bool {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}
