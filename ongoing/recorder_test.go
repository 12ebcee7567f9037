package ongoing_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/linkgate/linkgate/ongoing"
)

// TestStatusWriter: a writer is wrapped once, and the wrap is reused; it
// records the first final status written, counts the body's bytes, and Flush and http.ResponseController reach the
// writer underneath.
func TestStatusWriter(t *testing.T) {
	rec := httptest.NewRecorder()
	ww := ongoing.StatusWriter(rec)
	if again := ongoing.StatusWriter(ww); again != ww {
		t.Errorf("StatusWriter of a wrap = %p, want the wrap %p itself", again, ww)
	}
	if s := ww.Status(); s != 0 {
		t.Errorf("Status before any write = %d, want 0", s)
	}
	ww.WriteHeader(http.StatusNotFound)
	ww.WriteHeader(http.StatusInternalServerError) // superfluous: net/http ignores it too
	if s := ww.Status(); s != http.StatusNotFound || rec.Code != http.StatusNotFound {
		t.Errorf("Status %d, recorder %d; want 404 both", s, rec.Code)
	}
	ww.Write([]byte("abc"))
	ww.Write([]byte("de"))
	if n := ww.BytesWritten(); n != 5 || rec.Body.String() != "abcde" {
		t.Errorf("BytesWritten %d, body %q; want 5, abcde", n, rec.Body.String())
	}
	var f http.Flusher = ww
	f.Flush()
	if !rec.Flushed {
		t.Error("Flush did not reach the writer underneath")
	}

	// A write or a flush with no status first is a 200.
	for name, write := range map[string]func(*ongoing.Recorder){
		"Write": func(w *ongoing.Recorder) { w.Write([]byte("x")) },
		"Flush": func(w *ongoing.Recorder) { w.Flush() },
	} {
		w := ongoing.StatusWriter(httptest.NewRecorder())
		write(w)
		if s := w.Status(); s != http.StatusOK {
			t.Errorf("Status after a %s first = %d, want 200", name, s)
		}
	}

	// http.ResponseController reaches the writer underneath through
	// Unwrap: a recorder has no deadlines, so the call says so, rather
	// than that the wrap has none.
	under := &deadlineWriter{ResponseWriter: httptest.NewRecorder()}
	if err := http.NewResponseController(ongoing.StatusWriter(under)).SetReadDeadline(time.Now()); err != nil || !under.set {
		t.Errorf("SetReadDeadline through the wrap: %v, reached %v; want nil, true", err, under.set)
	}
}

type deadlineWriter struct {
	http.ResponseWriter
	set bool
}

func (w *deadlineWriter) SetReadDeadline(time.Time) error { w.set = true; return nil }

// TestFinal: the status reported is the one written (200 for none), but
// 499 when the request's client left (its context canceled, not timed
// out) before the handler was done, whatever was written; a 408 stays.
func TestFinal(t *testing.T) {
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	late, cancel2 := context.WithTimeout(context.Background(), 0)
	defer cancel2()
	for _, c := range []struct {
		ctx     context.Context
		written int
		want    int
	}{
		{context.Background(), 0, http.StatusOK},
		{context.Background(), http.StatusFound, http.StatusFound},
		{gone, 0, ongoing.StatusClientClosed},
		{gone, http.StatusFound, ongoing.StatusClientClosed},
		{gone, http.StatusRequestTimeout, http.StatusRequestTimeout},
		{late, http.StatusGatewayTimeout, http.StatusGatewayTimeout},
	} {
		w := ongoing.StatusWriter(httptest.NewRecorder())
		if c.written != 0 {
			w.WriteHeader(c.written)
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(c.ctx)
		if got := w.Final(r); got != c.want {
			t.Errorf("written %d, context %v: Final %d, want %d", c.written, c.ctx.Err(), got, c.want)
		}
	}
}
