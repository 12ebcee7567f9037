package memcached

import (
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/limit"
)

// TestIncrAllBadAnswer: an answer that is no answer to an incr (here the
// ERROR a server sends for a command it does not know) fails every
// increment of the send, to go back to pending; it counts against the
// server, and the connection is closed, never read again.
func TestIncrAllBadAnswer(t *testing.T) {
	t.Parallel()
	f := startFake(t) // answers ERROR to anything but get
	sv, reg := readerStore(t, f.addr, time.Second, 1)
	c := limit.Counter{Rule: "fake", Value: "x"}
	ds := []delta{{level: limit.Minute, start: 60, n: 2, ttl: time.Minute}, {level: limit.Hour, start: 0, n: 2, ttl: time.Hour}}
	if failed := sv.incrAll(c, ds); len(failed) != 2 {
		t.Errorf("incrAll failed %v, want both deltas back", failed)
	}
	if n := testkit.Metric(t, reg, "linkgate_memcached_errors_total", "server", f.addr, "op", opIncr); n != 1 {
		t.Errorf("%v incr errors counted, want 1", n)
	}
	testkit.Eventually(t, 2*time.Second, "the connection closed", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.closed) == 1
	})
}

// TestIncrAnswer: the answers an incr or an add may get.
func TestIncrAnswer(t *testing.T) {
	for _, tc := range []struct {
		op, line string
		want     outcome
		ok       bool
	}{
		{opIncr, "12\r\n", applied, true},
		{opIncr, "12  \r\n", applied, true},
		{opIncr, "NOT_FOUND\r\n", next, true},
		{opIncr, "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n", dropped, true},
		{opIncr, "STORED\r\n", 0, false},
		{opIncr, "12", 0, false},
		{opIncr, "\r\n", 0, false},
		{opIncr, "1x\r\n", 0, false},
		{opIncr, "SERVER_ERROR out of memory\r\n", 0, false},
		{opIncr, "ERROR\r\n", 0, false},
		{opAdd, "STORED\r\n", applied, true},
		{opAdd, "NOT_STORED\r\n", next, true},
		{opAdd, "NOT_FOUND\r\n", 0, false},
		{opAdd, "12\r\n", 0, false},
	} {
		if got, ok := incrAnswer(tc.op, []byte(tc.line)); got != tc.want || ok != tc.ok {
			t.Errorf("%s answered %q: %v %v, want %v %v", tc.op, tc.line, got, ok, tc.want, tc.ok)
		}
	}
}
