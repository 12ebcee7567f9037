package header

import (
	"net/http"
	"testing"
)

// TestFirstIsGet: for a canonical name, First gives what Get gives.
func TestFirstIsGet(t *testing.T) {
	h := http.Header{}
	h.Add("User-Agent", "a")
	h.Add("User-Agent", "b")
	h["X-Empty"] = nil
	for _, name := range []string{"User-Agent", "X-Empty", "Referer"} {
		if got, want := First(h, name), h.Get(name); got != want {
			t.Errorf("First(%s) = %q, Get gives %q", name, got, want)
		}
	}
	if First(h, "user-agent") != "" {
		t.Error("First canonicalized a name not in canonical form")
	}
}
