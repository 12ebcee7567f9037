package ongoing

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// RequestContext is the context of a request a server's loop serves
// (h1serve's, h2serve's): its parent's values (the connection's), its
// start under StartKey, done with context.Canceled once Cancel is called
// (the handler returned, the client left, the stream was reset). It is what
// context.WithCancel of the parent gives, without that one's two
// allocations and its cancelation's work: it sits in what the server
// allocates for the request anyway, and registers the functions of
// context.AfterFunc and the cancelation of contexts derived from it with
// its AfterFunc method, which the context package uses for a parent of a
// type of its own (no goroutine either).
//
// It does not end with its parent: a server whose connection's context
// can end calls Cancel then. Init readies the zero value; a
// RequestContext is not copied once used. Safe for concurrent use.
type RequestContext struct {
	parent context.Context // the connection's
	start  time.Time       // when the request began (StartKey)

	ended atomic.Bool
	done  atomic.Value // chan struct{}, made by Done
	mu    sync.Mutex
	funcs []*afterFunc // AfterFunc's, not stopped nor run
	// A function of AfterFunc's and the first two entries of funcs, in
	// place: a request has one or two (AfterEnd's, a derived context's).
	first      afterFunc
	firstTaken bool // by a function not stopped
	inline     [2]*afterFunc
	gen        uint64 // AfterFunc's calls, which tell the uses of first apart
}

type afterFunc struct {
	f   func()
	gen uint64
}

// Init readies x as the context of a request begun at start on the
// connection whose context is parent.
func (x *RequestContext) Init(parent context.Context, start time.Time) {
	x.parent, x.start = parent, start
}

// Deadline is the parent's.
func (x *RequestContext) Deadline() (time.Time, bool) { return x.parent.Deadline() }

// Done is closed once x is canceled.
func (x *RequestContext) Done() <-chan struct{} {
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

// Value holds the request's start under StartKey, and the parent's
// values.
func (x *RequestContext) Value(key any) any {
	if _, ok := key.(StartKey); ok {
		return &x.start
	}
	return x.parent.Value(key)
}

// Err is context.Canceled once x is canceled, else nil.
func (x *RequestContext) Err() error {
	if x.ended.Load() {
		return context.Canceled
	}
	return nil
}

// Cancel ends x: Done's channel closes, and each AfterFunc function
// starts on a goroutine of its own. Later calls do nothing.
func (x *RequestContext) Cancel() {
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
func (x *RequestContext) AfterFunc(f func()) (stop func() bool) {
	x.mu.Lock()
	if x.ended.Load() {
		x.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	a := &x.first
	if x.firstTaken {
		a = &afterFunc{}
	}
	x.gen++
	a.f, a.gen = f, x.gen
	x.firstTaken = x.firstTaken || a == &x.first
	if x.funcs == nil {
		x.funcs = x.inline[:0]
	}
	x.funcs = append(x.funcs, a)
	x.mu.Unlock()
	gen := a.gen
	return func() bool {
		x.mu.Lock()
		defer x.mu.Unlock()
		i := slices.Index(x.funcs, a)
		if i < 0 || a.gen != gen { // run, stopped, or first taken again since
			return false
		}
		x.funcs = slices.Delete(x.funcs, i, i+1)
		if a == &x.first {
			x.firstTaken = false
		}
		return true
	}
}
