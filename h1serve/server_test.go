package h1serve_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/h1serve"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/ongoing"
)

// serve starts an h1serve.Server on a loopback port; srv's Handler and
// timeouts apply.
func serve(t *testing.T, srv *http.Server) (*h1serve.Server, string, chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := h1serve.New(srv)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() { s.Close() })
	return s, ln.Addr().String(), served
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

const get = "GET /x HTTP/1.1\r\nHost: a\r\n\r\n"

func readResponse(t *testing.T, c net.Conn, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading a response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading a body: %v", err)
	}
	return resp, string(body)
}

// closedWithin reports whether the server closes c within d, stretched by
// the machine's pace.
func closedWithin(c net.Conn, br *bufio.Reader, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(testkit.Slack(d)))
	_, err := br.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestClientLeavingCancelsTheRequest: the request's context ends when the
// client hangs up, whether the watch was reading then (the handler had
// run over 20 ms) or starts after (its first read sees it).
func TestClientLeavingCancelsTheRequest(t *testing.T) {
	for _, tc := range []struct {
		name  string
		after time.Duration // from the request to the hang-up
	}{{"while the watch reads", 60 * time.Millisecond}, {"before the watch starts", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			ended := make(chan error, 1)
			_, addr, _ := serve(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-r.Context().Done():
					ended <- r.Context().Err()
				case <-time.After(time.Minute):
					ended <- errors.New("the context was not canceled")
				}
			})})
			c, _ := dial(t, addr)
			io.WriteString(c, get)
			time.Sleep(tc.after)
			c.Close()
			select {
			case err := <-ended:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("handler ended with %v, want context.Canceled", err)
				}
			case <-time.After(testkit.Slack(5 * time.Second)):
				t.Fatal("the handler still runs 5 s after the client left")
			}
		})
	}
}

func TestWatchKeepsAPipelinedRequest(t *testing.T) {
	// The second request arrives while the watch reads during the first:
	// its bytes stay for the loop, the first request is not canceled, and
	// both are answered in order.
	var n atomic.Int32
	_, addr, _ := serve(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			time.Sleep(150 * time.Millisecond)
		}
		if r.Context().Err() != nil {
			w.WriteHeader(http.StatusTeapot)
		}
		io.WriteString(w, r.URL.Path)
	})})
	c, br := dial(t, addr)
	io.WriteString(c, "GET /one HTTP/1.1\r\nHost: a\r\n\r\n")
	time.Sleep(60 * time.Millisecond)
	io.WriteString(c, "GET /two HTTP/1.1\r\nHost: a\r\n\r\n")
	for _, want := range []string{"/one", "/two"} {
		resp, body := readResponse(t, c, br)
		if resp.StatusCode != http.StatusOK || body != want {
			t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, body, want)
		}
	}
}

func TestWatchEndsWithTheHandler(t *testing.T) {
	// Slow handlers (the watch reads) on one connection, one after the
	// other: each stop of the watch must leave the connection readable
	// for the next request, with no request canceled.
	_, addr, _ := serve(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(30 * time.Millisecond)
		if r.Context().Err() != nil {
			w.WriteHeader(http.StatusTeapot)
		}
	})})
	c, br := dial(t, addr)
	for i := range 5 {
		io.WriteString(c, get)
		if resp, _ := readResponse(t, c, br); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %d, want 200", i, resp.StatusCode)
		}
	}
}

func TestIdleTimeout(t *testing.T) {
	_, addr, _ := serve(t, &http.Server{IdleTimeout: 100 * time.Millisecond,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})})
	c, br := dial(t, addr)
	io.WriteString(c, get)
	readResponse(t, c, br)
	start := time.Now()
	if !closedWithin(c, br, 3*time.Second) {
		t.Fatal("an idle connection stayed open past IdleTimeout")
	}
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Fatalf("closed after %v, before IdleTimeout", d)
	}
}

// TestIdleTimeoutCountsFromTheLastAnswer: the idle deadline is not set
// anew for every request (armIdle), yet a connection busy for longer than
// IdleTimeout stays open, and one idle after its last answer closes no
// sooner than IdleTimeout after it.
func TestIdleTimeoutCountsFromTheLastAnswer(t *testing.T) {
	// Stretched by the machine's pace: the client's requests, idle/8
	// apart, must come within it on a busy machine too.
	idle := testkit.Slack(160 * time.Millisecond)
	_, addr, _ := serve(t, &http.Server{IdleTimeout: idle,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})})
	c, br := dial(t, addr)
	var last time.Time
	for end := time.Now().Add(3 * idle); time.Now().Before(end); time.Sleep(idle / 8) {
		if _, err := io.WriteString(c, get); err != nil {
			t.Fatal(err)
		}
		readResponse(t, c, br)
		last = time.Now()
	}
	if !closedWithin(c, br, 3*time.Second) {
		t.Fatal("an idle connection stayed open past IdleTimeout")
	}
	if d := time.Since(last); d < idle-20*time.Millisecond {
		t.Fatalf("closed %v after the last answer, before IdleTimeout (%v)", d, idle)
	}
}

func TestReadHeaderTimeout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first bool // the slow head is the connection's first request
	}{{"first request", true}, {"later request", false}} {
		t.Run(tc.name, func(t *testing.T) {
			var served atomic.Int32
			_, addr, _ := serve(t, &http.Server{ReadHeaderTimeout: 150 * time.Millisecond, IdleTimeout: 10 * time.Second,
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) })})
			c, br := dial(t, addr)
			if !tc.first {
				io.WriteString(c, get)
				readResponse(t, c, br)
				time.Sleep(300 * time.Millisecond) // idle, well within IdleTimeout
			}
			io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: a\r\n")
			start := time.Now()
			if !closedWithin(c, br, 3*time.Second) {
				t.Fatal("a head that never ended kept the connection open past ReadHeaderTimeout")
			}
			if d := time.Since(start); d < 100*time.Millisecond {
				t.Fatalf("closed after %v, before ReadHeaderTimeout", d)
			}
			if want := int32(map[bool]int{true: 0, false: 1}[tc.first]); served.Load() != want {
				t.Fatalf("%d requests served, want %d", served.Load(), want)
			}
		})
	}
}

func TestWriteTimeout(t *testing.T) {
	werr := make(chan error, 1)
	_, addr, _ := serve(t, &http.Server{WriteTimeout: 200 * time.Millisecond,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			chunk := bytes.Repeat([]byte("x"), 64<<10)
			for range 4096 { // 256 MiB: more than the socket buffers hold
				if _, err := w.Write(chunk); err != nil {
					werr <- err
					return
				}
			}
			werr <- nil
		})})
	c, _ := dial(t, addr)
	io.WriteString(c, get) // and never read
	select {
	case err := <-werr:
		if err == nil {
			t.Fatal("256 MiB written to a client that reads nothing")
		}
	case <-time.After(testkit.Slack(10 * time.Second)):
		t.Fatal("a write still blocks 10 s after WriteTimeout")
	}
}

func TestShutdownDrains(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	s, addr, served := serve(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			select { // a test that failed first must not leave it waiting
			case <-release:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "done")
	})})
	idle, idleBR := dial(t, addr)
	io.WriteString(idle, get)
	readResponse(t, idle, idleBR)
	silent, silentBR := dial(t, addr) // connected, and says nothing
	busy, busyBR := dial(t, addr)
	io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	testkit.Recv(t, entered, 5*time.Second, "the request at the handler")

	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	if !closedWithin(idle, idleBR, 3*time.Second) {
		t.Fatal("Shutdown left an idle connection open")
	}
	if !closedWithin(silent, silentBR, 3*time.Second) {
		t.Fatal("Shutdown left open a connection that never sent a request")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with a request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("a new connection was accepted during Shutdown")
	}
	close(release)
	resp, body := readResponse(t, busy, busyBR)
	if body != "done" || !resp.Close {
		t.Fatalf("the request in flight got %q, close %v; want done, with Connection: close", body, resp.Close)
	}
	if err := testkit.Recv(t, shut, time.Minute, "Shutdown returning"); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := testkit.Recv(t, served, time.Minute, "Serve returning"); !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v, want http.ErrServerClosed", err)
	}
}

func TestShutdownDeadlineThenClose(t *testing.T) {
	entered := make(chan struct{}, 1)
	s, addr, _ := serve(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done()
	})})
	c, br := dial(t, addr)
	io.WriteString(c, get)
	testkit.Recv(t, entered, 5*time.Second, "the request at the handler")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with a request that never ends: %v, want the deadline", err)
	}
	s.Close()
	if !closedWithin(c, br, 3*time.Second) {
		t.Fatal("Close left the connection of a running request open")
	}
}

func TestShutdownReachesHandedOverConnections(t *testing.T) {
	// A connection served by net/http (a POST) is drained by Shutdown too.
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	s, addr, _ := serve(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodPost {
			entered <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, r.Method)
	})})
	c, br := dial(t, addr)
	io.WriteString(c, "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi")
	testkit.Recv(t, entered, 5*time.Second, "the request at the handler")
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with net/http's request in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if _, body := readResponse(t, c, br); body != "POST" {
		t.Fatalf("got %q, want POST", body)
	}
	if err := testkit.Recv(t, shut, time.Minute, "Shutdown returning"); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

func TestPanicIsLoggedAndClosesTheConnection(t *testing.T) {
	var logged testkit.Buffer
	_, addr, _ := serve(t, &http.Server{ErrorLog: log.New(&logged, "", 0),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/abort" {
				panic(http.ErrAbortHandler)
			}
			panic("boom")
		})})
	for _, path := range []string{"/boom", "/abort"} {
		c, br := dial(t, addr)
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: a\r\n\r\n")
		if !closedWithin(c, br, 3*time.Second) {
			t.Fatalf("%s: a panicking handler left its connection open", path)
		}
	}
	out := logged.String()
	if !strings.Contains(out, "http: panic serving") || !strings.Contains(out, "boom") {
		t.Fatalf("the panic was not logged: %q", out)
	}
	if strings.Count(out, "http: panic serving") != 1 {
		t.Fatalf("http.ErrAbortHandler was logged: %q", out)
	}
}

// readsConn records what is read through it.
type readsConn struct {
	net.Conn
	read *testkit.Buffer
}

func (c readsConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Write(p[:n])
	return n, err
}

func TestHandOverWrapsWhatNetHTTPReads(t *testing.T) {
	// The wrapper reads exactly what net/http parses: from the request
	// handed over (the bytes the loop had read of it too), and nothing
	// of the requests the loop served before it.
	var read testkit.Buffer
	wrapped := make(chan bool, 4)
	s := h1serve.New(&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, r.Method)
	}), ConnContext: func(ctx context.Context, c net.Conn) context.Context {
		_, ok := c.(readsConn)
		wrapped <- ok
		return ctx
	}})
	s.HandOver(func(c net.Conn) net.Conn { return readsConn{c, &read} })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close() })
	c, br := dial(t, ln.Addr().String())
	io.WriteString(c, get)
	if _, body := readResponse(t, c, br); body != "GET" {
		t.Fatalf("first answer %q, want GET", body)
	}
	post := "POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi"
	then := "GET /y HTTP/1.1\r\nHost: a\r\n\r\n"
	io.WriteString(c, post+then)
	for _, want := range []string{"POST", "GET"} {
		if _, body := readResponse(t, c, br); body != want {
			t.Fatalf("got %q, want %q", body, want)
		}
	}
	if got := read.String(); got != post+then {
		t.Fatalf("the wrapper read %q, want %q", got, post+then)
	}
	// ConnContext ran for the loop's connection (the raw one) and for the
	// one handed over (wrapped).
	for i, want := range []bool{false, true} {
		if got := testkit.Recv(t, wrapped, time.Minute, "ConnContext running"); got != want {
			t.Fatalf("ConnContext %d saw the wrapper: %v, want %v", i, got, want)
		}
	}
}

// TestRequestStart: a request the loop serves carries when it began
// (ongoing.Start), one read of the clock the layers share: the same in
// the request's context and in a context derived from it, before the
// handler ran, after the one of the connection's request before.
func TestRequestStart(t *testing.T) {
	type seen struct{ start, again, derived, handler time.Time }
	got := make(chan seen, 2)
	_, addr, _ := serve(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var s seen
		s.handler = time.Now()
		s.start = ongoing.Start(r.Context())
		s.again = ongoing.Start(r.Context())
		type key struct{}
		s.derived = ongoing.Start(context.WithValue(r.Context(), key{}, 1))
		got <- s
	})})
	c, br := dial(t, addr)
	var last time.Time
	for i := range 2 {
		if _, err := io.WriteString(c, get); err != nil {
			t.Fatal(err)
		}
		readResponse(t, c, br)
		s := <-got
		if !s.again.Equal(s.start) || !s.derived.Equal(s.start) {
			t.Errorf("request %d: Start %v, again %v, in a derived context %v; want one time", i, s.start, s.again, s.derived)
		}
		if s.start.After(s.handler) || !s.start.After(last) {
			t.Errorf("request %d: Start %v, want before the handler's %v and after the request before's %v", i, s.start, s.handler, last)
		}
		last = s.start
	}
}

// TestDateFollowsTheClock: the Date of an answer is the second it is
// written in (each connection formats it at most once a second),
// and it moves on as the seconds pass.
func TestDateFollowsTheClock(t *testing.T) {
	_, addr, _ := serve(t, &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})})
	c, br := dial(t, addr)
	var first time.Time
	deadline := time.Now().Add(testkit.Slack(5 * time.Second))
	for time.Now().Before(deadline) {
		before := time.Now()
		if _, err := io.WriteString(c, get); err != nil {
			t.Fatal(err)
		}
		resp, _ := readResponse(t, c, br)
		after := time.Now()
		d, err := http.ParseTime(resp.Header.Get("Date"))
		if err != nil {
			t.Fatalf("Date %q: %v", resp.Header.Get("Date"), err)
		}
		if d.Before(before.Truncate(time.Second)) || d.After(after) {
			t.Fatalf("Date %v of an answer written between %v and %v", d, before, after)
		}
		if first.IsZero() {
			first = d
		} else if d.After(first) {
			return
		}
		time.Sleep(20 * time.Millisecond) // the pace of requests, not a wait for an event
	}
	t.Errorf("Date still %v after %v", first, testkit.Slack(5*time.Second))
}
