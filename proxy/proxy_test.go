package proxy_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/proxy"
)

// config returns a valid Config for targets whose periodic health check
// stays out of the way (the first, immediate check still runs).
func config(targets ...string) proxy.Config {
	c := proxy.DefaultConfig()
	c.Targets = targets
	c.HealthCheck.Interval = time.Hour
	return c
}

type fixture struct {
	p     *proxy.Proxy
	reg   *prometheus.Registry
	front *httptest.Server // serves p on loopback
}

// plan compiles cfg with the given trusted proxies and X-User-ID as the
// identity header.
func plan(t testing.TB, cfg proxy.Config, trusted ...string) *proxy.Plan {
	t.Helper()
	tr, err := forwarded.Parse(trusted)
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.Compile(cfg, tr, forwarded.NewPolicy([]string{"X-User-ID"}, false))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func start(t *testing.T, cfg proxy.Config, trusted ...string) *fixture {
	t.Helper()
	reg := prometheus.NewRegistry()
	p := proxy.New(plan(t, cfg, trusted...), proxy.NewMetrics(reg), nil)
	t.Cleanup(p.Close)
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	return &fixture{p: p, reg: reg, front: front}
}

// get sends GET path to the proxy.
func (f *fixture) get(t *testing.T, path string) (*http.Response, string) {
	t.Helper()
	return testkit.Do(t, http.MethodGet, f.front.URL+path, nil)
}

// metric returns the value of the counter or gauge name with the given
// label pairs.
func (f *fixture) metric(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return testkit.Metric(t, f.reg, name, labels...)
}

func (f *fixture) healthy(t *testing.T, target string) float64 {
	t.Helper()
	if !testkit.HasMetric(t, f.reg, "linkgate_upstream_healthy", "target", target) {
		t.Fatalf("no linkgate_upstream_healthy series for %s", target)
	}
	return f.metric(t, "linkgate_upstream_healthy", "target", target)
}

// upstream is a test web server that names itself in X-Upstream and counts
// the non-health requests it served.
type upstream struct {
	*httptest.Server
	name         string
	hits, checks atomic.Int64
	closeChecks  atomic.Bool // answer health checks with Connection: close
}

func newUpstream(t *testing.T, name string, h http.HandlerFunc) *upstream {
	t.Helper()
	u := &upstream{name: name}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			u.checks.Add(1)
			if u.closeChecks.Load() {
				w.Header().Set("Connection", "close")
			}
			return
		}
		u.hits.Add(1)
		w.Header().Set("X-Upstream", name)
		if h != nil {
			h(w, r)
		}
	}))
	t.Cleanup(u.Close)
	return u
}

// wantProblem checks a problem answer of the proxy: testkit.Problem, and
// what the proxy adds: the type about:blank, the status text as the
// title, a detail, and no upstream address.
func wantProblem(t *testing.T, resp *http.Response, body string, status int) {
	t.Helper()
	p := testkit.Problem(t, resp, body, status)
	if p["type"] != "about:blank" || p["title"] != http.StatusText(status) || p["detail"] == nil || p["detail"] == "" {
		t.Errorf("problem = %v, want about:blank %q %d with a detail", p, http.StatusText(status), status)
	}
	if strings.Contains(body, "127.0.0.1") {
		t.Errorf("problem body leaks an upstream address: %s", body)
	}
}

func TestRedirectPassesIntact(t *testing.T) {
	up := newUpstream(t, "a", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/abs":
			http.Redirect(w, r, "https://example.com/a/long/path?q=1&r=%2F#frag", http.StatusFound)
		case "/rel":
			w.Header().Set("Location", "/elsewhere?x=y")
			w.WriteHeader(http.StatusMovedPermanently)
		}
	})
	f := start(t, config(up.URL))
	for path, want := range map[string]struct {
		status   int
		location string
	}{
		"/abs": {302, "https://example.com/a/long/path?q=1&r=%2F#frag"},
		"/rel": {301, "/elsewhere?x=y"},
	} {
		resp, _ := f.get(t, path)
		if resp.StatusCode != want.status || resp.Header.Get("Location") != want.location {
			t.Errorf("GET %s = %d Location %q, want %d %q", path, resp.StatusCode, resp.Header.Get("Location"), want.status, want.location)
		}
	}
}

func TestForwardedHeaders(t *testing.T) {
	type seen struct{ Host, XFF, Proto, FHost, RealIP, Forwarded, User, Query string }
	up := newUpstream(t, "a", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(seen{
			Host: r.Host, XFF: strings.Join(r.Header.Values("X-Forwarded-For"), "|"),
			Proto: r.Header.Get("X-Forwarded-Proto"), FHost: r.Header.Get("X-Forwarded-Host"),
			RealIP: r.Header.Get("X-Real-Ip"), Forwarded: r.Header.Get("Forwarded"), User: r.Header.Get("X-User-Id"), Query: r.URL.RawQuery,
		})
	})
	loopback := []string{"127.0.0.0/8"}
	tests := []struct {
		name    string
		trusted []string
		header  map[string]string
		want    seen
	}{
		{"trusted peer: client chain kept and peer appended", loopback,
			map[string]string{"X-Forwarded-For": "203.0.113.7, 10.0.0.1", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "sho.rt", "X-Real-Ip": "203.0.113.7", "Forwarded": "for=203.0.113.7"},
			// X-Real-IP names the client as the limiter sees it: the rightmost
			// address no trusted proxy appended.
			seen{Host: "public.example", XFF: "203.0.113.7, 10.0.0.1, 127.0.0.1", Proto: "https", FHost: "sho.rt", RealIP: "10.0.0.1", Query: "k=v"}},
		{"trusted peer without headers", loopback, nil,
			seen{Host: "public.example", XFF: "127.0.0.1", Proto: "http", FHost: "public.example", RealIP: "127.0.0.1", Query: "k=v"}},
		{"untrusted peer: forged headers not believed", nil,
			map[string]string{"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example", "X-Real-Ip": "203.0.113.7", "Forwarded": "for=203.0.113.7", "X-User-Id": "admin"},
			seen{Host: "public.example", XFF: "127.0.0.1", Proto: "http", FHost: "public.example", RealIP: "127.0.0.1", Query: "k=v"}},
		{"peer outside the trusted prefixes", []string{"10.0.0.0/8"},
			map[string]string{"X-Forwarded-For": "203.0.113.7", "X-User-Id": "admin"},
			seen{Host: "public.example", XFF: "127.0.0.1", Proto: "http", FHost: "public.example", RealIP: "127.0.0.1", Query: "k=v"}},
		{"trusted peer: its user header passes", loopback,
			map[string]string{"X-User-Id": "alice"},
			seen{Host: "public.example", XFF: "127.0.0.1", Proto: "http", FHost: "public.example", RealIP: "127.0.0.1", User: "alice", Query: "k=v"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := start(t, config(up.URL), tt.trusted...)
			req, _ := http.NewRequest(http.MethodGet, f.front.URL+"/x?k=v", nil)
			req.Host = "public.example"
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, body := testkit.Send(t, req)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var got seen
			if err := json.Unmarshal([]byte(body), &got); err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("upstream saw\n %+v\nwant\n %+v", got, tt.want)
			}
		})
	}
}

// deadAfterCheck returns an upstream that passed the proxy's first health
// check and then stopped listening: the proxy still believes it healthy, so
// the next request to it fails to connect. (The check's connection is not
// kept: a request on a stale pooled connection is a different failure, one
// where bytes were sent.)
func deadAfterCheck(t *testing.T, f func(target string) *fixture) (*fixture, *upstream) {
	t.Helper()
	dead := newUpstream(t, "dead", nil)
	dead.closeChecks.Store(true)
	fx := f(dead.URL)
	testkit.Eventually(t, 5*time.Second, "the first health check", func() bool { return dead.checks.Load() > 0 })
	dead.Close() // waits for the check's handler to finish
	if !fx.p.Ready() || fx.healthy(t, dead.URL) != 1 {
		t.Fatal("dead target not healthy after its first check")
	}
	return fx, dead
}

func TestFailover(t *testing.T) {
	live := newUpstream(t, "live", nil)
	f, dead := deadAfterCheck(t, func(dead string) *fixture { return start(t, config(dead, live.URL)) })
	for i := range 4 {
		resp, body := f.get(t, "/k")
		if resp.StatusCode != 200 || resp.Header.Get("X-Upstream") != "live" {
			t.Fatalf("request %d: %d from %q: %s", i, resp.StatusCode, resp.Header.Get("X-Upstream"), body)
		}
	}
	if got := f.healthy(t, dead.URL); got != 0 {
		t.Errorf("dead target health = %v, want 0", got)
	}
	if got := f.healthy(t, live.URL); got != 1 {
		t.Errorf("live target health = %v, want 1", got)
	}
	want := []proxy.TargetStatus{{Target: dead.URL, Healthy: false}, {Target: live.URL, Healthy: true}}
	if diff := cmp.Diff(want, f.p.Status()); diff != "" {
		t.Errorf("Status() mismatch (-want +got):\n%s", diff)
	}
	// Only the first request picked the dead target; the rest skipped it.
	if got := f.metric(t, "linkgate_upstream_retries_total"); got != 1 {
		t.Errorf("retries = %v, want 1", got)
	}
	if got := live.hits.Load(); got != 4 {
		t.Errorf("live served %d, want 4", got)
	}
}

func TestRetryOnlyReplayable(t *testing.T) {
	tests := []struct {
		method string
		body   string
		header string
		retry  bool
	}{
		{http.MethodGet, "", "", true},
		{http.MethodHead, "", "", true},
		{http.MethodDelete, "", "", true},
		{http.MethodPut, "", "", true},
		{http.MethodPost, "", "", false},
		{http.MethodPost, "", "Idempotency-Key", true},
		{http.MethodPut, "body", "", false},                 // a server request's body cannot be replayed
		{http.MethodPost, "body", "Idempotency-Key", false}, // idem
	}
	for _, tt := range tests {
		t.Run(tt.method+"/"+tt.body+"/"+tt.header, func(t *testing.T) {
			live := newUpstream(t, "live", nil)
			f, dead := deadAfterCheck(t, func(dead string) *fixture { return start(t, config(dead, live.URL)) })
			req, _ := http.NewRequest(tt.method, f.front.URL+"/k", strings.NewReader(tt.body))
			if tt.header != "" {
				req.Header.Set(tt.header, "abc")
			}
			resp, body := testkit.Send(t, req) // round robin starts with the first target: dead
			if tt.retry {
				if resp.StatusCode != 200 || live.hits.Load() != 1 {
					t.Fatalf("got %d (live hits %d), want the request retried on live: %s", resp.StatusCode, live.hits.Load(), body)
				}
			} else {
				wantProblem(t, resp, body, http.StatusBadGateway)
				if live.hits.Load() != 0 {
					t.Fatalf("request was retried on live")
				}
			}
			if got := f.healthy(t, dead.URL); got != 0 {
				t.Errorf("dead target health = %v, want 0 after a refused connection", got)
			}
		})
	}
}

func TestHealthCheckPutsTargetBack(t *testing.T) {
	target := "http://" + testkit.FreeAddr(t)
	cfg := config(target)
	cfg.HealthCheck.Interval = 100 * time.Millisecond
	f := start(t, cfg)
	testkit.Eventually(t, 5*time.Second, "the dead target to be taken out", func() bool { return !f.p.Ready() })
	if got := f.healthy(t, target); got != 0 {
		t.Errorf("health = %v, want 0", got)
	}
	resp, body := f.get(t, "/k")
	wantProblem(t, resp, body, http.StatusBadGateway)

	// Bring a server up on the same address.
	ln, err := net.Listen("tcp", strings.TrimPrefix(target, "http://"))
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", target, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "back")
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)

	testkit.Eventually(t, 5*time.Second, "the target to be put back", f.p.Ready)
	if got := f.healthy(t, target); got != 1 {
		t.Errorf("health = %v, want 1", got)
	}
	resp, body = f.get(t, "/k")
	if resp.StatusCode != 200 || body != "back" {
		t.Errorf("got %d %q, want 200 back", resp.StatusCode, body)
	}
}

func TestHealthCheckTakesOutNon2xx(t *testing.T) {
	var sick atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && sick.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	cfg := config(srv.URL)
	cfg.HealthCheck.Interval = 100 * time.Millisecond
	f := start(t, cfg)
	sick.Store(true)
	testkit.Eventually(t, 5*time.Second, "a 503 health check to take the target out", func() bool { return !f.p.Ready() })
	sick.Store(false)
	testkit.Eventually(t, 5*time.Second, "a 200 health check to put it back", f.p.Ready)
}

func TestAllTargetsDead(t *testing.T) {
	a, b := "http://"+testkit.DeadAddr(t), "http://"+testkit.DeadAddr(t)
	f := start(t, config(a, b))
	resp, body := f.get(t, "/k")
	wantProblem(t, resp, body, http.StatusBadGateway)
	testkit.Eventually(t, 5*time.Second, "Ready to turn false", func() bool { return !f.p.Ready() })
	resp, body = f.get(t, "/k") // now refused without dialling
	wantProblem(t, resp, body, http.StatusBadGateway)
	if got := f.metric(t, "linkgate_upstream_errors_total", "reason", "unreachable"); got != 2 {
		t.Errorf("unreachable errors = %v, want 2", got)
	}
}

func TestSlowUpstream(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	cfg := config(up.URL)
	cfg.ResponseHeaderTimeout = 100 * time.Millisecond
	f := start(t, cfg)
	resp, body := f.get(t, "/k")
	wantProblem(t, resp, body, http.StatusGatewayTimeout)
	if got := f.metric(t, "linkgate_upstream_errors_total", "reason", "timeout"); got != 1 {
		t.Errorf("timeout errors = %v, want 1", got)
	}
	if !f.p.Ready() {
		t.Error("a slow target was taken out of the pool")
	}
}

func TestPostNotRetriedAfterSent(t *testing.T) {
	// breaks reads the whole request and then drops the connection without
	// answering: the request reached the upstream, so it must not be retried.
	breaks := newUpstream(t, "breaks", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	})
	ok := newUpstream(t, "ok", nil)
	f := start(t, config(breaks.URL, ok.URL))
	testkit.Eventually(t, 5*time.Second, "the first health check", func() bool { return breaks.checks.Load() > 0 && ok.checks.Load() > 0 })

	var codes []int
	for range 2 { // round robin: one request to each target
		req, _ := http.NewRequest(http.MethodPost, f.front.URL+"/login", strings.NewReader("email=a@b.c&password=x"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Idempotency-Key", "k1") // even so: bytes were sent
		resp, body := testkit.Send(t, req)
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == http.StatusBadGateway {
			wantProblem(t, resp, body, http.StatusBadGateway)
		}
	}
	if breaks.hits.Load() != 1 || ok.hits.Load() != 1 {
		t.Errorf("hits: breaks %d ok %d, want 1 and 1 (codes %v)", breaks.hits.Load(), ok.hits.Load(), codes)
	}
	if codes[0]+codes[1] != 200+502 {
		t.Errorf("codes %v, want one 200 and one 502", codes)
	}
	if got := f.metric(t, "linkgate_upstream_retries_total"); got != 0 {
		t.Errorf("retries = %v, want 0", got)
	}
	if !f.p.Ready() || f.healthy(t, breaks.URL) != 1 {
		t.Error("a target that accepted the connection was taken out")
	}
}

func TestBodiesStreamedByteForByte(t *testing.T) {
	up := newUpstream(t, "echo", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		io.Copy(w, r.Body)
	})
	f := start(t, config(up.URL))
	payload := make([]byte, 5<<20)
	rand.Read(payload)
	req, _ := http.NewRequest(http.MethodPost, f.front.URL+"/upload", bytes.NewReader(payload))
	resp, body := testkit.Send(t, req)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got, want := sha256.Sum256([]byte(body)), sha256.Sum256(payload); got != want || len(body) != len(payload) {
		t.Errorf("echoed %d bytes with sha256 %x, want %d bytes %x", len(body), got, len(payload), want)
	}
}

func TestStreamingIsNotBuffered(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, "stream", testkit.EventStream(release))
	f := start(t, config(up.URL))
	testkit.CheckStreamed(t, f.front.URL+"/events", release, "the proxy buffers")
}

func TestConnectionReuse(t *testing.T) {
	up := newUpstream(t, "a", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})
	f := start(t, config(up.URL))
	const clients, requests = 32, 2000
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer c.CloseIdleConnections()
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range clients {
		wg.Go(func() {
			for range requests / clients {
				resp, err := c.Get(f.front.URL + "/k")
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d requests failed", failed.Load())
	}
	// About one connection per concurrent client, plus the health
	// check's. A few more are fine: the transport dials for a request that
	// finds no idle connection and keeps that connection even when another
	// went idle first and served the request, which a busy machine makes
	// happen (37 seen). Without reuse it would be one per request; with
	// net/http's default of 2 idle connections per host, hundreds.
	opened := f.p.ConnectionsOpened()
	if limit := int64(clients + clients/2); opened < 1 || opened > limit {
		t.Errorf("opened %d upstream connections for %d requests over %d clients, want at most %d", opened, requests, clients, limit)
	}
	if got := f.metric(t, "linkgate_upstream_connections_opened_total"); int64(got) != opened {
		t.Errorf("metric says %v connections, ConnectionsOpened %d", got, opened)
	}
	t.Logf("%d upstream connections for %d requests", opened, requests)
}

func TestCloseReleasesMetrics(t *testing.T) {
	up := newUpstream(t, "a", nil)
	reg := prometheus.NewRegistry()
	m := proxy.NewMetrics(reg)
	old := proxy.New(plan(t, config(up.URL)), m, nil)
	other := "http://" + testkit.DeadAddr(t)
	next := proxy.New(plan(t, config(up.URL, other)), m, nil) // a reload that adds a target
	old.Close()
	old.Close() // idempotent
	if !testkit.HasMetric(t, reg, "linkgate_upstream_healthy", "target", up.URL) {
		t.Error("closing the old proxy dropped the series of a target the new one still uses")
	}
	next.Close()
	for _, target := range []string{up.URL, other} {
		if testkit.HasMetric(t, reg, "linkgate_upstream_healthy", "target", target) {
			t.Errorf("series of %s left after every proxy closed", target)
		}
	}
}

func TestCompileRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mod   func(*proxy.Config)
		field string // the error starts with it
	}{
		{"no targets", func(c *proxy.Config) { c.Targets = nil }, "upstream.targets:"},
		{"target path", func(c *proxy.Config) { c.Targets = []string{"http://127.0.0.1:1/base"} }, "upstream.targets[0]:"},
		{"target query", func(c *proxy.Config) { c.Targets = []string{"http://127.0.0.1:1", "http://127.0.0.1:1?x=1"} }, "upstream.targets[1]:"},
		{"not http", func(c *proxy.Config) { c.Targets = []string{"ftp://127.0.0.1:1"} }, "upstream.targets[0]:"},
		{"port out of range", func(c *proxy.Config) { c.Targets = []string{"http://127.0.0.1:65536"} }, "upstream.targets[0]:"},
		{"empty port", func(c *proxy.Config) { c.Targets = []string{"http://127.0.0.1:"} }, "upstream.targets[0]:"},
		{"no host", func(c *proxy.Config) { c.Targets = []string{"http://:80"} }, "upstream.targets[0]:"},
		{"zero idle conns", func(c *proxy.Config) { c.MaxIdleConnsPerHost = 0 }, "upstream.max_idle_conns_per_host:"},
		{"zero interval", func(c *proxy.Config) { c.HealthCheck.Interval = 0 }, "upstream.health_check.interval:"},
		{"relative health path", func(c *proxy.Config) { c.HealthCheck.Path = "healthz" }, "upstream.health_check.path:"},
	} {
		cfg := config("http://127.0.0.1:1/")
		tc.mod(&cfg)
		_, err := proxy.Compile(cfg, nil, forwarded.Policy{})
		if err == nil || !strings.HasPrefix(err.Error(), tc.field) {
			t.Errorf("%s: Compile error %v, want one starting with %s", tc.name, err, tc.field)
		}
	}
}

func TestPlanEqual(t *testing.T) {
	a := plan(t, config("http://127.0.0.1:1"), "127.0.0.1")
	for _, tc := range []struct {
		name string
		b    *proxy.Plan
		want bool
	}{
		{"same", plan(t, config("http://127.0.0.1:1"), "127.0.0.1"), true},
		{"other target", plan(t, config("http://127.0.0.1:2"), "127.0.0.1"), false},
		{"other trust", plan(t, config("http://127.0.0.1:1"), "10.0.0.0/8"), false},
		{"other timeout", plan(t, func() proxy.Config { c := config("http://127.0.0.1:1"); c.DialTimeout++; return c }(), "127.0.0.1"), false},
	} {
		if got := a.Equal(tc.b); got != tc.want {
			t.Errorf("%s: Equal = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestClientGoneWritesNothing(t *testing.T) {
	arrived := make(chan struct{})
	up := newUpstream(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		<-r.Context().Done()
	})
	f := start(t, config(up.URL))
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-arrived
		cancel()
	}()
	rec := httptest.NewRecorder()
	f.p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/k", nil).WithContext(ctx))
	if rec.Body.Len() != 0 || len(rec.Header()) != 0 {
		t.Errorf("answered a client that left: %d %v %q", rec.Code, rec.Header(), rec.Body)
	}
	for _, reason := range []string{"unreachable", "timeout", "failed"} {
		if got := f.metric(t, "linkgate_upstream_errors_total", "reason", reason); got != 0 {
			t.Errorf("%s errors = %v, want 0", reason, got)
		}
	}
	if !f.p.Ready() {
		t.Error("a client leaving took the target out")
	}
}

func TestRequestDeadlineIs504(t *testing.T) {
	up := newUpstream(t, "slow", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	})
	f := start(t, config(up.URL))
	// A middleware in front of the proxy may bound the whole request.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	rec := httptest.NewRecorder()
	f.p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/k", nil).WithContext(ctx))
	wantProblem(t, rec.Result(), rec.Body.String(), http.StatusGatewayTimeout)
	if !f.p.Ready() {
		t.Error("a request deadline took the target out")
	}
}

// TestRenewKeepsConnectionsOfTargetsThatStay: a Proxy renewed from another
// takes over the idle connections of the targets both list, and they stay
// open when the old one closes; those of a target it dropped are closed.
func TestRenewKeepsConnectionsOfTargetsThatStay(t *testing.T) {
	stay, gone, added := newUpstream(t, "stay", nil), newUpstream(t, "gone", nil), newUpstream(t, "added", nil)
	m := proxy.NewMetrics(prometheus.NewRegistry())
	old := proxy.New(plan(t, config(stay.URL, gone.URL)), m, nil)
	var h atomic.Pointer[proxy.Proxy]
	h.Store(old)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.Load().ServeHTTP(w, r) }))
	defer front.Close()
	f := &fixture{p: old, front: front}
	for range 4 {
		f.get(t, "/k")
	}
	testkit.Eventually(t, 10*time.Second, "idle connections to both targets, the first checks done", func() bool {
		n := old.IdleConns()
		return len(n) == 2 && n[0] > 0 && n[1] > 0 && old.CheckRounds() > 0
	})
	openedBefore := old.ConnectionsOpened()
	next := proxy.Renew([]*proxy.Proxy{old}, plan(t, config(stay.URL, added.URL)), m, nil)
	defer next.Close()
	old.Close()
	testkit.Eventually(t, 10*time.Second, "the renewed proxy's first health checks", func() bool { return next.CheckRounds() > 0 })
	if added.checks.Load() == 0 {
		t.Errorf("the renewed proxy's first round did not check the added target")
	}
	// A health check may hold the connection for a moment: idle again soon.
	testkit.Eventually(t, 5*time.Second, "an idle connection to the target that stayed, after the old proxy closed", func() bool {
		return next.IdleConns()[0] > 0
	})
	if n := old.IdleConns(); n[1] != 0 {
		t.Errorf("%d idle connections to the dropped target left open", n[1])
	}
	h.Store(next)
	stayHits := stay.hits.Load()
	for range 4 {
		f.get(t, "/k")
	}
	if stay.hits.Load() != stayHits+2 || added.hits.Load() != 2 {
		t.Errorf("after the renewal: stay served %d, added %d; want 2 each", stay.hits.Load()-stayHits, added.hits.Load())
	}
	// Only the new target needed connections (and its health check).
	if got := next.ConnectionsOpened() - openedBefore; got > 2 {
		t.Errorf("renewed proxy opened %d connections, want at most 2 (to the added target)", got)
	}
}

// TestRenewFromSeveralPools: a target that moves from one pool to another
// on reload keeps its connections: Renew looks in every Proxy it is given.
func TestRenewFromSeveralPools(t *testing.T) {
	a := newUpstream(t, "a", nil)
	var checks atomic.Int64
	b, dials := testkit.Dialed(t, func(_ http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			checks.Add(1)
		}
	})
	m := proxy.NewMetrics(prometheus.NewRegistry())
	oldA := proxy.New(plan(t, config(a.URL)), m, nil)
	oldB := proxy.New(plan(t, config(b.URL)), m, nil)
	for _, p := range []*proxy.Proxy{oldA, oldB} {
		front := httptest.NewServer(p)
		(&fixture{p: p, front: front}).get(t, "/k")
		front.Close()
	}
	// The old proxies' first health checks done (none in flight for
	// Close to cut, none to take for the renewed proxy's own).
	testkit.Eventually(t, 10*time.Second, "an idle connection in each pool, the first checks done", func() bool {
		return oldA.IdleConns()[0] > 0 && oldB.IdleConns()[0] > 0 && oldA.CheckRounds() > 0 && oldB.CheckRounds() > 0
	})
	before, checked := dials.Load(), checks.Load()
	next := proxy.Renew([]*proxy.Proxy{oldA, oldB}, plan(t, config(b.URL)), m, nil)
	defer next.Close()
	oldA.Close()
	oldB.Close()
	testkit.Eventually(t, 10*time.Second, "the renewed proxy's first health check", func() bool { return next.CheckRounds() > 0 })
	if checks.Load() == checked {
		t.Errorf("the renewed proxy's first round checked nothing on b")
	}
	front := httptest.NewServer(next)
	defer front.Close()
	for range 3 {
		if resp, body := (&fixture{p: next, front: front}).get(t, "/k"); resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	if got := dials.Load() - before; got != 0 {
		t.Errorf("the target that moved to another pool was dialed %d times: its idle connections were lost", got)
	}
}
