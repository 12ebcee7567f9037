package main

import (
	"crypto/tls"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/linkgate/linkgate/internal/testkit"
)

// TestAbandonedRequests: a request whose client left while the upstream
// took its time (an HTTP/1 connection closed, an HTTP/2 stream reset) is
// logged status=499, counted in requests_total as 4xx, and is no visit,
// though the upstream answered it with a redirect that counts; a
// redirect the client received is counted once.
func TestAbandonedRequests(t *testing.T) {
	t.Parallel()
	arrived := make(chan string, 4)
	up := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz":
			return
		case strings.HasPrefix(r.URL.Path, "/left"):
			arrived <- r.URL.Path
			time.Sleep(testkit.Slack(300 * time.Millisecond)) // the client leaves meanwhile
		}
		http.Redirect(w, r, "https://example.com/", http.StatusFound)
	})
	g := startH2GatewayOver(t, up, "  access_log: true\n",
		"analytics:\n  enabled: true\n  flush_interval: 100ms\n  embedded: {path: "+filepath.Join(t.TempDir(), "analytics")+"}\n")
	waitArrived := func(path string) {
		t.Helper()
		select {
		case p := <-arrived:
			if p != path {
				t.Fatalf("the upstream got %s, want %s", p, path)
			}
		case <-time.After(testkit.Slack(10 * time.Second)):
			t.Fatalf("%s never reached the upstream", path)
		}
	}

	// HTTP/1.1 over TLS: the connection closed while the upstream thinks.
	tc := g.tls.Clone()
	tc.NextProtos = []string{"http/1.1"}
	c, err := tls.Dial("tcp", g.addr, tc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("GET /left1 HTTP/1.1\r\nHost: short.test\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	waitArrived("/left1")
	c.Close()

	// HTTP/2: the stream reset while the upstream thinks.
	h := g.dial(t)
	if err := h.Send(func(fr *http2.Framer) error {
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: h.Block("/left2"), EndStream: true, EndHeaders: true})
	}); err != nil {
		t.Fatal(err)
	}
	waitArrived("/left2")
	if err := h.Send(func(fr *http2.Framer) error { return fr.WriteRSTStream(1, http2.ErrCodeCancel) }); err != nil {
		t.Fatal(err)
	}

	for _, path := range []string{"/left1", "/left2"} {
		testkit.Eventually(t, 20*time.Second, path+" logged 499", func() bool {
			return g.p.logs.Logged("access", map[string]string{"path": path, "status": "499"})
		})
	}

	// A redirect received, after the abandoned requests were done with:
	// the flush that takes its visit takes any they left.
	cl := *g.client
	cl.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := cl.Get("https://" + g.addr + "/go")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("GET /go: %s, want 302", resp.Status)
	}
	const visits = `linkgate_visits_recorded_total{kind="human"}`
	testkit.Eventually(t, 20*time.Second, "the redirect's visit flushed", func() bool { v, _ := g.series(t, visits); return v >= 1 })
	if v := g.metric(t, visits); v != 1 {
		t.Errorf("visits recorded: %v, want 1 (the redirect received; not the two abandoned)", v)
	}
	if !g.p.logs.Logged("access", map[string]string{"path": "/go", "status": "302"}) {
		t.Error("no access line for /go with status=302")
	}
	if n := g.metric(t, `linkgate_requests_total{class="4xx"}`); n != 2 {
		t.Errorf(`requests_total{class="4xx"} = %v, want 2 (the abandoned requests)`, n)
	}
	if n := g.metric(t, `linkgate_requests_total{class="3xx"}`); n != 1 {
		t.Errorf(`requests_total{class="3xx"} = %v, want 1`, n)
	}
}
