package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
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

// TestStreamAndUpgradeThroughEveryMiddleware: behind the metrics, a
// count_status rule and the visit counter, which share one wrap of the
// response, a stream reaches the client event by event (Flush) and a
// protocol upgrade takes the connection over (Hijack).
func TestStreamAndUpgradeThroughEveryMiddleware(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/events":
			testkit.EventStream(release)(w, r)
		case "/echo":
			testkit.EchoUpgrade(w, "")
		}
	}))
	defer up.Close()
	cfg := strings.Replace(testkit.BaseConfig(up.URL), "  enabled: false\n", "  embedded: {path: "+t.TempDir()+"}\n", 1) +
		"rules:\n  - {name: r, match: {path: \"/{short_key}\"}, key: ip, limits: [1000/m], count_status: [200]}\n"
	gw := start(t, cfg)

	testkit.CheckStreamed(t, gw.url("/events"), release, "a flush was lost")

	c, err := net.Dial("tcp", gw.g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	cr := bufio.NewReader(c)
	if status, err := cr.ReadString('\n'); err != nil || !strings.HasPrefix(status, "HTTP/1.1 101 ") {
		t.Fatalf("status line %q (%v), want 101", status, err)
	}
	for {
		h, err := cr.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if h == "\r\n" {
			break
		}
	}
	io.WriteString(c, "hello\n")
	if got, err := cr.ReadString('\n'); got != "echo: hello\n" {
		t.Errorf("through the upgraded connection: %q (%v), want the upstream's echo", got, err)
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

// TestClaimsOfIdentityStripped: headers an upstream might take as the
// client's address, a URL to route by, the user an authenticating proxy
// logged in, or a forwarding detail, sent by a client through a real
// gateway over raw TCP. The upstream learns the client only from
// X-Forwarded-For and X-Real-IP; forwarding details and proxies' users
// reach it only from a trusted proxy; header names with '_' are dropped
// (server.underscores_in_headers: false), and with it true, only the ones
// that name no header the gateway sets, removes or routes by pass.
func TestClaimsOfIdentityStripped(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		select { // a test that has stopped reading must not hold the handler, nor up.Close
		case got <- r.Header.Clone():
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	claims := []string{
		"X-Client-IP: 6.6.6.1", "True-Client-IP: 6.6.6.2", "CF-Connecting-IP: 6.6.6.3", "X-Cluster-Client-IP: 6.6.6.4",
		"Fastly-Client-IP: 6.6.6.5", "X-Original-Forwarded-For: 6.6.6.6", "Client-IP: 6.6.6.7", "X-Originating-IP: 6.6.6.8",
		"Forwarded: for=6.6.6.9", "X-Original-URL: /admin", "X-Rewrite-URL: /admin",
		"X-Forwarded-Port: 8443", "X-Forwarded-Server: edge", "X-Forwarded-Prefix: /evil", "X-Forwarded-Ssl: on",
		"X-Forwarded-User: root", "X-Auth-Request-Email: root@example.com", "Remote-User: root", "X-Forwarded-Client-Cert: Hash=1",
		"X-User-ID: admin", "X-User_ID: admin", "Transfer_Encoding: chunked", "X_Forwarded_For: 6.6.6.10", "X_Real_IP: 6.6.6.11",
		"X-Request_Tag: blue", "Accept: */*",
	}
	// Connection: close ends the exchange with the answer.
	raw := "GET /x HTTP/1.1\r\nHost: short.example\r\nConnection: close\r\n" + strings.Join(claims, "\r\n") + "\r\n\r\n"
	const fromProxy = "X-Forwarded-Port X-Forwarded-Server X-Forwarded-Prefix X-Forwarded-Ssl X-Forwarded-User " +
		"X-Auth-Request-Email Remote-User X-Forwarded-Client-Cert X-User-Id"
	for _, tc := range []struct {
		name, trusted, underscores string
		want                       string // the upstream's headers besides X-Forwarded-For, -Proto, -Host, X-Real-Ip, X-Request-Id
	}{
		{"untrusted client", "[]", "false", "Accept"},
		{"trusted proxy", "[127.0.0.1/32]", "false", "Accept " + fromProxy},
		{"untrusted client, underscores passed", "[]", "true", "Accept X-Request_tag"},
		{"trusted proxy, underscores passed", "[127.0.0.1/32]", "true", "Accept X-Request_tag " + fromProxy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := strings.Replace(testkit.BaseConfig(up.URL), "[127.0.0.1/32]", tc.trusted, 1)
			cfg = strings.Replace(cfg, "  shutdown_timeout: 10s\n", "  shutdown_timeout: 10s\n  underscores_in_headers: "+tc.underscores+"\n", 1)
			gw := start(t, cfg)
			out, _ := rawExchange(t, gw.g.Addr().String(), raw, 5*time.Second)
			h := testkit.Recv(t, got, 5*time.Second, "the request at the upstream")
			if !strings.HasPrefix(out, "HTTP/1.1 200 ") {
				t.Fatalf("answer %q", out)
			}
			var names []string
			for k := range h {
				switch k {
				case "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Real-Ip", "Accept-Encoding",
					"X-Request-Id",  // the gateway's own (TestAccessLog)
					"Linkgate-Loop": // its loop mark (TestLoopMarkFromClients)
				default:
					names = append(names, k)
				}
			}
			slices.Sort(names)
			want := strings.Fields(tc.want)
			slices.Sort(want)
			if !slices.Equal(names, want) {
				t.Errorf("the upstream got %v\nwant %v", names, want)
			}
			client := "127.0.0.1"
			if h.Get("X-Real-Ip") != client || h.Get("X-Forwarded-For") != client || h.Get("X-Forwarded-Host") != "short.example" {
				t.Errorf("X-Real-Ip %q, X-Forwarded-For %q, X-Forwarded-Host %q: want the peer and the Host", h.Get("X-Real-Ip"), h.Get("X-Forwarded-For"), h.Get("X-Forwarded-Host"))
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
	gw := start(t, strings.Replace(testkit.BaseConfig(up.URL), "response_header_timeout: 10s", "response_header_timeout: 200ms", 1))
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
	if r := testkit.Recv(t, res, 10*time.Second, "the answer to the request in flight"); r.Err != nil || r.Status != 200 || r.Body != "finished" {
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

// TestClientLeavingEndsTheUpstreamRequest: a client that hangs up while
// the upstream thinks ends the upstream's request too (its connection is
// cut), well before upstream.response_header_timeout, and counts as no
// upstream failure.
func TestClientLeavingEndsTheUpstreamRequest(t *testing.T) {
	t.Parallel()
	arrived, ended := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/slow" {
			return
		}
		close(arrived)
		select {
		case <-r.Context().Done():
			close(ended)
		case <-time.After(time.Minute):
		}
	}))
	defer up.Close()
	gw := start(t, testkit.BaseConfig(up.URL))
	c, err := net.Dial("tcp", gw.g.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	testkit.Recv(t, arrived, 5*time.Second, "the request at the upstream")
	c.Close()
	select {
	case <-ended:
	case <-time.After(testkit.Slack(5 * time.Second)):
		t.Fatal("the upstream's request still runs 5 s (stretched by the pace) after its client left")
	}
	for _, reason := range []string{"unreachable", "timeout", "failed"} {
		if n := metric(t, gw, `linkgate_upstream_errors_total{reason="`+reason+`"}`); n > 0 {
			t.Errorf("linkgate_upstream_errors_total{reason=%q} = %v: a client leaving counted as an upstream failure", reason, n)
		}
	}
}
