package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// rssOf returns the resident set of process pid, in bytes.
func rssOf(t *testing.T, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestBurstMemory measures the gateway's resident memory before, at the
// peak of and two minutes after a burst of 1.2 million distinct links
// (each visited once), with the defaults (max_buffer_bytes 256 MiB) and
// the embedded store: the figure docs/security.md gives for the memory a
// burst leaves.
// It asserts the goal: back within twice the idle figure plus the
// configured buffer bound. A measurement, run by hand:
// LINKGATE_MEASURE_BURST=1 go test -run TestBurstMemory -v ./cmd/gateway/
func TestBurstMemory(t *testing.T) {
	if os.Getenv("LINKGATE_MEASURE_BURST") == "" {
		t.Skip("a measurement of several minutes: set LINKGATE_MEASURE_BURST=1")
	}
	const links, bufferBound = 1_200_000, 256 << 20
	up := redirector(t)
	dir := t.TempDir()
	cfg := strings.Replace(testkit.BaseConfig(up.URL), "analytics:\n  enabled: false\n",
		fmt.Sprintf("analytics:\n  embedded: {path: %s}\n", filepath.Join(dir, "analytics")), 1)
	gw, _ := startGateway(t, cfg)
	pid := gw.cmd.Process.Pid
	time.Sleep(3 * time.Second)
	idle := rssOf(t, pid)

	var peak atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			peak.Store(max(peak.Load(), rssOf(t, pid)))
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	began := time.Now()
	var next, redirects atomic.Int64
	var clients sync.WaitGroup
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	c := &http.Client{Transport: tr, CheckRedirect: testkit.Client.CheckRedirect, Timeout: 10 * time.Second}
	for range 32 {
		clients.Go(func() {
			for {
				i := next.Add(1)
				if i > links {
					return
				}
				resp, err := c.Get(fmt.Sprintf("%s/l%07d", gw.url("gateway", ""), i))
				if err != nil {
					continue
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusFound {
					redirects.Add(1)
				}
			}
		})
	}
	testkit.Await(t, clients.Wait, 5*time.Minute, "the clients of the burst")
	took := time.Since(began)
	tr.CloseIdleConnections()
	time.Sleep(2 * time.Minute)
	close(stop)
	testkit.Await(t, sampler.Wait, 5*time.Minute, "the sampler stopping")
	after := rssOf(t, pid)
	t.Logf("%d distinct links (%d redirects) in %v: RSS %.0f MB idle, %.0f MB at the peak, %.0f MB two minutes after",
		links, redirects.Load(), took.Round(time.Second), float64(idle)/1e6, float64(peak.Load())/1e6, float64(after)/1e6)
	if goal := 2*idle + bufferBound; after > goal {
		t.Errorf("RSS two minutes after the burst %.0f MB, over the goal of %.0f MB (twice idle plus max_buffer_bytes)", float64(after)/1e6, float64(goal)/1e6)
	}
	gw.stop()
}
