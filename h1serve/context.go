package h1serve

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linkgate/linkgate/ongoing"
)

// reqContext is the context of a request the loop serves: the
// connection's values (ConnContext's, the server and the local address),
// done with context.Canceled once the handler has returned or the client
// has left. It is what context.WithCancel of the connection's context
// gives, without that one's two allocations and its cancelation's work:
// it sits in the request's exchange, and registers the functions of
// context.AfterFunc and the cancelation of contexts derived from it with
// its AfterFunc method, which the context package uses for a parent of a
// type of its own (no goroutine either).
type reqContext struct {
	context.Context // the connection's

	start time.Time // when the request began (ongoing.StartKey)

	ended atomic.Bool
	done  atomic.Value // chan struct{}, made by Done
	mu    sync.Mutex
	funcs []*afterFunc // AfterFunc's, not stopped nor run
}

type afterFunc struct{ f func() }

func (x *reqContext) Done() <-chan struct{} {
	if d := x.done.Load(); d != nil {
		return d.(chan struct{})
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	d, _ := x.done.Load().(chan struct{})
	if d == nil {
		d = make(chan struct{})
		if x.ended.Load() {
			close(d)
		}
		x.done.Store(d)
	}
	return d
}

// Value holds the request's start under ongoing.StartKey, and the
// connection's values.
func (x *reqContext) Value(key any) any {
	if _, ok := key.(ongoing.StartKey); ok {
		return &x.start
	}
	return x.Context.Value(key)
}

func (x *reqContext) Err() error {
	if x.ended.Load() {
		return context.Canceled
	}
	return nil
}

// cancel ends x: Done's channel closes, and each AfterFunc function
// starts on a goroutine of its own.
func (x *reqContext) cancel() {
	if x.ended.Load() {
		return
	}
	x.mu.Lock()
	if x.ended.Load() {
		x.mu.Unlock()
		return
	}
	x.ended.Store(true)
	if d, _ := x.done.Load().(chan struct{}); d != nil {
		close(d)
	}
	funcs := x.funcs
	x.funcs = nil
	x.mu.Unlock()
	for _, a := range funcs {
		go a.f()
	}
}

// AfterFunc arranges for f to run on a goroutine of its own once x ends,
// as context.AfterFunc does; stop stops it and says whether it did.
func (x *reqContext) AfterFunc(f func()) (stop func() bool) {
	a := &afterFunc{f: f}
	x.mu.Lock()
	if x.ended.Load() {
		x.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	x.funcs = append(x.funcs, a)
	x.mu.Unlock()
	return func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		i := slices.Index(x.funcs, a)
		if i < 0 {
			return false
		}
		x.funcs = slices.Delete(x.funcs, i, i+1)
		return true
	}
}
