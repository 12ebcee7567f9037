package h1serve

import (
	"context"

	"github.com/linkgate/linkgate/ongoing"
)

var _ ongoing.Ender = (*conn)(nil)

// AfterEnd is the loop's ongoing.Ender, which every request context of
// the connection carries: context.AfterFunc for the context of the
// request it serves, without its cost (five allocations for every call).
// f runs on a goroutine of its own once the client has left or the
// handler has returned, unless stop (which says whether it stopped f)
// came first. stop is good until the handler returns.
//
// ok is false, and nothing is arranged, when ctx is not the context of
// the request the connection serves now, or is derived from it with an
// end of its own (its Done is not the request's), or when a function is
// arranged for the request already.
func (c *conn) AfterEnd(ctx context.Context, f func()) (stop func() bool, ok bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	// ctx == c.req first: Done makes the context's channel, which a
	// request that ends normally never needs.
	if c.req == nil || c.hook != nil || ctx != context.Context(c.req) && ctx.Done() != c.req.Done() {
		return nil, false
	}
	c.hook = f
	if c.req.Err() != nil { // ended already: f runs now
		c.runHook()
	}
	return c.stopHook, true
}

// unhook stops the function AfterEnd arranged; false when it ran or
// runs.
func (c *conn) unhook() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.hook == nil {
		return false
	}
	c.hook = nil
	return true
}
