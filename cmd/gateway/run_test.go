package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

var tokenEnv = "LG_TEST_ADMIN_TOKEN=" + testkit.AdminToken

// The tests here need a separate process: real signals, exit codes, the
// command line. Everything else is tested in-process in package gateway.

// TestSIGHUPReloads: SIGHUP reloads a good file and keeps the running
// config on a bad one, with the watch off.
func TestSIGHUPReloads(t *testing.T) {
	t.Parallel()
	a, b := testkit.Named(t, "A"), testkit.Named(t, "B")
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	testkit.WriteFile(t, path, testkit.BaseConfig(a.URL))
	gw := startProcess(t, []string{tokenEnv}, []string{"gateway", "admin"}, bin.gateway, "-config", path, "-log-format", "json", "-watch=false")
	body := func() string { _, s := testkit.Do(t, "GET", gw.url("gateway", "/x"), nil); return s }

	testkit.WriteFile(t, path, testkit.BaseConfig(b.URL))
	time.Sleep(300 * time.Millisecond) // the watcher is off: nothing may change by itself
	if got := body(); got != "A" {
		t.Fatalf("changed without a trigger: %q", got)
	}
	gw.cmd.Process.Signal(syscall.SIGHUP)
	testkit.Eventually(t, 5*time.Second, "SIGHUP reloads", func() bool { return body() == "B" })

	// A file that is not YAML, and an empty one: the process lives on,
	// serving B. (Every config check-config refuses, the once-fatal ones
	// among them, is reloaded by each trigger, SIGHUP included, in
	// TestBadReloadKeepsServing in package gateway.)
	for _, bad := range []string{"upstream: [\n", ""} {
		testkit.WriteFile(t, path, bad)
		gw.cmd.Process.Signal(syscall.SIGHUP)
		testkit.Eventually(t, 5*time.Second, "failed SIGHUP reload logged", func() bool {
			return gw.logs.Logged("config reload failed, running config kept", map[string]string{"source": "SIGHUP"})
		})
		gw.logs.Clear()
		if got := body(); got != "B" {
			t.Fatalf("after a bad file:\n%s\nthe gateway answers %q, want B", bad, got)
		}
	}
}

// TestSIGTERMDrainsAndFlushes: SIGTERM lets a request in flight finish,
// makes the final flush of the visits in memory (the flush interval is an
// hour away) and exits 0; the next process on the same directory serves
// them.
func TestSIGTERMDrainsAndFlushes(t *testing.T) {
	t.Parallel()
	var started atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
		case "/slow":
			started.Store(true)
			time.Sleep(700 * time.Millisecond)
			w.Write([]byte("finished"))
		default:
			http.Redirect(w, r, "https://example.com/", http.StatusFound)
		}
	}))
	defer up.Close()
	cfg := strings.Replace(testkit.BaseConfig(up.URL), "analytics:\n  enabled: false\n",
		"analytics:\n  flush_interval: 1h\n  embedded: {path: "+t.TempDir()+"}\n", 1)
	gw, _ := startGateway(t, cfg)
	for range 7 {
		if resp, _ := testkit.Do(t, "GET", gw.url("gateway", "/ex"), nil); resp.StatusCode != 302 {
			t.Fatalf("visit: %d", resp.StatusCode)
		}
	}
	res := testkit.InFlight(gw.url("gateway", "/slow"))
	testkit.Eventually(t, 5*time.Second, "request reached upstream", started.Load)
	if err := gw.stop(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	if r := testkit.Recv(t, res, time.Minute, "the answer of the request in flight"); r.Err != nil || r.Status != 200 || r.Body != "finished" {
		t.Errorf("in-flight request got %d %q (%v)", r.Status, r.Body, r.Err)
	}
	if !gw.logs.Logged("stopped", nil) {
		t.Errorf("no clean stop logged:\n%s", gw.logs.String())
	}
	gw2, _ := startGateway(t, cfg)
	_, b := testkit.Do(t, "GET", gw2.url("gateway", "/stats/ex?last=1h"), nil)
	var got struct{ Total int64 }
	if err := json.Unmarshal([]byte(b), &got); err != nil || got.Total != 7 {
		t.Errorf("after a restart /stats/ex answers %s, want a total of 7", b)
	}
}

// TestSubcommands: check-config, version, probe and -h, each with its exit
// status and output.
func TestSubcommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	testkit.WriteFile(t, good, testkit.BaseConfig("http://127.0.0.1:1"))
	testkit.WriteFile(t, bad, testkit.BaseConfig("http://127.0.0.1:1")+"limiter:\n  on_store_error: maybe\n")
	out, err := command(bin.gateway, "check-config", good).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Errorf("check-config good: %v %s", err, out)
	}
	out, err = command(bin.gateway, "check-config", bad).CombinedOutput()
	want := fmt.Sprintf("bad.yaml:%d: limiter.on_store_error", strings.Count(testkit.BaseConfig("x"), "\n")+2)
	if err == nil || !strings.Contains(string(out), want) {
		t.Errorf("check-config bad: %v %s", err, out)
	}
	for _, f := range []string{"../../configs/gateway.example.yaml", "../../configs/gateway.quickstart.yaml"} {
		if out, err := command(bin.gateway, "check-config", f).CombinedOutput(); err != nil {
			t.Errorf("check-config %s: %v %s", f, err, out)
		}
	}
	out, err = command(bin.gateway, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "linkgate ") {
		t.Errorf("version: %v %s", err, out)
	}
	up := testkit.Named(t, "ok")
	if out, err := command(bin.gateway, "probe", up.URL+"/healthz").CombinedOutput(); err != nil {
		t.Errorf("probe of a server answering 200: %v %s", err, out)
	}
	dead := "http://" + testkit.DeadAddr(t) + "/healthz"
	if out, err := command(bin.gateway, "probe", dead).CombinedOutput(); err == nil || !strings.Contains(string(out), "probe:") {
		t.Errorf("probe of a closed port: %v %s, want exit 1 and the reason", err, out)
	}
	out, _ = command(bin.gateway, "-h").CombinedOutput()
	for _, sub := range []string{"check-config FILE", "version", "probe URL", "-config"} {
		if !strings.Contains(string(out), sub) {
			t.Errorf("gateway -h does not mention %q:\n%s", sub, out)
		}
	}
}
