package testkit

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"
)

// CannedUpstream answers every request on loopback with a redirect (200
// to health checks) written from a constant, reading requests line by
// line into a fixed buffer: an upstream that costs a benchmark next to
// nothing and allocates nothing. It returns its URL.
func CannedUpstream(tb testing.TB) string {
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

// BenchKeepAlive sends req, a raw request head, to addr over and over
// from 8 keep-alive connections per core and checks each answer's status.
// Besides ns/op it reports cpu-ns/op, the process's CPU time per request
// (client and servers together), steadier than ns/op on a shared machine.
func BenchKeepAlive(b *testing.B, addr, req string, status int) {
	raw := []byte(req)
	b.SetParallelism(8)
	b.ReportAllocs()
	cpu0 := ProcessCPU()
	b.ResetTimer()
	defer func() { b.ReportMetric(float64(ProcessCPU()-cpu0)/float64(b.N), "cpu-ns/op") }()
	b.RunParallel(func(pb *testing.PB) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Error(err)
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		for pb.Next() {
			if _, err := c.Write(raw); err != nil {
				b.Error(err)
				return
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != status {
				b.Errorf("status %d, want %d", resp.StatusCode, status)
				return
			}
		}
	})
}

// ProcessCPU is the process's user and system CPU time.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
