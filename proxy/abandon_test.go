package proxy_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// waitChecked waits for the proxy's first round of health checks, whose
// connection the tests' requests then reuse.
func waitChecked(t *testing.T, f *fixture) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "the first health check", func() bool { return f.p.CheckRounds() >= 1 })
}

// TestClientGoneBeforeSent: a request whose client left before it was
// sent is not sent, and costs no connection.
func TestClientGoneBeforeSent(t *testing.T) {
	up := newUpstream(t, "a", nil)
	f := start(t, config(up.URL))
	waitChecked(t, f)
	opened := f.p.ConnectionsOpened()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := httptest.NewRecorder()
	f.p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/k", nil).WithContext(ctx))
	if n := up.hits.Load(); n != 0 {
		t.Errorf("the upstream got %d requests whose client had left, want 0", n)
	}
	if resp, _ := f.get(t, "/k"); resp.StatusCode != http.StatusOK {
		t.Fatalf("the next request: %s", resp.Status)
	}
	if n := f.p.ConnectionsOpened() - opened; n != 0 {
		t.Errorf("connections opened: %d, want 0 (the health check's kept)", n)
	}
}

// TestClientGoneKeepsConnection: a request whose client left after it was
// sent has its answer read and dropped when it comes soon after, and its
// connection is kept: the next request goes on it, no new one opened.
func TestClientGoneKeepsConnection(t *testing.T) {
	arrived, answer := make(chan struct{}), make(chan struct{})
	up := newUpstream(t, "a", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(arrived)
			<-answer
		}
		io.WriteString(w, "late")
	})
	f := start(t, config(up.URL))
	waitChecked(t, f)
	opened := f.p.ConnectionsOpened()
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
		close(answer)
	}()
	rec := httptest.NewRecorder()
	f.p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/slow", nil).WithContext(ctx))
	if rec.Body.Len() != 0 {
		t.Errorf("answered a client that left: %d %q", rec.Code, rec.Body)
	}
	if resp, body := f.get(t, "/k"); resp.StatusCode != http.StatusOK || body != "late" {
		t.Fatalf("the next request: %s %q", resp.Status, body)
	}
	if n := f.p.ConnectionsOpened() - opened; n != 0 {
		t.Errorf("connections opened: %d, want 0 (the abandoned request's kept)", n)
	}
}

// TestMaxConnsPerHost: with max_conns_per_host connections in use, a
// request waits dial_timeout for one and is answered 503 with Retry-After
// and a problem body; no connection more is opened, and once the
// connection is free it serves the next request.
func TestMaxConnsPerHost(t *testing.T) {
	arrived, answer := make(chan struct{}), make(chan struct{})
	up := newUpstream(t, "a", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			close(arrived)
			<-answer
		}
	})
	cfg := config(up.URL)
	cfg.MaxConnsPerHost = 1
	cfg.DialTimeout = 200 * time.Millisecond
	f := start(t, cfg)
	waitChecked(t, f)
	opened := f.p.ConnectionsOpened()
	var wg sync.WaitGroup
	wg.Go(func() {
		if resp, _ := f.get(t, "/hold"); resp.StatusCode != http.StatusOK {
			t.Errorf("the request holding the connection: %s", resp.Status)
		}
	})
	<-arrived
	resp, body := f.get(t, "/k")
	wantProblem(t, resp, body, http.StatusServiceUnavailable)
	if ra := resp.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q, want 1", ra)
	}
	if got := f.metric(t, "linkgate_upstream_errors_total", "reason", "busy"); got != 1 {
		t.Errorf("busy errors = %v, want 1", got)
	}
	close(answer)
	wg.Wait()
	if resp, _ := f.get(t, "/k"); resp.StatusCode != http.StatusOK {
		t.Errorf("after the connection was free: %s", resp.Status)
	}
	if n := f.p.ConnectionsOpened() - opened; n != 0 {
		t.Errorf("connections opened: %d, want 0 (the one allowed, the health check's)", n)
	}
	if !f.p.Ready() {
		t.Error("a busy target was taken out")
	}
}
