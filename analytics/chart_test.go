package analytics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// chromium finds a headless browser, or skips the test loudly.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("SKIPPED: no chromium on PATH, the chart page's script was NOT run (apt-get install -y chromium)")
	return ""
}

// chromiumArgs are the flags of a closed-network headless run.
func chromiumArgs(t *testing.T, extra ...string) []string {
	return append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir=" + t.TempDir(), "--virtual-time-budget=10000"}, extra...)
}

// TestChartPageInChromium loads the chart page in a real headless Chromium
// and checks the DOM after its script ran: the SVG paths and the totals come
// from the JSON answer the page fetched, the way the gateway mounts it.
func TestChartPageInChromium(t *testing.T) {
	bin := chromium(t)
	h := analytics.NewStats(newStatsReader(), rollup.DefaultTiers(), "", func() time.Time { return statsNow }, nil)
	mux := http.NewServeMux()
	mux.Handle("/stats/", http.StripPrefix("/stats", h))
	mux.Handle("/stats", http.StripPrefix("/stats", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, tc := range []struct {
		path, key, total, points string
	}{
		{"/stats/abc?last=3d", "abc", "123,456", "865 points per 5m"},
		{"/stats?last=1y&stitch=true", "all links", "9,876,543", "mixed resolution"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		out, err := exec.CommandContext(ctx, bin, chromiumArgs(t, "--dump-dom", srv.URL+tc.path)...).Output()
		cancel()
		if err != nil {
			t.Fatalf("chromium --dump-dom %s: %v", tc.path, err)
		}
		dom := string(out)
		for _, want := range []string{`data-state="ready"`, `<code id="key">` + tc.key + `</code>`, `<b id="total">` + tc.total + `</b>`, tc.points} {
			if !strings.Contains(dom, want) {
				t.Errorf("%s: the DOM lacks %q; the script did not run or failed:\n%s", tc.path, want, dom)
			}
		}
		for _, id := range []string{"humans", "bots"} {
			re := regexp.MustCompile(`<path id="` + id + `" d="M[0-9.]+,[0-9.]+(L[0-9.]+,[0-9.]+){50,}"`)
			if !re.MatchString(dom) {
				t.Errorf("%s: no drawn %s path in the DOM", tc.path, id)
			}
		}
	}

	if dir := os.Getenv("LINKGATE_CHART_SCREENSHOT"); dir != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, chromiumArgs(t, "--window-size=1000,620", "--screenshot="+dir+"/chart.png", srv.URL+"/stats/abc?last=3d")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("screenshot: %v\n%s", err, out)
		}
	}
}
