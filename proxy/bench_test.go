package proxy_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/h1serve"
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
	cpu0 := cpuTime()
	b.ResetTimer()
	defer func() {
		// CPU time per request (client, proxy and upstream together) is
		// steadier than ns/op on a machine shared with other work.
		b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
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

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
// ongoing.Recorder, as the gateway wraps every answer), from 16
// keep-alive connections, to an upstream on loopback that answers from a
// canned response and allocates nothing. Allocations are the loop's and
// the proxy's.
func BenchmarkLoop(b *testing.B) {
	p := proxy.New(plan(b, config(cannedUpstream(b))), proxy.NewMetrics(prometheus.NewRegistry()), nil)
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
	req := []byte("GET /abc123 HTTP/1.1\r\nHost: bench\r\nUser-Agent: bench/1.0\r\nAccept: */*\r\n\r\n")
	b.SetParallelism(8) // 16 connections on 2 cores
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	defer func() { b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op") }()
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for pb.Next() {
			if _, err := c.Write(req); err != nil {
				b.Error(err)
				return
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != http.StatusFound {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}

// cannedUpstream answers every request on loopback with a redirect (200
// to health checks) written from a constant, reading requests line by
// line: an upstream that costs the benchmark next to nothing. It returns
// its URL.
func cannedUpstream(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
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
						if err != nil || len(bytes.TrimRight(l, "\r\n")) == 0 {
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
