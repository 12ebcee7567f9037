package h1serve_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
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

// TestRequestContext: a request's context carries the connection's
// values, ends with context.Canceled when the handler returns, and ends
// what was derived from it then; contexts derived from it and
// context.AfterFunc's functions cost no goroutine while it runs.
func TestRequestContext(t *testing.T) {
	type derived struct {
		child, timeout context.Context
		done           <-chan struct{}
		errDuring      error
		values         []any
		goroutines     int
		afterRan       chan struct{}
		stoppedRan     chan struct{}
	}
	got := make(chan derived, 1)
	srv := &http.Server{ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
		return context.WithValue(ctx, ctxKey{}, "conn")
	}}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := derived{afterRan: make(chan struct{}), stoppedRan: make(chan struct{})}
		ctx := r.Context()
		d.errDuring = ctx.Err()
		d.done = ctx.Done()
		d.values = []any{ctx.Value(ctxKey{}), ctx.Value(http.ServerContextKey) == srv, ctx.Value(http.LocalAddrContextKey) != nil}
		before := runtime.NumGoroutine()
		// Their cancels run only once the test has looked: the request's
		// end must end them.
		var cancels [52]context.CancelFunc
		d.child, cancels[0] = context.WithCancel(ctx)
		d.timeout, cancels[1] = context.WithTimeout(ctx, time.Hour)
		for i := 2; i < len(cancels); i++ {
			_, cancels[i] = context.WithCancel(ctx)
		}
		t.Cleanup(func() {
			for _, cancel := range cancels {
				cancel()
			}
		})
		context.AfterFunc(ctx, func() { close(d.afterRan) })
		stop := context.AfterFunc(ctx, func() { close(d.stoppedRan) })
		d.goroutines = runtime.NumGoroutine() - before
		if !stop() {
			d.goroutines = -1
		}
		got <- d
	})
	_, addr, _ := serve(t, srv)
	c, br := dial(t, addr)
	io.WriteString(c, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
	readResponse(t, c, br)
	d := <-got
	if d.errDuring != nil {
		t.Errorf("Err during the handler: %v", d.errDuring)
	}
	if want := []any{"conn", true, true}; !slices.Equal(d.values, want) {
		t.Errorf("values %v, want %v", d.values, want)
	}
	if d.goroutines != 0 {
		t.Errorf("deriving 52 contexts and two AfterFuncs changed the goroutines by %d, want 0 (-1: stop failed)", d.goroutines)
	}
	select {
	case <-d.done:
	case <-time.After(5 * time.Second):
		t.Error("the request's Done channel still open 5 s after the handler returned")
	}
	for name, ctx := range map[string]context.Context{"WithCancel": d.child, "WithTimeout": d.timeout} {
		select {
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), context.Canceled) {
				t.Errorf("%s child: Err %v, Cause %v, want context.Canceled", name, ctx.Err(), context.Cause(ctx))
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s child not done 5 s after the handler returned", name)
		}
	}
	select {
	case <-d.afterRan:
	case <-time.After(5 * time.Second):
		t.Error("context.AfterFunc's function did not run after the handler returned")
	}
	select {
	case <-d.stoppedRan:
		t.Error("a stopped AfterFunc ran")
	case <-time.After(50 * time.Millisecond):
	}
}

// TestRequestContextEndsWithTheBase: a request's context ends when
// BaseContext's does, as one of net/http's.
func TestRequestContextEndsWithTheBase(t *testing.T) {
	base, cancel := context.WithCancelCause(context.Background())
	ended := make(chan error, 1)
	entered := make(chan struct{})
	_, addr, _ := serve(t, &http.Server{BaseContext: func(net.Listener) context.Context { return base },
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			select {
			case <-r.Context().Done():
				ended <- r.Context().Err()
			case <-time.After(5 * time.Second):
				ended <- errors.New("not ended")
			}
		})})
	c, _ := dial(t, addr)
	io.WriteString(c, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
	<-entered
	cancel(errors.New("base ended"))
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Fatalf("the request's context ended with %v, want context.Canceled", err)
	}
}
