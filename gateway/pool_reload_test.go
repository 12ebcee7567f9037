package gateway_test

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// TestReloadKeepsConnectionsOfTargetsThatStay: 20 reloads that change
// upstream.targets (a second target comes and goes) under 32 client
// connections. The target that stays in every config keeps its
// kept-alive connections: it is not dialed again per reload (it was
// about 32 per reload, ~990 in all, when a reload dropped the pool).
func TestReloadKeepsConnectionsOfTargetsThatStay(t *testing.T) {
	stay, opened := testkit.Dialed(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "stay")
	})
	other := testkit.Named(t, "other")
	gw := start(t, testkit.BaseConfig(stay.URL))

	const clients, reloads = 32, 20
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed, served atomic.Int64
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: testkit.Slack(20 * time.Second)}
	for range clients {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Get(gw.url("/x"))
				if err != nil {
					failed.Add(1)
					t.Logf("request failed: %v", err)
					continue
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
					t.Logf("request answered %d %s", resp.StatusCode, b)
				}
				served.Add(1)
			}
		})
	}
	testkit.Eventually(t, 5*time.Second, "load on every client connection", func() bool { return served.Load() > 5*clients })
	before, totalBefore := opened.Load(), metric(t, gw, "linkgate_upstream_connections_opened_total")
	for i := range reloads {
		cfg := testkit.BaseConfig(stay.URL)
		if i%2 == 0 {
			cfg = testkit.BaseConfig(stay.URL, other.URL)
		}
		testkit.WriteFile(t, gw.path, cfg)
		if resp, msg := reloadEndpoint(t, gw); resp.StatusCode != 200 {
			t.Fatalf("reload %d: %d %s", i, resp.StatusCode, msg)
		}
		time.Sleep(20 * time.Millisecond) // requests between reloads
	}
	close(stop)
	wg.Wait()
	got := opened.Load() - before
	total := metric(t, gw, "linkgate_upstream_connections_opened_total") - totalBefore
	t.Logf("%d reloads under %d client connections: %d new connections to the target that stayed, %.0f to both (%d requests)", reloads, clients, got, total, served.Load())
	if failed.Load() > 0 {
		t.Errorf("%d requests failed; the gateway's log:\n%s", failed.Load(), gw.logs)
	}
	// Health checks and the odd connection the pool's cap or a burst
	// needs, not a pool per reload.
	if got > clients {
		t.Errorf("the target that stayed was dialed %d times across %d reloads, want at most %d", got, reloads, clients)
	}
}
