package gateway_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// relay is a TCP relay to the address dest holds: a balancer in front of
// the gateway, which check-config cannot see through.
func relay(t *testing.T, dest *atomic.Value) string {
	return testkit.ServeTCP(t, func(_ int, c net.Conn) {
		defer c.Close()
		d, _ := dest.Load().(string)
		up, err := net.Dial("tcp", d)
		if d == "" || err != nil {
			return
		}
		defer up.Close()
		go func() { io.Copy(up, c); up.(*net.TCPConn).CloseWrite() }()
		io.Copy(c, up)
	})
}

// openFDs returns the number of file descriptors the process holds.
func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(ents)
}

// TestLoopBackIs508: a gateway whose upstream target leads back to itself
// (through a relay, as a balancer in front would, so that check-config
// cannot tell) answers a 508 problem to every request instead of proxying
// it again and again, and a burst of such requests leaves its file
// descriptors and goroutines where they were; the same through its admin
// listener, whose /metrics is not served. Its health check, looping too,
// takes the target out. Not parallel: it counts the
// process's descriptors and goroutines.
func TestLoopBackIs508(t *testing.T) {
	var dest atomic.Value
	target := relay(t, &dest)
	gw := start(t, testkit.BaseConfig("http://"+target))
	dest.Store(gw.g.Addr().String())
	// The health check loops too: answered 508 on its second pass, it takes
	// the target out.
	testkit.Eventually(t, 10*time.Second, "the looping target out of the pool", func() bool {
		resp, _ := testkit.Do(t, "GET", gw.admin("/readyz"), nil)
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	for _, c := range []struct{ name, dest, path string }{
		{"client listener", gw.g.Addr().String(), "/go"},
		{"admin listener", gw.g.AdminAddr().String(), "/metrics"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dest.Store(c.dest)
			burst := func(n int) {
				t.Helper()
				var wg sync.WaitGroup
				for range 8 {
					wg.Go(func() {
						for range n {
							resp, body := testkit.Do(t, "GET", gw.url(c.path), nil)
							if p := testkit.Problem(t, resp, body, http.StatusLoopDetected); !strings.Contains(p["detail"].(string), "upstream.targets") {
								t.Errorf("508 problem %v: want the detail to name upstream.targets", p)
							}
							if strings.Contains(body, "go_goroutines") {
								t.Errorf("the admin listener's /metrics reached the client: %.200s", body)
							}
						}
					})
				}
				wg.Wait()
			}
			burst(25) // connections pooled, goroutines started
			fds, gs := openFDs(t), runtime.NumGoroutine()
			burst(25)
			deadline := time.Now().Add(testkit.Slack(10 * time.Second))
			for openFDs(t) > fds+16 || runtime.NumGoroutine() > gs+40 {
				if time.Now().After(deadline) {
					t.Fatalf("200 looping requests took the process from %d to %d descriptors, %d to %d goroutines", fds, openFDs(t), gs, runtime.NumGoroutine())
				}
				time.Sleep(50 * time.Millisecond) // connections closing
			}
			t.Logf("200 looping requests: %d → %d descriptors, %d → %d goroutines", fds, openFDs(t), gs, runtime.NumGoroutine())
		})
	}
}

// TestLoopMarkFromClients: a gateway passes on the loop marks a request
// came with and adds its own after them; a client's own or false mark is
// served like any request, and the gateway's mark, had a client learned it
// from an upstream that echoes it, refuses only that client's request.
func TestLoopMarkFromClients(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(r.Header.Values("Linkgate-Loop"))
	}))
	t.Cleanup(up.Close)
	gw := start(t, testkit.BaseConfig(up.URL))
	resp, body := testkit.Do(t, "GET", gw.url("/echo"), nil, "Linkgate-Loop", "another-gateway")
	var marks []string
	if err := json.Unmarshal([]byte(body), &marks); resp.StatusCode != 200 || err != nil || len(marks) != 2 || marks[0] != "another-gateway" || len(marks[1]) < 20 {
		t.Fatalf("a request with another gateway's mark: %d %s, want it served with that mark and the gateway's after it", resp.StatusCode, body)
	}
	own := marks[1]
	resp, body = testkit.Do(t, "GET", gw.url("/echo"), nil, "Linkgate-Loop", own)
	testkit.Problem(t, resp, body, http.StatusLoopDetected)
	if strings.Contains(body, own) {
		t.Errorf("the 508 names the gateway's mark: %s", body)
	}
	if resp, body := testkit.Do(t, "GET", gw.url("/echo"), nil); resp.StatusCode != 200 || strings.Count(body, own) != 1 {
		t.Errorf("the next request: %d %s, want it served, the mark once", resp.StatusCode, body)
	}
}
