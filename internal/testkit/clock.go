package testkit

import (
	"sync/atomic"
	"time"
)

// Clock is a time a test moves by hand, for the code under test to read
// through its Now method in place of time.Now. Safe for concurrent use.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a Clock at t.
func NewClock(t time.Time) *Clock {
	c := &Clock{}
	c.Set(t)
	return c
}

// Now is the clock's time, in UTC.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// Set puts the clock at t.
func (c *Clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// Advance moves the clock d on (back for a negative d).
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
