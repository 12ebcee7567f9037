package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// ErrBodyTimeout is the error a request body read returns when the client
// sends it too slowly (see BodyDeadline). It wraps os.ErrDeadlineExceeded,
// so that any reader of the body (the limiter looking for an email) can
// tell it from a malformed body; the proxy answers it 408.
var ErrBodyTimeout = fmt.Errorf("proxy: the client sent the request body too slowly: %w", os.ErrDeadlineExceeded)

// BodyDeadline returns middleware that bounds how slowly a client may send
// a request body, against clients that hold a connection open by trickling
// bytes (slowloris): each read of the body must deliver bytes within idle
// of the last (nginx's client_body_timeout; 0: none), and the whole body
// must be read within total of the request's arrival (0: none). A body that
// misses either fails its reads with ErrBodyTimeout; the proxy then
// answers 408 and closes the connection (on HTTP/2 and HTTP/3 the stream
// alone ends: problem.CloseConnection). Requests without a body cost
// nothing. Put it first in the chain, before anything reads the body.
//
// The deadlines are read deadlines on the connection
// (http.ResponseController). Once the body is read the deadline is lifted,
// so that a long response (a stream) is not cut off the way
// http.Server.ReadTimeout cuts it; a body the handler left unread, which
// the server then drains to reuse the connection, must keep arriving
// within idle, unless the handler answered "Connection: close" (then it is
// not waited for at all).
func BodyDeadline(idle, total time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if idle <= 0 && total <= 0 || r.Body == nil || r.Body == http.NoBody {
				next.ServeHTTP(w, r)
				return
			}
			b := &deadlineBody{ReadCloser: r.Body, rc: http.NewResponseController(w), idle: idle}
			if total > 0 {
				b.end = time.Now().Add(total)
			}
			r.Body = b
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), bodyKey{}, b)))
			switch {
			case b.done.Load() || b.timedOut.Load():
				// Read whole, or cut off for being too slow: a body cut off
				// keeps its past deadline, so that the server does not wait
				// for the rest again before closing.
			case w.Header().Get("Connection") == "close":
				// The answer closes the connection (a 413 for a body too
				// large to read): nothing more of the body will be used.
				b.rc.SetReadDeadline(time.Now())
			default:
				d := b.end
				if idle > 0 {
					d = time.Now().Add(idle)
				}
				b.rc.SetReadDeadline(d)
			}
		})
	}
}

// deadlineBody is a request body read under BodyDeadline's deadlines.
type deadlineBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	idle     time.Duration
	end      time.Time // zero: none
	timedOut atomic.Bool
	done     atomic.Bool // the body was read to its end
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	if b.timedOut.Load() {
		return 0, ErrBodyTimeout
	}
	var d time.Time
	if !b.done.Load() {
		d = b.end
		if b.idle > 0 {
			if next := time.Now().Add(b.idle); d.IsZero() || next.Before(d) {
				d = next
			}
		}
		b.rc.SetReadDeadline(d) // a writer that cannot (a test recorder) keeps the server's deadlines
	}
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == nil:
	case errors.Is(err, os.ErrDeadlineExceeded) && !d.IsZero() && !time.Now().Before(d):
		// This body's deadline, not another's (the proxy cutting the
		// read short once the upstream failed).
		b.timedOut.Store(true)
		return n, ErrBodyTimeout
	case err == io.EOF && !b.done.Load():
		b.done.Store(true)
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

type bodyKey struct{}

// bodyTimedOut reports whether the body of the request of ctx was cut off
// for arriving too slowly. The limiter may have put another reader in
// front of the body, so the context, not r.Body, carries it.
func bodyTimedOut(ctx context.Context) bool {
	b, ok := ctx.Value(bodyKey{}).(*deadlineBody)
	return ok && b.timedOut.Load()
}
