package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const adminToken = "s3cret-admin"

// baseConfig is a gateway on free ports in front of targets, with the
// limiter and analytics left at rest.
func baseConfig(targets ...string) string {
	return fmt.Sprintf(`server:
  listen: 127.0.0.1:0
  trusted_proxies: [127.0.0.1/32]
  shutdown_timeout: 10s
admin:
  listen: 127.0.0.1:0
  token_env: LG_TEST_ADMIN_TOKEN
upstream:
  targets: [%s]
  dial_timeout: 500ms
  response_header_timeout: 1s
  health_check: {path: /healthz, interval: 100ms}
analytics:
  enabled: false
`, strings.Join(targets, ", "))
}

var tokenEnv = "LG_TEST_ADMIN_TOKEN=" + adminToken

// named answers "name" on every path, healthz included.
func named(t *testing.T, name string) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(name))
	}))
	t.Cleanup(s.Close)
	return s
}

// deadAddr is an address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func TestRedirectPassesThrough(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" { // a redirect is not healthy: the check wants a 2xx
			return
		}
		http.Redirect(w, r, "https://example.com/long/path?q=1&r=%C3%A9", http.StatusFound)
	}))
	defer up.Close()
	gw, _ := startGateway(t, baseConfig(up.URL))
	resp, _ := do(t, "GET", gw.url("gateway", "/abc123"), nil)
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "https://example.com/long/path?q=1&r=%C3%A9" {
		t.Errorf("got %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

func TestForwardedFor(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s|%s|%s", r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-Host"))
	}))
	defer up.Close()
	tests := []struct {
		name, trusted string
		want          func(gwHost string) string // X-Forwarded-For|-Proto|-Host as the upstream saw them
	}{
		{"trusted peer", "[127.0.0.1/32]", func(string) string { return "203.0.113.7, 127.0.0.1|https|short.example" }},
		{"untrusted peer", "[10.0.0.0/8]", func(h string) string { return "127.0.0.1|http|" + h }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := strings.Replace(baseConfig(up.URL), "[127.0.0.1/32]", tt.trusted, 1)
			gw, _ := startGateway(t, cfg)
			resp, body := do(t, "GET", gw.url("gateway", "/x"), nil,
				"X-Forwarded-For", "203.0.113.7", "X-Forwarded-Proto", "https", "X-Forwarded-Host", "short.example")
			want := tt.want(strings.TrimPrefix(gw.url("gateway", ""), "http://"))
			if resp.StatusCode != 200 || body != want {
				t.Errorf("upstream saw %q (status %d), want %q", body, resp.StatusCode, want)
			}
		})
	}
}

func TestFailoverToLiveTarget(t *testing.T) {
	live := named(t, "live")
	gw, _ := startGateway(t, baseConfig(deadAddr(t), live.URL))
	for i := 0; i < 20; i++ {
		resp, body := do(t, "GET", gw.url("gateway", "/k"), nil)
		if resp.StatusCode != 200 || body != "live" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	resp, _ := do(t, "GET", gw.url("admin", "/readyz"), nil)
	if resp.StatusCode != 200 {
		t.Errorf("readyz with one live target: %d", resp.StatusCode)
	}
}

func TestAllTargetsDeadIs502(t *testing.T) {
	gw, _ := startGateway(t, baseConfig(deadAddr(t), deadAddr(t)))
	resp, body := do(t, "GET", gw.url("gateway", "/k"), nil)
	assertProblem(t, resp, body, http.StatusBadGateway)
	eventually(t, 5*time.Second, "readyz answers 503", func() bool {
		resp, _ := do(t, "GET", gw.url("admin", "/readyz"), nil)
		return resp.StatusCode == http.StatusServiceUnavailable
	})
}

func TestSlowUpstreamIs504(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	defer close(release)
	gw, _ := startGateway(t, baseConfig(up.URL))
	start := time.Now()
	resp, body := do(t, "GET", gw.url("gateway", "/slow"), nil)
	assertProblem(t, resp, body, http.StatusGatewayTimeout)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("504 took %v; response_header_timeout is 1s", d)
	}
}

func assertProblem(t *testing.T, resp *http.Response, body string, status int) {
	t.Helper()
	var p struct {
		Type, Title string
		Status      int
	}
	if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("got %d %q %q, want %d problem+json", resp.StatusCode, resp.Header.Get("Content-Type"), body, status)
	}
	if err := json.Unmarshal([]byte(body), &p); err != nil || p.Status != status || p.Title == "" {
		t.Fatalf("problem body %q: %v", body, err)
	}
}

// TestReload changes the upstream by each reload trigger in turn and checks
// that a broken file keeps the running config.
func TestReload(t *testing.T) {
	a, b, c := named(t, "A"), named(t, "B"), named(t, "C")
	gw, path := startGateway(t, baseConfig(a.URL), tokenEnv)
	// the watcher is on: a plain write reloads
	body := func() string { _, s := do(t, "GET", gw.url("gateway", "/x"), nil); return s }
	if got := body(); got != "A" {
		t.Fatalf("before reload: %q", got)
	}
	writeFile(t, path, baseConfig(b.URL))
	eventually(t, 5*time.Second, "file change reloads", func() bool { return body() == "B" })
	if !gw.logged("config reloaded", map[string]string{"source": "file change", "generation": "2"}) {
		t.Errorf("no reload log line for the file change:\n%s", gw.logText())
	}

	// a broken file: the endpoint answers 400 with the reason, nothing changes
	writeFile(t, path, baseConfig(c.URL)+"rules:\n  - {name: x, match: {path: /x}, key: ip, limits: [5/fortnight]}\n")
	eventually(t, 5*time.Second, "failed reload logged", func() bool {
		return gw.logged("config reload failed, running config kept", map[string]string{"source": "file change"})
	})
	resp, msg := do(t, "POST", gw.url("admin", "/admin/reload"), nil, "Authorization", "Bearer "+adminToken)
	assertProblem(t, resp, msg, http.StatusBadRequest)
	badLine := fmt.Sprintf(":%d: rules[0]:", strings.Count(baseConfig(c.URL), "\n")+2)
	if !strings.Contains(msg, "5/fortnight") || !strings.Contains(msg, badLine) {
		t.Errorf("reload error does not name the bad value, its field and line: %s", msg)
	}
	if got := body(); got != "B" {
		t.Errorf("after a broken file: %q, want B", got)
	}
}

func TestReloadBySignalAndEndpoint(t *testing.T) {
	a, b, c := named(t, "A"), named(t, "B"), named(t, "C")
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	writeFile(t, path, baseConfig(a.URL))
	gw := startProcess(t, []string{tokenEnv}, []string{"gateway", "admin"}, bin.gateway, "-config", path, "-log-format", "json", "-watch=false")
	body := func() string { _, s := do(t, "GET", gw.url("gateway", "/x"), nil); return s }

	writeFile(t, path, baseConfig(b.URL))
	time.Sleep(300 * time.Millisecond) // the watcher is off: nothing may change by itself
	if got := body(); got != "A" {
		t.Fatalf("changed without a trigger: %q", got)
	}
	gw.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, 5*time.Second, "SIGHUP reloads", func() bool { return body() == "B" })

	writeFile(t, path, strings.Replace(baseConfig(c.URL), "listen: 127.0.0.1:0\n  trusted", "listen: 127.0.0.1:1\n  trusted", 1))
	resp, msg := do(t, "POST", gw.url("admin", "/admin/reload"), nil, "Authorization", "Bearer "+adminToken)
	if resp.StatusCode != 200 || !strings.Contains(msg, `"generation":3`) || !strings.Contains(msg, `"server.listen"`) {
		t.Fatalf("reload endpoint: %d %s (want generation 3, server.listen named as restart-only)", resp.StatusCode, msg)
	}
	if got := body(); got != "C" {
		t.Errorf("after endpoint reload: %q", got)
	}

	writeFile(t, path, "upstream: [\n")
	gw.cmd.Process.Signal(syscall.SIGHUP)
	eventually(t, 5*time.Second, "failed SIGHUP reload logged", func() bool {
		return gw.logged("config reload failed, running config kept", map[string]string{"source": "SIGHUP"})
	})
	if got := body(); got != "C" {
		t.Errorf("after a broken file: %q, want C", got)
	}
}

// TestReloadKeepsInFlight: a request in flight when a reload replaces its
// upstream finishes on the config it started with; the next goes to the new
// upstream.
func TestReloadKeepsInFlight(t *testing.T) {
	var started atomic.Bool
	release := make(chan struct{})
	a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started.Store(true)
			<-release
		}
		w.Write([]byte("A"))
	}))
	defer a.Close()
	b := named(t, "B")
	gw, path := startGateway(t, baseConfig(a.URL), tokenEnv)
	res := inFlight(gw.url("gateway", "/slow"))
	eventually(t, 5*time.Second, "request reached upstream A", started.Load)
	writeFile(t, path, baseConfig(b.URL))
	if resp, msg := do(t, "POST", gw.url("admin", "/admin/reload"), nil, "Authorization", "Bearer "+adminToken); resp.StatusCode != 200 {
		t.Fatalf("reload: %d %s", resp.StatusCode, msg)
	}
	if _, body := do(t, "GET", gw.url("gateway", "/x"), nil); body != "B" {
		t.Errorf("a request after the reload went to %q, want B", body)
	}
	close(release)
	if r := <-res; r.err != nil || r.status != 200 || r.body != "A" {
		t.Errorf("the request in flight across the reload got %d %q (%v), want 200 A", r.status, r.body, r.err)
	}
}

func TestSIGTERMDrainsInFlight(t *testing.T) {
	var started atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started.Store(true)
			time.Sleep(700 * time.Millisecond)
			w.Write([]byte("finished"))
		}
	}))
	defer up.Close()
	gw, _ := startGateway(t, baseConfig(up.URL))
	res := inFlight(gw.url("gateway", "/slow"))
	eventually(t, 5*time.Second, "request reached upstream", started.Load)
	if err := gw.stop(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	if r := <-res; r.err != nil || r.status != 200 || r.body != "finished" {
		t.Errorf("in-flight request got %d %q (%v)", r.status, r.body, r.err)
	}
	if !gw.logged("stopped", nil) {
		t.Errorf("no clean stop logged:\n%s", gw.logText())
	}
}

func TestAdminEndpoints(t *testing.T) {
	up := named(t, "ok")
	gw, _ := startGateway(t, baseConfig(up.URL), tokenEnv)
	do(t, "GET", gw.url("gateway", "/x"), nil)
	tests := []struct {
		path, token string
		status      int
		contains    string
	}{
		{"/healthz", "", 200, "ok"},
		{"/readyz", "", 200, "ready"},
		{"/metrics", "", 200, `linkgate_requests_total{class="2xx"} 1`},
		{"/metrics", "", 200, "linkgate_config_generation 1"},
		{"/metrics", "", 200, "linkgate_upstream_healthy"},
		{"/admin/config", "", 401, "bearer"},
		{"/admin/config", "wrong", 401, "bearer"},
		{"/admin/config", adminToken, 200, up.URL},
	}
	for _, tt := range tests {
		var hdr []string
		if tt.token != "" {
			hdr = []string{"Authorization", "Bearer " + tt.token}
		}
		resp, body := do(t, "GET", gw.url("admin", tt.path), nil, hdr...)
		if resp.StatusCode != tt.status || !strings.Contains(body, tt.contains) {
			t.Errorf("GET %s (token %q) = %d, want %d containing %q:\n%.600s", tt.path, tt.token, resp.StatusCode, tt.status, tt.contains, body)
		}
	}
	// With no token configured, /admin/* is off.
	gw2, _ := startGateway(t, baseConfig(up.URL))
	resp, body := do(t, "POST", gw2.url("admin", "/admin/reload"), nil, "Authorization", "Bearer anything")
	assertProblem(t, resp, body, http.StatusForbidden)
}

func TestCheckConfigAndVersion(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	writeFile(t, good, baseConfig("http://127.0.0.1:1"))
	writeFile(t, bad, baseConfig("http://127.0.0.1:1")+"limiter:\n  on_store_error: maybe\n")
	out, err := exec.Command(bin.gateway, "check-config", good).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Errorf("check-config good: %v %s", err, out)
	}
	out, err = exec.Command(bin.gateway, "check-config", bad).CombinedOutput()
	want := fmt.Sprintf("bad.yaml:%d: limiter: on_store_error", strings.Count(baseConfig("x"), "\n")+2)
	if err == nil || !strings.Contains(string(out), want) {
		t.Errorf("check-config bad: %v %s", err, out)
	}
	for _, f := range []string{"../../configs/gateway.example.yaml", "../../configs/gateway.quickstart.yaml"} {
		if out, err := exec.Command(bin.gateway, "check-config", f).CombinedOutput(); err != nil {
			t.Errorf("check-config %s: %v %s", f, err, out)
		}
	}
	out, err = exec.Command(bin.gateway, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "linkgate ") {
		t.Errorf("version: %v %s", err, out)
	}
}
