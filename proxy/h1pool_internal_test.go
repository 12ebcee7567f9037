package proxy

import (
	"net"
	"testing"
	"time"
)

// TestArmHeaderDeadline: a connection's response-head deadline is set
// anew only when the one set last would end the wait too soon, or too
// late for the timeout in force: after a reload that shortened
// response_header_timeout, a connection the pools share must not keep the
// old, longer deadline.
func TestArmHeaderDeadline(t *testing.T) {
	nc, peer := net.Pipe()
	defer nc.Close()
	defer peer.Close()
	c := &h1Conn{nc: nc}
	t0 := time.Now()
	for _, step := range []struct {
		name  string
		start time.Duration // after t0
		rht   time.Duration
		want  time.Duration // the deadline after t0
	}{
		{"first", 0, 16 * time.Second, 17 * time.Second},
		{"soon after: kept", 500 * time.Millisecond, 16 * time.Second, 17 * time.Second},
		{"within the slack: kept", time.Second, 16 * time.Second, 17 * time.Second},
		{"past it: set anew", 1100 * time.Millisecond, 16 * time.Second, 18100 * time.Millisecond},
		{"a shorter timeout: set anew", 1200 * time.Millisecond, 1600 * time.Millisecond, 2900 * time.Millisecond},
		{"a longer one: set anew", 1300 * time.Millisecond, 16 * time.Second, 18300 * time.Millisecond},
	} {
		c.armHeaderDeadline(t0.Add(step.start), step.rht)
		if got := c.rdl.Sub(t0); got != step.want {
			t.Errorf("%s: deadline t0+%v, want t0+%v", step.name, got, step.want)
		}
	}
}
