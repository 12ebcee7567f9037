package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// TestFloorProxies checks that the floor is a working proxy: redirects pass
// untouched, X-Forwarded-For is set, and keep-alive connections are reused.
func TestFloorProxies(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "https://go.dev/?a=b")
		w.Header().Set("X-Seen-XFF", r.Header.Get("X-Forwarded-For"))
		w.WriteHeader(http.StatusFound)
	}))
	defer up.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, lines, done := testkit.StartCommand(t, ctx, run, "floor", "-listen", "127.0.0.1:0", "-target", up.URL)
	for range 50 {
		resp, err := testkit.Client.Get(base + "/go")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "https://go.dev/?a=b" || resp.Header.Get("X-Seen-XFF") != "127.0.0.1" {
			t.Fatalf("GET /go = %d Location %q XFF %q, want 302 https://go.dev/?a=b 127.0.0.1",
				resp.StatusCode, resp.Header.Get("Location"), resp.Header.Get("X-Seen-XFF"))
		}
	}
	cancel()
	if !lines.Scan() || lines.Text() != "floor: upstream connections opened: 1" {
		t.Errorf("last line %q, want one upstream connection for 50 sequential requests", lines.Text())
	}
	if err := testkit.Recv(t, done, time.Minute, "run returning after cancel"); err != nil {
		t.Errorf("run = %v", err)
	}
}

// TestFloorServesTLS checks that with -cert and -key the floor answers
// over HTTPS, HTTP/1.1 and HTTP/2 each as the client asks by ALPN.
func TestFloorServesTLS(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "https://go.dev/")
		w.WriteHeader(http.StatusFound)
	}))
	defer up.Close()
	ca := edgetest.NewCA(t)
	cert, key, _ := ca.WritePair(t, t.TempDir(), "127.0.0.1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, lines, done := testkit.StartCommand(t, ctx, run, "floor", "-listen", "127.0.0.1:0", "-target", up.URL, "-cert", cert, "-key", key)
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("floor listening on %q, want https://", base)
	}
	ca.GetOverBoth(t, base+"/go", http.StatusFound)
	cancel()
	for lines.Scan() { // the count of upstream connections, at the end
	}
	if err := testkit.Recv(t, done, time.Minute, "run returning after cancel"); err != nil {
		t.Errorf("run = %v", err)
	}
}

func TestFloorBadTarget(t *testing.T) {
	if err := run(context.Background(), []string{"floor", "-target", "127.0.0.1:8081"}, io.Discard); err == nil {
		t.Error("run with a target without scheme = nil, want an error")
	}
	if err := run(context.Background(), []string{"floor", "-cert", "c.pem"}, io.Discard); err == nil || err.Error() != "floor: -cert and -key go together" {
		t.Errorf("run with -cert and no -key = %v, want an error naming both", err)
	}
}
