package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// TestRelayPassesAnswersThrough: the relay passes a keep-alive client's
// GETs to the upstream and their answers back untouched, on one upstream
// connection per client connection, and ends a connection that sends a
// body.
func TestRelayPassesAnswersThrough(t *testing.T) {
	up, conns := testkit.Dialed(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "https://go.dev/?a=b")
		w.Header().Set("X-Seen-Path", r.URL.Path)
		w.WriteHeader(http.StatusFound)
		io.WriteString(w, "moved")
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, _, done := testkit.StartCommand(t, ctx, run, "relay", "-listen", "127.0.0.1:0", "-target", strings.TrimPrefix(up.URL, "http://"))
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for _, path := range []string{"/a", "/b", "/c"} {
		io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "https://go.dev/?a=b" ||
			resp.Header.Get("X-Seen-Path") != path || string(body) != "moved" {
			t.Fatalf("GET %s = %d %v %q", path, resp.StatusCode, resp.Header, body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d upstream connections for one client connection, want 1", n)
	}
	io.WriteString(c, "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("a request with a body: %v, want the connection closed", err)
	}
	cancel()
	if err := testkit.Recv(t, done, time.Minute, "run returning after cancel"); err != nil {
		t.Errorf("run = %v", err)
	}
}
