package h1serve

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// scanTest serves a handler that waits for its context to end (at most a
// minute) and reports how it ended on the channel returned.
// The scanner ends after every scan that finds no handler running.
func scanTest(t *testing.T, began chan<- struct{}, ends func()) (*Server, string, <-chan error) {
	ended := make(chan error, 1)
	s := New(&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if began != nil {
			began <- struct{}{}
		}
		select {
		case <-r.Context().Done():
			ended <- r.Context().Err()
		case <-time.After(time.Minute):
			ended <- errors.New("the context was not canceled")
		}
	})})
	s.scanIdle, s.scanEnds = 1, ends
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	return s, ln.Addr().String(), ended
}

// hangUpAfter sends a request to addr and hangs up d later.
func hangUpAfter(t *testing.T, addr string, d time.Duration) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Error(err)
		return
	}
	io.WriteString(c, "GET /x HTTP/1.1\r\nHost: a\r\n\r\n")
	time.Sleep(d)
	c.Close()
}

// TestScannerMissesNoHandler: a handler that begins as the scanner
// decides to end, having seen it still running, is watched all the same:
// its client hangs up 40 ms into the request, and its context must end.
func TestScannerMissesNoHandler(t *testing.T) {
	began := make(chan struct{}, 1)
	var once sync.Once
	var addr string
	ready := make(chan struct{})
	s, addr, ended := scanTest(t, began, func() {
		once.Do(func() {
			<-ready
			go hangUpAfter(t, addr, 40*time.Millisecond)
			<-began // the handler has begun before the scanner says it ends
		})
	})
	close(ready)
	s.scanning() // as a request would
	if err := testkit.Recv(t, ended, time.Minute, "the scan ending"); !errors.Is(err, context.Canceled) {
		t.Fatalf("the handler ended with %v, want context.Canceled", err)
	}
	// And the scanner ends once no handler runs.
	deadline := time.Now().Add(testkit.Slack(2 * time.Second))
	for s.scanner.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the scanner still runs with no handler running")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestScannerEndsAndStartsAgain: with the scanner ending after every scan
// that finds no handler running, each request that follows is watched.
func TestScannerEndsAndStartsAgain(t *testing.T) {
	s, addr, ended := scanTest(t, nil, nil)
	for i := range 20 {
		if i%2 == 0 { // every other request begins with the scanner ended
			deadline := time.Now().Add(testkit.Slack(2 * time.Second))
			for s.scanner.Load() {
				if time.Now().After(deadline) {
					t.Fatal("the scanner still runs with no handler running")
				}
				time.Sleep(time.Millisecond)
			}
		} else { // the others at another point of its end
			time.Sleep(time.Duration(i%4) * scanEvery / 2)
		}
		hangUpAfter(t, addr, 40*time.Millisecond)
		if err := testkit.Recv(t, ended, time.Minute, "the scan ending"); !errors.Is(err, context.Canceled) {
			t.Fatalf("request %d: the handler ended with %v, want context.Canceled", i, err)
		}
	}
}
