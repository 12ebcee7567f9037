package h2guard_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"

	"github.com/linkgate/linkgate/h2guard"
	"github.com/linkgate/linkgate/internal/testkit"
)

// The tests here run a real net/http server configured by h2guard, over
// TLS on loopback (and h2c where it says so), against real clients: Go's
// own for well-behaved traffic, testkit.H2Conn for the frames a
// well-behaved client never sends.

const streams = 10 // the servers' MaxConcurrentStreams: a reset budget of 20 at once, 10 a second

// server is a guarded server on loopback.
type server struct {
	ts  *httptest.Server
	reg *prometheus.Registry
	tls *tls.Config // a client's, trusting the server's certificate
}

// start serves h over TLS (h2 by ALPN), or h2c with prior knowledge when
// h2c is set, with a header timeout of headerTimeout.
func start(t *testing.T, h http.Handler, h2c bool, headerTimeout time.Duration) *server {
	t.Helper()
	s := &server{ts: httptest.NewUnstartedServer(h), reg: prometheus.NewRegistry()}
	s.ts.Config.ReadHeaderTimeout = headerTimeout
	s.ts.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: streams, MaxReadFrameSize: 16 << 10}
	s.ts.Config.ErrorLog = nil
	if h2c {
		s.ts.Config.Protocols = new(http.Protocols)
		s.ts.Config.Protocols.SetHTTP1(true)
		s.ts.Config.Protocols.SetUnencryptedHTTP2(true)
	}
	if err := h2guard.Configure(s.ts.Config, h2guard.NewMetrics(s.reg), nil); err != nil {
		t.Fatal(err)
	}
	if h2c {
		s.ts.Start()
	} else {
		s.ts.EnableHTTP2 = true
		s.ts.TLS = &tls.Config{NextProtos: []string{"h2", "http/1.1"}}
		s.ts.StartTLS()
		pool := x509.NewCertPool()
		pool.AddCert(s.ts.Certificate())
		s.tls = &tls.Config{RootCAs: pool, ServerName: "example.com"}
	}
	t.Cleanup(s.ts.Close)
	return s
}

// dial opens a raw HTTP/2 connection to s.
func (s *server) dial(t *testing.T) *testkit.H2Conn {
	t.Helper()
	h, err := testkit.DialH2(s.ts.Listener.Addr().String(), s.tls)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// client is Go's HTTP/2 client for s.
func (s *server) client() *http.Client {
	tr := &http.Transport{ForceAttemptHTTP2: true, Protocols: new(http.Protocols)}
	if s.tls != nil {
		tr.TLSClientConfig = s.tls.Clone()
	}
	if s.tls == nil {
		tr.Protocols.SetUnencryptedHTTP2(true)
	} else {
		tr.Protocols.SetHTTP2(true)
	}
	return &http.Client{Transport: tr, Timeout: testkit.Slack(30 * time.Second)}
}

func (s *server) url(path string) string {
	if s.tls == nil {
		return "http://" + s.ts.Listener.Addr().String() + path
	}
	return s.ts.URL + path
}

// cuts returns the connections cut for reason.
func (s *server) cuts(t *testing.T, reason string) float64 {
	return testkit.Metric(t, s.reg, "linkgate_http2_connections_cut_total", "reason", reason)
}

// flood sends what write writes until the server's GOAWAY arrives (20 s
// at most), then waits up to 10 s for the GOAWAY. It returns the GOAWAY
// and when the flood started.
func flood(t *testing.T, h *testkit.H2Conn, write func(fr *http2.Framer) error) (testkit.H2GoAway, time.Time) {
	t.Helper()
	start := time.Now()
	h.Flood(20*time.Second, write)
	if !h.Wait(10*time.Second, func(h *testkit.H2Conn) bool { _, ok := h.GoAway(); return ok }) {
		_, err, ended := h.Ended()
		t.Fatalf("no GOAWAY after a flood of %v (connection ended: %v, %v)", time.Since(start), ended, err)
	}
	g, _ := h.GoAway()
	return g, start
}

// floodStreams floods h with new streams, each a HEADERS that ends it
// followed by the frame then writes on it, as flood does.
func floodStreams(t *testing.T, h *testkit.H2Conn, then func(fr *http2.Framer, id uint32) error) (testkit.H2GoAway, time.Time) {
	t.Helper()
	block := h.Block("/")
	id := uint32(1)
	return flood(t, h, func(fr *http2.Framer) error {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
			return err
		}
		id += 2
		return then(fr, id-2)
	})
}

// ended waits for the server to close h.
func ended(t *testing.T, h *testkit.H2Conn) {
	t.Helper()
	testkit.Recv(t, h.Done(), 10*time.Second, "the server closing the connection after its GOAWAY")
}

// hello reads the body and answers "hello".
func hello(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	io.WriteString(w, "hello")
}

// TestRapidReset: a client that opens streams and resets them at once
// (CVE-2023-44487) gets GOAWAY ENHANCE_YOUR_CALM after its budget of
// resets, twice MaxConcurrentStreams at once and MaxConcurrentStreams a
// second, over TLS and h2c alike, and the connection is closed; a
// well-behaved client of the same server meanwhile sees every request
// answered.
func TestRapidReset(t *testing.T) {
	for _, h2c := range []bool{false, true} {
		t.Run(map[bool]string{false: "tls", true: "h2c"}[h2c], func(t *testing.T) {
			t.Parallel()
			s := start(t, http.HandlerFunc(hello), h2c, 5*time.Second)
			stop := make(chan struct{})
			var good sync.WaitGroup
			var answered, failed int
			good.Go(func() {
				c := s.client()
				for {
					select {
					case <-stop:
						return
					default:
					}
					resp, err := c.Get(s.url("/good"))
					if err != nil || resp.StatusCode != 200 {
						failed++
						t.Errorf("a well-behaved client during the attack: %v %v", resp, err)
						return
					}
					resp.Body.Close()
					answered++
				}
			})

			h := s.dial(t)
			g, t0 := floodStreams(t, h, func(fr *http2.Framer, id uint32) error {
				return fr.WriteRSTStream(id, http2.ErrCodeCancel)
			})
			close(stop)
			good.Wait()
			if g.Code != http2.ErrCodeEnhanceYourCalm {
				t.Errorf("GOAWAY %v, want ENHANCE_YOUR_CALM", g.Code)
			}
			// The last stream the server took bounds the resets it read: the
			// burst, plus the rate for the time the flood took. A reset of a
			// stream the server had already answered is not charged (it
			// costs no more than any frame): those streams are not counted.
			// The client has read every answer written before the GOAWAY.
			took := g.At.Sub(t0).Seconds()
			charged := 0
			for id := uint32(1); id <= g.LastStream; id += 2 {
				if h.Status(id) == "" {
					charged++
				}
			}
			if max := 2*streams + int(float64(streams)*took) + 1; charged > max {
				t.Errorf("the server took %d streams it had not answered before its GOAWAY (%.2fs in), want at most %d", charged, took, max)
			}
			ended(t, h)
			if got := s.cuts(t, "rst_stream"); got != 1 {
				t.Errorf("connections cut for rst_stream: %v, want 1", got)
			}
			if answered == 0 || failed > 0 {
				t.Errorf("the well-behaved client: %d answered, %d failed", answered, failed)
			}
			t.Logf("GOAWAY %v after %.3fs, last stream %d; the well-behaved client had %d answers meanwhile", g.Code, took, g.LastStream, answered)
		})
	}
}

// TestFloodsOfNothing: each kind of frame that costs the server work and
// gives the client nothing, sent without end, gets GOAWAY
// ENHANCE_YOUR_CALM, counted under its reason, and the connection closed.
func TestFloodsOfNothing(t *testing.T) {
	for _, tc := range []struct {
		reason string
		first  func(h *testkit.H2Conn, fr *http2.Framer) error // opens what the flood needs
		flood  func(fr *http2.Framer) error
	}{
		{"empty_continuation", func(h *testkit.H2Conn, fr *http2.Framer) error {
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.Block("/")})
		}, func(fr *http2.Framer) error { return fr.WriteContinuation(1, false, nil) }},
		{"empty_data", func(h *testkit.H2Conn, fr *http2.Framer) error {
			return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.Block("/upload"), EndHeaders: true})
		}, func(fr *http2.Framer) error { return fr.WriteData(1, false, nil) }},
		{"priority", nil, func(fr *http2.Framer) error {
			return fr.WritePriority(3, http2.PriorityParam{Weight: 15})
		}},
		{"ping", nil, func(fr *http2.Framer) error { return fr.WritePing(false, [8]byte{1}) }},
		{"settings", nil, func(fr *http2.Framer) error { return fr.WriteSettings() }},
		{"window_update", nil, func(fr *http2.Framer) error { return fr.WriteWindowUpdate(0, 1) }},
		{"unknown_frame", nil, func(fr *http2.Framer) error { return fr.WriteRawFrame(0x20, 0, 0, nil) }},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			t.Parallel()
			s := start(t, http.HandlerFunc(hello), false, 5*time.Second)
			h := s.dial(t)
			if tc.first != nil {
				if err := h.Send(func(fr *http2.Framer) error { return tc.first(h, fr) }); err != nil {
					t.Fatal(err)
				}
			}
			g, t0 := flood(t, h, tc.flood)
			if g.Code != http2.ErrCodeEnhanceYourCalm {
				t.Errorf("GOAWAY %v, want ENHANCE_YOUR_CALM", g.Code)
			}
			ended(t, h)
			if got := s.cuts(t, tc.reason); got != 1 {
				t.Errorf("connections cut for %s: %v, want 1", tc.reason, got)
			}
			t.Logf("GOAWAY after %v", g.At.Sub(t0))
		})
	}
}

// TestStreamErrorsCountAsResets: a client that has the server reset its
// streams (here DATA on a stream it already ended: STREAM_CLOSED) instead
// of resetting them itself runs out of the same budget.
func TestStreamErrorsCountAsResets(t *testing.T) {
	t.Parallel()
	s := start(t, http.HandlerFunc(hello), false, 5*time.Second)
	h := s.dial(t)
	g, _ := floodStreams(t, h, func(fr *http2.Framer, id uint32) error {
		return fr.WriteData(id, false, []byte("x"))
	})
	if g.Code != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("GOAWAY %v, want ENHANCE_YOUR_CALM", g.Code)
	}
	if got := h.Resets(http2.ErrCodeStreamClosed); got == 0 {
		t.Errorf("the server reset no stream with STREAM_CLOSED: the test made no stream errors")
	}
	if got := s.cuts(t, "stream_error"); got != 1 {
		t.Errorf("connections cut for stream_error: %v, want 1", got)
	}
}

// TestHeaderTimeout: a header block not finished within the server's
// ReadHeaderTimeout ends the connection, however it is split: one byte of
// CONTINUATION at a time, or a HEADERS frame whose payload trickles in;
// one that finishes in time is answered. (Long for a test: the ways of
// sending a block slowly are its table, each a loop of its own.)
func TestHeaderTimeout(t *testing.T) {
	const timeout = 500 * time.Millisecond
	for _, tc := range []struct {
		name string
		send func(h *testkit.H2Conn, block []byte, stop <-chan struct{}) // sends the block slowly
	}{
		{"continuation bytes", func(h *testkit.H2Conn, block []byte, stop <-chan struct{}) {
			h.Send(func(fr *http2.Framer) error {
				return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:1], EndStream: true})
			})
			for i := 1; i < len(block); i++ {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if h.Send(func(fr *http2.Framer) error { return fr.WriteContinuation(1, false, block[i:i+1]) }) != nil {
					return
				}
			}
		}},
		{"headers payload", func(h *testkit.H2Conn, block []byte, stop <-chan struct{}) {
			// The frame header of a HEADERS frame holding the whole block,
			// then the block a byte at a time.
			n := len(block)
			h.Raw([]byte{byte(n >> 16), byte(n >> 8), byte(n), byte(http2.FrameHeaders),
				byte(http2.FlagHeadersEndHeaders | http2.FlagHeadersEndStream), 0, 0, 0, 1})
			for i := 0; i < n; i++ {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if h.Raw(block[i:i+1]) != nil {
					return
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := start(t, http.HandlerFunc(hello), false, timeout)
			h := s.dial(t)
			block := h.Block("/", "x-long", strings.Repeat("a", 10000))
			stop := make(chan struct{})
			defer close(stop)
			t0 := time.Now()
			go tc.send(h, block, stop)
			if !h.Wait(20*time.Second, func(h *testkit.H2Conn) bool { _, ok := h.GoAway(); return ok }) {
				t.Fatal("no GOAWAY within 20 s")
			}
			g, _ := h.GoAway()
			if took := g.At.Sub(t0); took < timeout || g.Code != http2.ErrCodeEnhanceYourCalm {
				t.Errorf("GOAWAY %v after %v, want ENHANCE_YOUR_CALM after the header timeout (%v)", g.Code, took, timeout)
			}
			ended(t, h)
			if got := s.cuts(t, "header_timeout"); got != 1 {
				t.Errorf("connections cut for header_timeout: %v, want 1", got)
			}
		})
	}

	t.Run("finished in time", func(t *testing.T) {
		t.Parallel()
		s := start(t, http.HandlerFunc(hello), false, 10*time.Second)
		h := s.dial(t)
		block := h.Block("/")
		// Three pieces 100 ms apart, then the same twice more on new
		// streams: the deadline an earlier block armed moves on.
		for stream := uint32(1); stream <= 5; stream += 2 {
			for i, piece := range [][]byte{block[:1], block[1:2], block[2:]} {
				if i > 0 {
					time.Sleep(100 * time.Millisecond)
				}
				h.Send(func(fr *http2.Framer) error {
					if i == 0 {
						return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: piece, EndStream: true})
					}
					return fr.WriteContinuation(stream, i == 2, piece)
				})
			}
			if !h.Wait(10*time.Second, func(h *testkit.H2Conn) bool { return h.Status(stream) != "" }) {
				t.Fatalf("stream %d not answered", stream)
			}
			if got := h.Status(stream); got != "200" {
				t.Errorf("stream %d: %s, want 200", stream, got)
			}
		}
	})
}

// TestWellBehavedClients: what browsers and Go's client do is never cut:
// a download of 8 MB (Go's client hands its window back every 4 kB of it:
// over 2000 WINDOW_UPDATE frames), hundreds of requests over one
// connection, a few of them cancelled before their answer and many reset
// after it (Go's client resets a stream whose body is closed before its
// end arrived), and a POST body in many DATA frames.
func TestWellBehavedClients(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 512<<10)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			io.WriteString(w, big)
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		default:
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprintf(w, "%d", n)
		}
	})
	for _, h2c := range []bool{false, true} {
		t.Run(map[bool]string{false: "tls", true: "h2c"}[h2c], func(t *testing.T) {
			t.Parallel()
			s := start(t, h, h2c, 5*time.Second)
			c := s.client()
			resp, err := c.Get(s.url("/big"))
			if err != nil {
				t.Fatal(err)
			}
			n, err := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || n != int64(len(big)) || resp.ProtoMajor != 2 {
				t.Errorf("download: %d bytes of %d over %s (%v)", n, len(big), resp.Proto, err)
			}
			resp, err = c.Post(s.url("/upload"), "application/octet-stream", strings.NewReader(big[:1<<20]))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != fmt.Sprint(1<<20) {
				t.Errorf("upload: the server read %s bytes, want %d", b, 1<<20)
			}
			// As many at once as the connection takes, so that they share it.
			var wg sync.WaitGroup
			for w := range streams {
				wg.Go(func() {
					for i := range 30 {
						if i == 5 { // cancelled: Go's client resets the stream, 10 in all
							ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
							req, _ := http.NewRequestWithContext(ctx, "GET", s.url("/slow"), nil)
							if resp, err := c.Do(req); err == nil {
								resp.Body.Close()
							}
							cancel()
							continue
						}
						resp, err := c.Get(s.url("/x"))
						if err != nil {
							t.Errorf("worker %d, request %d: %v", w, i, err)
							return
						}
						resp.Body.Close()
					}
				})
			}
			wg.Wait()
			if got := testkit.Metric(t, s.reg, "linkgate_http2_connections_cut_total"); got != 0 {
				t.Errorf("connections cut: %v, want none: %v", got, testkit.Samples(t, s.reg)["linkgate_http2_connections_cut_total"])
			}
		})
	}
}

// TestRepeatedSettings: a SETTINGS frame that repeats a setting is taken
// in order, the last value holding (RFC 9113 §6.5.3), where Go's server
// alone would close the connection; an invalid value among them still
// ends it with its own error, as in-order processing would.
func TestRepeatedSettings(t *testing.T) {
	t.Parallel()
	s := start(t, http.HandlerFunc(hello), false, 5*time.Second)

	h := s.dial(t)
	h.Send(func(fr *http2.Framer) error {
		return fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
	})
	h.Send(func(fr *http2.Framer) error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.Block("/"), EndStream: true, EndHeaders: true})
	})
	if !h.Wait(10*time.Second, func(h *testkit.H2Conn) bool { return len(h.Data(1)) > 0 }) {
		_, err, _ := h.Ended()
		t.Fatalf("no DATA after repeated settings (%v)", err)
	}
	if got := h.Data(1); got[0] != 1 {
		t.Errorf("DATA frames of %v bytes, want 1 (the window's last value)", got)
	}

	h = s.dial(t)
	h.Send(func(fr *http2.Framer) error {
		return fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 31}, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1})
	})
	if !h.Wait(10*time.Second, func(h *testkit.H2Conn) bool { _, ok := h.GoAway(); return ok }) {
		t.Fatal("no GOAWAY for an invalid window size")
	}
	if g, _ := h.GoAway(); g.Code != http2.ErrCodeFlowControl {
		t.Errorf("GOAWAY %v, want FLOW_CONTROL_ERROR", g.Code)
	}
}

// TestServerAsBefore: the guard changes nothing else: requests see their
// TLS state (none over h2c), an HTTP/1 client is served beside, and
// Shutdown drains an HTTP/2 connection: GOAWAY NO_ERROR, the request in
// flight answered.
func TestServerAsBefore(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}, 1), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			entered <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		fmt.Fprintf(w, "%s tls=%v", r.Proto, r.TLS != nil)
	})
	for _, h2c := range []bool{false, true} {
		s := start(t, h, h2c, 5*time.Second)
		resp, err := s.client().Get(s.url("/"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("HTTP/2.0 tls=%v", !h2c); string(b) != want {
			t.Errorf("h2c=%v: %q, want %q", h2c, b, want)
		}
		h1 := &http.Transport{Protocols: new(http.Protocols)}
		h1.Protocols.SetHTTP1(true)
		if s.tls != nil {
			h1.TLSClientConfig = s.tls.Clone()
			h1.TLSClientConfig.NextProtos = []string{"http/1.1"}
		}
		if resp, err := (&http.Client{Transport: h1}).Get(s.url("/")); err != nil || resp.ProtoMajor != 1 {
			t.Errorf("h2c=%v: HTTP/1: %v %v", h2c, resp, err)
		} else {
			resp.Body.Close()
		}
	}

	s := start(t, h, false, 5*time.Second)
	c := s.dial(t)
	c.Send(func(fr *http2.Framer) error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.Block("/wait"), EndStream: true, EndHeaders: true})
	})
	testkit.Recv(t, entered, 10*time.Second, "the request at the handler")
	shut := make(chan error, 1)
	go func() { shut <- s.ts.Config.Shutdown(context.Background()) }()
	if !c.Wait(10*time.Second, func(h *testkit.H2Conn) bool { _, ok := h.GoAway(); return ok }) {
		t.Fatal("Shutdown sent no GOAWAY")
	}
	if g, _ := c.GoAway(); g.Code != http2.ErrCodeNo {
		t.Errorf("Shutdown's GOAWAY %v, want NO_ERROR", g.Code)
	}
	close(release)
	if !c.Wait(10*time.Second, func(h *testkit.H2Conn) bool { return h.Status(1) == "200" }) {
		t.Error("the request in flight was not answered during the drain")
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(testkit.Slack(10 * time.Second)):
		t.Error("Shutdown did not return after the drain")
	}
}
