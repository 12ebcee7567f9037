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

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/ongoing"
)

type ctxKey struct{}

// TestAfterEnd: ongoing.AfterEnd on the context of a request of the
// loop (or one only carrying values more) costs no allocation and runs
// its function when the client leaves or else when the handler returns,
// not once stopped; on a context derived with an end of its own it is
// context.AfterFunc, and for a second function the request context's
// AfterFunc, which run them when their context ends.
func TestAfterEnd(t *testing.T) {
	type outcome struct {
		stopped, ranInHandler bool
		allocs                float64
	}
	results := make(chan outcome, 1)
	ran := make(chan string, 4)
	_, addr, _ := serve(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var o outcome
		ctx := context.WithValue(r.Context(), ctxKey{}, 1)
		wait := func(ch <-chan struct{}) bool {
			select {
			case <-ch:
				return true
			case <-time.After(testkit.Slack(5 * time.Second)):
				return false
			}
		}
		switch r.URL.Path {
		case "/stopped":
			f := func() { ran <- "stopped" }
			o.allocs = testing.AllocsPerRun(100, func() { ongoing.AfterEnd(ctx, f)() })
			stop := ongoing.AfterEnd(ctx, f)
			o.stopped = stop() && !stop()
		case "/at-return":
			ongoing.AfterEnd(ctx, func() { ran <- "at-return" })
		case "/gone":
			arrived := make(chan struct{})
			ongoing.AfterEnd(ctx, func() { close(arrived) })
			w.WriteHeader(http.StatusAccepted)
			w.(http.Flusher).Flush()
			o.ranInHandler = wait(arrived)
		case "/derived":
			derived, cancel := context.WithCancel(r.Context())
			arrived := make(chan struct{})
			ongoing.AfterEnd(derived, func() { close(arrived) })
			cancel()
			o.ranInHandler = wait(arrived)
		case "/second":
			ongoing.AfterEnd(r.Context(), func() { ran <- "first" })
			ongoing.AfterEnd(r.Context(), func() { ran <- "second" })
		}
		results <- o
	})})

	get := func(path string) {
		t.Helper()
		c, br := dial(t, addr)
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: a\r\n\r\n")
		readResponse(t, c, br)
	}
	ranNext := func(want ...string) {
		t.Helper()
		var got []string
		for range want {
			select {
			case name := <-ran:
				got = append(got, name)
			case <-time.After(testkit.Slack(5 * time.Second)):
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("functions run: %q, want %q", got, want)
		}
	}
	// outcomeOf is the handler's outcome for path, sent once it returns.
	outcomeOf := func(path string) outcome {
		t.Helper()
		return testkit.Recv(t, results, 30*time.Second, path+"'s outcome")
	}
	get("/stopped")
	if o := outcomeOf("/stopped"); !o.stopped || o.allocs != 0 {
		t.Errorf("/stopped: %+v, want stopped once, no allocation", o)
	}
	get("/at-return")
	outcomeOf("/at-return")
	ranNext("at-return")

	c, br := dial(t, addr)
	io.WriteString(c, "GET /gone HTTP/1.1\r\nHost: a\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := br.ReadString('\n'); err != nil || line != "HTTP/1.1 202 Accepted\r\n" {
		t.Fatalf("/gone: %q %v", line, err)
	}
	c.Close()
	if o := outcomeOf("/gone"); !o.ranInHandler {
		t.Errorf("/gone: not run while the handler waited")
	}

	get("/derived")
	if o := outcomeOf("/derived"); !o.ranInHandler {
		t.Errorf("/derived: not run when the derived context ended")
	}
	get("/second")
	outcomeOf("/second")
	ranNext("first", "second")
	select {
	case name := <-ran:
		t.Errorf("%s's function ran after all", name)
	default:
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
		goroutines     int // started while deriving: a goroutine of an earlier test ending counts less
		stopFailed     bool
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
		d.stopFailed = !stop()
		got <- d
	})
	_, addr, _ := serve(t, srv)
	c, br := dial(t, addr)
	io.WriteString(c, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
	readResponse(t, c, br)
	d := testkit.Recv(t, got, 30*time.Second, "the handler's contexts")
	if d.errDuring != nil {
		t.Errorf("Err during the handler: %v", d.errDuring)
	}
	if want := []any{"conn", true, true}; !slices.Equal(d.values, want) {
		t.Errorf("values %v, want %v", d.values, want)
	}
	if d.goroutines > 0 {
		t.Errorf("deriving 52 contexts and two AfterFuncs started %d goroutines, want none", d.goroutines)
	}
	if d.stopFailed {
		t.Error("stopping an AfterFunc before the request ended failed")
	}
	select {
	case <-d.done:
	case <-time.After(testkit.Slack(5 * time.Second)):
		t.Error("the request's Done channel still open 5 s (stretched by the pace) after the handler returned")
	}
	for name, ctx := range map[string]context.Context{"WithCancel": d.child, "WithTimeout": d.timeout} {
		select {
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), context.Canceled) {
				t.Errorf("%s child: Err %v, Cause %v, want context.Canceled", name, ctx.Err(), context.Cause(ctx))
			}
		case <-time.After(testkit.Slack(5 * time.Second)):
			t.Errorf("%s child not done 5 s after the handler returned", name)
		}
	}
	select {
	case <-d.afterRan:
	case <-time.After(testkit.Slack(5 * time.Second)):
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
			case <-time.After(testkit.Slack(5 * time.Second)):
				ended <- errors.New("not ended")
			}
		})})
	c, _ := dial(t, addr)
	io.WriteString(c, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
	testkit.Recv(t, entered, 30*time.Second, "the request at the handler")
	cancel(errors.New("base ended"))
	if err := testkit.Recv(t, ended, 30*time.Second, "the handler's end"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the request's context ended with %v, want context.Canceled", err)
	}
}
