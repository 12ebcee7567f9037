package h1serve_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/linkgate/linkgate/h1serve"
	"github.com/linkgate/linkgate/internal/testkit"
)

// tlsWriterHandler answers who served the request (the response writer's
// type), its protocol and what it knew of TLS.
func tlsWriterHandler(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	tlsState := "none"
	if r.TLS != nil {
		tlsState = fmt.Sprintf("complete=%v alpn=%q sni=%q", r.TLS.HandshakeComplete, r.TLS.NegotiatedProtocol, r.TLS.ServerName)
	}
	fmt.Fprintf(w, "%T %s %s", w, r.Proto, tlsState)
}

// serveTLS serves srv with the loop, until the test ends, on a loopback
// listener that wrap makes a TLS one with diffTLSConfig, and returns the
// server and its address.
func serveTLS(t *testing.T, srv *http.Server, wrap func(net.Listener, *tls.Config) net.Listener) (*h1serve.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := h1serve.New(srv)
	testkit.ServeOn(t, wrap(ln, diffTLSConfig(t)), s.Serve, s.Close)
	return s, ln.Addr().String()
}

// tlsRoundTrip sends raw on c and returns the body of the answer.
func tlsRoundTrip(t *testing.T, c net.Conn, br *bufio.Reader, raw, method string) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(testkit.Slack(5 * time.Second)))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%q: %v", raw, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%q: status %d, %v", raw, resp.StatusCode, err)
	}
	return string(body)
}

// TestTLSServedByProtocol checks a TLS listener served as net/http's
// ServeTLS serves it: HTTP/1.1 (by ALPN or without it) by the loop with
// the request's TLS state, a request the loop does not take by net/http
// with the state still, and h2 by net/http's HTTP/2 server.
func TestTLSServedByProtocol(t *testing.T) {
	t.Parallel()
	srv := &http.Server{Handler: http.HandlerFunc(tlsWriterHandler), ErrorLog: diffDiscardLog, ReadHeaderTimeout: time.Minute}
	_, addr := serveTLS(t, srv, tls.NewListener)

	for _, alpn := range [][]string{{"http/1.1"}, nil} {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: "example.com", NextProtos: alpn})
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		want := fmt.Sprintf(" HTTP/1.1 complete=true alpn=%q sni=\"example.com\"", strings.Join(alpn, ""))
		if got := tlsRoundTrip(t, c, br, diffGet(), "GET"); got != "*h1serve.response"+want {
			t.Errorf("ALPN %q, a GET: %q, want the loop's with %q", alpn, got, want)
		}
		post := "POST / HTTP/1.1\r\n" + diffHost + "Content-Length: 2\r\n\r\nhi"
		if got := tlsRoundTrip(t, c, br, post, "POST"); got != "*http.response"+want {
			t.Errorf("ALPN %q, a POST: %q, want net/http's with %q", alpn, got, want)
		}
		c.Close()
	}

	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, ServerName: "example.com"}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: testkit.Slack(5 * time.Second)}
	resp, err := client.Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := ` HTTP/2.0 complete=true alpn="h2" sni="example.com"`; resp.ProtoMajor != 2 || !strings.HasSuffix(string(body), want) || strings.HasPrefix(string(body), "*h1serve") {
		t.Errorf("h2: %s %q, want net/http's HTTP/2 server's answer ending %q", resp.Proto, body, want)
	}
}

// handshaken is ln with each connection handshaken before Accept returns
// it.
func handshaken(ln net.Listener, cfg *tls.Config) net.Listener { return handshakenListener{ln, cfg} }

// handshakenListener handshakes each connection before Accept returns it,
// and returns it as a connection that says its TLS state (as the
// gateway's edge does).
type handshakenListener struct {
	net.Listener
	cfg *tls.Config
}

type handshakenConn struct {
	net.Conn
	state tls.ConnectionState
}

func (c *handshakenConn) ConnectionState() tls.ConnectionState { return c.state }

func (l handshakenListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc := tls.Server(c, l.cfg)
		tc.SetDeadline(time.Now().Add(testkit.Slack(5 * time.Second)))
		if err := tc.Handshake(); err != nil {
			c.Close()
			continue
		}
		tc.SetDeadline(time.Time{})
		return &handshakenConn{Conn: tc, state: tc.ConnectionState()}, nil
	}
}

// TestTLSStateOfAConnectionHandshakenBefore checks a connection accepted
// with its handshake done: the loop serves it with its TLS state, and a
// request handed to net/http carries the state too.
func TestTLSStateOfAConnectionHandshakenBefore(t *testing.T) {
	t.Parallel()
	srv := &http.Server{Handler: http.HandlerFunc(tlsWriterHandler), ErrorLog: diffDiscardLog}
	_, addr := serveTLS(t, srv, handshaken)

	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: "example.com", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	const want = ` HTTP/1.1 complete=true alpn="http/1.1" sni="example.com"`
	if got := tlsRoundTrip(t, c, br, diffGet(), "GET"); got != "*h1serve.response"+want {
		t.Errorf("a GET: %q, want the loop's with %q", got, want)
	}
	post := "POST / HTTP/1.1\r\n" + diffHost + "Content-Length: 2\r\n\r\nhi"
	if got := tlsRoundTrip(t, c, br, post, "POST"); got != "*http.response"+want {
		t.Errorf("a POST: %q, want net/http's with %q", got, want)
	}
}

// TestPlainHTTPToTheTLSPort checks that a client speaking plain HTTP to a
// TLS listener gets net/http's plain-text 400.
func TestPlainHTTPToTheTLSPort(t *testing.T) {
	t.Parallel()
	srv := &http.Server{Handler: http.HandlerFunc(tlsWriterHandler), ErrorLog: diffDiscardLog}
	_, addr := serveTLS(t, srv, tls.NewListener)

	c, br := dial(t, addr)
	c.SetDeadline(time.Now().Add(testkit.Slack(5 * time.Second)))
	io.WriteString(c, diffGet())
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "Client sent an HTTP request to an HTTPS server") {
		t.Errorf("%d %q, want net/http's 400", resp.StatusCode, body)
	}
}

// TestShutdownTellsHTTP2AtOnce checks that Shutdown sends an HTTP/2
// connection net/http serves its GOAWAY at once, while a request of the
// loop is still running: not once the loop's connections have ended.
func TestShutdownTellsHTTP2AtOnce(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	srv := &http.Server{ErrorLog: diffDiscardLog, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		io.WriteString(w, "done")
	})}
	s, addr := serveTLS(t, srv, tls.NewListener)

	// DialH2's handshake has 10 s, which a machine busy with -race may
	// miss: a few tries.
	var h2 *testkit.H2Conn
	for try := 0; h2 == nil; try++ {
		var err error
		if h2, err = testkit.DialH2(addr, &tls.Config{InsecureSkipVerify: true, ServerName: "example.com"}); err != nil && try == 2 {
			t.Fatal(err)
		}
	}
	defer h2.Close()
	// The h2 connection is net/http's once one of its requests is answered.
	if err := h2.Send(func(fr *http2.Framer) error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h2.Block("/"), EndStream: true, EndHeaders: true})
	}); err != nil {
		t.Fatal(err)
	}
	if !h2.Wait(5*time.Second, func(h *testkit.H2Conn) bool { return h.Status(1) != "" }) {
		t.Fatal("no answer over h2")
	}

	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, ServerName: "example.com", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
	testkit.Recv(t, entered, 5*time.Second, "the loop's request at the handler")

	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	if !h2.Wait(5*time.Second, func(h *testkit.H2Conn) bool { _, ok := h.GoAway(); return ok }) {
		t.Error("no GOAWAY on the h2 connection while the loop's request runs")
	}
	close(release)
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(testkit.Slack(5 * time.Second)))
	if resp, err := http.ReadResponse(br, nil); err != nil || !resp.Close {
		t.Fatalf("the loop's request in flight: %v (%v), want its answer with Connection: close", resp, err)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(testkit.Slack(10 * time.Second)):
		t.Fatal("Shutdown did not return once the requests ended")
	}
}
