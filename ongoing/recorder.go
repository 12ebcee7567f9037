// Package ongoing is what the gateway's layers learn of a request while
// it is served, without importing the server that reads it or the proxy
// that answers it: the status and size of its answer as they are written
// (StatusWriter, Recorder), and its end (AfterEnd); and the context a
// server's loop gives it (RequestContext).
package ongoing

import (
	"context"
	"net/http"
)

// StatusWriter returns w as a *Recorder, which records the status and the
// bytes of the answer written through it: w itself when it is one
// already, else a new wrap of w. One wrap thus serves a whole request: the
// gateway's outermost middleware makes it, and the middlewares inside
// that wait for the upstream's status (the limiter's count_status, the
// visit counter) reuse it; each of them still wraps for itself when used
// alone. Reuse assumes nothing has answered through w yet, as holds for
// any middleware before it calls next.
func StatusWriter(w http.ResponseWriter) *Recorder {
	if rec, ok := w.(*Recorder); ok {
		return rec
	}
	return &Recorder{ResponseWriter: w}
}

// Recorder is a response writer that records what is written through it.
// Status is 0 until a final status is written, by WriteHeader, a Write
// (200) or a Flush (200); a handler that writes nothing answers 200.
// Flush reaches the writer underneath, and so do Hijack, deadlines and
// the other calls of http.ResponseController (Unwrap).
type Recorder struct {
	http.ResponseWriter
	status, bytes int
}

// WriteHeader passes an interim (1xx) status on, and the first final one;
// a later one is superfluous, as net/http ignores it too.
func (w *Recorder) WriteHeader(code int) {
	if w.passes(code) {
		w.ResponseWriter.WriteHeader(code)
	}
}

// passes reports whether a head of status code goes on to the writer
// underneath: an interim one does, and the first final one, which it
// records.
func (w *Recorder) passes(code int) bool {
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		return true
	}
	if w.status == 0 {
		w.status = code
		return true
	}
	return false
}

func (w *Recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK // the writer underneath answers 200 first
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += n
	return n, err
}

// Flush sends what is written so far, and the head: the status is 200
// unless one was written.
func (w *Recorder) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap is the writer underneath, for http.ResponseController.
func (w *Recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Status is the final status written, 0 for none yet.
func (w *Recorder) Status() int { return w.status }

// BytesWritten is the number of body bytes written.
func (w *Recorder) BytesWritten() int { return w.bytes }

// StatusClientClosed is the status a request whose client left before
// its answer was written is logged and counted with, as nginx logs it:
// no client ever saw it.
const StatusClientClosed = 499

// Final is the status r was answered with, as the gateway reports it
// (access log, requests_total, the visit counter): StatusClientClosed
// when r's client left before the handler was done (its HTTP/1
// connection closed, its HTTP/2 stream reset: its context canceled, not
// timed out), whatever the handler wrote, which the client did not wait
// for; else the status written, 200 when nothing was. A 408 stays: the
// gateway ended the request itself, for a body too slow, and the server
// canceled it then.
func (w *Recorder) Final(r *http.Request) int {
	if w.status != http.StatusRequestTimeout && context.Cause(r.Context()) == context.Canceled {
		return StatusClientClosed
	}
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
