package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// TestCacheFleetPurge: two gateway processes share a memcached as their
// limiter's store; a purge on the admin API of the first reaches the
// second's cache through it: its next visit of the key goes upstream.
func TestCacheFleetPurge(t *testing.T) {
	t.Parallel()
	mc := testkit.StartMemcached(t)
	var asked testkit.Counts
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		asked.Add(r.URL.Path)
		w.Header().Set("CDN-Cache-Control", "max-age=3600")
		http.Redirect(w, r, "https://example.com"+r.URL.Path, http.StatusFound)
	}))
	defer up.Close()
	cfg := fmt.Sprintf(`server: {listen: 127.0.0.1:0, access_log: true}
admin: {listen: 127.0.0.1:0, token_env: LG_FLEET_TOKEN}
upstream: {targets: [%s]}
limiter:
  store: memcached
  memcached: {servers: [%s]}
analytics: {enabled: false}
`, up.URL, mc.Addr)
	gw1, _ := startGateway(t, cfg, "LG_FLEET_TOKEN=fleet-token")
	gw2, _ := startGateway(t, cfg, "LG_FLEET_TOKEN=fleet-token")
	misses := func(p *process) int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.logs.Count("access", map[string]string{"cache": "miss"})
	}
	for _, gw := range []*process{gw1, gw2} {
		for range 2 {
			if resp, _ := testkit.Do(t, "GET", gw.url("gateway", "/go"), nil); resp.StatusCode != http.StatusFound {
				t.Fatalf("GET /go: %d", resp.StatusCode)
			}
		}
	}
	testkit.Eventually(t, 10*time.Second, "the visits logged", func() bool { return misses(gw1) == 1 && misses(gw2) == 1 })
	if n := asked.Count("/go"); n != 2 {
		t.Errorf("upstream asked %d times for /go, want 2 (once per gateway)", n)
	}

	host := gw2.url("gateway", "")[len("http://"):]
	resp, b := testkit.Do(t, "POST", gw1.url("admin", "/admin/cache/purge?key="+host+"/go"), nil, "Authorization", "Bearer fleet-token")
	if resp.StatusCode != 200 {
		t.Fatalf("purge: %d %s", resp.StatusCode, b)
	}
	purged := time.Now()
	defer func() {
		if t.Failed() {
			t.Log("the second gateway's log:\n", gw2.logs.String())
		}
	}()
	// The first gateway's own key differs (another port): its purge named
	// the second's. Visit the second until its cache has dropped the key.
	testkit.Eventually(t, 30*time.Second, "the purge seen by the second gateway", func() bool {
		testkit.Do(t, "GET", gw2.url("gateway", "/go"), nil)
		return misses(gw2) == 2
	})
	t.Logf("the second gateway dropped the key %v after the purge answered (it reads the fleet's purges every 200ms)", time.Since(purged).Round(time.Millisecond))
}
