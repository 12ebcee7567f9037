package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/linkgate/linkgate/gateway"
	"github.com/linkgate/linkgate/internal/testkit"
)

// metric returns the value of the sample of the admin /metrics page whose
// line starts with series, or -1.
func metric(t testing.TB, gw *running, series string) float64 {
	t.Helper()
	_, page := testkit.Do(t, "GET", gw.admin("/metrics"), nil)
	for _, l := range strings.Split(page, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	return -1
}

func reloadEndpoint(t testing.TB, gw *running) (*http.Response, string) {
	t.Helper()
	return testkit.Do(t, "POST", gw.admin("/admin/reload"), nil, "Authorization", "Bearer "+testkit.AdminToken)
}

// TestReload changes the upstream by each trigger in turn.
func TestReload(t *testing.T) {
	t.Parallel()
	a, b, c, d := testkit.Named(t, "A"), testkit.Named(t, "B"), testkit.Named(t, "C"), testkit.Named(t, "D")
	gw := start(t, testkit.BaseConfig(a.URL))
	get := func() string { return testkit.Body(t, gw.url("/x")) }
	if got := get(); got != "A" {
		t.Fatalf("before reload: %q", got)
	}
	// The file did not change: SIGHUP reloads anyway. (First, so that the
	// watch has read the file before it changes: see watching.)
	gw.hup <- syscall.SIGHUP
	testkit.Eventually(t, 5*time.Second, "SIGHUP reloads", func() bool {
		return gw.logs.Logged("config reloaded", map[string]string{"source": "SIGHUP", "generation": "2"})
	})
	testkit.WriteFile(t, gw.path, testkit.BaseConfig(b.URL))
	testkit.Eventually(t, 5*time.Second, "file change reloads", func() bool { return get() == "B" })
	// The new snapshot serves a moment before the reload is logged.
	testkit.Eventually(t, 5*time.Second, "the file change's reload logged as generation 3", func() bool {
		return gw.logs.Logged("config reloaded", map[string]string{"source": "file change", "generation": "3"})
	})

	// The endpoint: restart-only fields are named, keep their running
	// values, and the rest applies.
	testkit.WriteFile(t, gw.path, strings.Replace(testkit.BaseConfig(c.URL), "listen: 127.0.0.1:0\n  trusted", "listen: 127.0.0.1:1\n  trusted", 1))
	resp, msg := reloadEndpoint(t, gw)
	if resp.StatusCode != 200 || !strings.Contains(msg, `"restart_required":["server.listen"]`) {
		t.Fatalf("reload endpoint: %d %s (want server.listen named as restart-only)", resp.StatusCode, msg)
	}
	if got := get(); got != "C" {
		t.Errorf("after the endpoint's reload: %q, want C", got)
	}
	_, cfg := testkit.Do(t, "GET", gw.admin("/admin/config"), nil, "Authorization", "Bearer "+testkit.AdminToken)
	if !strings.Contains(cfg, "listen: 127.0.0.1:0") || !strings.Contains(cfg, c.URL) {
		t.Errorf("/admin/config does not show the running listen address and the new upstream:\n%s", cfg)
	}

	// With the watch off only the triggers reload. (From a file on a free
	// port: a fixed one may be another test's.)
	testkit.WriteFile(t, gw.path, testkit.BaseConfig(c.URL))
	gw2 := startFile(t, gw.path, false)
	testkit.WriteFile(t, gw.path, testkit.BaseConfig(d.URL))
	time.Sleep(4 * gateway.SettleTime) // twice what a watch would take
	if got := testkit.Body(t, gw2.url("/x")); got != "C" {
		t.Errorf("with the watch off a file change reloaded: %q", got)
	}
}

// TestBadReloadKeepsServing tries every config check-config refuses on a
// running gateway, by the endpoint and by SIGHUP: it keeps serving on the
// running config, the endpoint answers 400 naming the field, and each
// failure is logged and counted. The watch takes the same reload path, and
// waits half a second for a file to settle: it is tried on two of them.
func TestBadReloadKeepsServing(t *testing.T) {
	t.Parallel()
	a := testkit.Named(t, "A")
	good := testkit.BaseConfig(a.URL)
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	testkit.WriteFile(t, path, good)
	gw := startFile(t, path, false) // each failure counted once, at once
	failed := func(gw *running) float64 { return metric(t, gw, `linkgate_config_reloads_total{result="failed"}`) }
	for _, tc := range badConfigs(a.URL) {
		t.Run(tc.name, func(t *testing.T) {
			before := failed(gw)
			testkit.WriteFile(t, gw.path, tc.yaml)
			resp, msg := reloadEndpoint(t, gw)
			p := testkit.Problem(t, resp, msg, http.StatusBadRequest)
			field := strings.TrimSuffix(tc.want[strings.LastIndex(tc.want, " ")+1:], ":")
			if !strings.Contains(msg, tc.want) && !strings.Contains(fmt.Sprint(p["field"]), field) {
				t.Errorf("reload answer %s does not name %q", msg, tc.want)
			}
			if got := failed(gw); got != before+1 {
				t.Errorf("the endpoint's failure counted: %v failed reloads, want %v", got, before+1)
			}
			gw.logs.Clear()
			gw.hup <- syscall.SIGHUP
			testkit.Eventually(t, 5*time.Second, "SIGHUP's failure logged", func() bool {
				return gw.logs.Logged("config reload failed, running config kept", map[string]string{"source": "SIGHUP"})
			})
			if got := failed(gw); got != before+2 {
				t.Errorf("SIGHUP's failure counted: %v failed reloads, want %v", got, before+2)
			}
			if got := testkit.Body(t, gw.url("/x")); got != "A" {
				t.Errorf("after a bad reload: %q, want A", got)
			}
		})
	}
	testkit.WriteFile(t, gw.path, good)
	if resp, msg := reloadEndpoint(t, gw); resp.StatusCode != 200 {
		t.Fatalf("a good file after the bad ones: %d %s", resp.StatusCode, msg)
	}

	t.Run("by the watch", func(t *testing.T) {
		gw := start(t, good)
		gw.watching(t)
		bad := map[string]string{}
		for _, tc := range badConfigs(a.URL) {
			bad[tc.name] = tc.yaml
		}
		for i, name := range []string{"rule name with a space", "empty file"} {
			yaml, ok := bad[name]
			if !ok {
				t.Fatalf("badConfigs has no %q", name)
			}
			testkit.WriteFile(t, gw.path, yaml)
			// A failure is counted, then logged.
			testkit.Eventually(t, 5*time.Second, "the watch's failure on "+name+" logged", func() bool {
				return gw.logs.Count("config reload failed, running config kept", map[string]string{"source": "file change"}) == i+1
			})
			if got := failed(gw); got != float64(i+1) {
				t.Errorf("%v failed reloads counted, want %d", got, i+1)
			}
			if got := testkit.Body(t, gw.url("/x")); got != "A" {
				t.Errorf("after %s by the watch: %q, want A", name, got)
			}
		}
	})
}

// TestFailedReloadsLeakNothing: a reload that fails after it built parts
// (a proxy with its health loop, a memcached store with its flushers)
// releases them, and one that panics in a constructor answers 400 too.
func TestFailedReloadsLeakNothing(t *testing.T) {
	a, b := testkit.Named(t, "A"), testkit.Named(t, "B")
	gw := start(t, testkit.BaseConfig(a.URL))
	// Every reload builds a new proxy (the target changes) and memcached
	// store (the servers do), then panics: both must be released.
	restore := gateway.SetBuildHook(func() { panic("constructor exploded") })
	defer restore()
	next := testkit.BaseConfig(b.URL) + "limiter:\n  store: memcached\n  memcached: {servers: [127.0.0.1:1]}\n"
	failed := metric(t, gw, `linkgate_config_reloads_total{result="failed"}`)
	testkit.WriteFile(t, gw.path, next)
	testkit.Eventually(t, 5*time.Second, "the watch's own attempt", func() bool {
		return metric(t, gw, `linkgate_config_reloads_total{result="failed"}`) > failed
	})
	reloadEndpoint(t, gw)
	base := runtime.NumGoroutine()
	before := metric(t, gw, `linkgate_config_reloads_total{result="failed"}`)
	const tries = 20
	for range tries {
		resp, msg := reloadEndpoint(t, gw)
		testkit.Problem(t, resp, msg, http.StatusBadRequest)
		if !strings.Contains(msg, "constructor exploded") {
			t.Fatalf("reload answer %s does not say what failed", msg)
		}
	}
	if got := metric(t, gw, `linkgate_config_reloads_total{result="failed"}`); got != before+tries {
		t.Errorf("failed reloads counted %v, want %v", got, before+tries)
	}
	testkit.Eventually(t, 5*time.Second, fmt.Sprintf("goroutines back to %d", base), func() bool {
		return runtime.NumGoroutine() <= base+2
	})
	if got := testkit.Body(t, gw.url("/x")); got != "A" {
		t.Errorf("after panicking reloads: %q, want A", got)
	}
	restore()
	if resp, msg := reloadEndpoint(t, gw); resp.StatusCode != 200 || testkit.Body(t, gw.url("/x")) != "B" {
		t.Errorf("reload once the constructor works: %d %s", resp.StatusCode, msg)
	}
}

// TestBadConfigAtStart: New is never reached with a bad file, and a file
// that compiles starts whatever its resources: the four once-fatal
// configs are refused by the compile step that start-up runs.
func TestBadConfigAtStart(t *testing.T) {
	for _, tc := range badConfigs("http://127.0.0.1:1") {
		path := t.TempDir() + "/gw.yaml"
		testkit.WriteFile(t, path, tc.yaml)
		if _, err := gateway.Load(path, getenv); err == nil {
			t.Errorf("%s: start-up's compile accepted it", tc.name)
		}
	}
}

// TestReloadKeepsInFlight: a request in flight when a reload replaces its
// upstream finishes on the config it started with; the next goes to the
// new upstream.
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
	// Released before a.Close waits for the handler, should the test end
	// early.
	releaseOnce := sync.OnceFunc(func() { close(release) })
	defer releaseOnce()
	b := testkit.Named(t, "B")
	gw := start(t, testkit.BaseConfig(a.URL))
	res := testkit.InFlight(gw.url("/slow"))
	testkit.Eventually(t, 5*time.Second, "request reached upstream A", started.Load)
	testkit.WriteFile(t, gw.path, testkit.BaseConfig(b.URL))
	if resp, msg := reloadEndpoint(t, gw); resp.StatusCode != 200 {
		t.Fatalf("reload: %d %s", resp.StatusCode, msg)
	}
	if got := testkit.Body(t, gw.url("/x")); got != "B" {
		t.Errorf("a request after the reload went to %q, want B", got)
	}
	releaseOnce()
	if r := testkit.Recv(t, res, 10*time.Second, "the answer to the request in flight"); r.Err != nil || r.Status != 200 || r.Body != "A" {
		t.Errorf("the request in flight across the reload got %d %q (%v), want 200 A", r.Status, r.Body, r.Err)
	}
}

// TestReloadReusesUnchangedParts: a reload that leaves the upstream and
// the limiter store alone keeps them: the counters carry over and the
// upstream connections are not opened again.
func TestReloadReusesUnchangedParts(t *testing.T) {
	var checks atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			checks.Add(1)
		}
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	// Health checks an hour apart: one running beside a request would open
	// a second connection to the upstream, reload or not.
	cfg := strings.Replace(testkit.BaseConfig(up.URL), "interval: 100ms", "interval: 1h", 1) +
		"rules:\n  - {name: ip, match: {path: /limited}, key: ip, limits: [3/m]}\n"
	gw := start(t, cfg)
	// The first check runs at start: a busy machine may run it late, beside
	// the requests after the reload, were it not waited for.
	testkit.Eventually(t, 5*time.Second, "the first health check", func() bool { return checks.Load() > 0 })
	time.Sleep(100 * time.Millisecond) // its connection back in the pool
	for i := range 3 {
		if resp, _ := testkit.Do(t, "GET", gw.url("/limited"), nil); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	opened := metric(t, gw, "linkgate_upstream_connections_opened_total")
	// Same rule name, a higher limit: counts survive, the 4th request
	// passes under 4/m and the 5th does not.
	testkit.WriteFile(t, gw.path, strings.Replace(cfg, "[3/m]", "[4/m]", 1))
	if resp, msg := reloadEndpoint(t, gw); resp.StatusCode != 200 {
		t.Fatalf("reload: %d %s", resp.StatusCode, msg)
	}
	codes := []int{}
	for range 2 {
		resp, _ := testkit.Do(t, "GET", gw.url("/limited"), nil)
		codes = append(codes, resp.StatusCode)
	}
	if codes[0] != 200 || codes[1] != 429 {
		t.Errorf("after the reload to 4/m with 3 counted: %v, want [200 429]", codes)
	}
	if got := metric(t, gw, "linkgate_upstream_connections_opened_total"); got != opened {
		t.Errorf("upstream connections opened went from %v to %v across a reload that kept the upstream", opened, got)
	}
}

// TestWatchWaitsForAWholeFile: a file written in place slowly, in pieces,
// passes through states that must never run: empty, then the first part
// (which here compiles: the rules are cut off). The watch reloads once,
// on the whole file, and never the empty or the partial one: the writer
// pauses for longer than the settle time but less than twice it. A busy
// machine may stretch a pause past twice the settle time, when a reload
// of the partial file is right: such a try proves nothing, and is made
// again on a fresh gateway.
func TestWatchWaitsForAWholeFile(t *testing.T) {
	t.Parallel()
	a, b := testkit.Named(t, "A"), testkit.Named(t, "B")
	rules := "rules:\n  - {name: ip, match: {path: /limited}, key: ip, limits: [1/m]}\n"
	next := testkit.BaseConfig(b.URL) + rules
	cut := strings.Index(next, "rules:")
	const tries = 10
	for try := 1; ; try++ {
		gw := start(t, testkit.BaseConfig(a.URL)+rules)
		gw.watching(t)
		f, err := os.OpenFile(gw.path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		truncated := time.Now()
		time.Sleep(settleWait) // empty for longer than the settle time
		f.WriteString(next[:cut])
		partial := time.Now()
		time.Sleep(settleWait) // the rules cut off as long
		f.WriteString(next[cut:])
		whole := time.Now()
		f.Close()
		if p1, p2 := partial.Sub(truncated), whole.Sub(partial); p1 >= 2*gateway.SettleTime || p2 >= 2*gateway.SettleTime {
			if try == tries {
				t.Skipf("*** SKIPPED: in %d tries the machine never paused the writer for less than twice the settle time (%v): %v, %v ***", tries, 2*gateway.SettleTime, p1, p2)
			}
			t.Logf("try %d: the writer paused %v and %v, not less than twice the settle time (%v): again", try, p1, p2, 2*gateway.SettleTime)
			continue
		}
		testkit.Eventually(t, 5*time.Second, "the whole file reloaded", func() bool {
			return testkit.Body(t, gw.url("/x")) == "B" && metric(t, gw, `linkgate_config_reloads_total{result="ok"}`) >= 2
		})
		time.Sleep(2 * settleWait) // a reload after the whole file's would show
		if got := metric(t, gw, `linkgate_config_reloads_total{result="ok"}`); got != 2 {
			t.Errorf("%v reloads, want 2 (SIGHUP's and the whole file's): the partial states were reloaded", got)
		}
		if got := metric(t, gw, `linkgate_config_reloads_total{result="failed"}`); got != 0 {
			t.Errorf("%v failed reloads: the empty state was read", got)
		}
		// The rules survived: the second request is limited.
		testkit.Do(t, "GET", gw.url("/limited"), nil)
		if resp, _ := testkit.Do(t, "GET", gw.url("/limited"), nil); resp.StatusCode != 429 {
			t.Errorf("the rule of the whole file does not apply: %d", resp.StatusCode)
		}
		return
	}
}

// settleWait is longer than the watch's settle time (gateway.SettleTime),
// and less than twice it.
const settleWait = 300 * time.Millisecond
