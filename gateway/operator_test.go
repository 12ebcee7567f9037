package gateway_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

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
	time.Sleep(settleWait) // the neighbour is busy before the change
	testkit.WriteFile(t, gw.path, testkit.BaseConfig(b.URL))
	testkit.Eventually(t, 3*time.Second, "the file change reloads while a neighbour changes every 20 ms", func() bool {
		return testkit.Body(t, gw.url("/x")) == "B"
	})
	if !gw.logs.Logged("config reloaded", map[string]string{"source": "file change"}) {
		t.Errorf("reloaded, but not by the file watch:\n%s", gw.logs)
	}
}

// TestWatchKubernetesConfigMap: a config mounted as a Kubernetes ConfigMap
// is a link to ..data/gateway.yaml, and an update renames a new ..data link
// over the old one; the events name ..data, never gateway.yaml, and the
// watch still reloads.
func TestWatchKubernetesConfigMap(t *testing.T) {
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
	if !gw.logs.Logged("config reloaded", map[string]string{"source": "file change"}) {
		t.Errorf("reloaded, but not by the file watch:\n%s", gw.logs)
	}
}
