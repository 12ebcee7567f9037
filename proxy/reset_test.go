package proxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/proxy"
)

// TestClientGoneMidBody: a client that goes away while its body is on its
// way upstream (an HTTP/2 stream reset: the request's context ends, then
// the body's read fails) is not answered, and neither counted nor logged
// as an upstream failure, nor told to close its connection: on HTTP/2 a
// "Connection: close" is a GOAWAY for every other stream of the
// connection. The body's read is made to fail only once the proxy stops
// its writer, the order in which the two failures once reached the proxy
// now and then (h2spec's case 5.1/10 failed on a GOAWAY sent after a
// stream's reset).
func TestClientGoneMidBody(t *testing.T) {
	for _, proto := range []int{1, 2} {
		reached := make(chan struct{}, 1)
		addr, _ := testkit.RawHTTP(t, func(c net.Conn, br *bufio.Reader, req *http.Request) bool {
			io.ReadFull(req.Body, make([]byte, 5))
			reached <- struct{}{}
			br.ReadByte() // no answer: waits for the proxy to give up
			return false
		})
		reg := prometheus.NewRegistry()
		p := proxy.New(plan(t, config("http://"+addr)), proxy.NewMetrics(reg), nil)
		defer p.Close()

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w := &stoppingWriter{ResponseRecorder: httptest.NewRecorder(), stopped: make(chan struct{})}
		body := &resetBody{first: "hello", stopped: w.stopped}
		r := httptest.NewRequestWithContext(ctx, "POST", "http://short.test/x", body)
		r.ContentLength = -1
		r.ProtoMajor, r.ProtoMinor = proto, 0
		served := make(chan struct{})
		go func() {
			defer close(served)
			p.ServeHTTP(w, r)
		}()
		testkit.Recv(t, reached, 10*time.Second, "the body's first bytes at the upstream")
		cancel() // the client resets the stream
		testkit.Recv(t, served, 10*time.Second, "the proxy's return")

		if w.wrote || w.Header().Get("Connection") != "" {
			t.Errorf("HTTP/%d: the client gone mid-body was answered %d, Connection %q; want no answer", proto, w.Code, w.Header().Get("Connection"))
		}
		for _, reason := range []string{"failed", "timeout", "unreachable", "busy"} {
			if n := testkit.Metric(t, reg, "linkgate_upstream_errors_total", "reason", reason); n != 0 {
				t.Errorf("HTTP/%d: linkgate_upstream_errors_total{reason=%q} = %v, want 0", proto, reason, n)
			}
		}
	}
}

// stoppingWriter is a response writer whose read deadline set in the past
// (the proxy stopping its body's writer) closes stopped.
type stoppingWriter struct {
	*httptest.ResponseRecorder
	stopped chan struct{}
	once    sync.Once
	wrote   bool
}

func (w *stoppingWriter) SetReadDeadline(d time.Time) error {
	if !d.IsZero() && time.Until(d) < 0 {
		w.once.Do(func() { close(w.stopped) })
	}
	return nil
}

func (w *stoppingWriter) WriteHeader(code int) {
	w.wrote = true
	w.ResponseRecorder.WriteHeader(code)
}

func (w *stoppingWriter) Write(p []byte) (int, error) {
	w.wrote = true
	return w.ResponseRecorder.Write(p)
}

// resetBody reads first, then fails once stopped is closed, as a reset
// stream's body fails.
type resetBody struct {
	first   string
	stopped <-chan struct{}
}

func (b *resetBody) Read(p []byte) (int, error) {
	if b.first != "" {
		n := copy(p, b.first)
		b.first = b.first[n:]
		return n, nil
	}
	<-b.stopped
	return 0, errors.New("stream reset by the client")
}

func (b *resetBody) Close() error { return nil }
