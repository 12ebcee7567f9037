package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// The HTTP/2 abuse a client can try, against the real binary over TLS:
// each gets GOAWAY ENHANCE_YOUR_CALM within its budget (README, "HTTP/2
// abuse") and the connection closed, costing the gateway little CPU,
// while a well-behaved client of the same gateway is answered throughout.

// h2Gateway is a gateway serving TLS (and h2c on its internal listener) in
// front of an upstream that answers every path with a short body.
type h2Gateway struct {
	p      *process
	tls    *tls.Config // a client's, trusting the gateway's certificate
	addr   string      // server.listen
	h2c    string      // server.internal_listen
	client *http.Client
}

func startH2Gateway(t *testing.T, server string) *h2Gateway {
	t.Helper()
	return startH2GatewayOver(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("hello from the upstream\n"))
	}), server, "")
}

// startH2GatewayOver is startH2Gateway in front of an upstream of its own,
// server's lines added to the server section and analytics, when not "",
// in place of the analytics section.
func startH2GatewayOver(t *testing.T, upstream http.Handler, server, analytics string) *h2Gateway {
	t.Helper()
	ca := edgetest.NewCA(t)
	certFile, keyFile, _ := ca.WritePair(t, t.TempDir(), "short.test", "127.0.0.1")
	up := httptest.NewServer(upstream)
	t.Cleanup(up.Close)
	cfg := strings.Replace(testkit.BaseConfig(up.URL), "  shutdown_timeout: 10s\n", fmt.Sprintf(`  shutdown_timeout: 10s
  internal_listen: 127.0.0.1:0
  tls: {cert_file: %s, key_file: %s}
%s`, certFile, keyFile, server), 1)
	if analytics != "" {
		cfg = strings.Replace(cfg, "analytics:\n  enabled: false\n", analytics, 1)
	}
	p, _ := startGateway(t, cfg, tokenEnv)
	g := &h2Gateway{p: p, tls: &tls.Config{RootCAs: ca.Pool(), ServerName: "short.test"},
		addr: strings.TrimPrefix(p.url("gateway", ""), "http://"), h2c: strings.TrimPrefix(p.url("h2c", ""), "http://")}
	tr := &http.Transport{TLSClientConfig: g.tls.Clone(), ForceAttemptHTTP2: true}
	g.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	return g
}

// cuts returns the connections the gateway cut for reason.
func (g *h2Gateway) cuts(t *testing.T, reason string) int {
	t.Helper()
	return int(g.metric(t, fmt.Sprintf(`linkgate_http2_connections_cut_total{reason=%q}`, reason)))
}

// metric returns the value of series (name{labels}) in the gateway's
// /metrics.
func (g *h2Gateway) metric(t *testing.T, series string) float64 {
	t.Helper()
	v, ok := g.series(t, series)
	if !ok {
		t.Fatalf("no series %s in /metrics", series)
	}
	return v
}

// series is metric for a series that may not be there yet (a labelled
// counter before its first count).
func (g *h2Gateway) series(t *testing.T, series string) (float64, bool) {
	t.Helper()
	body := testkit.Body(t, g.p.url("admin", "/metrics"))
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n, true
		}
	}
	return 0, false
}

const upstreamOpened = "linkgate_upstream_connections_opened_total"

// meanwhile runs a well-behaved HTTP/2 client against g, a request every
// 10 ms, until the returned function is called, which fails t if any
// request failed or was answered 5xx, and returns how many were answered.
func (g *h2Gateway) meanwhile(t *testing.T) (stop func() int) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	answered := 0
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
			resp, err := g.client.Get("https://" + g.addr + "/good")
			if err != nil {
				t.Errorf("a well-behaved client during the attack: %v", err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode >= 500 || resp.ProtoMajor != 2 {
				t.Errorf("a well-behaved client during the attack: %s %s", resp.Proto, resp.Status)
				return
			}
			answered++
		}
	})
	return func() int {
		close(done)
		testkit.Await(t, wg.Wait, 5*time.Minute, "the well-behaved client stopping")
		if answered == 0 {
			t.Error("the well-behaved client had no answer during the attack")
		}
		return answered
	}
}

// dial opens a raw HTTP/2 connection to the gateway over TLS.
func (g *h2Gateway) dial(t *testing.T) *testkit.H2Conn {
	t.Helper()
	h, err := testkit.DialH2(g.addr, g.tls)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// cpuOf returns the CPU time process pid used so far.
func cpuOf(t *testing.T, pid int) time.Duration {
	f, ok := procStat(fmt.Sprintf("/proc/%d/stat", pid))
	if !ok {
		t.Fatalf("no /proc/%d/stat", pid)
	}
	return statCPU(f)
}

// procStat returns the fields of a /proc/PID/stat file after the command
// (which may hold spaces): state is f[0], the parent f[1], utime f[11] and
// stime f[12].
func procStat(path string) (f []string, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	s := string(b)
	f = strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return f, len(f) > 12
}

// statCPU is the user and system time of procStat's fields, in clock
// ticks of 10 ms (Linux's USER_HZ).
func statCPU(f []string) time.Duration {
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// TestHTTP2RapidReset: a client opening streams and resetting them at once
// (CVE-2023-44487) gets GOAWAY ENHANCE_YOUR_CALM once past its budget of
// resets (twice max_concurrent_streams at once, max_concurrent_streams a
// second), the connection closed; a well-behaved client is answered
// throughout, never 5xx; and the streams cost the upstream no more
// connections than the streams the gateway serves at once (a request not
// yet sent is not, one sent has its answer drained and its connection
// kept), however many were reset.
func TestHTTP2RapidReset(t *testing.T) {
	t.Parallel()
	const streams = 100
	g := startH2Gateway(t, fmt.Sprintf("  max_concurrent_streams: %d\n", streams))
	stop := g.meanwhile(t)
	opened0 := g.metric(t, upstreamOpened)
	h := g.dial(t)
	block := h.Block("/reset")
	stream := uint32(1)
	t0 := time.Now()
	sent := h.Flood(10*time.Second, func(fr *http2.Framer) error {
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: block, EndStream: true, EndHeaders: true}); err != nil {
			return err
		}
		stream += 2
		return fr.WriteRSTStream(stream-2, http2.ErrCodeCancel)
	})
	if !h.Wait(10*time.Second, func(h *testkit.H2Conn) bool { _, ok := h.GoAway(); return ok }) {
		t.Fatalf("no GOAWAY after %d streams reset", sent)
	}
	answered := stop()
	gw, _ := h.GoAway()
	took := gw.At.Sub(t0)
	if gw.Code != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("GOAWAY %v, want ENHANCE_YOUR_CALM", gw.Code)
	}
	// The streams the gateway took before its GOAWAY: the budget's burst
	// and its rate for the time the flood took, and a margin for streams
	// answered before their reset came (those cost no more than requests).
	if taken, most := int(gw.LastStream+1)/2, 2*streams+int(streams*took.Seconds())+streams; taken > most {
		t.Errorf("the gateway took %d streams before its GOAWAY (%v in), want at most %d", taken, took, most)
	}
	testkit.Recv(t, h.Done(), 10*time.Second, "the connection closed after the GOAWAY")
	if got := g.cuts(t, "rst_stream"); got != 1 {
		t.Errorf("connections cut for rst_stream: %d, want 1", got)
	}
	// The attack's handlers run at most max_concurrent_streams at once;
	// the well-behaved client and the health checks add a few.
	opened := g.metric(t, upstreamOpened) - opened0
	if opened > streams+8 {
		t.Errorf("upstream connections opened during the attack: %v, want at most %d (the streams served at once, and a few)", opened, streams+8)
	}
	testkit.Eventually(t, 10*time.Second, "the cut logged", func() bool {
		return g.p.logs.Logged("HTTP/2 connection cut: GOAWAY ENHANCE_YOUR_CALM", map[string]string{"reason": "rst_stream"})
	})
	t.Logf("GOAWAY %v after %v and %d streams reset (the gateway took %d); %v upstream connections opened; %d answers to the well-behaved client meanwhile",
		gw.Code, took, sent, (gw.LastStream+1)/2, opened, answered)
}

// TestHTTP2EmptyContinuationFlood: HEADERS without END_HEADERS, then empty
// CONTINUATION frames without end, which Go's server reads forever: the
// connection gets GOAWAY ENHANCE_YOUR_CALM and is closed within 2 s, and
// the gateway spends little CPU on it; a well-behaved client is answered
// throughout.
func TestHTTP2EmptyContinuationFlood(t *testing.T) {
	t.Parallel()
	g := startH2Gateway(t, "")
	stop := g.meanwhile(t)
	h := g.dial(t)
	pid := g.p.cmd.Process.Pid
	cpu0, t0 := cpuOf(t, pid), time.Now()
	if err := h.Send(func(fr *http2.Framer) error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.Block("/flood"), EndStream: true})
	}); err != nil {
		t.Fatal(err)
	}
	sent := h.Flood(10*time.Second, func(fr *http2.Framer) error { return fr.WriteContinuation(1, false, nil) })
	testkit.Recv(t, h.Done(), 10*time.Second, fmt.Sprintf("the connection closed after a flood of %d empty CONTINUATION frames", sent))
	ended, _, _ := h.Ended()
	closed, cpu := ended.Sub(t0), cpuOf(t, pid)-cpu0
	answered := stop()
	gw, ok := h.GoAway()
	if !ok || gw.Code != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("GOAWAY %v (%v), want ENHANCE_YOUR_CALM", gw.Code, ok)
	}
	if closed > testkit.Slack(2*time.Second) { // the flood goes on for 10 s
		t.Errorf("the connection was closed %v after the flood began, want within 2 s (stretched by the pace)", closed)
	}
	// Generous: the gateway's CPU over the flood, the well-behaved client's
	// requests included, with the race detector's cost when it is on.
	if cpu > time.Second {
		t.Errorf("the gateway used %v of CPU during the flood, want less than 1 s", cpu)
	}
	if got := g.cuts(t, "empty_continuation"); got != 1 {
		t.Errorf("connections cut for empty_continuation: %d, want 1", got)
	}
	t.Logf("GOAWAY after %v, closed after %v; %d frames sent; the gateway's CPU meanwhile %v; %d answers to the well-behaved client",
		gw.At.Sub(t0), closed, sent, cpu, answered)
}

// TestHTTP2SlowHeaderBlock: a header block sent a byte of CONTINUATION at
// a time, never finished, ends the connection at server.read_header_timeout
// (checked every quarter of it), GOAWAY ENHANCE_YOUR_CALM.
func TestHTTP2SlowHeaderBlock(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	g := startH2Gateway(t, fmt.Sprintf("  read_header_timeout: %v\n", timeout))
	h := g.dial(t)
	block := h.Block("/slow", "x-slow", strings.Repeat("s", 1000))
	t0 := time.Now()
	h.Send(func(fr *http2.Framer) error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block[:1], EndStream: true})
	})
	go func() {
		for i := 1; i < len(block); i++ {
			select {
			case <-h.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			if h.Send(func(fr *http2.Framer) error { return fr.WriteContinuation(1, false, block[i:i+1]) }) != nil {
				return
			}
		}
	}()
	if !h.Wait(30*time.Second, func(h *testkit.H2Conn) bool { _, ok := h.GoAway(); return ok }) {
		t.Fatal("no GOAWAY within 30 s")
	}
	gw, _ := h.GoAway()
	if took := gw.At.Sub(t0); took < timeout || gw.Code != http2.ErrCodeEnhanceYourCalm {
		t.Errorf("GOAWAY %v after %v, want ENHANCE_YOUR_CALM after read_header_timeout (%v)", gw.Code, took, timeout)
	}
	testkit.Recv(t, h.Done(), 10*time.Second, "the connection closed after the GOAWAY")
	if got := g.cuts(t, "header_timeout"); got != 1 {
		t.Errorf("connections cut for header_timeout: %d, want 1", got)
	}
	t.Logf("GOAWAY %v after %v", gw.Code, gw.At.Sub(t0))
}

// TestHTTP2StreamEndsAlone: what ends one stream whose body is unread ends
// that stream, not the connection: a body that stalls past body_timeout
// is answered 408, a stream the client resets while its body is on its
// way upstream is dropped, and the connection carries the next request,
// with no GOAWAY (x/net/http2 sends one for an answer that asks to close
// the connection, as the 408 once did) and nothing counted as an upstream
// failure.
func TestHTTP2StreamEndsAlone(t *testing.T) {
	t.Parallel()
	reached := make(chan struct{}, 1)
	g := startH2GatewayOver(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/reset" {
			io.ReadFull(r.Body, make([]byte, 5))
			reached <- struct{}{}
		}
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}), "  body_timeout: 1s\n", "")
	h := g.dial(t)
	post := func(stream uint32, path string) {
		block := h.RequestBlock("POST", path)
		h.Send(func(fr *http2.Framer) error {
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: block, EndHeaders: true}); err != nil {
				return err
			}
			return fr.WriteData(stream, false, []byte("hello")) // and no more
		})
	}
	answered := func(stream uint32) string {
		h.Wait(30*time.Second, func(h *testkit.H2Conn) bool { _, _, ended := h.Ended(); return ended || h.Status(stream) != "" })
		return h.Status(stream)
	}
	noGoAway := func(after string) {
		if gw, ok := h.GoAway(); ok {
			t.Fatalf("GOAWAY %v (last stream %d) after %s: the connection was ended for one stream", gw.Code, gw.LastStream, after)
		}
	}

	post(1, "/stalled")
	if got := answered(1); got != "408" {
		t.Errorf("a body stalled past body_timeout: %q, want 408", got)
	}
	noGoAway("the 408")
	post(3, "/reset")
	testkit.Recv(t, reached, 10*time.Second, "the body's first bytes at the upstream")
	h.Send(func(fr *http2.Framer) error { return fr.WriteRSTStream(3, http2.ErrCodeCancel) })
	h.Send(func(fr *http2.Framer) error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 5, BlockFragment: h.Block("/after"), EndStream: true, EndHeaders: true})
	})
	if got := answered(5); got != "200" {
		t.Errorf("the next request on the connection: %q, want 200", got)
	}
	noGoAway("the reset")
	if got := h.Status(3); got != "" {
		t.Errorf("the reset stream was answered %s", got)
	}
	for _, reason := range []string{"failed", "timeout"} {
		if n := g.metric(t, fmt.Sprintf(`linkgate_upstream_errors_total{reason=%q}`, reason)); n != 0 {
			t.Errorf("linkgate_upstream_errors_total{reason=%q} = %v, want 0", reason, n)
		}
	}
}
