package gateway_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/pebblestore"
	"github.com/linkgate/linkgate/internal/testkit"
)

// healthDetail is GET /admin/health's answer.
type healthDetail struct {
	Ready     bool `json:"ready"`
	Analytics *struct {
		State         string     `json:"state"`
		Reason        string     `json:"reason"`
		JournalBytes  int64      `json:"journal_bytes"`
		OldestUnsaved *time.Time `json:"oldest_unsaved"`
		DroppedVisits uint64     `json:"dropped_visits"`
	} `json:"analytics"`
}

func health(t testing.TB, gw *running) healthDetail {
	t.Helper()
	resp, b := testkit.Do(t, "GET", gw.admin("/admin/health"), nil, "Authorization", "Bearer "+testkit.AdminToken)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /admin/health: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var h healthDetail
	if err := json.Unmarshal([]byte(b), &h); err != nil {
		t.Fatalf("GET /admin/health: %v in %s", err, b)
	}
	return h
}

// healthConfig is analyticsConfig with the admin API on.
func healthConfig(upstream, path string) string {
	return withAdmin(analyticsConfig(upstream, embeddedStore(path), "200ms"))
}

// TestBrokenEmbeddedStoreAtStart starts the gateway on an analytics
// folder that cannot be opened, in each way that can happen: the gateway
// proxies at once and /readyz says ready; /admin/health and
// linkgate_analytics_state say analytics are degraded and why; once the
// folder is usable the store opens by itself and the visits counted
// meanwhile reach it, each once.
func TestBrokenEmbeddedStoreAtStart(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		reason string
		// breakDir makes path unusable and returns what mends it.
		breakDir func(t *testing.T, path string) (mend func())
	}{
		{"not a folder", "not a directory", func(t *testing.T, path string) func() {
			if err := os.WriteFile(path, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"held by another store", "in use", func(t *testing.T, path string) func() {
			s, err := pebblestore.Open(path, analyticstest.DefaultPlan, nil)
			if err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"read-only volume", "read-only file system", func(t *testing.T, path string) func() {
			// chmod means nothing to root: a read-only mount is what stops
			// it too.
			mnt := filepath.Dir(path)
			testkit.MountTmpfs(t, mnt, 64<<20, "the other two cases cover a store that opens late without privileges")
			if out, err := exec.Command("mount", "-o", "remount,ro", mnt).CombinedOutput(); err != nil {
				t.Fatalf("remount ro: %v: %s", err, out)
			}
			return func() {
				if out, err := exec.Command("mount", "-o", "remount,rw", mnt).CombinedOutput(); err != nil {
					t.Fatalf("remount rw: %v: %s", err, out)
				}
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "data", "analytics")
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			mend := c.breakDir(t, path)
			up := tinyURL(t)
			began := time.Now()
			gw := start(t, healthConfig(up.URL, path))

			// Proxying does not wait for the store.
			const visits = 7
			for range visits {
				if resp, _ := testkit.Do(t, "GET", gw.url("/go"), nil); resp.StatusCode != 302 {
					t.Fatalf("GET /go with the store broken: %d, want the upstream's 302", resp.StatusCode)
				}
			}
			t.Logf("gateway up and %d visits proxied %v after start", visits, time.Since(began).Round(time.Millisecond))
			testkit.Eventually(t, 5*time.Second, "/readyz ready", func() bool {
				resp, _ := testkit.Do(t, "GET", gw.admin("/readyz"), nil)
				return resp.StatusCode == 200
			})
			testkit.Eventually(t, 5*time.Second, "health degraded", func() bool {
				h := health(t, gw)
				return h.Analytics != nil && h.Analytics.State == "degraded"
			})
			h := health(t, gw)
			if !h.Ready || !strings.Contains(h.Analytics.Reason, c.reason) || !strings.Contains(h.Analytics.Reason, "not open yet") {
				t.Errorf("health = %+v %+v, want ready and a reason saying %q", h, *h.Analytics, c.reason)
			}
			if got := metric(t, gw, `linkgate_analytics_state{state="degraded"}`); got != 1 {
				t.Errorf(`linkgate_analytics_state{state="degraded"} = %v, want 1`, got)
			}
			if got := metric(t, gw, `linkgate_analytics_state{state="ok"}`); got != 0 {
				t.Errorf(`linkgate_analytics_state{state="ok"} = %v, want 0`, got)
			}
			if !gw.logs.Logged("analytics store cannot be opened yet; the gateway proxies, counts are kept in memory, opening is retried", nil) {
				t.Errorf("no warning that the store cannot be opened; logs:\n%s", gw.logs)
			}
			// A few failed flushes pass before the folder is mended.
			testkit.Eventually(t, 5*time.Second, "a failed flush", func() bool { return metric(t, gw, "linkgate_analytics_store_errors_total") >= 1 })

			mend()
			mended := time.Now()
			testkit.Eventually(t, 15*time.Second, "health ok once the folder is usable", func() bool {
				return health(t, gw).Analytics.State == "ok"
			})
			t.Logf("analytics ok %v after the folder was mended", time.Since(mended).Round(time.Millisecond))
			// The metric reports the same state: ok, unless a write has
			// gone on past spill_after since (a busy machine's), which is
			// degraded until it ends.
			testkit.Eventually(t, 5*time.Second, `linkgate_analytics_state{state="ok"} 1`, func() bool {
				return metric(t, gw, `linkgate_analytics_state{state="ok"}`) == 1
			})
			if got := stats(t, gw, "/stats/go?last=1h"); got.Total != visits || got.RangeTotal != visits {
				t.Errorf("/stats/go once open: total %d, range %d; want the %d visits made while broken", got.Total, got.RangeTotal, visits)
			}
			testkit.Eventually(t, 5*time.Second, "health once all is written: nothing waiting and no reason", func() bool {
				h := health(t, gw)
				return h.Analytics.OldestUnsaved == nil && h.Analytics.Reason == ""
			})
		})
	}
}

// TestHealthDetailNeedsTheToken: /admin/health is behind the admin token,
// as the rest of /admin; /healthz stays open and about the process.
func TestHealthDetailNeedsTheToken(t *testing.T) {
	t.Parallel()
	up := tinyURL(t)
	gw := start(t, healthConfig(up.URL, filepath.Join(t.TempDir(), "analytics")))
	resp, b := testkit.Do(t, "GET", gw.admin("/admin/health"), nil)
	testkit.Problem(t, resp, b, 401)
	if resp, b := testkit.Do(t, "GET", gw.admin("/healthz"), nil); resp.StatusCode != 200 || b != "ok\n" {
		t.Errorf("/healthz = %d %q", resp.StatusCode, b)
	}
	testkit.Eventually(t, 5*time.Second, "health ok", func() bool { return health(t, gw).Analytics.State == "ok" })
}

// TestFullDiskThenSpaceBack runs the gateway with its embedded store on a
// tmpfs of the smallest supported size (48 MiB, see docs/analytics.md), fills the
// volume while visits come in, and frees it again: the proxy serves
// throughout, health says degraded with "disk almost full" while the
// writes are refused, and once space is back the same process writes the
// visits kept meanwhile, each once.
func TestFullDiskThenSpaceBack(t *testing.T) {
	t.Parallel()
	mnt := testkit.Tmpfs(t, 48<<20, "TestReserveOnSmallDisk (analytics/pebblestore) covers the reserve without privileges")
	up := tinyURL(t)
	gw := start(t, healthConfig(up.URL, filepath.Join(mnt, "analytics")))
	visit := func(n int) {
		for range n {
			if resp, _ := testkit.Do(t, "GET", gw.url("/gh"), nil); resp.StatusCode != 302 {
				t.Fatalf("GET /gh: %d, want 302", resp.StatusCode)
			}
		}
	}
	visit(3)
	testkit.Eventually(t, 5*time.Second, "the first visits written", func() bool {
		h := health(t, gw)
		return h.Analytics.State == "ok" && h.Analytics.OldestUnsaved == nil
	})

	free := testkit.Fill(t, mnt, 0)
	visit(4)
	testkit.Eventually(t, 5*time.Second, "health degraded by the full disk", func() bool {
		return strings.Contains(health(t, gw).Analytics.Reason, "disk almost full")
	})
	h := health(t, gw)
	if h.Analytics.State != "degraded" || h.Analytics.OldestUnsaved == nil || !h.Ready {
		t.Errorf("health on a full disk = %+v %+v, want ready, analytics degraded with visits waiting", h, *h.Analytics)
	}

	free()
	testkit.Eventually(t, 15*time.Second, "health ok once space is back", func() bool {
		h := health(t, gw)
		return h.Analytics.State == "ok" && h.Analytics.OldestUnsaved == nil
	})
	if got := stats(t, gw, "/stats/gh?last=1h"); got.Total != 7 {
		t.Errorf("/stats/gh total %d, want the 7 visits, the 4 made on a full disk included", got.Total)
	}
}

// TestCassandraDownAtStart: a gateway whose Cassandra cannot be reached
// proxies at once, and says so the way it does for the embedded store.
func TestCassandraDownAtStart(t *testing.T) {
	t.Parallel()
	up := tinyURL(t)
	dead := testkit.DeadAddr(t)
	cfg := strings.Replace(healthConfig(up.URL, filepath.Join(t.TempDir(), "analytics")),
		"  store: embedded\n", "  store: cassandra\n  cassandra: {hosts: ["+dead+"]}\n", 1)
	gw := start(t, cfg)
	if resp, _ := testkit.Do(t, "GET", gw.url("/go"), nil); resp.StatusCode != 302 {
		t.Fatalf("GET /go with Cassandra down: %d, want 302", resp.StatusCode)
	}
	testkit.Eventually(t, 10*time.Second, "health degraded", func() bool { return health(t, gw).Analytics.State == "degraded" })
	h := health(t, gw)
	if !h.Ready || !strings.Contains(h.Analytics.Reason, "cassandra: not connected") {
		t.Errorf("health = %+v %+v, want ready, and the reason", h, *h.Analytics)
	}
	if got := metric(t, gw, `linkgate_analytics_state{state="degraded"}`); got != 1 {
		t.Errorf(`linkgate_analytics_state{state="degraded"} = %v, want 1`, got)
	}
}
