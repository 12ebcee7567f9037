package h2serve

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// conn is one HTTP/2 connection. The reader goroutine (serve) owns the
// fields under "reader's"; mu guards the streams and the flow-control
// windows; wmu (write.go) guards the output. Lock order: mu before wmu,
// a body's mu alone.
type conn struct {
	s      *Server
	nc     net.Conn
	ctx    context.Context // the connection's values; canceled as it ends
	cancel context.CancelFunc
	// stopBase stops endRequests' run at the end of the base context, if
	// that can end.
	stopBase func() bool
	remote   string
	tls      *tls.ConnectionState // the handshake's, over TLS
	handler  http.Handler         // the connection's own, in place of the Server's; nil: the Server's

	// reader's
	br          *bufio.Reader
	rfr         *http2.Framer
	sawSettings bool
	idleArmed   bool        // the idle timeout's read deadline is set
	started     atomic.Bool // the server's SETTINGS is written

	mu        sync.Mutex
	flow      sync.Cond // on mu: a send window grew, a stream reset, the connection ended
	streams   map[uint32]*stream
	maxID     uint32     // the highest stream the client opened
	sendWin   int64      // the connection's send window
	peerWin   int64      // the client's SETTINGS_INITIAL_WINDOW_SIZE
	peerMax   int        // the client's SETTINGS_MAX_FRAME_SIZE
	recvWin   int64      // how much more DATA the client may send on the connection
	unacked   int64      // DATA bytes consumed and not yet given back with WINDOW_UPDATE
	cut       [8]cutBody // the last bodies cut short, for their DATA in flight
	cutNext   int
	goingAway bool // GOAWAY sent: no new streams
	// closeOnLast: the GOAWAY sent was NO_ERROR's, so the last stream's
	// end closes the connection; after a connection error's, connError
	// closes it, after its grace.
	closeOnLast bool
	closed      bool

	w writer // write.go
}

// newConn returns the connection nc of s, its context derived from ctx.
func newConn(ctx context.Context, s *Server, nc net.Conn) *conn {
	c := &conn{s: s, nc: nc, remote: nc.RemoteAddr().String(), streams: make(map[uint32]*stream),
		sendWin: 65535, peerWin: 65535, peerMax: defaultMaxFrameSize, recvWin: 65535}
	c.ctx, c.cancel = context.WithCancel(ctx)
	if ctx.Done() != nil {
		c.stopBase = context.AfterFunc(ctx, c.endRequests)
	}
	c.flow.L = &c.mu
	c.w.init(c)
	return c
}

// endRequests cancels the contexts of the requests served (the streams'
// contexts end with the connection's, but are not derived from it), once
// the connection's base context ended; a stream opened later finds the
// connection's context ended.
func (c *conn) endRequests() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.streams {
		st.ctx.Cancel()
	}
}

// errGoneAway ends the reader after a connection error's GOAWAY.
var errGoneAway = errors.New("h2serve: connection error sent")

// serve reads and handles frames until the connection ends.
func (c *conn) serve(sawPreface bool) {
	defer c.close()
	defer func() {
		if v := recover(); v != nil { // the loop's own bug: the connection's end, not the process's
			c.s.logf("h2serve: panic serving %v: %v\n%s", c.remote, v, debug.Stack())
		}
	}()
	c.br = bufio.NewReaderSize(c.nc, 16<<10)
	if d := c.s.ReadHeaderTimeout; d > 0 {
		c.nc.SetReadDeadline(time.Now().Add(d))
	}
	// The server's preface first, as RFC 9113 section 3.4 allows: it
	// leaves while the client's comes (a client that waits for it before
	// its first request waits no round trip more).
	c.writeSettings()
	go c.w.flusher()
	if !sawPreface && !c.readPreface() {
		return
	}
	c.rfr = http2.NewFramer(nil, c.br)
	c.rfr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.rfr.MaxHeaderListSize = c.s.maxHeaderListSize()
	c.rfr.SetMaxReadFrameSize(c.s.maxReadFrameSize())
	c.rfr.SetReuseFrames()
	for {
		c.armIdle()
		f, err := c.rfr.ReadFrame()
		if err == nil {
			err = c.process(f)
		}
		if err != nil && !c.handleError(f, err) {
			return
		}
	}
}

// readPreface reads the client's connection preface (RFC 9113 section
// 3.4); false when it is something else.
func (c *conn) readPreface() bool {
	buf := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c.br, buf); err != nil || string(buf) != http2.ClientPreface {
		return false
	}
	return true
}

// writeSettings sends the server's SETTINGS and opens the connection's
// receive window to connWindow.
func (c *conn) writeSettings() {
	c.w.mu.Lock()
	c.w.fr.WriteSettings(
		http2.Setting{ID: http2.SettingMaxFrameSize, Val: c.s.maxReadFrameSize()},
		http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: c.s.maxStreams()},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.s.maxHeaderListSize()},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: initialStreamWindow},
	)
	c.w.fr.WriteWindowUpdate(0, connWindow-65535)
	c.w.mu.Unlock()
	c.started.Store(true)
	c.mu.Lock()
	c.recvWin = connWindow
	c.mu.Unlock()
	c.w.kick()
}

// armIdle sets the idle timeout's read deadline when no stream is open,
// before the reader waits for a frame; the HEADERS that opens a stream
// clears it. Until the first SETTINGS, ReadHeaderTimeout's stands.
func (c *conn) armIdle() {
	d := c.s.IdleTimeout
	if d <= 0 || c.idleArmed || !c.sawSettings {
		return
	}
	c.mu.Lock()
	n := len(c.streams)
	c.mu.Unlock()
	if n == 0 {
		c.idleArmed = true
		c.nc.SetReadDeadline(time.Now().Add(d))
	}
}

// handleError answers an error of reading or handling frame f: a stream
// error resets the stream, a connection error sends GOAWAY and ends the
// connection; false when the reader is to stop.
func (c *conn) handleError(f http2.Frame, err error) bool {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		c.mu.Lock()
		if se.StreamID > c.maxID && se.StreamID%2 == 1 {
			c.maxID = se.StreamID // a HEADERS refused still opened (and closed) its stream
		}
		st := c.streams[se.StreamID]
		c.mu.Unlock()
		c.resetStream(st, se.StreamID, se.Code)
		return true
	case err == http2.ErrFrameTooLarge:
		c.connError(http2.ErrCodeFrameSize)
	case errors.As(err, &ce):
		c.connError(http2.ErrCode(ce))
	case err == errGoneAway:
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() && c.idleArmed && c.sawSettings {
			c.goAway(http2.ErrCodeNo) // idle too long
			c.w.flushNow()
		}
	}
	return false
}

// connError sends GOAWAY with code and closes the connection after it
// went out, reading and dropping what the client still sends for a
// moment so that the close does not reset the connection before the
// client read the GOAWAY.
func (c *conn) connError(code http2.ErrCode) {
	c.goAway(code)
	c.w.flushNow()
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	grace := time.Now().Add(time.Second)
	c.nc.SetReadDeadline(grace)
	_, err := io.Copy(io.Discard, c.br)
	var ne net.Error
	if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
		// A reader that fails at once (h2guard's, after a cut) leaves the
		// client's bytes unread: closing now would reset the connection
		// before the client read the GOAWAY. It gets its second all the same.
		time.Sleep(time.Until(grace))
	}
}

// goAway sends GOAWAY with code and the last stream taken, once; with
// NO_ERROR, the connection closes once its open streams have ended.
func (c *conn) goAway(code http2.ErrCode) {
	if !c.started.Load() { // no SETTINGS sent yet: nothing may come before it
		c.nc.Close()
		return
	}
	c.mu.Lock()
	if c.goingAway && code == http2.ErrCodeNo {
		c.mu.Unlock()
		return
	}
	c.goingAway = true
	c.closeOnLast = code == http2.ErrCodeNo
	last, idle := c.maxID, len(c.streams) == 0
	c.mu.Unlock()
	c.w.mu.Lock()
	c.w.fr.WriteGoAway(last, code, nil)
	c.w.mu.Unlock()
	c.w.kick()
	if code == http2.ErrCodeNo && idle {
		c.w.closeWhenFlushed()
	}
}

// close ends the connection: every stream's context and body, the
// writers waiting for a window, the flusher, the net.Conn.
func (c *conn) close() {
	c.mu.Lock()
	c.closed = true
	streams := make([]*stream, 0, len(c.streams))
	for _, st := range c.streams {
		streams = append(streams, st)
	}
	c.flow.Broadcast()
	c.mu.Unlock()
	c.cancel()
	if c.stopBase != nil {
		c.stopBase()
	}
	for _, st := range streams {
		st.ctx.Cancel()
		st.body.fail(errConnClosed)
	}
	c.w.stop()
	c.nc.Close()
}

// process handles a frame read.
func (c *conn) process(f http2.Frame) error {
	if !c.sawSettings {
		// RFC 9113 section 3.4: the client's preface ends with SETTINGS.
		if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		c.sawSettings = true
		if c.s.ReadHeaderTimeout > 0 {
			c.nc.SetReadDeadline(time.Time{})
		}
	}
	switch f := f.(type) {
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.PingFrame:
		return c.onPing(f)
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID { // RFC 9113 section 5.3.1
			return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
		}
		return nil
	case *http2.GoAwayFrame:
		// The client opens no more streams, and closes the connection
		// once done with those open: the server goes on answering them,
		// and PINGs, until then (the idle timeout ends it otherwise).
		return nil
	case *http2.PushPromiseFrame: // RFC 9113 section 8.4: a client cannot push
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	return nil // unknown frame types are ignored (RFC 9113 section 5.5)
}

// onSettings applies the client's settings and acknowledges them. It
// holds mu until the ACK is in the writer's buffer: a stream waiting for
// the window a larger SETTINGS_INITIAL_WINDOW_SIZE gives takes it under
// mu, so its DATA follows the ACK, as the ACK says the settings are in
// force (h2spec's http2/6.9.2/1 misses a DATA that comes first).
func (c *conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingHeaderTableSize:
			c.w.mu.Lock()
			c.w.enc.SetMaxDynamicTableSize(s.Val)
			c.w.mu.Unlock()
		case http2.SettingInitialWindowSize:
			return c.setPeerWindow(int64(s.Val))
		case http2.SettingMaxFrameSize:
			c.peerMax = int(s.Val)
			c.w.mu.Lock()
			c.w.maxFrame = int(s.Val)
			c.w.mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return err
	}
	c.w.mu.Lock()
	c.w.fr.WriteSettingsAck()
	c.w.mu.Unlock()
	c.w.kick()
	c.flow.Broadcast()
	return nil
}

// setPeerWindow applies a new SETTINGS_INITIAL_WINDOW_SIZE to every open
// stream's send window (RFC 9113 section 6.9.2): a window may go negative,
// and one over 2^31-1 is a FLOW_CONTROL_ERROR. Under mu.
func (c *conn) setPeerWindow(v int64) error {
	delta := v - c.peerWin
	c.peerWin = v
	for _, st := range c.streams {
		st.sendWin += delta
		if st.sendWin > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
	}
	return nil
}

const maxWindow = 1<<31 - 1

// onWindowUpdate grows a send window and wakes the writers waiting for it.
func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		c.sendWin += int64(f.Increment)
		if c.sendWin > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.flow.Broadcast()
		return nil
	}
	st := c.streams[f.StreamID]
	if st == nil {
		if c.idle(f.StreamID) {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
		return nil // a closed stream: allowed (RFC 9113 section 5.1)
	}
	st.sendWin += int64(f.Increment)
	if st.sendWin > maxWindow {
		return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeFlowControl}
	}
	c.flow.Broadcast()
	return nil
}

// idle says whether stream id was never opened; under mu.
func (c *conn) idle(id uint32) bool { return id > c.maxID || id%2 == 0 }

// onPing answers a PING.
func (c *conn) onPing(f *http2.PingFrame) error {
	if f.IsAck() {
		return nil
	}
	c.w.mu.Lock()
	c.w.fr.WritePing(true, f.Data)
	c.w.mu.Unlock()
	c.w.kick()
	return nil
}

// onReset ends a stream the client reset: its context, its body, its
// writes.
func (c *conn) onReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	if c.idle(f.StreamID) {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	st := c.streams[f.StreamID]
	if st != nil {
		st.reset.Store(true)
		st.recvDone = true
		c.flow.Broadcast()
	}
	c.mu.Unlock()
	if st != nil {
		st.ctx.Cancel()
		st.body.fail(errClientReset)
	}
	return nil
}

// resetStream sends RST_STREAM with code for stream id, and ends st (nil
// when the stream is closed already) as onReset does.
func (c *conn) resetStream(st *stream, id uint32, code http2.ErrCode) {
	if st != nil {
		c.mu.Lock()
		sent := st.rstSent
		st.rstSent, st.recvDone = true, true
		st.reset.Store(true)
		c.flow.Broadcast()
		c.mu.Unlock()
		if sent {
			return
		}
		st.ctx.Cancel()
		st.body.fail(errStreamReset)
	}
	c.w.mu.Lock()
	c.w.fr.WriteRSTStream(id, code)
	c.w.room.Broadcast() // a writer of st waiting for room
	c.w.mu.Unlock()
	c.w.kick()
}
