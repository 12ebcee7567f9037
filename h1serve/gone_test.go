package h1serve_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/linkgate/linkgate/h1serve"
)

type ctxKey struct{}

// TestAfterGone: AfterGone arranges a function as context.AfterFunc does
// for the request's own context (or one only carrying values more), runs
// it when the client leaves or else when the handler returns, not once
// stopped; it declines a context with an end of its own, one not of a
// request of the loop, and a second function.
func TestAfterGone(t *testing.T) {
	type outcome struct {
		ok, stopped, ranInHandler bool
		declined                  []string
	}
	results := make(chan outcome, 1)
	ran := make(chan string, 4)
	_, addr, _ := serve(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var o outcome
		ctx := context.WithValue(r.Context(), ctxKey{}, 1)
		switch r.URL.Path {
		case "/stopped":
			stop, ok := h1serve.AfterGone(ctx, func() { ran <- "stopped" })
			o.ok = ok
			o.stopped = ok && stop() && !stop()
		case "/at-return":
			_, o.ok = h1serve.AfterGone(ctx, func() { ran <- "at-return" })
		case "/gone":
			arrived := make(chan struct{})
			_, o.ok = h1serve.AfterGone(ctx, func() { close(arrived) })
			w.WriteHeader(http.StatusAccepted)
			w.(http.Flusher).Flush()
			select {
			case <-arrived:
				o.ranInHandler = true
			case <-time.After(5 * time.Second):
			}
		case "/declined":
			derived, cancel := context.WithCancel(r.Context())
			defer cancel()
			if _, ok := h1serve.AfterGone(derived, func() {}); ok {
				o.declined = append(o.declined, "a context with an end of its own was taken")
			}
			if _, ok := h1serve.AfterGone(context.Background(), func() {}); ok {
				o.declined = append(o.declined, "a context of no request was taken")
			}
			stop, ok := h1serve.AfterGone(r.Context(), func() {})
			if _, again := h1serve.AfterGone(r.Context(), func() {}); !ok || again {
				o.declined = append(o.declined, "a second function was taken, or the first was not")
			}
			if ok {
				stop()
			}
		}
		results <- o
	})})

	get := func(path string) {
		t.Helper()
		c, br := dial(t, addr)
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: a\r\n\r\n")
		readResponse(t, c, br)
	}
	get("/stopped")
	if o := <-results; !o.ok || !o.stopped {
		t.Errorf("/stopped: %+v, want taken and stopped once", o)
	}
	get("/at-return")
	if o := <-results; !o.ok {
		t.Errorf("/at-return: not taken")
	}
	select {
	case name := <-ran:
		if name != "at-return" {
			t.Errorf("%s's function ran", name)
		}
	case <-time.After(5 * time.Second):
		t.Error("a function not stopped did not run when the handler returned")
	}

	c, br := dial(t, addr)
	io.WriteString(c, "GET /gone HTTP/1.1\r\nHost: a\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := br.ReadString('\n'); err != nil || line != "HTTP/1.1 202 Accepted\r\n" {
		t.Fatalf("/gone: %q %v", line, err)
	}
	c.Close()
	if o := <-results; !o.ok || !o.ranInHandler {
		t.Errorf("/gone: %+v, want taken and run while the handler waited", o)
	}

	get("/declined")
	if o := <-results; len(o.declined) > 0 {
		t.Errorf("/declined: %v", o.declined)
	}
	select {
	case name := <-ran:
		t.Errorf("%s's function ran after all", name)
	case <-time.After(50 * time.Millisecond):
	}
}
