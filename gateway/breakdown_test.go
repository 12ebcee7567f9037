package gateway_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/pebblestore"
	"github.com/linkgate/linkgate/gateway"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
	"github.com/linkgate/linkgate/visitor/visitortest"
)

type breakdownAnswer struct {
	Total     int64                       `json:"total"`
	BotTotal  int64                       `json:"bot_total"`
	Partial   bool                        `json:"partial"`
	Breakdown map[string][]map[string]any `json:"breakdown"`
}

func breakdown(t *testing.T, gw *running, path string) breakdownAnswer {
	t.Helper()
	return getJSON[breakdownAnswer](t, testkit.Client, gw.url(path), "Accept", "application/json")
}

// values returns a breakdown as "value=count" in the answer's order.
func values(a breakdownAnswer, dim string) []string {
	var out []string
	for _, v := range a.Breakdown[dim] {
		out = append(out, v["value"].(string)+"="+strings.TrimSuffix(strings.TrimSuffix(jsonNumber(v["count"]), ".0"), "e+00"))
	}
	return out
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestBreakdownsEndToEnd: visits through the gateway from clients behind
// the trusted proxy (127.0.0.1), with referrers, source parameters,
// User-Agents and addresses of a test .mmdb written with MaxMind's writer,
// give exact breakdowns on /stats, JSON and CSV, per link and for all
// links, in memory, once flushed, and after a restart.
func TestBreakdownsEndToEnd(t *testing.T) {
	up := tinyURL(t)
	dir := t.TempDir()
	geo := visitortest.CountryDB(t, visitortest.GeoLite2, map[string]string{"203.0.113.0/24": "DE", "198.51.100.0/24": "FR"})
	cfg := analyticsConfig(up.URL, embeddedStore(dir), "200ms") + "  geoip: {path: " + geo + "}\n"
	gw := start(t, cfg)
	const (
		iphone  = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1"
		windows = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36"
	)
	visit := func(n int, path, client, ref, ua string) {
		for range n {
			resp, _ := testkit.Do(t, "GET", gw.url(path), nil, append(testkit.Navigation(ua), "X-Forwarded-For", client, "Referer", ref)...)
			if resp.StatusCode != 302 {
				t.Fatalf("GET %s: %d", path, resp.StatusCode)
			}
		}
	}
	visit(6, "/go", "203.0.113.5", "https://www.news.example/story", iphone)
	visit(3, "/go?utm_source=newsletter", "198.51.100.9", "", windows)
	visit(1, "/go?src=qr", "192.0.2.1", "", iphone)
	visit(2, "/gh", "203.0.113.6", "https://t.co/x", "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)")

	want := map[string][]string{
		"referrer": {"news.example=6", "direct=4"},
		"source":   {"news.example=6", "newsletter=3", "qr=1"},
		"country":  {"DE=6", "FR=3", "unknown=1"},
		"device":   {"mobile=7", "desktop=3"},
		"browser":  {"Safari=7", "Chrome=3"},
		"os":       {"iOS=7", "Windows=3"},
	}
	check := func(when string, gw *running) {
		t.Helper()
		a := breakdown(t, gw, "/stats/go?last=1h&by=referrer,source,country,device,browser,os")
		for dim, w := range want {
			if diff := cmp.Diff(w, values(a, dim)); diff != "" {
				t.Errorf("%s: /stats/go by %s (-want +got):\n%s", when, dim, diff)
			}
		}
		all := breakdown(t, gw, "/stats?last=1h&by=device,referrer")
		if diff := cmp.Diff([]string{"mobile=7", "desktop=3", "bot=2"}, values(all, "device")); diff != "" {
			t.Errorf("%s: /stats by device (-want +got):\n%s", when, diff)
		}
		if diff := cmp.Diff([]string{"news.example=6", "direct=4", "t.co=2"}, values(all, "referrer")); diff != "" {
			t.Errorf("%s: /stats by referrer (-want +got):\n%s", when, diff)
		}
	}
	check("in memory or just flushed", gw)
	resp, b := testkit.Do(t, "GET", gw.url("/stats/go?last=1h&by=country&format=csv"), nil)
	if want := "dimension,value,count\ncountry,DE,6\ncountry,FR,3\ncountry,unknown,1\n"; resp.StatusCode != 200 || b != want {
		t.Errorf("CSV: %d %q, want %q", resp.StatusCode, b, want)
	}
	resp, b = testkit.Do(t, "GET", gw.url("/stats/go?by=city"), nil)
	if p := testkit.Problem(t, resp, b, 400); !strings.Contains(b, `"name":"by"`) {
		t.Errorf("by=city: %v, want the problem to name by", p)
	}
	// One value's visits per UTC day: the page's curve of a clicked value.
	resp, b = testkit.Do(t, "GET", gw.url("/stats/go?last=3d&daily=referrer:news.example"), nil, "Accept", "application/json")
	var daily struct {
		Daily struct {
			Dimension, Value string
			Points           [][2]int64
		}
	}
	if err := json.Unmarshal([]byte(b), &daily); err != nil || resp.StatusCode != 200 {
		t.Fatalf("daily=: %d %s (%v)", resp.StatusCode, b, err)
	}
	today := rollup.Align(time.Now().UTC(), rollup.Day).Unix()
	pts := daily.Daily.Points
	if daily.Daily.Dimension != "referrer" || daily.Daily.Value != "news.example" || len(pts) != 4 || pts[0][0] != today-3*86400 ||
		pts[len(pts)-1] != [2]int64{today, 6} {
		t.Errorf("daily=referrer:news.example: %+v; want the 4 UTC days the 3 days touch, today's 6 last", daily.Daily)
	}
	for _, p := range pts[:len(pts)-1] {
		if p[1] != 0 {
			t.Errorf("daily=referrer:news.example: %d visits on day %d, before any was sent", p[1], p[0])
		}
	}
	for _, bad := range []string{"referrer", "city:x", "referrer:"} {
		resp, b = testkit.Do(t, "GET", gw.url("/stats/go?daily="+bad), nil)
		if p := testkit.Problem(t, resp, b, 400); !strings.Contains(b, `"name":"daily"`) {
			t.Errorf("daily=%s: %v, want the problem to name daily", bad, p)
		}
	}
	if err := gw.shutdown(); err != nil {
		t.Fatal(err)
	}
	check("after a restart", start(t, cfg))
}

// TestTopLinksEndToEnd: /stats?top=N lists the most visited links with
// their human visits and curves, from what the flushes wrote, before and
// after a restart; top on one link's stats is a 400 naming it.
func TestTopLinksEndToEnd(t *testing.T) {
	up := tinyURL(t)
	dir := t.TempDir()
	cfg := analyticsConfig(up.URL, embeddedStore(dir), "100ms")
	gw := start(t, cfg)
	for key, n := range map[string]int{"go": 5, "gh": 3, "ex": 1} {
		for range n {
			if resp, _ := testkit.Do(t, "GET", gw.url("/"+key), nil); resp.StatusCode != 302 {
				t.Fatalf("GET /%s: %d", key, resp.StatusCode)
			}
		}
	}
	testkit.Do(t, "GET", gw.url("/go"), nil, "User-Agent", "Twitterbot/1.0") // a bot: not ranked
	type top struct {
		ShortKey     string    `json:"short_key"`
		Total        int64     `json:"total"`
		RangeTotal   int64     `json:"range_total"`
		CompareTotal *int64    `json:"compare_range_total"`
		Points       [][]int64 `json:"points"`
	}
	check := func(when string, gw *running) {
		t.Helper()
		var got []top
		testkit.Eventually(t, 5*time.Second, "the top list flushed", func() bool {
			resp, b := testkit.Do(t, "GET", gw.url("/stats?last=1h&top=2"), nil, "Accept", "application/json")
			var a struct{ Top []top }
			if resp.StatusCode != 200 || json.Unmarshal([]byte(b), &a) != nil {
				t.Fatalf("%s: %d %s", when, resp.StatusCode, b)
			}
			got = a.Top
			return len(got) == 2 && got[0].Total == 5
		})
		if len(got) != 2 || got[0].ShortKey != "go" || got[0].Total != 5 || got[1].ShortKey != "gh" || got[1].Total != 3 {
			t.Fatalf("%s: top = %+v, want go 5, gh 3", when, got)
		}
		var human, bot int64
		for _, p := range got[0].Points {
			human, bot = human+p[1], bot+p[2]
		}
		if human != 5 || bot != 1 || got[0].RangeTotal != 5 || got[0].CompareTotal != nil {
			t.Errorf("%s: go's curve sums to %d human, %d bot, range_total %d, compare_range_total %v; want 5, 1, 5 and none", when, human, bot, got[0].RangeTotal, got[0].CompareTotal)
		}
		// With compare, each link has the human visits of the range
		// before: none in the hour before the last.
		resp, b := testkit.Do(t, "GET", gw.url("/stats?last=1h&top=2&compare=previous"), nil, "Accept", "application/json")
		var c struct{ Top []top }
		if resp.StatusCode != 200 || json.Unmarshal([]byte(b), &c) != nil || len(c.Top) != 2 || c.Top[1].RangeTotal != 3 ||
			c.Top[1].CompareTotal == nil || *c.Top[1].CompareTotal != 0 {
			t.Errorf("%s: top with compare: %d %.400s; want gh with range_total 3 and compare_range_total 0", when, resp.StatusCode, b)
		}
		resp, b = testkit.Do(t, "GET", gw.url("/stats?last=1h&top=5&format=csv"), nil)
		if want := "short_key,total\ngo,5\ngh,3\nex,1\n"; resp.StatusCode != 200 || b != want {
			t.Errorf("%s: CSV %d %q, want %q", when, resp.StatusCode, b, want)
		}
	}
	check("running", gw)
	resp, b := testkit.Do(t, "GET", gw.url("/stats/go?top=2"), nil)
	if testkit.Problem(t, resp, b, 400); !strings.Contains(b, `"name":"top"`) {
		t.Errorf("top on one link: %s, want a problem naming top", b)
	}
	if err := gw.shutdown(); err != nil {
		t.Fatal(err)
	}
	check("after a restart", start(t, cfg))
}

// TestUniquesEndToEnd: 40 visitors (address and User-Agent) visit a link
// 200 times through the trusted proxy: the answer counts 40 unique
// visitors (the sketch is exact to a few at this size), says how, and a
// restarted gateway with the same secret hashes the same visitors alike,
// so that their new visits add none. A short secret is refused naming the
// field; without one, answers have no uniques.
func TestUniquesEndToEnd(t *testing.T) {
	up := tinyURL(t)
	dir := t.TempDir()
	setenv(t, "LG_TEST_UNIQUES", "a-secret-of-32-bytes-for-testing")
	cfg := analyticsConfig(up.URL, embeddedStore(dir), "100ms") + "  uniques: {secret_env: LG_TEST_UNIQUES}\n"
	visits := func(gw *running) {
		for i := range 200 {
			v := i % 40
			resp, _ := testkit.Do(t, "GET", gw.url("/go"), nil, "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", v%20),
				"User-Agent", fmt.Sprintf("agent/%d", v/20))
			if resp.StatusCode != 302 {
				t.Fatalf("GET /go: %d", resp.StatusCode)
			}
		}
	}
	type uniques struct {
		Count int64   `json:"count"`
		Kind  string  `json:"kind"`
		Days  int     `json:"days"`
		Error float64 `json:"error"`
	}
	read := func(gw *running, path string) (u *uniques, header string) {
		t.Helper()
		resp, b := testkit.Do(t, "GET", gw.url(path), nil, "Accept", "application/json")
		var a struct{ Uniques *uniques }
		if resp.StatusCode != 200 || json.Unmarshal([]byte(b), &a) != nil {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return a.Uniques, resp.Header.Get("Linkgate-Uniques")
	}
	gw := start(t, cfg)
	day := time.Now().UTC().Truncate(24 * time.Hour)
	visits(gw)
	if !time.Now().UTC().Truncate(24 * time.Hour).Equal(day) {
		t.Skip("the visits crossed midnight UTC: two days of uniques (the next run tests one)")
	}
	u, h := read(gw, "/stats/go?from="+fmt.Sprint(day.Unix()))
	if u == nil || u.Count != 40 || u.Kind != "one_day" || u.Days != 1 || u.Error != 0.016 || h != "40" {
		t.Fatalf("uniques = %+v (header %q), want 40 visitors of one day, error 0.016", u, h)
	}
	if u, _ := read(gw, "/stats/go?last=3d"); u == nil || u.Count != 40 || u.Kind != "sum_of_days" || u.Days < 3 {
		t.Errorf("over 3 days: %+v, want 40, sum_of_days", u)
	}
	if err := gw.shutdown(); err != nil {
		t.Fatal(err)
	}
	gw = start(t, cfg)
	visits(gw)
	if u, _ := read(gw, "/stats/go?last=1h"); u == nil || u.Count != 40 {
		t.Errorf("after a restart and the same visitors again: %+v, want still 40", u)
	}
	if u, _ := read(gw, "/stats/gh?last=1h"); u == nil || u.Count != 0 {
		t.Errorf("another link: %+v, want 0", u)
	}

	setenv(t, "LG_TEST_UNIQUES", "short")
	path := filepath.Join(t.TempDir(), "gw.yaml")
	testkit.WriteFile(t, path, cfg)
	if _, err := gateway.Load(path, getenv); err == nil || !strings.Contains(err.Error(), "analytics.uniques.secret_env") {
		t.Errorf("a 5-byte secret: %v, want an error naming analytics.uniques.secret_env", err)
	}
	off := start(t, analyticsConfig(up.URL, embeddedStore(t.TempDir()), "100ms"))
	if u, _ := read(off, "/stats/go?last=1h"); u != nil {
		t.Errorf("without a secret: uniques %+v, want none", u)
	}
}

// TestBreakdownsThroughOutageAndRestart: the embedded store's folder is
// unusable (a file stands in its place): visits are journaled with their
// breakdowns and visitors; /stats answers them, partial, from the journal;
// the gateway stops with the store still down; once the folder is usable,
// the next gateway writes the journal and every breakdown and unique
// count is exact.
func TestBreakdownsThroughOutageAndRestart(t *testing.T) {
	up := tinyURL(t)
	dir := t.TempDir()
	store := filepath.Join(dir, "analytics")
	if err := os.WriteFile(store, []byte("not a folder"), 0o644); err != nil {
		t.Fatal(err)
	}
	setenv(t, "LG_TEST_UNIQUES", "a-secret-of-32-bytes-for-testing")
	cfg := analyticsConfig(up.URL, embeddedStore(store), "100ms") + "  uniques: {secret_env: LG_TEST_UNIQUES}\n"
	gw := start(t, cfg)
	for i := range 30 {
		ref := []string{"https://news.example/", "https://t.co/x", ""}[i%3]
		resp, _ := testkit.Do(t, "GET", gw.url("/go"), nil, "X-Forwarded-For", fmt.Sprintf("203.0.113.%d", i%10), "Referer", ref)
		if resp.StatusCode != 302 {
			t.Fatalf("GET /go: %d", resp.StatusCode)
		}
	}
	want := []string{"direct=10", "news.example=10", "t.co=10"}
	type answer struct {
		Partial   bool                        `json:"partial"`
		Breakdown map[string][]map[string]any `json:"breakdown"`
		Uniques   struct{ Count int64 }       `json:"uniques"`
	}
	read := func(gw *running) answer {
		t.Helper()
		return getJSON[answer](t, testkit.Client, gw.url("/stats/go?last=1h&by=referrer"), "Accept", "application/json")
	}
	testkit.Eventually(t, 5*time.Second, "the journal holds the visits", func() bool {
		a := read(gw)
		return a.Partial && cmp.Equal(want, values(breakdownAnswer{Breakdown: a.Breakdown}, "referrer")) && a.Uniques.Count == 10
	})
	if err := gw.shutdown(); err != nil {
		t.Fatalf("shutdown with the store down and the journal writable: %v", err)
	}
	if err := os.Remove(store); err != nil {
		t.Fatal(err)
	}
	gw = start(t, cfg)
	testkit.Eventually(t, 10*time.Second, "the journal written to the store", func() bool {
		a := read(gw)
		return !a.Partial && cmp.Equal(want, values(breakdownAnswer{Breakdown: a.Breakdown}, "referrer")) && a.Uniques.Count == 10
	})
	if a := read(gw); a.Partial || !cmp.Equal(want, values(breakdownAnswer{Breakdown: a.Breakdown}, "referrer")) || a.Uniques.Count != 10 {
		t.Errorf("after the restart: %+v, want %v and 10 visitors, whole", a, want)
	}
	// In the store itself, once the gateway has stopped: written once.
	if err := gw.shutdown(); err != nil {
		t.Fatal(err)
	}
	s, err := pebblestore.Open(store, analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	vals, err := s.Dims(t.Context(), "go", visitor.Referrer, now.Add(-rollup.Day), now.Add(rollup.Day))
	analytics.SortDims(vals)
	if err != nil || fmt.Sprint(vals) != "[{direct 10} {news.example 10} {t.co 10}]" {
		t.Errorf("the store holds %v, %v; want each referrer's 10 visits once", vals, err)
	}
	if sk, err := s.Uniques(t.Context(), "go", now.Add(-rollup.Day), now.Add(rollup.Day)); err != nil || sk.Estimate() != 10 {
		t.Errorf("the store's sketch estimates %v, %v; want 10", sk.Estimate(), err)
	}
}
