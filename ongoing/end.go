package ongoing

import "context"

// AfterEnd arranges for f to run on a goroutine of its own once the
// request whose context is ctx has ended (its client left, or its handler
// returned) or ctx has otherwise ended, as context.AfterFunc(ctx, f)
// does; stop stops it and reports whether it did, as context.AfterFunc's
// stop. It is the one way the gateway's layers act on a request's end.
//
// It costs nothing on a server whose request contexts carry an Ender
// that takes f (h1serve's loop), where context.AfterFunc costs five
// allocations; on a RequestContext itself (h2serve's requests), one;
// anywhere else it is context.AfterFunc.
func AfterEnd(ctx context.Context, f func()) (stop func() bool) {
	if e, ok := ctx.Value(enderKey{}).(Ender); ok {
		if stop, ok := e.AfterEnd(ctx, f); ok {
			return stop
		}
	}
	if x, ok := ctx.(*RequestContext); ok {
		return x.AfterFunc(f)
	}
	return context.AfterFunc(ctx, f)
}

// Ender is a server that runs a function at the end of a request it
// serves at less cost than context.AfterFunc: AfterEnd asks the Ender
// that the request's context carries (WithEnder) first.
type Ender interface {
	// AfterEnd arranges f as AfterEnd does and reports whether it could:
	// not when ctx is not the context of a request it serves now, or is
	// derived from one with an end of its own, or when it takes one
	// function per request and has one already. stop is good until the
	// request ends.
	AfterEnd(ctx context.Context, f func()) (stop func() bool, ok bool)
}

type enderKey struct{}

// WithEnder returns ctx carrying e: a server puts its Ender in the
// contexts of the requests it serves, for AfterEnd to find.
func WithEnder(ctx context.Context, e Ender) context.Context {
	return context.WithValue(ctx, enderKey{}, e)
}
