package h2guard

import "net/http"

// grownStack serves each stream after growing its goroutine's stack once,
// at the stream's shallowest. x/net/http2 runs every stream's handler on a
// new goroutine whose stack starts small; the gateway's handler needs more
// than 8 kB, so the stack was copied on the way down, deep in the proxy,
// every frame below walked and adjusted: 15 % of an HTTP/2 gateway's CPU
// (docs/benchmarks.md). Grown here, the copy walks a few frames.
type grownStack struct{ h http.Handler }

func (g grownStack) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	growStack()
	g.h.ServeHTTP(w, r)
}

// stackIndex is read by growStack so that its frame is kept.
var stackIndex int

// growStack has a frame of 8 kB: calling it grows a smaller stack to
// 16 kB, which the handler then keeps until it returns.
//
//go:noinline
func growStack() byte {
	var b [8 << 10]byte
	b[stackIndex] = 1
	return b[len(b)-1-stackIndex]
}
