package proxy_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/h1serve"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/ongoing"
	"github.com/linkgate/linkgate/proxy"
)

// The benchmarks send redirects, the tiny-URL service's hot path, from
// parallel keep-alive clients over loopback: directly to the upstream, through
// a Proxy, and through a bare httputil.ReverseProxy with the same transport
// (the floor). Compare them in one run:
//
//	go test -run '^$' -bench . -benchtime 2s -count 6 ./proxy/ | benchstat -
//
// Allocations include the in-process client and servers.

func benchUpstream(b *testing.B) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		w.Header().Set("Location", "https://example.com/some/long/url")
		w.WriteHeader(http.StatusFound)
	}))
	b.Cleanup(up.Close)
	return up
}

func benchThrough(b *testing.B, h http.Handler) {
	front := httptest.NewServer(h)
	defer front.Close()
	benchGet(b, front.URL+"/abc123")
}

func benchGet(b *testing.B, url string) {
	c := &http.Client{
		Transport:     &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer c.CloseIdleConnections()
	b.SetParallelism(8) // 8 clients per core
	b.ReportAllocs()
	cpu0 := testkit.ProcessCPU()
	b.ResetTimer()
	defer func() {
		// CPU time per request (client, proxy and upstream together) is
		// steadier than ns/op on a machine shared with other work.
		b.ReportMetric(float64(testkit.ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op")
	}()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get(url)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusFound {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}

func BenchmarkDirect(b *testing.B) {
	benchGet(b, benchUpstream(b).URL+"/abc123")
}

func BenchmarkProxy(b *testing.B) {
	up := benchUpstream(b)
	p := proxy.New(plan(b, config(up.URL)), proxy.NewMetrics(prometheus.NewRegistry()), nil)
	defer p.Close()
	benchThrough(b, p)
	b.ReportMetric(float64(p.ConnectionsOpened()), "upstream-conns")
}

func BenchmarkBareReverseProxy(b *testing.B) {
	up := benchUpstream(b)
	u, err := url.Parse(up.URL)
	if err != nil {
		b.Fatal(err)
	}
	tr := proxy.NewTransport(plan(b, config(up.URL)))
	defer tr.CloseIdleConnections()
	benchThrough(b, &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.SetXForwarded()
		},
		Transport: tr,
	})
}

// BenchmarkLoop is the gateway's plain path without its middlewares: a
// redirect relayed by a Proxy under h1serve's loop (through an
// ongoing.Recorder, as the gateway wraps every answer), from keep-alive
// connections, to an upstream that allocates nothing. Allocations are
// the loop's and the proxy's, and the client's http.ReadResponse (7).
func BenchmarkLoop(b *testing.B) {
	p := proxy.New(plan(b, config(testkit.CannedUpstream(b))), proxy.NewMetrics(prometheus.NewRegistry()), nil)
	defer p.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.ServeHTTP(ongoing.StatusWriter(w), r)
	})}
	go h1serve.New(srv).Serve(l)
	testkit.BenchKeepAlive(b, l.Addr().String(), "GET /abc123 HTTP/1.1\r\nHost: bench\r\nUser-Agent: bench/1.0\r\nAccept: */*\r\n\r\n", http.StatusFound)
}
