package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/linkgate/linkgate/gateway"
	"github.com/linkgate/linkgate/internal/testkit"
)

// TestStatsOneVary: a stats answer through the gateway carries one Vary
// header, naming both request headers it depends on, whatever the format
// and whether it was compressed. Two Vary lines are legal HTTP, but caches
// and CDNs that read only the first one would serve a gzipped answer to a
// client that cannot read it.
func TestStatsOneVary(t *testing.T) {
	up := tinyURL(t)
	gw := start(t, analyticsConfig(up.URL, embeddedStore(t.TempDir()), "10s"))
	for _, tc := range []struct{ path, accept, encoding string }{
		{"/stats/go?last=1h", "application/json", ""},
		{"/stats/go?last=1y&stitch=true", "application/json", "gzip"}, // large enough to be gzipped
		{"/stats/go?last=1h&format=csv", "", ""},
		{"/stats/go", "text/html", ""},
	} {
		req, err := http.NewRequest("GET", gw.url(tc.path), nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.accept != "" {
			req.Header.Set("Accept", tc.accept)
		}
		if tc.encoding != "" {
			req.Header.Set("Accept-Encoding", tc.encoding)
		}
		resp, err := testkit.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", tc.path, resp.StatusCode)
		}
		if tc.encoding == "gzip" && resp.Header.Get("Content-Encoding") != "gzip" {
			t.Errorf("GET %s: not gzipped (Content-Encoding %q): the case meant to be compressed is not", tc.path, resp.Header.Get("Content-Encoding"))
		}
		if vary := resp.Header.Values("Vary"); len(vary) != 1 || vary[0] != "Accept, Accept-Encoding" {
			t.Errorf("GET %s: Vary %q, want one header: Accept, Accept-Encoding", tc.path, vary)
		}
	}
}

// TestWatchIgnoresOtherFiles: a file beside the config that changes every
// 20 ms (a log, a pid file) neither delays nor prevents the reload of a
// config change. The watch once restarted its wait at every event of the
// folder, so such a neighbour kept any file change from ever reloading.
func TestWatchIgnoresOtherFiles(t *testing.T) {
	t.Parallel()
	a, b := testkit.Named(t, "A"), testkit.Named(t, "B")
	gw := start(t, testkit.BaseConfig(a.URL))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		log := filepath.Join(filepath.Dir(gw.path), "gateway.log")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			f, err := os.OpenFile(log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
			if err != nil {
				t.Error(err)
				return
			}
			fmt.Fprintf(f, "line %d\n", i)
			f.Close()
		}
	}()
	defer func() { close(stop); <-done }()
	testkit.Eventually(t, 5*time.Second, "the neighbour busy before the change", func() bool {
		b, _ := os.ReadFile(filepath.Join(filepath.Dir(gw.path), "gateway.log"))
		return bytes.Count(b, []byte("\n")) >= 5
	})
	testkit.WriteFile(t, gw.path, testkit.BaseConfig(b.URL))
	testkit.Eventually(t, 5*time.Second, "the file change reloads while a neighbour changes every 20 ms", func() bool {
		return testkit.Body(t, gw.url("/x")) == "B"
	})
	// The snapshot is swapped in before the reload is logged.
	testkit.Eventually(t, 5*time.Second, "the reload logged as the file watch's", func() bool {
		return gw.logs.Logged("config reloaded", map[string]string{"source": "file change"})
	})
}

// TestWatchSeesAChangeBeforeItStarted: a file changed between the read of
// the config that runs and the start of the watch (a ConfigMap update in
// the gateway's first moments) is reloaded, though no event of the watch
// tells of it.
func TestWatchSeesAChangeBeforeItStarted(t *testing.T) {
	t.Parallel()
	a, b := testkit.Named(t, "A"), testkit.Named(t, "B")
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	testkit.WriteFile(t, path, testkit.BaseConfig(a.URL))
	plan, err := gateway.Load(path, getenv)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, path, testkit.BaseConfig(b.URL))
	gw := startPlan(t, plan, path, true)
	testkit.Eventually(t, 5*time.Second, "the change made before the watch started reloads", func() bool {
		return testkit.Body(t, gw.url("/x")) == "B"
	})
}

// TestWatchKubernetesConfigMap: a config mounted as a Kubernetes ConfigMap
// is a link to ..data/gateway.yaml, and an update renames a new ..data link
// over the old one; the events name ..data, never gateway.yaml, and the
// watch still reloads.
func TestWatchKubernetesConfigMap(t *testing.T) {
	t.Parallel()
	a, b := testkit.Named(t, "A"), testkit.Named(t, "B")
	dir := t.TempDir()
	version := func(name, cfg string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		testkit.WriteFile(t, filepath.Join(dir, name, "gateway.yaml"), cfg)
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_11_26_01", testkit.BaseConfig(a.URL))
	path := filepath.Join(dir, "gateway.yaml")
	if err := os.Symlink("..data/gateway.yaml", path); err != nil {
		t.Fatal(err)
	}
	gw := startFile(t, path, true)
	if got := testkit.Body(t, gw.url("/x")); got != "A" {
		t.Fatalf("before the update: %q", got)
	}
	version("..2026_11_26_02", testkit.BaseConfig(b.URL))
	os.RemoveAll(filepath.Join(dir, "..2026_11_26_01"))
	testkit.Eventually(t, 5*time.Second, "the ConfigMap update reloads", func() bool {
		return testkit.Body(t, gw.url("/x")) == "B"
	})
	// The snapshot is swapped in before the reload is logged.
	testkit.Eventually(t, 5*time.Second, "the reload logged as the file watch's", func() bool {
		return gw.logs.Logged("config reloaded", map[string]string{"source": "file change"})
	})
}

// nonLocalIPv4 returns an address of the documentation ranges (RFC 5737)
// that no interface of this machine has: binding it fails with "cannot
// assign requested address".
func nonLocalIPv4(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"192.0.2.1", "198.51.100.1", "203.0.113.1"} {
		local := false
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().String() == c {
				local = true
			}
		}
		if !local {
			return c
		}
	}
	t.Skip("every documentation address is on an interface of this machine")
	return ""
}

// TestListenChecked: check-config (gateway.Load, the compile that start-up
// and every reload run) refuses a listen address start-up could not bind,
// naming the field and its line, and accepts the odd ones it can: a start
// never fails on an address the file names. Before, an address of no
// interface and a malformed IPv4 address (taken for a host name) passed
// the check and killed the start.
func TestListenChecked(t *testing.T) {
	up := testkit.Named(t, "upstream")
	base := testkit.BaseConfig(up.URL)
	server := func(addr string) string {
		return strings.Replace(base, "listen: 127.0.0.1:0\n  trusted", "listen: "+addr+"\n  trusted", 1)
	}
	admin := func(addr string) string {
		return strings.Replace(base, "admin:\n  listen: 127.0.0.1:0", "admin:\n  listen: "+addr, 1)
	}
	other := nonLocalIPv4(t)
	for _, tc := range []struct{ name, yaml, want string }{
		{"an address of no interface", server(other + ":8080"), `:2: server.listen: "` + other + `:8080": ` + other + " is an address that no interface of this machine has"},
		{"an IPv4 address of no interface, admin", admin(other + ":9999"), ":6: admin.listen:"},
		{"a malformed IPv4 address", admin("527.0.0.1:9999"), `:6: admin.listen: "527.0.0.1:9999": "527.0.0.1" is not an IP address`},
		{"three numbers", server("10.0.1:8080"), `:2: server.listen: "10.0.1:8080": "10.0.1" is not an IP address`},
		{"a name that does not resolve", admin("no-such-host.invalid:9999"), `:6: admin.listen: "no-such-host.invalid:9999": the host name "no-such-host.invalid" does not resolve`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gw.yaml")
			testkit.WriteFile(t, path, tc.yaml)
			_, err := gateway.Load(path, getenv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load: %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
	for _, tc := range []struct{ name, yaml string }{
		{"another loopback address", server("127.0.0.2:0")},
		{"a host name", admin("localhost:0")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gw := start(t, tc.yaml)
			if got := testkit.Body(t, gw.url("/x")); got != "upstream" {
				t.Errorf("GET /x on %s = %q", gw.g.Addr(), got)
			}
			if resp, _ := testkit.Do(t, "GET", gw.admin("/healthz"), nil); resp.StatusCode != 200 {
				t.Errorf("GET /healthz on %s: %d", gw.g.AdminAddr(), resp.StatusCode)
			}
		})
	}

	// A reload to an address that a restart could not bind is refused like
	// any bad file, though listen changes only at a restart.
	gw := start(t, base)
	testkit.WriteFile(t, gw.path, server(other+":8080"))
	resp, msg := reloadEndpoint(t, gw)
	p := testkit.Problem(t, resp, msg, http.StatusBadRequest)
	if p["field"] != "server.listen" || p["line"] != float64(2) {
		t.Errorf("reload answer %s: want field server.listen at line 2", msg)
	}
	if got := testkit.Body(t, gw.url("/x")); got != "upstream" {
		t.Errorf("after the refused reload: %q", got)
	}
}

// TestReloadKeepsAdminToken: a reload whose admin.token_env names a
// variable the process does not have is refused, naming the field and its
// line, and the admin API keeps its token; it once switched /admin/* off
// until a restart, since no reload can set a variable. token_env: "" turns
// it off on purpose, and a reload takes that.
func TestReloadKeepsAdminToken(t *testing.T) {
	up := testkit.Named(t, "upstream")
	base := testkit.BaseConfig(up.URL)
	gw := start(t, base)
	authed := func() int {
		resp, _ := testkit.Do(t, "GET", gw.admin("/admin/config"), nil, "Authorization", "Bearer "+testkit.AdminToken)
		return resp.StatusCode
	}
	testkit.WriteFile(t, gw.path, strings.Replace(base, "token_env: LG_TEST_ADMIN_TOKEN", "token_env: LG_TEST_NOT_SET", 1))
	resp, msg := reloadEndpoint(t, gw)
	p := testkit.Problem(t, resp, msg, http.StatusBadRequest)
	if p["field"] != "admin.token_env" || p["line"] != float64(7) || !strings.Contains(msg, "LG_TEST_NOT_SET is not set") {
		t.Errorf("reload answer %s: want admin.token_env at line 7 named with the variable", msg)
	}
	if got := authed(); got != 200 {
		t.Errorf("after the refused reload, /admin/config with the token: %d, want 200", got)
	}
	gw.hup <- syscall.SIGHUP
	testkit.Eventually(t, 5*time.Second, "SIGHUP's refusal logged", func() bool {
		return gw.logs.Logged("config reload failed, running config kept", map[string]string{"source": "SIGHUP"})
	})
	if got := authed(); got != 200 {
		t.Errorf("after the refused SIGHUP reload, /admin/config with the token: %d, want 200", got)
	}

	testkit.WriteFile(t, gw.path, strings.Replace(base, "token_env: LG_TEST_ADMIN_TOKEN", `token_env: ""`, 1))
	if resp, msg := reloadEndpoint(t, gw); resp.StatusCode != 200 {
		t.Fatalf("a reload turning the admin API off on purpose: %d %s", resp.StatusCode, msg)
	}
	if got := authed(); got != http.StatusForbidden {
		t.Errorf("after token_env: \"\", /admin/config: %d, want 403", got)
	}
}

// TestOddValuesRefused: values that once passed check-config and ran are
// refused by a reload over the admin endpoint (and by check-config, the
// same compile), each answer naming the field and its line in the file's
// own words, and the running config stays.
func TestOddValuesRefused(t *testing.T) {
	up := testkit.Named(t, "upstream")
	base := testkit.BaseConfig(up.URL)
	nl := strings.Count(base, "\n")
	gw := start(t, base)
	for _, tc := range []struct {
		name, yaml, field string
		line              int
		says              string
	}{
		{"a health check every nanosecond", strings.Replace(base, "interval: 100ms", "interval: 1ns", 1), "upstream.health_check.interval", 12,
			"1ns is less than 100ms; it can be 100ms to 1h"},
		{"a field in the wrong section", base + "  max_header_bytes: 65536\n", "analytics.max_header_bytes", nl + 1, "unknown field; analytics has enabled, match,"},
		{"two terabytes of headers, in server", strings.Replace(base, "  shutdown_timeout: 10s\n", "  shutdown_timeout: 10s\n  max_header_bytes: 2000000000000\n", 1),
			"server.max_header_bytes", 5, "2000000000000 is more than 1048576"},
		{"a second document", base + "---\nrules: []\n", "", nl + 1, "a second YAML document"},
		{"an IPv6 prefix too long", base + "identity:\n  ipv6_prefix: 200\n", "identity.ipv6_prefix", nl + 2, "200 is more than 128; it can be 1 to 128"},
		{"a misspelt section", base + "servr:\n  listen: 127.0.0.1:0\n", "servr", nl + 1, "unknown field (did you mean server?); the file's top level has server, admin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.WriteFile(t, gw.path, tc.yaml)
			resp, msg := reloadEndpoint(t, gw)
			p := testkit.Problem(t, resp, msg, http.StatusBadRequest)
			if tc.field != "" && (p["field"] != tc.field || p["line"] != float64(tc.line)) {
				t.Errorf("reload answer %s: want field %s at line %d", msg, tc.field, tc.line)
			}
			if want := fmt.Sprintf(":%d: ", tc.line); !strings.Contains(msg, want) || !strings.Contains(msg, tc.says) {
				t.Errorf("reload answer %s: want line %d and %q", msg, tc.line, tc.says)
			}
			if got := testkit.Body(t, gw.url("/x")); got != "upstream" {
				t.Errorf("after the refused reload: %q", got)
			}
		})
	}
}

// TestAccessLog: with server.access_log, each request gets a line with the
// client the trusted proxies name (not only the peer), User-Agent, Referer,
// the request id and the time the upstream took; the request id reaches
// the upstream in X-Request-ID: a trusted proxy's is kept, an untrusted
// client's is replaced by a new one, and a request without one gets one.
func TestAccessLog(t *testing.T) {
	var mu sync.Mutex
	var seen []string // X-Request-ID as the upstream got it
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			mu.Lock()
			seen = append(seen, strings.Join(r.Header.Values("X-Request-ID"), "|"))
			mu.Unlock()
		}
		if r.URL.Path == "/slow" {
			time.Sleep(60 * time.Millisecond)
		}
		w.Write([]byte("ok"))
	}))
	defer up.Close()
	lastSeen := func() string {
		mu.Lock()
		defer mu.Unlock()
		return seen[len(seen)-1]
	}
	base := testkit.BaseConfig(up.URL)
	cfg := strings.Replace(base, "  shutdown_timeout: 10s\n", "  shutdown_timeout: 10s\n  access_log: true\n", 1)
	trusting := start(t, cfg)
	untrusting := start(t, strings.Replace(cfg, "trusted_proxies: [127.0.0.1/32]", "trusted_proxies: []", 1))
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)

	type line = map[string]string
	access := func(gw *running, path string) line {
		t.Helper()
		var found line
		testkit.Eventually(t, 5*time.Second, "the access line of "+path, func() bool {
			for _, js := range strings.Split(gw.logs.String(), "\n") {
				var l line
				if json.Unmarshal([]byte(js), &l) == nil && l["msg"] == "access" && l["path"] == path {
					found = l
				}
			}
			return found != nil
		})
		return found
	}

	// Through a trusted proxy: its client, its id.
	testkit.Do(t, "GET", trusting.url("/slow"), nil, "X-Forwarded-For", "203.0.113.9", "X-Request-ID", "edge-7f3a:1",
		"User-Agent", "curl/8.5.0", "Referer", "https://example.org/page")
	l := access(trusting, "/slow")
	for k, want := range map[string]string{
		"method": "GET", "status": "200", "bytes": "2", "proto": "HTTP/1.1", "client": "203.0.113.9",
		"request_id": "edge-7f3a:1", "user_agent": "curl/8.5.0", "referer": "https://example.org/page",
		"host": trusting.g.Addr().String(),
	} {
		if l[k] != want {
			t.Errorf("access line %s = %q, want %q (line %v)", k, l[k], want, l)
		}
	}
	if !strings.HasPrefix(l["peer"], "127.0.0.1:") {
		t.Errorf("peer %q, want the connection's address", l["peer"])
	}
	if d, err := time.ParseDuration(l["upstream_duration"]); err != nil || d < 60*time.Millisecond || d > 5*time.Second {
		t.Errorf("upstream_duration %q, want the upstream's 60 ms or a little more", l["upstream_duration"])
	}
	if got := lastSeen(); got != "edge-7f3a:1" {
		t.Errorf("the upstream got X-Request-ID %q, want the trusted proxy's", got)
	}

	// A trusted proxy's id that does not fit in a log line is replaced.
	testkit.Do(t, "GET", trusting.url("/spaced"), nil, "X-Request-ID", "two words")
	if id := access(trusting, "/spaced")["request_id"]; !hex32.MatchString(id) || lastSeen() != id {
		t.Errorf("an id with a space: logged %q, upstream got %q; want a new id in both", id, lastSeen())
	}

	// From an untrusted client: its headers are not believed.
	testkit.Do(t, "GET", untrusting.url("/forged"), nil, "X-Forwarded-For", "203.0.113.9", "X-Request-ID", "someone-elses-id")
	l = access(untrusting, "/forged")
	if l["client"] != "127.0.0.1" {
		t.Errorf("untrusted client %q, want the peer 127.0.0.1", l["client"])
	}
	if id := l["request_id"]; !hex32.MatchString(id) || lastSeen() != id {
		t.Errorf("a forged id: logged %q, upstream got %q; want one new id in both", id, lastSeen())
	}

	// Without an id: one is made, and the next request gets another.
	testkit.Do(t, "GET", untrusting.url("/a"), nil)
	testkit.Do(t, "GET", untrusting.url("/b"), nil)
	a, b := access(untrusting, "/a")["request_id"], access(untrusting, "/b")["request_id"]
	if !hex32.MatchString(a) || !hex32.MatchString(b) || a == b {
		t.Errorf("new ids %q and %q: want two different 32-hex ids", a, b)
	}

	// An answer the gateway gives itself has no upstream time.
	resp, _ := testkit.Do(t, "TRACE", untrusting.url("/t"), nil)
	if l := access(untrusting, "/t"); resp.StatusCode != 405 || l["status"] != "405" || l["upstream_duration"] != "" {
		t.Errorf("TRACE: %d, access line %v; want 405 without upstream_duration", resp.StatusCode, l)
	}
}
