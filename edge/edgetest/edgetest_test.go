package edgetest

import (
	"net"
	"strconv"
	"strings"
	"testing"
)

// TestStartPebbleRetriesATakenPort: the management port picked for the
// first pebble is held by another listener, as when another process takes
// it between FreePort and pebble's bind. That pebble exits; StartPebble
// starts another on new ports and returns it, with its own root and log.
func TestStartPebbleRetriesATakenPort(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := held.Addr().(*net.TCPAddr).Port
	calls := 0
	orig := pebblePort
	pebblePort = func(t testing.TB) int {
		calls++
		if calls == 2 { // the first attempt's management port
			return taken
		}
		return orig(t)
	}
	t.Cleanup(func() { pebblePort = orig })

	p := StartPebble(t, PebbleOptions{})
	if calls != 4 {
		t.Errorf("%d ports picked, want 4 (two attempts)", calls)
	}
	if len(p.RootPEM) == 0 || strings.Contains(p.Log(), "address already in use") || strings.Contains(p.Log(), ":"+strconv.Itoa(taken)) {
		t.Errorf("the pebble returned is not the second one (root %d bytes), its log:\n%s", len(p.RootPEM), p.Log())
	}
}
