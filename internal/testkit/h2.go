package testkit

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// H2Conn is a raw HTTP/2 client connection for what a well-behaved client
// never sends: frames written one by one with x/net/http2's Framer into a
// buffer that Send flushes, header blocks encoded with hpack. A goroutine
// reads what the server answers and records its GOAWAY, its RST_STREAM
// frames, the response heads (their fields in order) and DATA lengths,
// the streams the server ended, and when the connection ended. It writes nothing itself: not even the server's SETTINGS are
// acknowledged (an ACK could land inside a header block the test is
// sending; Go's server does not wait for one). Safe for concurrent use.
type H2Conn struct {
	conn net.Conn
	host string

	wmu sync.Mutex // the writer
	bw  *bufio.Writer
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer

	mu      sync.Mutex
	goAway  *H2GoAway
	resets  map[http2.ErrCode]int
	status  map[uint32]string // :status by stream
	heads   map[uint32][][]hpack.HeaderField
	ended   map[uint32]bool  // END_STREAM received
	data    map[uint32][]int // DATA frame lengths by stream (the first 64)
	acks    int              // SETTINGS ACK frames received
	changed chan struct{}    // closed and replaced on every record
	done    chan struct{}    // closed when the reader stops
	endedAt time.Time
	readErr error
}

// H2GoAway is the GOAWAY a server sent and when it arrived.
type H2GoAway struct {
	Code       http2.ErrCode
	LastStream uint32
	At         time.Time
}

// DialH2 connects to addr over TLS with cfg (NextProtos h2), or in clear
// text with prior knowledge (h2c) when cfg is nil, and sends the preface
// and an empty SETTINGS frame.
func DialH2(addr string, cfg *tls.Config) (*H2Conn, error) {
	var c net.Conn
	var err error
	d := &net.Dialer{Timeout: 10 * time.Second}
	if cfg != nil {
		cfg = cfg.Clone()
		cfg.NextProtos = []string{"h2"}
		var tc *tls.Conn
		if tc, err = tls.DialWithDialer(d, "tcp", addr, cfg); err == nil {
			if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
				tc.Close()
				return nil, fmt.Errorf("h2: %s negotiated %q", addr, p)
			}
			c = tc
		}
	} else {
		c, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	h := &H2Conn{conn: c, host: addr, bw: bufio.NewWriterSize(c, 64<<10),
		resets: map[http2.ErrCode]int{}, status: map[uint32]string{}, data: map[uint32][]int{},
		heads: map[uint32][][]hpack.HeaderField{}, ended: map[uint32]bool{},
		changed: make(chan struct{}), done: make(chan struct{})}
	h.fr = http2.NewFramer(h.bw, c)
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.fr.MaxHeaderListSize = 1 << 20
	h.enc = hpack.NewEncoder(&h.buf)
	if err := h.Send(func(fr *http2.Framer) error {
		if _, err := h.bw.WriteString(http2.ClientPreface); err != nil {
			return err
		}
		return fr.WriteSettings()
	}); err != nil {
		c.Close()
		return nil, err
	}
	go h.read()
	return h, nil
}

// Close closes the connection.
func (h *H2Conn) Close() error { return h.conn.Close() }

// Send runs write, which writes frames with fr, and flushes them to the
// server in one go.
func (h *H2Conn) Send(write func(fr *http2.Framer) error) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if err := write(h.fr); err != nil {
		return err
	}
	return h.bw.Flush()
}

// Flood sends what write writes, in batches of 100 calls, until the
// server's GOAWAY arrives, a send fails (the server stopped reading and
// closed) or d passes; it returns how many calls were sent.
func (h *H2Conn) Flood(d time.Duration, write func(fr *http2.Framer) error) int {
	sent := 0
	for start := time.Now(); time.Since(start) < d; {
		if _, ok := h.GoAway(); ok {
			break
		}
		if err := h.Send(func(fr *http2.Framer) error {
			for range 100 {
				if err := write(fr); err != nil {
					return err
				}
				sent++
			}
			return nil
		}); err != nil {
			break
		}
	}
	return sent
}

// Raw sends p as it is.
func (h *H2Conn) Raw(p []byte) error {
	return h.Send(func(*http2.Framer) error {
		_, err := h.bw.Write(p)
		return err
	})
}

// Block returns the header block of a GET of path, with extra fields
// (name, value pairs) after the pseudo-headers. Call it from one goroutine:
// the HPACK encoder's table is the connection's.
func (h *H2Conn) Block(path string, extra ...string) []byte {
	return h.RequestBlock("GET", path, extra...)
}

// RequestBlock is Block for a request of method.
func (h *H2Conn) RequestBlock(method, path string, extra ...string) []byte {
	h.buf.Reset()
	fields := append([]string{":method", method, ":scheme", "https", ":authority", h.host, ":path", path}, extra...)
	for i := 0; i+1 < len(fields); i += 2 {
		h.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	return bytes.Clone(h.buf.Bytes())
}

func (h *H2Conn) read() {
	defer close(h.done)
	for {
		f, err := h.fr.ReadFrame()
		h.mu.Lock()
		if err != nil {
			h.readErr, h.endedAt = err, time.Now()
			h.notify()
			h.mu.Unlock()
			return
		}
		switch f := f.(type) {
		case *http2.GoAwayFrame:
			if h.goAway == nil {
				h.goAway = &H2GoAway{Code: f.ErrCode, LastStream: f.LastStreamID, At: time.Now()}
			}
		case *http2.RSTStreamFrame:
			h.resets[f.ErrCode]++
		case *http2.MetaHeadersFrame:
			if s := f.PseudoValue("status"); s != "" {
				h.status[f.StreamID] = s
			}
			h.heads[f.StreamID] = append(h.heads[f.StreamID], append([]hpack.HeaderField(nil), f.Fields...))
			h.ended[f.StreamID] = h.ended[f.StreamID] || f.StreamEnded()
		case *http2.DataFrame:
			if l := h.data[f.StreamID]; len(l) < 64 {
				h.data[f.StreamID] = append(l, len(f.Data()))
			}
			h.ended[f.StreamID] = h.ended[f.StreamID] || f.StreamEnded()
		case *http2.SettingsFrame:
			if f.IsAck() {
				h.acks++
			}
		}
		h.notify()
		h.mu.Unlock()
	}
}

// notify wakes the waiters; h.mu is held.
func (h *H2Conn) notify() {
	close(h.changed)
	h.changed = make(chan struct{})
}

// Wait waits up to d, stretched by the machine's pace, for cond,
// evaluated again after every frame read
// and at the end; it reports whether cond held.
func (h *H2Conn) Wait(d time.Duration, cond func(h *H2Conn) bool) bool {
	deadline := time.NewTimer(Slack(d))
	defer deadline.Stop()
	for {
		h.mu.Lock()
		changed := h.changed
		h.mu.Unlock()
		if cond(h) {
			return true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return false
		}
	}
}

// GoAway returns the server's first GOAWAY, if it sent one.
func (h *H2Conn) GoAway() (H2GoAway, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if g := h.goAway; g != nil {
		return *g, true
	}
	return H2GoAway{}, false
}

// Ended returns when the connection ended (the server closed it, or a read
// failed) and the read error; ok is false while it is open.
func (h *H2Conn) Ended() (at time.Time, err error, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.endedAt, h.readErr, !h.endedAt.IsZero()
}

// Done is closed when the connection has ended.
func (h *H2Conn) Done() <-chan struct{} { return h.done }

// Resets returns how many RST_STREAM frames with code the server sent.
func (h *H2Conn) Resets(code http2.ErrCode) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.resets[code]
}

// Status returns the :status of the response on stream, "" before it.
func (h *H2Conn) Status(stream uint32) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.status[stream]
}

// Heads returns the header blocks received on stream, in order (interim
// heads, the final head, trailers), each with its fields as sent.
func (h *H2Conn) Heads(stream uint32) [][]hpack.HeaderField {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]hpack.HeaderField(nil), h.heads[stream]...)
}

// StreamEnded reports whether the server ended stream (END_STREAM).
func (h *H2Conn) StreamEnded(stream uint32) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ended[stream]
}

// Data returns the lengths of the first DATA frames on stream.
func (h *H2Conn) Data(stream uint32) []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.data[stream]...)
}

// SettingsAcks returns how many SETTINGS frames the server acknowledged.
func (h *H2Conn) SettingsAcks() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.acks
}
