package h2serve_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/linkgate/linkgate/h2serve"
	"github.com/linkgate/linkgate/ongoing"
)

type ctxKey struct{}

// derived is what a handler derived from its request's context, for the
// test to look at once the request ended.
type derived struct {
	child, timeout context.Context
	errDuring      error
	values         []any
	startNoted     bool
	goroutines     int // started while deriving
	stopFailed     bool
	afterEndAllocs float64
	afterRan       chan struct{}
	afterEndRan    chan struct{}
	stoppedRan     chan struct{}
	cancels        []context.CancelFunc
}

// derive derives from r's context what TestRequestContext looks at.
func derive(r *http.Request) *derived {
	d := &derived{afterRan: make(chan struct{}), afterEndRan: make(chan struct{}), stoppedRan: make(chan struct{})}
	ctx := r.Context()
	d.errDuring = ctx.Err()
	d.values = []any{ctx.Value(ctxKey{}), ctx.Value(http.ServerContextKey) != nil, ctx.Value(http.LocalAddrContextKey) != nil}
	_, d.startNoted = ctx.Value(ongoing.StartKey{}).(*time.Time)
	f := func() {}
	d.afterEndAllocs = testing.AllocsPerRun(100, func() { ongoing.AfterEnd(ctx, f)() })
	before := runtime.NumGoroutine()
	var cancel context.CancelFunc
	d.child, cancel = context.WithCancel(ctx)
	d.cancels = append(d.cancels, cancel)
	d.timeout, cancel = context.WithTimeout(ctx, time.Hour)
	d.cancels = append(d.cancels, cancel)
	context.AfterFunc(ctx, func() { close(d.afterRan) })
	ongoing.AfterEnd(ctx, func() { close(d.afterEndRan) })
	stop := context.AfterFunc(ctx, func() { close(d.stoppedRan) })
	d.goroutines = runtime.NumGoroutine() - before
	d.stopFailed = !stop()
	return d
}

// check checks d once its request ended: every derived context ended
// with context.Canceled and the functions not stopped ran.
func (d *derived) check(t *testing.T) {
	t.Helper()
	defer func() {
		for _, cancel := range d.cancels {
			cancel()
		}
	}()
	if d.errDuring != nil || !d.startNoted || d.goroutines > 0 || d.stopFailed || d.afterEndAllocs > 1 {
		t.Errorf("during the handler: Err %v, start noted %v, %d goroutines started, stop failed %v, ongoing.AfterEnd %v allocations; want nil, true, 0, false, at most 1",
			d.errDuring, d.startNoted, d.goroutines, d.stopFailed, d.afterEndAllocs)
	}
	for name, ctx := range map[string]context.Context{"WithCancel": d.child, "WithTimeout": d.timeout} {
		select {
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.Canceled) {
				t.Errorf("%s child: Err %v, want context.Canceled", name, ctx.Err())
			}
		case <-time.After(wait):
			t.Errorf("%s child not done after the request ended", name)
		}
	}
	for name, ran := range map[string]chan struct{}{"context.AfterFunc": d.afterRan, "ongoing.AfterEnd": d.afterEndRan} {
		select {
		case <-ran:
		case <-time.After(wait):
			t.Errorf("%s's function did not run after the request ended", name)
		}
	}
	select {
	case <-d.stoppedRan:
		t.Error("a stopped AfterFunc ran")
	case <-time.After(50 * time.Millisecond):
	}
}

// TestRequestContext: a request's context (an ongoing.RequestContext)
// carries the connection's values and the request's start; contexts
// derived from it, context.AfterFunc's and ongoing.AfterEnd's functions
// cost no goroutine while it runs, and end or run when the handler
// returns, when the client resets the stream, and when the connection's
// base context ends.
func TestRequestContext(t *testing.T) {
	got := make(chan *derived, 1)
	entered := make(chan struct{}, 1)
	var srv *h2serve.Server
	srv = &h2serve.Server{
		ConnContext: func(ctx context.Context, _ net.Conn) context.Context {
			return context.WithValue(ctx, ctxKey{}, "conn")
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got <- derive(r)
			if r.URL.Path == "/wait" {
				entered <- struct{}{}
				<-r.Context().Done()
			}
		}),
	}
	ts := start(t, false, srv.Handler, func(s *h2serve.Server) { s.ConnContext = srv.ConnContext })
	srv = ts.srv

	t.Run("returned", func(t *testing.T) {
		do(t, ts, newRequest(t, "GET", ts.url("/x"), nil))
		d := <-got
		if want := []any{"conn", true, true}; !slices.Equal(d.values, want) {
			t.Errorf("values %v, want %v", d.values, want)
		}
		d.check(t)
	})
	t.Run("reset", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := ts.client.Do(newRequest(t, "GET", ts.url("/wait"), nil).WithContext(ctx))
			errc <- err
		}()
		d := <-got
		<-entered
		cancel()
		d.check(t)
		<-errc
	})
	t.Run("base ended", func(t *testing.T) {
		base, cancel := context.WithCancel(context.Background())
		c1, c2 := net.Pipe()
		defer c1.Close()
		go srv.ServeConn(base, c1, false)
		tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return c2, nil }}
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr.Protocols = &p
		defer tr.CloseIdleConnections()
		errc := make(chan error, 1)
		go func() {
			_, err := (&http.Client{Transport: tr}).Do(newRequest(t, "GET", "http://pipe/wait", nil))
			errc <- err
		}()
		d := <-got
		<-entered
		cancel()
		d.check(t)
		c2.Close()
		<-errc
	})
}
