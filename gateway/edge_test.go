package gateway_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// rawExchange sends raw bytes on a new connection to addr and returns
// everything the gateway answers until it closes the connection or
// Slack(wait) passes, and whether it closed it. A caller that expects the
// connection kept names Connection: close in raw, so as not to wait.
func rawExchange(t *testing.T, addr, raw string, wait time.Duration) (string, bool) {
	t.Helper()
	return rawExchangeOver(t, addr, false, raw, wait)
}

// rawExchangeOver is rawExchange, over TLS when overTLS is set (any
// certificate trusted, ALPN http/1.1).
func rawExchangeOver(t *testing.T, addr string, overTLS bool, raw string, wait time.Duration) (string, bool) {
	t.Helper()
	var c net.Conn
	var err error
	if overTLS {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: testkit.Slack(5 * time.Second)}, "tcp", addr,
			&tls.Config{InsecureSkipVerify: true, ServerName: "short.test", NextProtos: []string{"http/1.1"}})
	} else {
		c, err = net.Dial("tcp", addr)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(testkit.Slack(wait)))
	b, err := io.ReadAll(c)
	closed := err == nil // EOF: the gateway closed; a timeout: it kept the connection
	return string(b), closed
}

// TestContentLengthWithTransferEncoding: a request with both headers is
// refused with 400 and the connection closed, so the bytes after its last
// chunk are never served as a request of their own (RFC 9112 section 6.1).
func TestContentLengthWithTransferEncoding(t *testing.T) {
	t.Run("tcp", func(t *testing.T) { contentLengthWithTransferEncoding(t, false) })
	t.Run("tls", func(t *testing.T) { contentLengthWithTransferEncoding(t, true) })
}

// framingGateway starts a gateway in front of up, on TLS when overTLS is
// set (a static certificate), and returns rawExchange with it.
func framingGateway(t *testing.T, up string, overTLS bool) func(t *testing.T, raw string, wait time.Duration) (string, bool) {
	var gw *running
	if !overTLS {
		gw = start(t, testkit.BaseConfig(up))
	} else {
		certFile, keyFile, _ := edgetest.NewCA(t).WritePair(t, t.TempDir(), "short.test")
		gw = start(t, tlsConfig(up, fmt.Sprintf("  tls: {cert_file: %s, key_file: %s}\n", certFile, keyFile)))
	}
	addr := gw.g.Addr().String()
	return func(t *testing.T, raw string, wait time.Duration) (string, bool) {
		t.Helper()
		return rawExchangeOver(t, addr, overTLS, raw, wait)
	}
}

func contentLengthWithTransferEncoding(t *testing.T, overTLS bool) {
	var seen sync.Map
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.URL.Path, true)
	}))
	defer up.Close()
	send := framingGateway(t, up.URL, overTLS)
	for _, tc := range []struct{ name, raw string }{
		{"CL then TE", "POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 44\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"TE then CL, odd case", "POST /a HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\ncontent-LENGTH: 5\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"},
		{"after a good request", "GET /first HTTP/1.1\r\nHost: x\r\n\r\nPOST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen.Clear()
			out, closed := send(t, tc.raw, 3*time.Second)
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
	out, _ := send(t, "POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 3*time.Second)
	if strings.Count(out, "HTTP/1.1 200 ") != 2 {
		t.Errorf("a plain chunked request and the next one: %q", out)
	}
}

// statusLine matches the status line of each answer in a raw exchange.
var statusLine = regexp.MustCompile(`(?m)^HTTP/1\.[01] \d{3} `)

// TestHTTP10TransferEncodingRefused: an HTTP/1.0 request carrying
// Transfer-Encoding, with or without Content-Length, has faulty framing
// (RFC 9112 section 6.1): Go's server ignores the header on HTTP/1.0 and
// would frame the body by Content-Length, passing the chunk lines on as
// data, or read no body at all and take the chunks for the next request.
// It is answered 400, the connection closed, and never proxied.
func TestHTTP10TransferEncodingRefused(t *testing.T) {
	t.Run("tcp", func(t *testing.T) { http10TransferEncodingRefused(t, false) })
	t.Run("tls", func(t *testing.T) { http10TransferEncodingRefused(t, true) })
}

func http10TransferEncodingRefused(t *testing.T, overTLS bool) {
	var seen sync.Map
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen.Store(r.URL.Path, string(b))
	}))
	defer up.Close()
	send := framingGateway(t, up.URL, overTLS)
	for _, tc := range []struct{ name, raw string }{
		{"TE and CL", "POST /a HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 10\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
		{"CL and TE, keep-alive", "POST /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
		{"TE alone", "POST /a HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
		{"TE alone, keep-alive, a request in the chunks", "POST /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"GET /smuggled HTTP/1.0\r\nHost: x\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen.Clear()
			out, closed := send(t, tc.raw, 3*time.Second)
			if !strings.HasPrefix(out, "HTTP/1.0 400 ") || !strings.Contains(out, "application/problem+json") || !closed {
				t.Errorf("got %q (closed %v), want a 400 problem and the connection closed", out, closed)
			}
			if n := len(statusLine.FindAllString(out, -1)); n != 1 {
				t.Errorf("%d answers: %q", n, out)
			}
			seen.Range(func(k, v any) bool {
				if k != "/healthz" {
					t.Errorf("the upstream got %s with body %q", k, v)
				}
				return true
			})
		})
	}
	// HTTP/1.0 with Content-Length alone is fine.
	out, _ := send(t, "POST /plain HTTP/1.0\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc", time.Second)
	if body, _ := seen.Load("/plain"); !strings.HasPrefix(out, "HTTP/1.0 200 ") || body != "abc" {
		t.Errorf("HTTP/1.0 with Content-Length: %q, the upstream read %q", out, body)
	}
}

// TestMalformedChunkedBodyIsTheClients: a chunked body the gateway cannot
// parse (a chunk line ending in a bare LF, a chunk extension whose quoted
// string holds a CRLF, a chunk size that is not hex) is the client's
// error: 400 with the connection closed, on a proxied route and on an
// email rule's route alike (whatever its on_unreadable), and not an
// upstream failure
// (linkgate_upstream_errors_total does not move).
func TestMalformedChunkedBodyIsTheClients(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
	}))
	defer up.Close()
	cfg := testkit.BaseConfig(up.URL) + `rules:
  - {name: login_email, match: {methods: [POST], path: /login}, key: email, limits: [5/m]}
  - {name: signup_email, match: {methods: [POST], path: /signup}, key: email, limits: [5/m], on_unreadable: skip}
`
	gw := start(t, cfg)
	addr := gw.g.Addr().String()
	head := "Host: x\r\nContent-Type: application/x-www-form-urlencoded\r\nTransfer-Encoding: chunked\r\n\r\n"
	for _, body := range []struct{ name, raw string }{
		{"bare LF after the chunk size", "3\nabc\r\n0\r\n\r\n"},
		{"bare LF after the chunk data", "3\r\nabc\n0\r\n\r\n"},
		{"quoted CRLF in a chunk extension", "3;a=\"x\r\ny\"\r\nabc\r\n0\r\n\r\n"},
		{"chunk size not hex", "zz\r\nabc\r\n0\r\n\r\n"},
	} {
		for _, path := range []string{"/upload", "/login", "/signup"} {
			t.Run(body.name+" "+path, func(t *testing.T) {
				out, closed := rawExchange(t, addr, "POST "+path+" HTTP/1.1\r\n"+head+body.raw, 3*time.Second)
				if !strings.HasPrefix(out, "HTTP/1.1 400 ") || !strings.Contains(out, "application/problem+json") || !closed {
					t.Errorf("got %q (closed %v), want a 400 problem and the connection closed", out, closed)
				}
			})
		}
	}
	for _, reason := range []string{"failed", "unreachable", "timeout"} {
		if n := metric(t, gw, `linkgate_upstream_errors_total{reason="`+reason+`"}`); n > 0 {
			t.Errorf("linkgate_upstream_errors_total{reason=%q} = %v: the client's malformed bodies were counted as upstream failures", reason, n)
		}
	}
}

// countingUpstream is an upstream that answers 200 to everything and counts
// the requests that reach it, its health checks aside.
func countingUpstream(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var reached atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			reached.Add(1)
		}
	}))
	t.Cleanup(up.Close)
	return up, &reached
}

// TestTraceAndConnectRefused: TRACE and CONNECT are answered 405 unless
// server.allow_methods lists them.
func TestTraceAndConnectRefused(t *testing.T) {
	t.Parallel()
	up, reached := countingUpstream(t)
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
	// A method the router does not know: refused with a problem body too.
	out, _ := rawExchange(t, gw.g.Addr().String(), "PROPFIND /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 3*time.Second)
	if !strings.HasPrefix(out, "HTTP/1.1 405 ") || !strings.Contains(out, "application/problem+json") {
		t.Errorf("PROPFIND: %q, want 405 with a problem body", out)
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
// upstream request is abandoned; a body sent briskly passes. Each timeout
// is checked on a gateway where the other one is far away, so that the
// time the cut took tells which one fired even with the slack a busy
// machine needs.
func TestSlowBodyCutOff(t *testing.T) {
	t.Parallel()
	brisk := make(chan string, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if r.URL.Path == "/brisk" {
			brisk <- fmt.Sprintf("%d %v", len(b), err)
		}
	}))
	defer up.Close()
	const idle, total, far = time.Second, 2 * time.Second, time.Minute
	listening := func(bodyTimeout, readTimeout time.Duration) string {
		cfg := strings.Replace(testkit.BaseConfig(up.URL), "  shutdown_timeout: 10s\n",
			fmt.Sprintf("  shutdown_timeout: 10s\n  body_timeout: %v\n  read_timeout: %v\n", bodyTimeout, readTimeout), 1)
		return start(t, cfg).g.Addr().String()
	}
	idleCut, totalCut := listening(idle, far), listening(idle, total)

	trickle := func(addr, path string, total int, every time.Duration) (string, time.Duration) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		begin := time.Now()
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", path, total)
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for range total {
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(every):
				}
			}
		}()
		c.SetReadDeadline(time.Now().Add(far / 2))
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

	// A pause of 3 s after the first byte: cut off at body_timeout.
	status, took := trickle(idleCut, "/paused", 10, 3*time.Second)
	if status != "408 close" || took < idle-50*time.Millisecond || took > idle+testkit.Slack(time.Second) {
		t.Errorf("a body paused past body_timeout: %s after %v, want 408 close at body_timeout (%v)", status, took, idle)
	}
	// A byte every 50 ms, never idle for long, but 80 of them take longer
	// than read_timeout: cut off at read_timeout.
	status, took = trickle(totalCut, "/trickled", 80, 50*time.Millisecond)
	if status != "408 close" || took < total-50*time.Millisecond || took > total+testkit.Slack(time.Second) {
		t.Errorf("a body slower than read_timeout: %s after %v, want 408 close at read_timeout (%v)", status, took, total)
	}
	// A brisk body passes whole.
	status, _ = trickle(idleCut, "/brisk", 5, 10*time.Millisecond)
	if status != "200 " {
		t.Fatalf("a brisk body: %s, want 200", status)
	}
	if read := testkit.Recv(t, brisk, 5*time.Second, "the brisk body at the upstream"); read != "5 <nil>" {
		t.Errorf("the upstream read %q of the brisk body, want all 5 bytes", read)
	}
}

// TestSlowBodyOnEmailRoute: on an email rule's route, where the limiter
// reads the body to find the email, a body that stalls is answered 408 at
// server.body_timeout, one that trickles 408 at server.read_timeout, both
// with the connection closed, whatever the rule's on_unreadable or shadow
// mode; a body
// whose Content-Length already exceeds identity.max_body_bytes is answered
// 413 at once, without waiting for the body. (The limiter once answered
// 400 after twice the timeout: the server drained the unread body under a
// fresh deadline before writing the answer.)
func TestSlowBodyOnEmailRoute(t *testing.T) {
	t.Parallel()
	up, reached := countingUpstream(t)
	// Each timeout is checked on a gateway where the other one is far
	// away, so that the time the answer took tells which one fired even
	// with the slack a busy machine needs.
	const idle, total, far = time.Second, 2500 * time.Millisecond, time.Minute
	listening := func(bodyTimeout, readTimeout time.Duration) string {
		cfg := strings.Replace(testkit.BaseConfig(up.URL), "  shutdown_timeout: 10s\n",
			fmt.Sprintf("  shutdown_timeout: 10s\n  body_timeout: %v\n  read_timeout: %v\n", bodyTimeout, readTimeout), 1) + `identity:
  max_body_bytes: 4096
rules:
  - {name: login_email, match: {methods: [POST], path: /login}, key: email, limits: [5/m]}
  - {name: signup_email, match: {methods: [POST], path: /signup}, key: email, limits: [5/m], on_unreadable: skip}
  - {name: reset_email, match: {methods: [POST], path: /reset}, key: email, limits: [5/m], shadow: true}
`
		return start(t, cfg).g.Addr().String()
	}
	idleCut, totalCut := listening(idle, far), listening(far, total)

	// send writes a head with Content-Length n and the first bytes of a
	// body, then one byte every every (never when every is 0), and
	// returns the answer's status, whether the connection was closed, and
	// how long the answer took.
	send := func(addr, path string, n int, first string, every time.Duration) (int, bool, time.Duration) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		begin := time.Now()
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n%s", path, n, first)
		stop := make(chan struct{})
		defer close(stop)
		if every > 0 {
			go func() {
				for range n - len(first) {
					select {
					case <-stop:
						return
					case <-time.After(every):
					}
					if _, err := c.Write([]byte("x")); err != nil {
						return
					}
				}
			}()
		}
		c.SetReadDeadline(time.Now().Add(far / 2))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: no answer after %v: %v", path, time.Since(begin), err)
		}
		took := time.Since(begin)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		_, err = br.ReadByte()
		// Closed: an end of stream, or a reset when a byte the client
		// trickled arrived after the server's last read (a socket closed
		// with unread data sends RST, not FIN).
		closed := err == io.EOF || errors.Is(err, syscall.ECONNRESET)
		return resp.StatusCode, resp.Close && closed, took
	}
	for _, path := range []string{"/login", "/signup", "/reset"} {
		t.Run("stalled "+path, func(t *testing.T) {
			status, closed, took := send(idleCut, path, 100, "email=a%40example.com&p=", 0)
			if status != 408 || !closed || took < idle-50*time.Millisecond || took > idle+testkit.Slack(600*time.Millisecond) {
				t.Errorf("a body that stalls: %d (closed %v) after %v, want 408 and the connection closed at body_timeout (%v)", status, closed, took, idle)
			}
		})
		if path != "/login" {
			continue
		}
		t.Run("trickled "+path, func(t *testing.T) {
			status, closed, took := send(totalCut, path, 100, "email=a%40example.com&p=", 100*time.Millisecond)
			if status != 408 || !closed || took < total-50*time.Millisecond || took > total+testkit.Slack(600*time.Millisecond) {
				t.Errorf("a body that trickles: %d (closed %v) after %v, want 408 and the connection closed at read_timeout (%v)", status, closed, took, total)
			}
		})
	}
	t.Run("Content-Length over max_body_bytes", func(t *testing.T) {
		status, closed, took := send(idleCut, "/login", 100_000, "email=a%40example.com&p=", 0)
		if status != 413 || !closed || took > testkit.Slack(300*time.Millisecond) {
			t.Errorf("a body announced larger than max_body_bytes: %d (closed %v) after %v, want 413 at once and the connection closed", status, closed, took)
		}
	})
	if n := reached.Load(); n != 0 {
		t.Errorf("%d of these requests reached the upstream", n)
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
	c.SetReadDeadline(time.Now().Add(testkit.Slack(5 * time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	if resp.StatusCode != 408 || time.Since(begin) > testkit.Slack(3*time.Second) {
		t.Errorf("%d after %v, want 408 at about 500ms", resp.StatusCode, time.Since(begin))
	}
}

// TestUpstreamBreaksMidBody: an upstream that closes while the client is
// still sending its body (the client waits before the rest) is a 502 at
// once, on a connection that then closes: not a 408 at body_timeout, nor
// an empty answer. The proxy cutting the client's read short is not the
// client being too slow.
func TestUpstreamBreaksMidBody(t *testing.T) {
	t.Parallel()
	up, _ := testkit.RawHTTP(t, func(c net.Conn, _ *bufio.Reader, req *http.Request) bool {
		io.ReadFull(req.Body, make([]byte, 5))
		return false // and close
	})
	gw := start(t, testkit.BaseConfig("http://"+up))
	c, err := net.Dial("tcp", gw.g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	begin := time.Now()
	io.WriteString(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello") // and the rest never
	c.SetReadDeadline(time.Now().Add(testkit.Slack(5 * time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadGateway || !resp.Close || !strings.Contains(string(body), `"status":502`) {
		t.Errorf("%d close=%v %q, want a 502 problem and the connection closed", resp.StatusCode, resp.Close, body)
	}
	if d := time.Since(begin); d > testkit.Slack(3*time.Second) { // body_timeout is a minute
		t.Errorf("answered after %v, want at once", d)
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
	// The client is still sending when the gateway answers: the answer
	// ends with a half-close (the client reads it to its end), not with
	// the reset of a close with unread bytes.
	c, err := net.Dial("tcp", gw.g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go io.WriteString(c, "GET /x HTTP/1.1\r\nHost: x\r\nX-Big: "+strings.Repeat("a", 300<<10)+"\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(testkit.Slack(5 * time.Second)))
	out, err := io.ReadAll(c)
	if err != nil || !strings.HasPrefix(string(out), "HTTP/1.1 431 ") || !strings.HasSuffix(string(out), "431 Request Header Fields Too Large") {
		t.Errorf("300 KiB of headers sent while the answer comes: %q, %v", out, err)
	}
}
