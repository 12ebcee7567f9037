package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// rawExchange sends raw bytes on a new connection to addr and returns
// everything the gateway answers until it closes the connection or wait
// passes, and whether it closed it.
func rawExchange(t *testing.T, addr, raw string, wait time.Duration) (string, bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(wait))
	b, err := io.ReadAll(c)
	closed := err == nil // EOF: the gateway closed; a timeout: it kept the connection
	return string(b), closed
}

// TestContentLengthWithTransferEncoding: a request with both headers is
// refused with 400 and the connection closed, so the bytes after its last
// chunk are never served as a request of their own (RFC 9112 section 6.1).
func TestContentLengthWithTransferEncoding(t *testing.T) {
	var seen sync.Map
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.URL.Path, true)
	}))
	defer up.Close()
	gw := start(t, testkit.BaseConfig(up.URL))
	addr := gw.g.Addr().String()
	for _, tc := range []struct{ name, raw string }{
		{"CL then TE", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 44\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"TE then CL, odd case", "POST /a HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\ncontent-LENGTH: 5\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"after a good request", "GET /first HTTP/1.1\r\nHost: x\r\n\r\nPOST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen.Clear()
			out, closed := rawExchange(t, addr, tc.raw, 3*time.Second)
			if !strings.Contains(out, "HTTP/1.1 400 ") || !closed {
				t.Errorf("got %q (closed %v), want a 400 and the connection closed", out, closed)
			}
			if strings.Count(out, "HTTP/1.1 ") != strings.Count(tc.raw, "Host: x")-1 {
				t.Errorf("answers: %q", out)
			}
			if _, ok := seen.Load("/smuggled"); ok {
				t.Error("the smuggled request reached the upstream")
			}
			if _, ok := seen.Load("/a"); ok {
				t.Error("the ambiguous request reached the upstream")
			}
		})
	}
	// Chunked alone is fine, on the same connection as further requests.
	// (The last asks the gateway to close: the exchange ends with it.)
	out, _ := rawExchange(t, addr, "POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 3*time.Second)
	if strings.Count(out, "HTTP/1.1 200 ") != 2 {
		t.Errorf("a plain chunked request and the next one: %q", out)
	}
}

// TestTraceAndConnectRefused: TRACE and CONNECT are answered 405 unless
// server.allow_methods lists them.
func TestTraceAndConnectRefused(t *testing.T) {
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			reached.Add(1)
		}
	}))
	defer up.Close()
	gw := start(t, testkit.BaseConfig(up.URL))
	for _, m := range []string{"TRACE", "CONNECT"} {
		// Connection: close ends the exchange with the answer.
		raw := m + " /x HTTP/1.1\r\nHost: x\r\nCookie: secret\r\nConnection: close\r\n\r\n"
		if m == "CONNECT" {
			raw = "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nConnection: close\r\n\r\n"
		}
		out, _ := rawExchange(t, gw.g.Addr().String(), raw, 3*time.Second)
		if !strings.HasPrefix(out, "HTTP/1.1 405 ") || !strings.Contains(out, "Allow: ") || strings.Contains(out, "secret") {
			t.Errorf("%s: %q, want 405 with Allow and no echo", m, out)
		}
	}
	if reached.Load() != 0 {
		t.Errorf("%d refused requests reached the upstream", reached.Load())
	}
	gw2 := start(t, strings.Replace(testkit.BaseConfig(up.URL), "  shutdown_timeout: 10s\n", "  shutdown_timeout: 10s\n  allow_methods: [TRACE]\n", 1))
	if resp, _ := testkit.Do(t, "TRACE", gw2.url("/x"), nil); resp.StatusCode != 200 || reached.Load() != 1 {
		t.Errorf("TRACE with allow_methods [TRACE]: %d, upstream reached %d times", resp.StatusCode, reached.Load())
	}
}

// TestSlowBodyCutOff: a client that trickles its body is cut off once it
// pauses longer than server.body_timeout (408, connection closed), and the
// upstream request is abandoned; a body sent briskly passes.
func TestSlowBodyCutOff(t *testing.T) {
	got := make(chan string, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		b, err := io.ReadAll(r.Body)
		got <- fmt.Sprintf("%d %v", len(b), err)
	}))
	defer up.Close()
	cfg := strings.Replace(testkit.BaseConfig(up.URL), "  shutdown_timeout: 10s\n", "  shutdown_timeout: 10s\n  body_timeout: 300ms\n  read_timeout: 2s\n", 1)
	gw := start(t, cfg)
	addr := gw.g.Addr().String()

	trickle := func(total int, every time.Duration) (string, time.Duration) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		begin := time.Now()
		fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", total)
		go func() {
			for range total {
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
				time.Sleep(every)
			}
		}()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "no answer: " + err.Error(), time.Since(begin)
		}
		resp.Body.Close()
		closing := ""
		if resp.Close {
			closing = "close"
		}
		return fmt.Sprintf("%d %s", resp.StatusCode, closing), time.Since(begin)
	}

	// A pause of 500ms between bytes: cut off at the first one.
	status, took := trickle(10, 500*time.Millisecond)
	if status != "408 close" || took > 3*time.Second {
		t.Errorf("a body paused past body_timeout: %s after %v, want 408 close within a second or so", status, took)
	}
	// Bytes every 100ms, never idle for long, but 40 of them take longer
	// than read_timeout: cut off at 2s.
	status, took = trickle(40, 100*time.Millisecond)
	if status != "408 close" || took < 1500*time.Millisecond || took > 4*time.Second {
		t.Errorf("a body slower than read_timeout: %s after %v, want 408 close at about 2s", status, took)
	}
	// A brisk body passes whole.
	status, _ = trickle(5, 10*time.Millisecond)
	if status != "200 " {
		t.Errorf("a brisk body: %s, want 200", status)
	}
	var last string
	for len(got) > 0 {
		last = <-got
	}
	if last != "5 <nil>" {
		t.Errorf("the upstream read %q of the brisk body, want all 5 bytes", last)
	}
}

// TestReadTimeoutAlone: with body_timeout off, read_timeout still bounds
// the whole body.
func TestReadTimeoutAlone(t *testing.T) {
	t.Parallel()
	up := testkit.Named(t, "ok")
	cfg := strings.Replace(testkit.BaseConfig(up.URL), "  shutdown_timeout: 10s\n", "  shutdown_timeout: 10s\n  body_timeout: 0s\n  read_timeout: 500ms\n", 1)
	gw := start(t, cfg)
	c, err := net.Dial("tcp", gw.g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	begin := time.Now()
	fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	if resp.StatusCode != 408 || time.Since(begin) > 3*time.Second {
		t.Errorf("%d after %v, want 408 at about 500ms", resp.StatusCode, time.Since(begin))
	}
}

// TestHeaderTooLarge: headers beyond server.max_header_bytes get 431.
func TestHeaderTooLarge(t *testing.T) {
	t.Parallel()
	up := testkit.Named(t, "ok")
	gw := start(t, testkit.BaseConfig(up.URL))
	resp, _ := testkit.Do(t, "GET", gw.url("/x"), nil, "X-Big", strings.Repeat("a", 70<<10))
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("70 KiB of headers: %d, want 431", resp.StatusCode)
	}
}
