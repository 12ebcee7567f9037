package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

func TestRedirectPassesThrough(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" { // a redirect is not healthy: the check wants a 2xx
			return
		}
		http.Redirect(w, r, "https://example.com/long/path?q=1&r=%C3%A9", http.StatusFound)
	}))
	defer up.Close()
	gw := start(t, testkit.BaseConfig(up.URL))
	resp, _ := testkit.Do(t, "GET", gw.url("/abc123"), nil)
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "https://example.com/long/path?q=1&r=%C3%A9" {
		t.Errorf("got %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// TestForwardedHeaders: what the upstream learns of the client comes from
// one decision (forwarded.Trust), whichever way the trusted proxies are
// written: the IPv4-mapped prefix once split the limiter from the proxy.
func TestForwardedHeaders(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s|%s|%s|%s|%s", r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Proto"),
			r.Header.Get("X-Forwarded-Host"), r.Header.Get("X-Real-Ip"), r.Header.Get("X-User-Id"))
		if f := r.Header.Get("Forwarded"); f != "" {
			fmt.Fprintf(w, "|Forwarded: %s", f) // never expected
		}
	}))
	defer up.Close()
	tests := []struct {
		name, trusted string
		want          func(gwHost string) string // X-Forwarded-For|-Proto|-Host|X-Real-IP|X-User-ID as the upstream saw them
	}{
		{"trusted peer", "[127.0.0.1/32]", func(string) string { return "203.0.113.7, 127.0.0.1|https|short.example|203.0.113.7|mallory" }},
		{"trusted as an IPv4-mapped prefix", `["::ffff:127.0.0.0/104"]`, func(string) string { return "203.0.113.7, 127.0.0.1|https|short.example|203.0.113.7|mallory" }},
		{"untrusted peer", "[10.0.0.0/8]", func(h string) string { return "127.0.0.1|http|" + h + "|127.0.0.1|" }},
		{"nobody trusted", "[]", func(h string) string { return "127.0.0.1|http|" + h + "|127.0.0.1|" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := strings.Replace(testkit.BaseConfig(up.URL), "[127.0.0.1/32]", tt.trusted, 1) +
				"rules:\n  - {name: per_ip, match: {path: /limited}, key: ip, limits: [1/m]}\n"
			gw := start(t, cfg)
			_, got := testkit.Do(t, "GET", gw.url("/x"), nil,
				"X-Forwarded-For", "203.0.113.7", "X-Forwarded-Proto", "https", "X-Forwarded-Host", "short.example",
				"X-Real-IP", "198.51.100.1", "X-User-ID", "mallory", "Forwarded", "for=198.51.100.2")
			want := tt.want(strings.TrimPrefix(gw.url(""), "http://"))
			if got != want {
				t.Errorf("upstream saw %q, want %q", got, want)
			}
			// The limiter keys on the same client the upstream was told of:
			// two forwarded clients are limited apart only if the peer is
			// trusted.
			first, _ := testkit.Do(t, "GET", gw.url("/limited"), nil, "X-Forwarded-For", "203.0.113.7")
			second, _ := testkit.Do(t, "GET", gw.url("/limited"), nil, "X-Forwarded-For", "203.0.113.8")
			trusted := strings.HasPrefix(want, "203.0.113.7")
			if first.StatusCode != 200 || (second.StatusCode == 200) != trusted {
				t.Errorf("limiter: %d then %d for two forwarded clients; trusted peer %v", first.StatusCode, second.StatusCode, trusted)
			}
		})
	}
}

func TestFailoverToLiveTarget(t *testing.T) {
	live := testkit.Named(t, "live")
	gw := start(t, testkit.BaseConfig("http://"+testkit.DeadAddr(t), live.URL))
	for i := 0; i < 20; i++ {
		resp, b := testkit.Do(t, "GET", gw.url("/k"), nil)
		if resp.StatusCode != 200 || b != "live" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, b)
		}
	}
	if resp, _ := testkit.Do(t, "GET", gw.admin("/readyz"), nil); resp.StatusCode != 200 {
		t.Errorf("readyz with one live target: %d", resp.StatusCode)
	}
}

func TestAllTargetsDeadIs502(t *testing.T) {
	t.Parallel()
	gw := start(t, testkit.BaseConfig("http://"+testkit.DeadAddr(t), "http://"+testkit.DeadAddr(t)))
	resp, b := testkit.Do(t, "GET", gw.url("/k"), nil)
	testkit.Problem(t, resp, b, http.StatusBadGateway)
	testkit.Eventually(t, 5*time.Second, "readyz answers 503", func() bool {
		resp, _ := testkit.Do(t, "GET", gw.admin("/readyz"), nil)
		return resp.StatusCode == http.StatusServiceUnavailable
	})
}

func TestSlowUpstreamIs504(t *testing.T) {
	t.Parallel()
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
	gw := start(t, strings.Replace(testkit.BaseConfig(up.URL), "response_header_timeout: 1s", "response_header_timeout: 200ms", 1))
	begin := time.Now()
	resp, b := testkit.Do(t, "GET", gw.url("/slow"), nil)
	testkit.Problem(t, resp, b, http.StatusGatewayTimeout)
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("504 took %v; response_header_timeout is 200ms", d)
	}
}

// TestShutdownDrainsInFlight: cancelling Serve (what SIGTERM does) lets a
// request in flight finish.
func TestShutdownDrainsInFlight(t *testing.T) {
	t.Parallel()
	var started atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			started.Store(true)
			time.Sleep(700 * time.Millisecond)
			w.Write([]byte("finished"))
		}
	}))
	defer up.Close()
	gw := start(t, testkit.BaseConfig(up.URL))
	res := testkit.InFlight(gw.url("/slow"))
	testkit.Eventually(t, 5*time.Second, "request reached upstream", started.Load)
	if err := gw.shutdown(); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if r := <-res; r.Err != nil || r.Status != 200 || r.Body != "finished" {
		t.Errorf("in-flight request got %d %q (%v)", r.Status, r.Body, r.Err)
	}
	if !gw.logs.Logged("stopped", nil) {
		t.Errorf("no clean stop logged:\n%s", gw.logs)
	}
}

func TestAdminEndpoints(t *testing.T) {
	up := testkit.Named(t, "ok")
	gw := start(t, testkit.BaseConfig(up.URL))
	testkit.Do(t, "GET", gw.url("/x"), nil)
	tests := []struct {
		method, path, token string
		status              int
		contains            string
	}{
		{"GET", "/healthz", "", 200, "ok"},
		{"GET", "/readyz", "", 200, "ready"},
		{"GET", "/metrics", "", 200, `linkgate_requests_total{class="2xx"} 1`},
		{"GET", "/metrics", "", 200, "linkgate_config_generation 1"},
		{"GET", "/metrics", "", 200, "linkgate_upstream_healthy"},
		{"GET", "/admin/config", "", 401, "bearer"},
		{"GET", "/admin/config", "wrong", 401, "bearer"},
		{"GET", "/admin/config", testkit.AdminToken, 200, up.URL},
		{"GET", "/nope", "", 404, "no admin endpoint"},
		{"GET", "/admin/limits", testkit.AdminToken, 404, `"rules":[`},
		{"GET", "/admin/limits/", testkit.AdminToken, 404, "/admin/limits/{rule}/{value}"},
		{"GET", "/admin/limits/no-such-rule/1.2.3.4", testkit.AdminToken, 404, "/admin/limits/{rule}/{value}"},
		{"GET", "/admin/config", "lowercase", 200, up.URL},
		{"PUT", "/admin/reload", testkit.AdminToken, 405, "not allowed"},
	}
	for _, tt := range tests {
		var hdr []string
		switch tt.token {
		case "":
		case "lowercase": // RFC 9110 §11.1: the scheme is case-insensitive
			hdr = []string{"Authorization", "bearer " + testkit.AdminToken}
		default:
			hdr = []string{"Authorization", "Bearer " + tt.token}
		}
		resp, b := testkit.Do(t, tt.method, gw.admin(tt.path), nil, hdr...)
		if resp.StatusCode != tt.status || !strings.Contains(b, tt.contains) {
			t.Errorf("%s %s (token %q) = %d, want %d containing %q:\n%.600s", tt.method, tt.path, tt.token, resp.StatusCode, tt.status, tt.contains, b)
		}
	}
	// With no token configured, /admin/* is off.
	gw2 := start(t, strings.Replace(testkit.BaseConfig(up.URL), "token_env: LG_TEST_ADMIN_TOKEN", "token_env: LG_TEST_NO_SUCH_TOKEN", 1))
	resp, b := testkit.Do(t, "POST", gw2.admin("/admin/reload"), nil, "Authorization", "Bearer anything")
	testkit.Problem(t, resp, b, http.StatusForbidden)
	if !gw2.logs.Logged("the admin API is off: /admin/* answers 403", nil) {
		t.Error("an admin API left off is not logged at start")
	}
}
