package proxy_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/linkgate/linkgate/proxy"
)

// TestStatusWriter: a writer is wrapped once, and the wrap is reused; it
// records the first final status written, and Flush reaches the writer
// underneath.
func TestStatusWriter(t *testing.T) {
	rec := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/", nil)
	ww := proxy.StatusWriter(rec, r)
	if again := proxy.StatusWriter(ww, r); again != ww {
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
	f, ok := ww.(http.Flusher)
	if !ok {
		t.Fatalf("the wrap of a Flusher (%T) is no Flusher", ww)
	}
	f.Flush()
	if !rec.Flushed {
		t.Error("Flush did not reach the writer underneath")
	}
}
