package stats_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/internal/browser"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/stats"
)

func TestMain(m *testing.M) { os.Exit(browser.Run(m)) }

// chartDOM opens url in the shared headless Chromium at a desktop's size,
// waits for the page's script to finish and returns the body's HTML.
func chartDOM(t *testing.T, url string) string {
	t.Helper()
	p := browser.Shared(t).NewPage(t, browser.Options{Width: 1280, Height: 800, TimeZone: "UTC"})
	p.Navigate(url)
	p.WaitFor(30*time.Second, "the page's script to finish", `document.body.dataset.state === "ready"`)
	var dom string
	p.Eval(`document.body.outerHTML`, &dom)
	if errs := p.Errors(); len(errs) > 0 {
		t.Errorf("%s: page errors (a CSP violation is one): %q", url, errs)
	}
	return dom
}

// TestChartPageInChromium loads the chart page in a real headless Chromium
// and checks the DOM after its script ran: the SVG paths (humans, and each
// class of machines the range has: declared bots and scanners here) and the
// totals come from the JSON answer the page fetched, the way the gateway mounts it, and
// the page runs under its own Content-Security-Policy.
func TestChartPageInChromium(t *testing.T) {
	t.Parallel()
	h := stats.New(newStatsReader(), rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return statsNow }})
	mux := http.NewServeMux()
	mux.Handle("/stats/", http.StripPrefix("/stats", h))
	mux.Handle("/stats", http.StripPrefix("/stats", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, tc := range []struct {
		path, key, total, points string
	}{
		{"/stats/abc?last=3d", "abc", "123,456", "points, one per 5 minutes"},
		{"/stats?last=1y&stitch=true", "all links", "9,876,543", "mixed resolution"},
	} {
		dom := chartDOM(t, srv.URL+tc.path)
		for _, want := range []string{`data-state="ready"`, `<code id="key">` + tc.key + `</code>`, `<b id="total">` + tc.total + `</b>`, tc.points} {
			if !strings.Contains(dom, want) {
				t.Errorf("%s: the DOM lacks %q; the script did not run or failed:\n%.3000s", tc.path, want, dom)
			}
		}
		for _, id := range []string{"humans", "class-bot", "class-scanner"} {
			re := regexp.MustCompile(`<path id="` + id + `" d="M[0-9.]+,[0-9.]+(L[0-9.]+,[0-9.]+){50,}"`)
			if !re.MatchString(dom) {
				t.Errorf("%s: no drawn %s path in the DOM", tc.path, id)
			}
		}
	}
}

// TestChartPageGapsInChromium: in a real headless Chromium, null points are
// gaps in the lines (a point alone between gaps is a dot), the expired part
// is shaded, and a partial answer, an expired range and a key never counted
// are each said in words; a partial answer's totals are "at least".
func TestChartPageGapsInChromium(t *testing.T) {
	t.Parallel()
	m := rollup.Align(statsNow, time.Minute)
	held := heldReader{
		held: []analytics.Point{
			{Start: m.Add(-20 * time.Minute), Visits: analytics.Visits{Human: 3}},
			{Start: m.Add(-10 * time.Minute), Visits: analytics.Visits{Human: 1, Bot: 2}},
		},
		total: analytics.Visits{Human: 4, Bot: 2},
	}
	now := func() time.Time { return statsNow }
	mux := http.NewServeMux()
	mux.Handle("/held/", http.StripPrefix("/held", stats.New(held, rollup.DefaultTiers(), stats.Options{Now: now})))
	mux.Handle("/stats/", http.StripPrefix("/stats", stats.New(newStatsReader(), rollup.DefaultTiers(), stats.Options{Now: now})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// Partial: two lone points, drawn as dots, and no line through the gaps.
	d := chartDOM(t, srv.URL+"/held/abc?last=1h&step=1m")
	for _, want := range []string{"Partial: store unreachable", `<b id="total">≥ 4</b>`, `<b id="range_total">≥ 4</b>`} {
		if !strings.Contains(d, want) {
			t.Errorf("partial: the DOM lacks %q:\n%.3000s", want, d)
		}
	}
	if n := strings.Count(d, `<circle class="h"`); n != 2 {
		t.Errorf("partial: %d human dots, want 2 (one per lone point)", n)
	}
	if re := regexp.MustCompile(`<path id="humans" d="M[0-9.]+,[0-9.]+M[0-9.]+,[0-9.]+"`); !re.MatchString(d) {
		t.Errorf("partial: the humans path should be two moves and no line:\n%.3000s", d)
	}

	// Expired: a shaded part, then a line of every minute kept.
	d = chartDOM(t, srv.URL+"/stats/abc?step=1m&last=3d")
	if !strings.Contains(d, `<rect class="expired"`) || !strings.Contains(d, "no longer keeps this resolution") {
		t.Errorf("expired: no shaded part or note:\n%.3000s", d)
	}
	if m := regexp.MustCompile(`<path id="humans" d="([^"]*)"`).FindStringSubmatch(d); m == nil || strings.Count(m[1], "M") != 1 || strings.Count(m[1], "L") < 2000 {
		t.Errorf("expired: the kept minutes (2,880) are not one line of at least 2,000 segments")
	}

	// Never counted.
	if d := chartDOM(t, srv.URL+"/stats/never?last=1h"); !strings.Contains(d, `<div id="note">No visit has ever been counted for this link.</div>`) {
		t.Errorf("unknown key: the note is missing:\n%.3000s", d)
	}
}
