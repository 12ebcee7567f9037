package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linkgate/linkgate/h1wire"
)

// bodyWriter copies a request body upstream on a goroutine of the
// request's own. A nil *bodyWriter is a request without a body.
type bodyWriter struct {
	nc   net.Conn
	rht  time.Duration
	done chan error
	eof  atomic.Bool // the client's body was read to its end
	cl   int64       // the body's length, -1 when chunked
	sent atomic.Int64

	mu          sync.Mutex
	headersSeen bool // guarded by mu

	// cut: stop cut the writer's read of the client's body short, and
	// that is why the read failed: the server has ended the request's
	// context and will close the connection after the answer, and the
	// body's failure is the proxy's doing, not the client's. Set and read
	// by the handler's goroutine only, once the writer has ended.
	cut bool
	// cutting: stop is about to cut the read. ownFailure: the client's
	// read failed before that (a malformed chunk, the client gone), which
	// is then the client's failure even if stop cut the read too.
	cutting, ownFailure atomic.Bool
}

func startBody(nc net.Conn, r *http.Request, rht time.Duration) *bodyWriter {
	bw := &bodyWriter{nc: nc, rht: rht, done: make(chan error, 1), cl: r.ContentLength}
	go func() {
		err := bw.copy(r)
		if errors.Is(err, errClientRead) {
			if !bw.cutting.Load() {
				bw.ownFailure.Store(true)
			}
			// The client's body failed (too slow, malformed, the client
			// gone): nothing more will be sent, so no answer is waited
			// for unless it has begun (an upstream that answered early).
			bw.mu.Lock()
			if !bw.headersSeen {
				nc.SetReadDeadline(aLongTimeAgo)
			}
			bw.mu.Unlock()
		}
		bw.done <- err
	}()
	return bw
}

// errClientRead wraps the error of reading the client's body.
var errClientRead = errors.New("proxy: reading the request body")

func (bw *bodyWriter) copy(r *http.Request) error {
	bufp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bufp)
	chunked := r.ContentLength < 0
	// Room for a chunk's size line before the data and its CRLF after,
	// so that each chunk is one write.
	const pre = 18
	buf := *bufp
	data := buf[pre : len(buf)-2]
	if !chunked {
		data = buf
	}
	for {
		n, rerr := r.Body.Read(data)
		if n > 0 {
			bw.sent.Add(int64(n)) // before the write: the upstream may answer as soon as it has them
			var werr error
			if chunked {
				size := h1wire.AppendChunkSize(buf[:0:pre], n)
				start := pre - len(size)
				copy(buf[start:], size)
				buf[pre+n], buf[pre+n+1] = '\r', '\n'
				_, werr = bw.nc.Write(buf[start : pre+n+2])
			} else {
				_, werr = bw.nc.Write(data[:n])
			}
			if werr != nil {
				return werr
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("%w: %w", errClientRead, rerr)
		}
	}
	bw.eof.Store(true)
	if chunked {
		b := append(buf[:0], h1wire.LastChunk...)
		for k, vv := range r.Trailer {
			for _, v := range vv {
				b = h1wire.AppendField(b, k, v)
			}
		}
		b = append(b, "\r\n"...)
		if _, err := bw.nc.Write(b); err != nil {
			return err
		}
	}
	// The whole request is sent: the wait for the response head starts.
	bw.mu.Lock()
	if !bw.headersSeen {
		bw.nc.SetReadDeadline(time.Now().Add(bw.rht))
	}
	bw.mu.Unlock()
	return nil
}

// cutShort reports whether stop cut the client's body short (false for a
// nil bw).
func (bw *bodyWriter) cutShort() bool { return bw != nil && bw.cut }

// bodyCutError is an upstream failure that came while the client's body
// was still arriving: the proxy stopped reading it (bodyWriter.cut). It is
// answered as the failure it wraps, on a connection that then closes.
type bodyCutError struct{ err error }

func (e bodyCutError) Error() string { return e.err.Error() }
func (e bodyCutError) Unwrap() error { return e.err }

// headersRead tells the writer the response head is in: no deadline
// for it any more.
func (bw *bodyWriter) headersRead() {
	bw.mu.Lock()
	bw.headersSeen = true
	bw.mu.Unlock()
}

// stop waits for the writer and reports whether the whole body was sent.
// An upstream that answered before the body was read whole gets no more
// of it: the writer's read of the client's body is cut short (the client
// connection closes after the answer) and its connection is not reused.
// A nil bw reports true. Unless complete, the connection is not reused
// whatever is reported.
func (bw *bodyWriter) stop(w http.ResponseWriter, complete bool) bool {
	if bw == nil {
		return true
	}
	select {
	case err := <-bw.done:
		bw.done <- err
		return err == nil
	default:
	}
	// All of a body of known length is sent when the upstream knows it
	// has it all; a chunked body, when its last chunk is, which is
	// written only after the client's body ended (eof).
	allSent := bw.eof.Load() || bw.cl > 0 && bw.sent.Load() == bw.cl
	if !allSent || !complete {
		bw.nc.SetWriteDeadline(aLongTimeAgo)
		if !allSent {
			// The writer may be waiting for the client's next bytes. Once
			// it has them all it only writes upstream, and the client's
			// connection must not be touched: a past read deadline there
			// would fail the server's next read and end the contexts of
			// this request and of every later one on the connection.
			bw.cutting.Store(true)
			rc := http.NewResponseController(w)
			rc.SetReadDeadline(aLongTimeAgo)
			// A reader of the body that sets deadlines of its own
			// (BodyDeadline) sets one over the cut when the writer reads
			// again: cut again until the writer has ended.
			tick := time.NewTicker(10 * time.Millisecond)
		wait:
			for {
				select {
				case err := <-bw.done:
					bw.done <- err
					break wait
				case <-tick.C:
					rc.SetReadDeadline(aLongTimeAgo)
				}
			}
			tick.Stop()
		}
		err := <-bw.done
		bw.done <- err
		// The writer's own failure first (its failed read set the
		// upstream's deadline that ended the wait for the answer) is the
		// client's, as when stop did not cut.
		bw.cut = !allSent && !bw.ownFailure.Load()
		return false
	}
	// The last bytes are on their way: wait for them, not for ever.
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case err := <-bw.done:
		bw.done <- err
		return err == nil
	case <-t.C:
		bw.nc.SetWriteDeadline(aLongTimeAgo)
		err := <-bw.done
		bw.done <- err
		return false
	}
}
