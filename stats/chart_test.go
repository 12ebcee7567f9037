package stats_test

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

	"github.com/linkgate/linkgate/stats"

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
	h := stats.New(newStatsReader(), rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return statsNow }})
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

// TestChartPageGapsInChromium: in a real headless Chromium, null points are
// gaps in the lines (a point alone between gaps is a dot), the expired part
// is shaded, and a partial answer, an expired range and a key never counted
// are each said in words; a partial answer's totals are "at least".
func TestChartPageGapsInChromium(t *testing.T) {
	bin := chromium(t)
	m := rollup.Align(statsNow, time.Minute)
	held := heldReader{
		held: []analytics.Point{
			{Start: m.Add(-20 * time.Minute), Visits: analytics.Visits{Human: 3}},
			{Start: m, Visits: analytics.Visits{Human: 1, Bot: 2}},
		},
		total: analytics.Visits{Human: 4, Bot: 2},
	}
	now := func() time.Time { return statsNow }
	mux := http.NewServeMux()
	mux.Handle("/held/", http.StripPrefix("/held", stats.New(held, rollup.DefaultTiers(), stats.Options{Now: now})))
	mux.Handle("/stats/", http.StripPrefix("/stats", stats.New(newStatsReader(), rollup.DefaultTiers(), stats.Options{Now: now})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	dom := func(path string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, chromiumArgs(t, "--dump-dom", srv.URL+path)...).Output()
		if err != nil {
			t.Fatalf("chromium --dump-dom %s: %v", path, err)
		}
		if !strings.Contains(string(out), `data-state="ready"`) {
			t.Fatalf("%s: the script did not finish:\n%s", path, out)
		}
		return string(out)
	}

	// Partial: two lone points, drawn as dots, and no line through the gaps.
	d := dom("/held/abc?last=1h")
	for _, want := range []string{"Partial: store unreachable", `<b id="total">≥ 4</b>`, `<b id="range_total">≥ 4</b>`} {
		if !strings.Contains(d, want) {
			t.Errorf("partial: the DOM lacks %q:\n%s", want, d)
		}
	}
	if n := strings.Count(d, `<circle class="h"`); n != 2 {
		t.Errorf("partial: %d human dots, want 2 (one per lone point)", n)
	}
	if re := regexp.MustCompile(`<path id="humans" d="M[0-9.]+,[0-9.]+M[0-9.]+,[0-9.]+"`); !re.MatchString(d) {
		t.Errorf("partial: the humans path should be two moves and no line:\n%s", d)
	}

	// Expired: a shaded part, then a line of every minute kept.
	d = dom("/stats/abc?step=1m&last=3d")
	if !strings.Contains(d, `<rect class="expired"`) || !strings.Contains(d, "no longer keeps this resolution") {
		t.Errorf("expired: no shaded part or note:\n%.3000s", d)
	}
	if m := regexp.MustCompile(`<path id="humans" d="([^"]*)"`).FindStringSubmatch(d); m == nil || strings.Count(m[1], "M") != 1 || strings.Count(m[1], "L") < 2000 {
		t.Errorf("expired: the kept minutes (2,880) are not one line of at least 2,000 segments")
	}

	// Never counted.
	if d := dom("/stats/never?last=1h"); !strings.Contains(d, `<div id="note">No visit has ever been counted for this link.</div>`) {
		t.Errorf("unknown key: the note is missing:\n%s", d)
	}
}
