package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/gateway"
)

// BenchmarkServeVisit is one redirect through the whole gateway, as every
// visit to a link goes: the metrics middleware, a rule with count_status
// (the limiter waits for the upstream's status), the visit counter and the
// proxy, to an upstream on loopback that answers from a canned response
// and allocates nothing, so that the allocations reported are the
// gateway's own (TestServeVisitAllocs holds them to a budget).
func BenchmarkServeVisit(b *testing.B) {
	g, req := visitGateway(b)
	w := &headerWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		serveVisit(b, g, w, req)
	}
}

// TestServeVisitAllocs holds a proxied visit with an IP rule and
// analytics on to a budget of allocations (the 40; 93 before the
// proxy had its own client). Allocations, unlike times, do not depend on
// how busy the machine is.
func TestServeVisitAllocs(t *testing.T) {
	const budget = 40
	g, req := visitGateway(t)
	w := &headerWriter{h: http.Header{}}
	serveVisit(t, g, w, req) // connections and first-visit state
	got := testing.AllocsPerRun(500, func() { serveVisit(t, g, w, req) })
	t.Logf("%.1f allocations per proxied visit", got)
	if got > budget {
		t.Errorf("%.1f allocations per proxied visit, budget %d", got, budget)
	}
}

func serveVisit(tb testing.TB, g *gateway.Gateway, w *headerWriter, req *http.Request) {
	clear(w.h)
	w.status = 0
	g.ServeHTTP(w, req)
	if w.status != http.StatusFound {
		tb.Fatalf("status %d, want 302", w.status)
	}
}

// visitGateway is a gateway with a count_status IP rule and analytics on,
// in front of a canned redirecting upstream, and a visit to send it.
func visitGateway(tb testing.TB) (*gateway.Gateway, *http.Request) {
	up := cannedUpstream(tb)
	cfg, err := config.Parse(fmt.Appendf(nil, `server: {listen: 127.0.0.1:0}
admin: {listen: ""}
upstream: {targets: [%s]}
rules:
  - {name: visits, match: {path: "/{short_key}"}, key: ip, limits: [1000000000/s], count_status: [302]}
analytics:
  embedded: {path: %s}
`, up, filepath.Join(tb.TempDir(), "analytics")))
	if err != nil {
		tb.Fatal(err)
	}
	plan, err := gateway.Compile(cfg, getenv)
	if err != nil {
		tb.Fatal(err)
	}
	g, err := gateway.New(plan, gateway.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { g.Close(context.Background()) })
	return g, httptest.NewRequest("GET", "/abc123", nil)
}

// cannedUpstream serves every request on loopback with a redirect (200 to
// health checks) written from a constant, reading requests line by line
// into a fixed buffer: a web server that costs the benchmark nothing. It
// returns its URL.
func cannedUpstream(tb testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	redirect := []byte("HTTP/1.1 302 Found\r\nLocation: https://example.com/some/long/url\r\nContent-Length: 0\r\n\r\n")
	ok := []byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						return
					}
					resp := redirect
					if bytes.HasPrefix(line, []byte("GET /healthz ")) {
						resp = ok
					}
					for { // the rest of the head; GETs have no body
						l, err := br.ReadSlice('\n')
						if err != nil {
							return
						}
						if len(bytes.TrimRight(l, "\r\n")) == 0 {
							break
						}
					}
					if _, err := c.Write(resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// headerWriter is a ResponseWriter that keeps the status and drops the body.
type headerWriter struct {
	h      http.Header
	status int
}

func (w *headerWriter) Header() http.Header { return w.h }
func (w *headerWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(p), nil
}
func (w *headerWriter) WriteHeader(s int) {
	if w.status == 0 {
		w.status = s
	}
}
