package h2serve_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/linkgate/linkgate/h2serve"
)

// wait bounds every wait of the tests.
const wait = 10 * time.Second

// testServer is a Server serving on loopback, and a client of it.
type testServer struct {
	srv    *h2serve.Server
	addr   string
	client *http.Client
	tr     *http.Transport
	tls    bool
}

// url is the address of path on the server.
func (ts *testServer) url(path string) string {
	if ts.tls {
		return "https://" + ts.addr + path
	}
	return "http://" + ts.addr + path
}

// start serves h on a loopback listener, over TLS or h2c, with the
// Server's fields as mod sets them.
func start(t *testing.T, overTLS bool, h http.Handler, mod ...func(*h2serve.Server)) *testServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &h2serve.Server{Handler: h, ErrorLog: nil}
	for _, m := range mod {
		m(srv)
	}
	ts := &testServer{srv: srv, addr: l.Addr().String(), tls: overTLS}
	if overTLS {
		cert, pool := selfSigned(t)
		l = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
		var p http.Protocols
		p.SetHTTP2(true)
		ts.tr = &http.Transport{Protocols: &p, TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}}
	} else {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true) // h2c with prior knowledge
		ts.tr = &http.Transport{Protocols: &p}
	}
	ts.client = &http.Client{Transport: ts.tr, Timeout: wait}
	done := make(chan error, 1)
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				done <- err
				return
			}
			go srv.ServeConn(context.Background(), nc, false)
		}
	}()
	t.Cleanup(func() {
		ts.tr.CloseIdleConnections()
		l.Close()
		srv.Close()
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("Accept: %v", err)
			}
		case <-time.After(wait):
			t.Error("the accept loop did not end")
		}
	})
	return ts
}

// selfSigned returns a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "h2serve test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

// both runs f over h2c and over TLS.
func both(t *testing.T, f func(t *testing.T, overTLS bool)) {
	t.Run("h2c", func(t *testing.T) { f(t, false) })
	t.Run("tls", func(t *testing.T) { f(t, true) })
}

// do does req and returns the answer with its body read.
func do(t *testing.T, ts *testServer, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	res, err := ts.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	return res, body
}

// newRequest is http.NewRequest, failing t on an error.
func newRequest(t *testing.T, method, url string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestGetAndHead: a GET and a HEAD, with the request as net/http builds
// it and the fields added to the answer (Content-Length, a sniffed
// Content-Type, Date).
func TestGetAndHead(t *testing.T) {
	both(t, func(t *testing.T, overTLS bool) {
		ts := start(t, overTLS, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor != 2 || r.Proto != "HTTP/2.0" || r.Host != r.URL.Host && r.Host == "" ||
				r.RequestURI != "/hello?x=1" || r.URL.Path != "/hello" || (r.TLS != nil) != overTLS ||
				r.Body != http.NoBody || r.ContentLength != 0 || r.Header.Get("X-Test") != "yes" {
				t.Errorf("request: %s %s %q host %q tls %v body %T len %d header %v", r.Method, r.Proto, r.RequestURI, r.Host, r.TLS != nil, r.Body, r.ContentLength, r.Header)
			}
			if _, ok := r.Context().Value(http.ServerContextKey).(*http.Server); !ok {
				t.Error("no *http.Server in the context")
			}
			if _, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); !ok {
				t.Error("no local address in the context")
			}
			io.WriteString(w, "<html>hello</html>")
		}))
		for _, method := range []string{"GET", "HEAD"} {
			req := newRequest(t, method, ts.url("/hello?x=1"), nil)
			req.Header.Set("X-Test", "yes")
			res, body := do(t, ts, req)
			want := "<html>hello</html>"
			if method == "HEAD" {
				want = ""
			}
			if res.StatusCode != 200 || string(body) != want || res.ContentLength != 18 ||
				res.Header.Get("Content-Type") != "text/html; charset=utf-8" || res.Header.Get("Date") == "" {
				t.Errorf("%s: %d %q, length %d, header %v", method, res.StatusCode, body, res.ContentLength, res.Header)
			}
		}
	})
}

// TestRedirect is the answer the gateway gives most: no body.
func TestRedirect(t *testing.T) {
	ts := start(t, false, http.HandlerFunc(redirect))
	ts.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, body := do(t, ts, newRequest(t, "GET", ts.url("/go"), nil))
	if res.StatusCode != 302 || len(body) != 0 || res.Header.Get("Location") != "https://go.dev/" ||
		res.Header.Get("Content-Length") != "0" || res.Header.Get("Content-Type") != "" {
		t.Errorf("got %d %q %v", res.StatusCode, body, res.Header)
	}
}

func redirect(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h["Location"] = []string{"https://go.dev/"}
	h["Cache-Control"] = []string{"no-store"}
	h["Content-Length"] = []string{"0"}
	w.WriteHeader(http.StatusFound)
}

// echoSum answers the length and SHA-256 of the request's body.
func echoSum(w http.ResponseWriter, r *http.Request) {
	sum := sha256.New()
	n, err := io.Copy(sum, r.Body)
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	fmt.Fprintf(w, "%d %d %x", r.ContentLength, n, sum.Sum(nil))
}

// TestPostBody: bodies of 5 bytes to 3 MiB, of known length and not,
// read whole (the windows given back as the handler reads).
func TestPostBody(t *testing.T) {
	both(t, func(t *testing.T, overTLS bool) {
		ts := start(t, overTLS, http.HandlerFunc(echoSum))
		for _, size := range []int{5, 1 << 20, 3<<20 + 7} {
			data := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
			res, body := do(t, ts, newRequest(t, "POST", ts.url("/post"), bytes.NewReader(data)))
			want := fmt.Sprintf("%d %d %x", size, size, sha256.Sum256(data))
			if res.StatusCode != 200 || string(body) != want {
				t.Errorf("%d bytes: %d %q, want %q", size, res.StatusCode, body, want)
			}
			// Of unknown length: ContentLength -1.
			res, body = do(t, ts, newRequest(t, "POST", ts.url("/post"), io.MultiReader(bytes.NewReader(data))))
			want = fmt.Sprintf("-1 %d %x", size, sha256.Sum256(data))
			if res.StatusCode != 200 || string(body) != want {
				t.Errorf("%d bytes, length unknown: %d %q, want %q", size, res.StatusCode, body, want)
			}
		}
	})
}

// TestLargeResponse: a 1 MiB answer, written within the client's windows.
func TestLargeResponse(t *testing.T) {
	data := bytes.Repeat([]byte("abcdefghijklmnopqrstuvwxyz012345"), 1<<15) // 1 MiB
	both(t, func(t *testing.T, overTLS bool) {
		ts := start(t, overTLS, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for p := data; len(p) > 0; p = p[min(len(p), 10000):] {
				w.Write(p[:min(len(p), 10000)])
			}
		}))
		res, body := do(t, ts, newRequest(t, "GET", ts.url("/big"), nil))
		if res.StatusCode != 200 || !bytes.Equal(body, data) || res.ContentLength != -1 {
			t.Errorf("got %d, %d bytes (equal: %v), length %d", res.StatusCode, len(body), bytes.Equal(body, data), res.ContentLength)
		}
	})
}

// TestTrailers: the request's trailers reach the handler; the answer's,
// declared with Trailer and with http.TrailerPrefix, reach the client.
func TestTrailers(t *testing.T) {
	ts := start(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Trailer", "X-Sum")
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "body")
		w.Header().Set("X-Sum", "got "+r.Trailer.Get("X-Client"))
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	}))
	req := newRequest(t, "POST", ts.url("/t"), io.MultiReader(strings.NewReader("hi")))
	req.Trailer = http.Header{"X-Client": {"c1"}}
	res, body := do(t, ts, req)
	if string(body) != "body" || res.Trailer.Get("X-Sum") != "got c1" || res.Trailer.Get("X-Late") != "late" {
		t.Errorf("got %q, trailer %v", body, res.Trailer)
	}
}

// TestConcurrentStreams: 100 requests at once on one connection, their
// handlers all running together.
func TestConcurrentStreams(t *testing.T) {
	const n = 100
	var mu sync.Mutex
	arrived, remotes := 0, map[string]bool{}
	all := make(chan struct{})
	ts := start(t, true, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived++
		remotes[r.RemoteAddr] = true
		if arrived == n {
			close(all)
		}
		mu.Unlock()
		select { // every handler runs at once, or none answers
		case <-all:
		case <-time.After(wait):
		}
		io.WriteString(w, r.URL.Path)
	}))
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			path := fmt.Sprintf("/%d", i)
			res, err := ts.client.Get(ts.url(path))
			if err != nil {
				t.Error(err)
				return
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if string(body) != path {
				t.Errorf("%s: %q", path, body)
			}
		})
	}
	wg.Wait()
	select {
	case <-all:
	default:
		t.Fatal("the handlers did not all run at once")
	}
	if len(remotes) != 1 {
		t.Errorf("%d connections, want 1", len(remotes))
	}
}

// TestFullDuplex: a handler that answers, then reads the body and echoes
// it as it comes.
func TestFullDuplex(t *testing.T) {
	ts := start(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if err := rc.EnableFullDuplex(); err != nil {
			t.Error(err)
		}
		w.WriteHeader(200)
		rc.Flush()
		buf := make([]byte, 100)
		for {
			n, err := r.Body.Read(buf)
			if n > 0 {
				w.Write(buf[:n])
				rc.Flush()
			}
			if err != nil {
				return
			}
		}
	}))
	pr, pw := io.Pipe()
	res, err := ts.client.Do(newRequest(t, "POST", ts.url("/duplex"), pr))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	for _, msg := range []string{"ping", "pong", "again"} {
		if _, err := io.WriteString(pw, msg); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(res.Body, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo of %q: %q, %v", msg, buf, err)
		}
	}
	pw.Close()
	if rest, err := io.ReadAll(res.Body); err != nil || len(rest) != 0 {
		t.Errorf("after the body's end: %q, %v", rest, err)
	}
}

// TestClientCancel: a request the client cancels (RST_STREAM) ends its
// handler's context.
func TestClientCancel(t *testing.T) {
	started, ended := make(chan struct{}), make(chan error, 1)
	ts := start(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			ended <- r.Context().Err()
		case <-time.After(wait):
			ended <- nil
		}
	}))
	ctx, cancel := context.WithCancel(context.Background())
	req := newRequest(t, "GET", ts.url("/slow"), nil).WithContext(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := ts.client.Do(req)
		errc <- err
	}()
	select {
	case <-started:
	case <-time.After(wait):
		t.Fatal("the handler did not start")
	}
	cancel()
	if err := <-ended; err != context.Canceled {
		t.Errorf("the handler's context: %v, want context.Canceled", err)
	}
	if err := <-errc; err == nil {
		t.Error("the canceled request succeeded")
	}
}

// TestShutdown: Shutdown lets the request in flight finish, refuses new
// ones, and returns once the connection closed.
func TestShutdown(t *testing.T) {
	started, release := make(chan struct{}, 1), make(chan struct{})
	ts := start(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started <- struct{}{}
			<-release
		}
		io.WriteString(w, "done "+r.URL.Path)
	}))
	type result struct {
		body string
		err  error
	}
	inflight := make(chan result, 1)
	go func() {
		res, err := ts.client.Get(ts.url("/slow"))
		if err != nil {
			inflight <- result{err: err}
			return
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		inflight <- result{string(b), err}
	}()
	select {
	case <-started:
	case <-time.After(wait):
		t.Fatal("the handler did not start")
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		shut <- ts.srv.Shutdown(ctx)
	}()
	// A new stream is refused: once GOAWAY arrived, the client opens a
	// connection the closed listener does not take.
	deadline := time.Now().Add(wait)
	for {
		res, err := ts.client.Get(ts.url("/new"))
		if err != nil {
			break
		}
		res.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("new requests still served after Shutdown")
		}
		time.Sleep(time.Millisecond) // a poll's pace, not a synchronization
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	default:
	}
	close(release)
	if r := <-inflight; r.err != nil || r.body != "done /slow" {
		t.Errorf("the request in flight: %q, %v", r.body, r.err)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("Shutdown did not return")
	}
}

// TestHeaderTooLarge: a header list over MaxHeaderBytes (in fields each
// short enough for the HPACK decoder) is answered 431. The request goes
// on a raw connection: Go's client refuses to send it once it has the
// server's SETTINGS_MAX_HEADER_LIST_SIZE.
func TestHeaderTooLarge(t *testing.T) {
	ts := start(t, false, http.HandlerFunc(redirect), func(s *h2serve.Server) { s.MaxHeaderBytes = 1000 })
	fr := dialRaw(t, ts.addr)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":path", "/"}, {":authority", ts.addr}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for i := range 6 {
		enc.WriteField(hpack.HeaderField{Name: fmt.Sprintf("x-big-%d", i), Value: strings.Repeat("x", 300)})
	}
	fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true})
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if h, ok := f.(*http2.MetaHeadersFrame); ok {
			if got := h.PseudoValue("status"); got != "431" {
				t.Errorf("got %s, want 431", got)
			}
			return
		}
	}
}

// dialRaw opens an h2c connection to addr, sends the preface and an empty
// SETTINGS, and returns a framer on it (reads and writes bounded by wait).
func dialRaw(t *testing.T, addr string) *http2.Framer {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, wait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(wait))
	io.WriteString(nc, http2.ClientPreface)
	fr := http2.NewFramer(nc, nc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.WriteSettings()
	return fr
}

// TestIdleTimeout: a connection without a stream for IdleTimeout hears
// GOAWAY NO_ERROR and is closed.
func TestIdleTimeout(t *testing.T) {
	ts := start(t, false, http.HandlerFunc(redirect), func(s *h2serve.Server) { s.IdleTimeout = 50 * time.Millisecond })
	fr := dialRaw(t, ts.addr)
	sawGoAway := false
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			if !sawGoAway || err != io.EOF {
				t.Errorf("read %v, GOAWAY seen: %v", err, sawGoAway)
			}
			return
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			sawGoAway = true
			if g.ErrCode != http2.ErrCodeNo {
				t.Errorf("GOAWAY %v", g.ErrCode)
			}
		}
	}
}

// TestReadDeadline: http.ResponseController.SetReadDeadline bounds the
// reads of a body that does not come.
func TestReadDeadline(t *testing.T) {
	ts := start(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
			t.Error(err)
		}
		_, err := io.ReadAll(r.Body)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("read: %v, want os.ErrDeadlineExceeded", err)
		}
		io.WriteString(w, "timed out")
	}))
	pr, pw := io.Pipe()
	defer pw.Close()
	res, body := do(t, ts, newRequest(t, "POST", ts.url("/"), pr))
	if res.StatusCode != 200 || string(body) != "timed out" {
		t.Errorf("got %d %q", res.StatusCode, body)
	}
}

// TestSettingsAckBeforeData: the SETTINGS ACK of a larger
// SETTINGS_INITIAL_WINDOW_SIZE leaves before the DATA the new window lets
// out, as the ACK says the settings are in force from then on (h2spec's
// http2/6.9.2/1 waits for the ACK, then for the DATA, and misses a DATA
// that came first).
func TestSettingsAckBeforeData(t *testing.T) {
	ts := start(t, false, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "x") }))
	fr := dialRaw(t, ts.addr)
	readUntil := func(what string, ok func(http2.Frame) bool) {
		t.Helper()
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("waiting for %s: %v", what, err)
			}
			if ok(f) {
				return
			}
		}
	}
	isAck := func(f http2.Frame) bool { s, ok := f.(*http2.SettingsFrame); return ok && s.IsAck() }
	readUntil("the first SETTINGS ACK", isAck)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for id := uint32(1); id < 2000; id += 2 {
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		readUntil("the ACK of a zero window", isAck)
		block.Reset()
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "a"}, {":path", "/"}} {
			enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true})
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
		acked := false
		readUntil("the answer", func(f http2.Frame) bool {
			switch f := f.(type) {
			case *http2.SettingsFrame:
				acked = acked || f.IsAck()
			case *http2.DataFrame:
				if len(f.Data()) > 0 && !acked {
					t.Fatalf("stream %d: DATA before the ACK of the window that let it out", id)
				}
				return f.StreamEnded()
			}
			return false
		})
	}
}

// TestSettingsFirst: over TLS the server's SETTINGS comes right after the
// handshake, before the client said anything (RFC 9113 section 3.4: a
// client may wait for it; a client that closes at once then resets
// rather than leaving a half-closed connection behind).
func TestSettingsFirst(t *testing.T) {
	ts := start(t, true, http.HandlerFunc(redirect))
	cfg := ts.tr.TLSClientConfig.Clone()
	cfg.NextProtos = []string{"h2"}
	tc, err := tls.DialWithDialer(&net.Dialer{Timeout: wait}, "tcp", ts.addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(wait))
	f, err := http2.NewFramer(nil, tc).ReadFrame()
	if err != nil {
		t.Fatalf("nothing before the client's preface: %v", err)
	}
	if s, ok := f.(*http2.SettingsFrame); !ok || s.IsAck() {
		t.Fatalf("first frame %v, want the server's SETTINGS", f)
	}
}
