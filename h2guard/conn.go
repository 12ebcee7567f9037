package h2guard

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

const frameHeaderLen = 9

// Conn is the server's side of one client's HTTP/2 connection, read
// through its budgets. Reads follow the frames the client sends (their
// 9-byte headers; payloads are skipped, never copied) and charge each
// frame that costs the server work without moving a request forward;
// writes follow the frames the server sends, for the work they give the
// client. When a budget runs out, or a header block stays open past the
// header timeout, Read returns http2.ConnectionError(ENHANCE_YOUR_CALM):
// the server answers it with a GOAWAY of that code, naming the last stream
// it took, at a frame boundary of its own writes, and closes the
// connection a second later (Conn closes it itself if the GOAWAY cannot
// be written by then).
//
// Read is for one goroutine (the server's frame reader) and Write for one
// at a time (the server's writer); the deadline setters may be called from
// any goroutine.
type Conn struct {
	net.Conn
	g    *guard
	born time.Time // the zero of the buckets' clock

	// The read side: the reading goroutine only.
	preface    int                  // bytes of the client preface not yet read
	head       [frameHeaderLen]byte // a frame header split between reads
	headN      int
	typ        http2.FrameType // the frame being read
	flags      http2.Flags
	length     uint32 // its payload's length
	remain     uint32 // the bytes of its payload not yet read
	lastStream uint32 // the highest stream a HEADERS frame opened
	inBlock    bool   // a header block is open: from its HEADERS frame header to the end of its END_HEADERS frame
	blocks     uint64 // header blocks opened
	resets     bucket
	overhead   bucket
	updates    int64 // WINDOW_UPDATE frames credited to DATA frames sent
	errorsSeen int64 // stream errors charged to resets
	err        error // the cut, returned by every Read after it

	// Read deadlines: the server's own (theirs) and the header blocks'
	// (ours), the earlier of the two set on the connection.
	mu     sync.Mutex
	theirs time.Time
	ours   time.Time
	seen   uint64    // the header block open when ours was last armed or passed
	seenAt time.Time // when: that block has been open since then at least

	// The write side: the writing goroutine.
	out          outFrames
	dataSent     atomic.Int64 // DATA frames with a payload sent
	streamErrors atomic.Int64 // RST_STREAM frames sent for the client's protocol errors
	answered     answered     // the streams the server answered (or reset) last
}

// answered holds the last streams the server sent a response head or a
// RST_STREAM for, written by the writing goroutine and read by the
// reading one. A client that resets a stream once it has its answer
// (Go's client does when a body is closed before its end arrived) cost
// the server no more than the request did; a reset before the answer is
// the one that makes the server start work for nothing.
type answered struct {
	ids  [answeredRing]atomic.Uint32
	next int // the writing goroutine's
}

// answeredRing is how many streams answered keeps: 1 kB a connection. A
// reset that comes after more streams than that were answered since its
// own is taken for one before the answer.
const answeredRing = 256

func (a *answered) add(id uint32) {
	a.ids[a.next%answeredRing].Store(id)
	a.next++
}

func (a *answered) has(id uint32) bool {
	for i := range a.ids {
		if a.ids[i].Load() == id {
			return true
		}
	}
	return false
}

// outFrames follows the frames the server writes.
type outFrames struct {
	head   [frameHeaderLen]byte
	headN  int
	typ    http2.FrameType
	remain uint32
	code   [4]byte // a RST_STREAM frame's error code, as it is written
	codeN  int
}

// newConn guards c; preface is how much of the client preface is still to
// be read from it (none when net/http read it to recognize h2c).
func (g *guard) newConn(c net.Conn, preface int) *Conn {
	return &Conn{Conn: c, g: g, born: time.Now(), preface: preface}
}

// tlsConn is a Conn over TLS: the server reads the handshake's state
// through ConnectionState (Request.TLS, RFC 9113 §9.2's checks). A Conn
// over plain TCP must not have the method, or it would be taken for TLS.
type tlsConn struct {
	*Conn
	state tls.ConnectionState
}

func (c *tlsConn) ConnectionState() tls.ConnectionState { return c.state }

// Read reads from the connection and follows the frames read.
func (c *Conn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.read(p)
	if n > 0 {
		var serr error
		if n, serr = c.scan(p, n); serr != nil {
			if c.err != nil {
				return 0, c.err
			}
			err = serr
		}
	}
	return n, err
}

// read reads from the connection, reading again when the deadline that
// passed was the header block's and the block has time left (or closed).
func (c *Conn) read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if n > 0 || err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		again, cut := c.expired(time.Now())
		if cut {
			return 0, c.cut(HeaderTimeout)
		}
		if !again {
			return n, err
		}
	}
}

// The header blocks' deadline is armed when a block opens and none is, and
// then passes every quarter of the header timeout for as long as blocks
// keep opening; each time it passes, the block open then is noted. A block
// noted open a header timeout ago is cut. A block is thus cut between one
// header timeout and a quarter more after it opened, and a busy connection
// reads the clock and sets its deadline four times per header timeout,
// not once a request: the clock costs more than the rest of the guard's
// work on a frame.

// expired answers a read deadline that passed at now: read again (the
// header blocks' deadline, moved on or cleared), cut (a block open for the
// header timeout), or neither (the server's own deadline).
func (c *Conn) expired(now time.Time) (again, cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.theirs.IsZero() && !now.Before(c.theirs) || c.ours.IsZero() {
		return false, false
	}
	if !c.inBlock {
		c.ours = time.Time{}
	} else {
		if c.blocks != c.seen {
			c.seen, c.seenAt = c.blocks, now
		}
		if now.Sub(c.seenAt) >= c.g.headerTimeout {
			return false, true
		}
		c.ours = now.Add(c.g.headerTimeout / 4)
		if end := c.seenAt.Add(c.g.headerTimeout); end.Before(c.ours) {
			c.ours = end
		}
	}
	c.setDeadline()
	return true, false
}

// openBlock notes a header block's start, and arms the deadline when it is
// not armed: from then on the block has the exact time it opened.
func (c *Conn) openBlock() {
	c.inBlock = true
	c.blocks++
	if c.g.headerTimeout <= 0 {
		return
	}
	c.mu.Lock()
	if c.ours.IsZero() {
		now := time.Now()
		c.seen, c.seenAt = c.blocks, now
		c.ours = now.Add(c.g.headerTimeout / 4)
		c.setDeadline()
	}
	c.mu.Unlock()
}

// setDeadline sets the earlier of the two deadlines on the connection;
// c.mu is held.
func (c *Conn) setDeadline() error {
	d := c.theirs
	if !c.ours.IsZero() && (d.IsZero() || c.ours.Before(d)) {
		d = c.ours
	}
	return c.Conn.SetReadDeadline(d)
}

// SetReadDeadline sets the server's read deadline.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.theirs = t
	return c.setDeadline()
}

// SetDeadline sets the server's read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

// scan follows the frames in p[:n], the bytes just read, and charges them.
// It may read on to the end of a SETTINGS frame (see dedupeSettings); it
// returns the count of bytes then in p, and the error of that read or the
// cut.
func (c *Conn) scan(p []byte, n int) (int, error) {
	var rerr error
	for i := 0; i < n; {
		switch {
		case c.preface > 0:
			k := min(c.preface, n-i)
			c.preface -= k
			i += k
		case c.remain > 0:
			if c.remain == c.length && c.typ == http2.FrameSettings && canDedupe(c.flags, c.length) && i+int(c.length) <= len(p) {
				end := i + int(c.length)
				for n < end && rerr == nil {
					var m int
					m, rerr = c.read(p[n:end])
					n += m
				}
				if n == end {
					dedupeSettings(p[i:end])
				}
			}
			k := min(int(c.remain), n-i)
			c.remain -= uint32(k)
			i += k
			if c.remain == 0 {
				c.frameEnd()
			}
		default:
			var h []byte
			if c.headN == 0 && n-i >= frameHeaderLen {
				h = p[i : i+frameHeaderLen]
				i += frameHeaderLen
			} else {
				k := copy(c.head[c.headN:], p[i:n])
				c.headN += k
				i += k
				if c.headN < frameHeaderLen {
					return n, rerr
				}
				c.headN = 0
				h = c.head[:]
			}
			if r, over := c.frame(h); over {
				return n, c.cut(r)
			}
		}
	}
	return n, rerr
}

// Budgets that do not follow the server's config.
const (
	// overheadBurst frames that carry nothing may come at once, then
	// overheadRate a second, plus one for each stream the client opens.
	overheadBurst = 1000
	overheadRate  = 100
	// updatesPerData WINDOW_UPDATE frames per DATA frame sent are free
	// (Envoy's max_inbound_window_update_frames_per_data_frame_sent): a
	// client reading a response hands its window back as it reads, Go's
	// client every 4 kB for the stream and the connection, a 16 kB DATA
	// frame at most 8.
	updatesPerData = 10
)

// frame charges the frame whose header h is; it reports the reason when
// a budget ran out.
func (c *Conn) frame(h []byte) (Reason, bool) {
	c.length = uint32(h[0])<<16 | uint32(h[1])<<8 | uint32(h[2])
	c.remain = c.length
	c.typ = http2.FrameType(h[3])
	c.flags = http2.Flags(h[4])
	stream := binary.BigEndian.Uint32(h[5:]) & (1<<31 - 1)

	overhead := Reason(0)
	switch c.typ {
	case http2.FrameData:
		if c.length == 0 && !c.flags.Has(http2.FlagDataEndStream) {
			overhead = EmptyData
		}
	case http2.FrameHeaders:
		if stream > c.lastStream {
			c.lastStream = stream
			c.overhead.give(c.g.overhead)
		}
		if !c.inBlock {
			c.openBlock()
		}
	case http2.FrameContinuation:
		if c.length == 0 && !c.flags.Has(http2.FlagContinuationEndHeaders) {
			overhead = EmptyContinuation
		}
	case http2.FrameRSTStream:
		if c.answered.has(stream) {
			overhead = ResetStream // after its answer: as cheap as any other frame
		} else if !c.resets.take(c.now(), c.g.resets) {
			return ResetStream, true
		}
	case http2.FramePriority:
		overhead = Priority
	case http2.FrameSettings:
		overhead = Settings
	case http2.FramePing:
		overhead = Ping
	case http2.FrameWindowUpdate:
		if c.updates < updatesPerData*c.dataSent.Load() {
			c.updates++
		} else {
			overhead = WindowUpdate
		}
	case http2.FrameGoAway, http2.FramePushPromise:
		// The end of the connection, or the server's error.
	default:
		overhead = UnknownFrame
	}
	if overhead != 0 && !c.overhead.take(c.now(), c.g.overhead) {
		return overhead, true
	}
	// The streams the server reset for the client's protocol errors since
	// the last frame count as resets: a client may not have the server
	// reset its streams for it to get around the budget.
	for sent := c.streamErrors.Load(); c.errorsSeen < sent; c.errorsSeen++ {
		if !c.resets.take(c.now(), c.g.resets) {
			return StreamError, true
		}
	}
	if c.length == 0 {
		c.frameEnd()
	}
	return 0, false
}

// frameEnd notes the end of the frame being read.
func (c *Conn) frameEnd() {
	if (c.typ == http2.FrameHeaders || c.typ == http2.FrameContinuation) && c.flags.Has(http2.FlagHeadersEndHeaders) {
		c.inBlock = false
	}
}

// now is the time on the buckets' clock.
func (c *Conn) now() int64 { return int64(time.Since(c.born)) }

// cutGrace is how long a cut connection stays open at most: the server
// closes it a second after its GOAWAY is written (h2serve's grace for the
// client to read it); this closes one whose GOAWAY could not be written.
const cutGrace = 2 * time.Second

// cut ends the connection for r: every Read from now on returns the
// connection error the server answers with GOAWAY.
func (c *Conn) cut(r Reason) error {
	c.err = http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
	c.g.report(c, r)
	time.AfterFunc(cutGrace, func() { c.Conn.Close() })
	return c.err
}

// Write writes p, following the frames in it.
func (c *Conn) Write(p []byte) (int, error) {
	c.follow(p)
	return c.Conn.Write(p)
}

// follow follows the frames the server writes: the DATA frames that give
// the client something (credit for its WINDOW_UPDATE frames) and the
// streams reset for the client's protocol errors.
func (c *Conn) follow(p []byte) {
	o := &c.out
	for len(p) > 0 {
		if o.remain > 0 {
			k := min(int(o.remain), len(p))
			if o.typ == http2.FrameRSTStream && o.codeN < len(o.code) {
				o.codeN += copy(o.code[o.codeN:], p[:k])
				if o.codeN == len(o.code) && clientsError(http2.ErrCode(binary.BigEndian.Uint32(o.code[:]))) {
					c.streamErrors.Add(1)
				}
			}
			o.remain -= uint32(k)
			p = p[k:]
			continue
		}
		var h []byte
		if o.headN == 0 && len(p) >= frameHeaderLen {
			h, p = p[:frameHeaderLen], p[frameHeaderLen:]
		} else {
			k := copy(o.head[o.headN:], p)
			o.headN += k
			p = p[k:]
			if o.headN < frameHeaderLen {
				return
			}
			o.headN, h = 0, o.head[:]
		}
		o.remain = uint32(h[0])<<16 | uint32(h[1])<<8 | uint32(h[2])
		o.typ = http2.FrameType(h[3])
		o.codeN = 0
		switch o.typ {
		case http2.FrameData:
			if o.remain > 0 {
				c.dataSent.Add(1)
			}
		case http2.FrameHeaders, http2.FrameRSTStream:
			c.answered.add(binary.BigEndian.Uint32(h[5:]) & (1<<31 - 1))
		}
	}
}

// clientsError reports whether a stream reset with code was the client's
// doing: a frame that broke the protocol on that stream (a WINDOW_UPDATE
// of 0, a self-dependent PRIORITY, DATA past the window or on a stream the
// client ended, a frame of the wrong size), what the MadeYouReset attack
// (CVE-2025-8671) sends instead of RST_STREAM. Not NO_ERROR (a handler
// done before reading the whole body), INTERNAL_ERROR (a handler that
// failed or gave up, an upstream broken mid-answer), CANCEL, or
// REFUSED_STREAM (streams opened before the client had the server's
// SETTINGS: Go's client opens up to 100 at once).
func clientsError(code http2.ErrCode) bool {
	switch code {
	case http2.ErrCodeProtocol, http2.ErrCodeFlowControl, http2.ErrCodeStreamClosed, http2.ErrCodeFrameSize:
		return true
	}
	return false
}
