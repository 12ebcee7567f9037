package proxy

import (
	"context"
	"net"
	"testing"
)

// TestLateAbortSparesTheNextExchange: an exchange whose context ends just
// as it finishes (a health check timing out) has its abort started on a
// goroutine of its own, too late to stop. That abort, however late it
// runs, must not reach the connection of the exchange that takes the
// pooled scratch next: its read still succeeds.
func TestLateAbortSparesTheNextExchange(t *testing.T) {
	for i := range 20 {
		st := h1States.Get().(*h1State)
		first, _ := net.Pipe()
		defer first.Close()
		st.conn.Store(&h1Conn{nc: first})
		ctx, cancel := context.WithCancel(context.Background())
		late := make(chan struct{})
		ran := make(chan struct{})
		stop := context.AfterFunc(ctx, func() { <-late; st.cancel(); close(ran) })
		cancel() // the context ends as the exchange finishes
		if st.disarm(stop) {
			t.Fatal("disarm stopped an abort that had started")
		}
		st.conn.Store(nil)
		st.release()

		next := h1States.Get().(*h1State)
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		next.conn.Store(&h1Conn{nc: a})
		close(late) // the first exchange's abort runs now
		<-ran
		go b.Write([]byte("x"))
		if _, err := a.Read(make([]byte, 1)); err != nil {
			t.Fatalf("round %d: the next exchange's read failed: %v (the late abort reached its connection)", i, err)
		}
		next.conn.Store(nil)
		next.release()
	}
}
