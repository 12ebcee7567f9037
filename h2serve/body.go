package h2serve

import (
	"io"
	"net/http"
	"os"
	"sync"
	"time"
)

// body is a request's body: the DATA the reader puts in, drained by the
// handler's reads, which give the bytes read back to the client's
// windows. Read is for one goroutine at a time, as net/http's bodies.
type body struct {
	st     *stream
	wake   chan struct{} // 1 slot: something changed
	expect bool          // the request expects 100-continue, not yet sent

	mu       sync.Mutex
	buf      []byte
	off      int         // buf[off:] is unread
	err      error       // io.EOF after END_STREAM, or why the stream ended
	closed   bool        // the handler closed it
	deadline time.Time   // http.ResponseController.SetReadDeadline's
	trailers http.Header // received, moved to the request's Trailer by the read that ends the body
}

// setTrailers keeps the trailers received until a read ends the body.
func (b *body) setTrailers(h http.Header) {
	if b == nil || h == nil {
		return
	}
	b.mu.Lock()
	b.trailers = h
	b.mu.Unlock()
}

// put appends data; false when the handler closed the body or the stream
// ended (the bytes are dropped).
func (b *body) put(data []byte) bool {
	b.mu.Lock()
	if b.closed || b.err != nil {
		b.mu.Unlock()
		return false
	}
	if b.off == len(b.buf) {
		b.buf, b.off = b.buf[:0], 0
	}
	b.buf = append(b.buf, data...)
	b.mu.Unlock()
	b.signal()
	return true
}

// end ends the body: reads return err once what was put is read (io.EOF
// for a nil err).
func (b *body) end(err error) {
	if b == nil {
		return
	}
	if err == nil {
		err = io.EOF
	}
	b.mu.Lock()
	if b.err == nil {
		b.err = err
	}
	b.mu.Unlock()
	b.signal()
}

// fail ends the body with err at once, what was put and not read
// dropped; an ended body stays ended.
func (b *body) fail(err error) {
	if b == nil {
		return
	}
	b.mu.Lock()
	if b.err == nil {
		b.err = err
		b.buf, b.off = nil, 0
	}
	b.mu.Unlock()
	b.signal()
}

// signal wakes the reader waiting in Read, if any.
func (b *body) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// Read reads what the client sent, waiting for it.
func (b *body) Read(p []byte) (int, error) {
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return 0, http.ErrBodyReadAfterClose
		}
		if b.off < len(b.buf) {
			n := copy(p, b.buf[b.off:])
			b.off += n
			b.mu.Unlock()
			b.st.c.credit(b.st, int64(n))
			return n, nil
		}
		if b.err != nil {
			err, got := b.err, b.trailers
			b.trailers = nil
			b.mu.Unlock()
			if err == io.EOF {
				for k, v := range got {
					b.st.trailer[k] = v
				}
			}
			return 0, err
		}
		dl := b.deadline
		expect := b.expect
		b.expect = false
		b.mu.Unlock()
		if expect {
			b.st.rw.writeContinue()
		}
		if err := b.wait(dl); err != nil {
			return 0, err
		}
	}
}

// wait waits for the body to change, or until dl.
func (b *body) wait(dl time.Time) error {
	if dl.IsZero() {
		<-b.wake
		return nil
	}
	d := time.Until(dl)
	if d <= 0 {
		return os.ErrDeadlineExceeded
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.wake:
	case <-t.C:
	}
	return nil
}

// setDeadline sets the deadline of reads (the zero time: none).
func (b *body) setDeadline(t time.Time) {
	b.mu.Lock()
	b.deadline = t
	b.mu.Unlock()
	b.signal()
}

// Close closes the body; what the client still sends is dropped.
func (b *body) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.signal()
	return nil
}

// discard drops what was put and not read, and returns its length.
func (b *body) discard() int {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.buf) - b.off
	b.buf, b.off, b.closed = nil, 0, true
	return n
}
