package h1serve_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/linkgate/linkgate/h1serve"
)

// BenchmarkServe: a keep-alive GET answered with a small redirect (what
// the gateway relays most), by the loop and by net/http, from 16
// connections at once over loopback. ns/op is wall time per request with
// both sides on the machine; allocs/op counts both sides' allocations
// (the client's are the same for both).
func BenchmarkServe(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "https://example.com/a/long/path")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusFound)
	})
	for _, tc := range []struct {
		name  string
		serve func(*http.Server, net.Listener) error
	}{
		{"h1serve", func(srv *http.Server, l net.Listener) error { return h1serve.New(srv).Serve(l) }},
		{"net-http", func(srv *http.Server, l net.Listener) error { return srv.Serve(l) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := &http.Server{Handler: h}
			go tc.serve(srv, l)
			defer l.Close()
			req := []byte("GET /go HTTP/1.1\r\nHost: bench\r\nUser-Agent: bench\r\n\r\n")
			b.SetParallelism(8) // 16 connections on 2 cores
			b.ReportAllocs()
			b.ResetTimer()
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
					if err := readAnswer(br); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// readAnswer reads one response with a Content-Length and checks its
// status is 302.
func readAnswer(br *bufio.Reader) error {
	n := -1
	for first := true; ; first = false {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if first && !bytes.HasPrefix(line, []byte("HTTP/1.1 302 ")) {
			return io.ErrUnexpectedEOF
		}
		if len(line) == 2 {
			break
		}
		if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
			n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	if n < 0 {
		return io.ErrUnexpectedEOF
	}
	_, err := br.Discard(n)
	return err
}
