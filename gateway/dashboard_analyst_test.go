package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/browser"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/visitor/visitortest"
)

// analystLinks are the links of TestAnalystPage: ten, so that the top list
// is longer than a list shows before its "more" control, one of them a
// key too long for a phone's line, which must be cut with an ellipsis (and
// be whole in its title), not broken inside a word. "quiet" is never
// visited.
var analystLinks = []string{"go", "spring-sale-2026-newsletter-for-europe", "gh", "docs", "blog", "jobs", "shop", "help", "news", "team"}

// TestAnalystPage walks the chart page as an analyst would, at the three
// sizes the page is read at (a desktop at 1280 px, a phone at 390 px, and
// the README's embed frame of 600×360), in light and dark: the embed view
// shows its chart; the page follows prefers-color-scheme; lists show their
// first rows and a control for the rest, cut in no scroll box; the
// campaign's utm parameters and the visits' classes are breakdowns; the
// unique-visitor card says which UTC days it covers and shows no change
// against the same days; a link without visits says "no visits", not that
// the gateway has no country database; top links' keys and changes do not
// wrap; the live strip has a scale; a tenant's link page names its tenant.
func TestAnalystPage(t *testing.T) {
	t.Parallel()
	b := browser.Shared(t)
	dir := t.TempDir()
	setenv(t, "LG_ANALYST_TOKEN", "analyst-s3cret")
	setenv(t, "LG_ANALYST_UNIQUES", "a-secret-of-32-bytes-for-uniques")
	setenv(t, "LG_ANALYST_SHARE", "a-share-key-of-32-bytes-long-too")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.URL.Path, "/")
		for _, l := range analystLinks {
			if key == l {
				http.Redirect(w, r, "https://example.com/"+key, http.StatusFound)
				return
			}
		}
		http.NotFound(w, r)
	}))
	defer up.Close()
	geo := visitortest.CountryDB(t, visitortest.GeoLite2, map[string]string{"203.0.113.0/24": "DE", "198.51.100.0/24": "FR"})
	cfg := withStats(analyticsConfig(up.URL, embeddedStore(filepath.Join(dir, "analytics")), "1s"),
		"  token_env: LG_ANALYST_TOKEN\n  share: {key_env: LG_ANALYST_SHARE}\n  embed: {frame_ancestors: [\"'self'\"]}\n") +
		"  geoip: {path: " + geo + "}\n  uniques: {secret_env: LG_ANALYST_UNIQUES}\n" +
		"tenants:\n  - {name: acme, hosts: [go.acme.test]}\n"
	gw := start(t, cfg)
	plan, err := gatewayPlan(gw.path)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := plan.MakeShare("", "go", false, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	const chrome = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
	visit := func(path, from, ref string, hdr ...string) {
		t.Helper()
		if resp, _ := testkit.Do(t, "GET", gw.url(path), nil, append(hdr, "X-Forwarded-For", from, "Referer", ref)...); resp.StatusCode != http.StatusFound {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
	}
	// go: twelve referrers (more than a list shows at first), a campaign,
	// two scanners and an unfurler; every other link a few people.
	for i := range 12 {
		for range 12 - i {
			visit("/go?utm_source=news&utm_medium=email&utm_campaign=spring-sale", fmt.Sprintf("203.0.113.%d", i+1), fmt.Sprintf("https://site%02d.example/", i), testkit.Navigation(chrome)...)
		}
	}
	visit("/go", "198.51.100.7", "", "User-Agent", chrome) // a browser's User-Agent without its headers
	visit("/go", "198.51.100.8", "", "User-Agent", chrome)
	visit("/go", "198.51.100.9", "", "User-Agent", "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)")
	for i, l := range analystLinks[1:] { // 9 visits to 1 ("team")
		for range 9 - i {
			visit("/"+l, "198.51.100.20", "", testkit.Navigation(chrome)...)
		}
	}

	shots := os.Getenv("LINKGATE_SCREENSHOTS")
	for _, vp := range []struct {
		name          string
		width, height int
		mobile        bool
	}{{"desktop", 1280, 800, false}, {"phone", 390, 844, true}, {"embed", 600, 360, false}} {
		for _, scheme := range []string{"light", "dark"} {
			t.Run(vp.name+"/"+scheme, func(t *testing.T) {
				p := b.NewPage(t, browser.Options{Width: vp.width, Height: vp.height, Mobile: vp.mobile})
				p.Call("Emulation.setEmulatedMedia", map[string]any{"features": []map[string]string{{"name": "prefers-color-scheme", "value": scheme}}}, nil)
				a := &analyst{t: t, p: p, gw: gw, scheme: scheme, vp: vp.name, width: vp.width, shots: shots}
				a.embed(sh.Token)
				p.Navigate(gw.url("/stats/go"))
				p.Eval(`sessionStorage.setItem("linkgate-stats-token", "analyst-s3cret")`, nil)
				a.linkPage()
				a.allLinks()
				a.uniques()
				a.quietLink()
				a.tenantPage()
				a.oneVisit()
				if errs := p.Errors(); len(errs) > 0 {
					t.Errorf("page errors (a CSP violation is one): %q", errs)
				}
			})
		}
	}
}

// analyst drives one page at one size and colour scheme.
type analyst struct {
	t         *testing.T
	p         *browser.Page
	gw        *running
	scheme    string
	vp, shots string
	width     int // the viewport's, in CSS px
}

// oneLineJS defines oneLine(el): whether an element's text is on one line.
const oneLineJS = `const oneLine = el => { const rg = document.createRange(); rg.selectNodeContents(el);
	const rs = [...rg.getClientRects()]; return rs.length > 0 && rs.every(x => Math.abs(x.top - rs[0].top) < 2); };`

// shot saves a screenshot in 256 colours as TestDashboard's, when
// LINKGATE_SCREENSHOTS names a directory.
func (a *analyst) shot(name string) {
	if a.shots == "" {
		return
	}
	img, err := png.Decode(bytes.NewReader(a.p.Screenshot()))
	if err != nil {
		a.t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(&buf, paletted(img)); err != nil {
		a.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.shots, name+"-"+a.vp+"-"+a.scheme+".png"), buf.Bytes(), 0o644); err != nil {
		a.t.Fatal(err)
	}
}

// colours checks that the page follows the colour scheme: its background
// and its text, and a breakdown box's, are light on dark or dark on light.
func (a *analyst) colours(where string) {
	a.t.Helper()
	var lum struct{ Bg, Ink, Box float64 }
	a.p.Eval(`(() => {
		const l = c => { const m = c.match(/[\d.]+/g).map(Number); return (0.2126*m[0] + 0.7152*m[1] + 0.0722*m[2]) / 255; };
		const box = document.querySelector(".dim, .card");
		return {bg: l(getComputedStyle(document.body).backgroundColor), ink: l(getComputedStyle(document.body).color),
			box: box ? l(getComputedStyle(box).backgroundColor) : -1};
	})()`, &lum)
	dark := a.scheme == "dark"
	if dark && !(lum.Bg < 0.2 && lum.Ink > 0.7 && lum.Box < 0.3) || !dark && !(lum.Bg > 0.9 && lum.Ink < 0.3 && lum.Box > 0.85) {
		a.t.Errorf("%s in %s: background %.2f, text %.2f, boxes %.2f (luminance)", where, a.scheme, lum.Bg, lum.Ink, lum.Box)
	}
}

// embed: the embed view at this size shows its chart, inside the frame.
func (a *analyst) embed(share string) {
	a.t.Helper()
	a.p.Navigate(a.gw.url("/stats/go?format=embed&share=" + share))
	ready(a.t, a.p, "the embed view")
	var c struct {
		Top, Height, Bottom, Inner float64
		Points                     int
	}
	a.p.Eval(`(() => { const r = document.getElementById("chart").getBoundingClientRect(), path = document.getElementById("humans");
		return {top: r.top, height: r.height, bottom: r.bottom, inner: innerHeight, points: path ? path.getAttribute("d").split(/[ML]/).length - 1 : 0}; })()`, &c)
	if c.Points < 2 || c.Height < 100 || c.Bottom > c.Inner+1 {
		a.t.Errorf("embed at %s: the chart is %.0f px high, from %.0f to %.0f in a %.0f px frame, %d points: want it whole in the frame",
			a.vp, c.Height, c.Top, c.Bottom, c.Inner, c.Points)
	}
	// The unique visitors' card says which days it covers here too.
	var cover string
	a.p.Eval(`(() => { const e = document.getElementById("uniques_cover"); return e.getClientRects().length ? e.textContent : ""; })()`, &cover)
	if !strings.HasPrefix(cover, "UTC day") && cover != "today (UTC)" {
		a.t.Errorf("embed at %s: the unique visitors' card covers %q, want the UTC days", a.vp, cover)
	}
	a.colours("the embed view")
	a.shot("embed")
}

// rows returns the rows of a table's body: their first cell's text and
// whether each is shown.
func (a *analyst) rows(sel string) (texts []string, shown int) {
	a.t.Helper()
	var r struct {
		Texts []string
		Shown int
	}
	a.p.Eval(fmt.Sprintf(`(() => { const rows = [...document.querySelectorAll(%q)];
		return {texts: rows.map(r => r.cells[0].textContent), shown: rows.filter(r => r.getClientRects().length > 0).length}; })()`, sel+" tbody tr"), &r)
	return r.Texts, r.Shown
}

// more checks a list of n rows shows the first 8 and a control for all,
// which shows them and hides them again.
func (a *analyst) more(sel, box, what string, n int) {
	a.t.Helper()
	texts, shown := a.rows(sel)
	var label string
	a.p.Eval(fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, box+" button.more"), &label)
	if len(texts) != n || shown != 8 || label != fmt.Sprintf("Show all %d %s", n, what) {
		a.t.Errorf("%s: %d rows, %d shown, control %q; want %d, 8 and \"Show all %d %s\"", sel, len(texts), shown, label, n, n, what)
		return
	}
	a.p.Eval(fmt.Sprintf(`document.querySelector(%q).click()`, box+" button.more"), nil)
	if _, shown = a.rows(sel); shown != n {
		a.t.Errorf("%s after \"more\": %d of %d rows shown", sel, shown, n)
	}
	a.p.Eval(fmt.Sprintf(`document.querySelector(%q).click()`, box+" button.more"), nil)
	if _, shown = a.rows(sel); shown != 8 {
		a.t.Errorf("%s after \"less\": %d rows shown, want 8", sel, shown)
	}
}

// linkPage: the link's breakdowns, their lists, the utm dimensions and the
// classes, the live strip's scale.
func (a *analyst) linkPage() {
	a.t.Helper()
	a.p.Navigate(a.gw.url("/stats/go"))
	ready(a.t, a.p, "the link's page")
	a.colours("the link's page")
	var dest struct{ Text, Href string }
	a.p.Eval(`({text: document.getElementById("dest").textContent, href: document.getElementById("dest-link").getAttribute("href")})`, &dest)
	if dest.Text != "Leads to https://example.com/go " || dest.Href != "https://example.com/go" {
		a.t.Errorf("the link's destination: %+v, want https://example.com/go", dest)
	}
	// "new: none before" (the humans', none having come the day before)
	// stays on one line; a change in % may break before "vs previous".
	var chg []struct {
		Text string
		One  bool
	}
	a.p.Eval(`(() => { `+oneLineJS+` return [...document.querySelectorAll(".card .chg")].filter(e => e.textContent).map(e => ({text: e.textContent.replace(/\u00a0/g, " "), one: oneLine(e)})); })()`, &chg)
	if len(chg) == 0 || chg[0].Text != "new: none before" {
		a.t.Errorf("the cards' changes: %+v; want the humans' first, \"new: none before\"", chg)
	}
	for _, c := range chg {
		if !c.One && !strings.Contains(c.Text, " vs previous") {
			a.t.Errorf("the change %q wraps at %s", c.Text, a.vp)
		}
	}
	a.more("#dim-referrer", "#dimbox-referrer", "referrers", 13) // and "direct", the machines'
	var cut []string
	a.p.Eval(`[...document.querySelectorAll("#dims *, #top-section *")].filter(e => e.scrollHeight > e.clientHeight + 1 && /auto|scroll|hidden/.test(getComputedStyle(e).overflowY)).map(e => e.id || e.className)`, &cut)
	if len(cut) > 0 {
		a.t.Errorf("boxes that cut their lists: %q", cut)
	}
	for sel, want := range map[string][]string{
		"#dim-medium":   {"email"},
		"#dim-campaign": {"spring-sale"},
		"#dim-class":    {"human", "scanner", "preview"},
		"#dim-reason":   {"none", "headers", "preview-ua"},
		"#dim-country":  {"DE · Germany", "FR · France"},
	} {
		texts, _ := a.rows(sel)
		if strings.Join(texts, ",") != strings.Join(want, ",") {
			a.t.Errorf("%s: %q, want %q", sel, texts, want)
		}
	}
	a.classCurves("/stats/go")
	a.daily()
	a.p.WaitFor(10*time.Second, "the live strip's scale", `!!document.querySelector("#live text.ymax")`)
	var scale string
	a.p.Eval(`document.querySelector("#live text.ymax").textContent`, &scale)
	if !strings.HasSuffix(scale, " per 10 s") {
		a.t.Errorf("live strip scale %q", scale)
	}
	a.fits("the link's page")
	a.p.Eval(`scrollTo(0, 0)`, nil)
	a.shot("link")
	a.p.Eval(`document.getElementById("dims-section").scrollIntoView({block: "start"})`, nil)
	a.shot("link-breakdowns")
}

// daily: clicking a breakdown's value shows its visits per UTC day, as
// the API answers them; another value replaces it; Clear hides it.
func (a *analyst) daily() {
	a.t.Helper()
	for _, pick := range []struct{ table, value string }{{"#dim-referrer", "site03.example"}, {"#dim-country", "FR"}} {
		a.p.Eval(`delete document.body.dataset.dailyApi`, nil)
		a.p.Eval(fmt.Sprintf(`document.querySelector(%q).click()`, fmt.Sprintf(`%s tr[data-value=%q]`, pick.table, pick.value)), nil)
		a.p.WaitFor(10*time.Second, "the daily curve of "+pick.value, `document.body.dataset.dailyApi !== undefined && !document.getElementById("daily").hidden`)
		var got struct {
			API, Title string
			Bars       [][2]int64
			Pressed    int
		}
		a.p.Eval(`({api: document.body.dataset.dailyApi, title: document.getElementById("daily-title").textContent,
			bars: [...document.querySelectorAll("#daily-chart rect")].map(r => [+r.dataset.t, +r.dataset.n]),
			pressed: document.querySelectorAll("#dims tr[aria-pressed=true]").length})`, &got)
		var ans struct {
			Daily struct{ Points [][2]int64 }
		}
		_, body := testkit.Do(a.t, "GET", a.gw.url("/stats/go"+got.API), nil, "Accept", "application/json", "Authorization", "Bearer analyst-s3cret")
		if err := json.Unmarshal([]byte(body), &ans); err != nil {
			a.t.Fatalf("the daily curve's request: %v in %s", err, body)
		}
		var sum int64
		for _, p := range got.Bars {
			sum += p[1]
		}
		if !strings.Contains(got.Title, pick.value) || got.Pressed != 1 || fmt.Sprint(got.Bars) != fmt.Sprint(ans.Daily.Points) || sum == 0 {
			a.t.Errorf("the daily curve of %s: title %q, %d rows pressed, bars %v; the API says %v", pick.value, got.Title, got.Pressed, got.Bars, ans.Daily.Points)
		}
	}
	a.p.Eval(`document.getElementById("dims-section").scrollIntoView({block: "start"})`, nil)
	a.shot("link-daily")
	a.p.Eval(`document.getElementById("daily-clear").click()`, nil)
	var hidden bool
	a.p.Eval(`document.getElementById("daily").hidden && !document.querySelector("#dims tr[aria-pressed=true]")`, &hidden)
	if !hidden {
		a.t.Error("Clear left the daily curve or a pressed value")
	}
}

// allLinks: ten top links, eight shown and a control; keys and changes on
// one line, each key whole in its title; on a phone the long key cut with
// an ellipsis; at every size nothing wider than the window.
func (a *analyst) allLinks() {
	a.t.Helper()
	a.p.Navigate(a.gw.url("/stats"))
	ready(a.t, a.p, "the all-links page")
	a.p.WaitFor(10*time.Second, "the top links", `!document.getElementById("top-section").hidden`)
	a.more("#top", "#top-section", "links", len(analystLinks))
	a.p.Eval(`document.querySelector("#top-section button.more").click()`, nil)
	a.p.WaitFor(10*time.Second, "the top links' destinations", `[...document.querySelectorAll("#top .dest")].every(e => e.textContent !== "")`)
	var lines []struct {
		Key, Title      string
		Key1, Chg1, Cut bool
		Change, Dest    string
		PageW           int
	}
	a.p.Eval(`(() => { `+oneLineJS+` return [...document.querySelectorAll("#top tbody tr")].map(r => {
		const a = r.cells[0].querySelector("a");
		return {key: r.dataset.key, key1: oneLine(a), chg1: oneLine(r.cells[2]), change: r.cells[2].textContent,
			title: a.title, cut: a.scrollWidth > a.clientWidth + 1, pageW: document.documentElement.scrollWidth,
			dest: r.cells[0].querySelector(".dest").textContent}; }); })()`, &lines)
	for _, l := range lines {
		if !l.Key1 || !l.Chg1 || l.Title != l.Key || l.PageW > a.width {
			a.t.Errorf("top link %q at %s: key on one line %v (title %q), change %q on one line %v, page %d px wide in %d",
				l.Key, a.vp, l.Key1, l.Title, l.Change, l.Chg1, l.PageW, a.width)
		}
		// The long key is cut on a phone, and only there.
		if long := len(l.Key) > 30; l.Cut != (long && a.vp == "phone") {
			a.t.Errorf("top link %q at %s: cut with an ellipsis %v", l.Key, a.vp, l.Cut)
		}
		if want := "→ https://example.com/" + l.Key; l.Dest != want {
			a.t.Errorf("top link %q leads to %q, want %q", l.Key, l.Dest, want)
		}
	}
	a.fits("the all-links page, all top links shown")
	a.colours("the all-links page")
	a.classCurves("/stats")
	a.shot("all-links")
}

// fits checks that the page is as wide as the window at this size, its
// layout viewport and its content alike (a phone's widens to content too
// wide for it), with no element reaching past its right edge.
func (a *analyst) fits(where string) {
	a.t.Helper()
	var w struct {
		Inner, Client, Scroll int
		Past                  []string
	}
	a.p.Eval(`({inner: innerWidth, client: document.documentElement.clientWidth, scroll: document.documentElement.scrollWidth,
		past: [...document.querySelectorAll("body *")].filter(e => e.getClientRects().length && e.getBoundingClientRect().right > innerWidth + 1).map(e => e.tagName + "#" + e.id + "." + e.className)})`, &w)
	if w.Inner != a.width || w.Client != a.width || w.Scroll != a.width || len(w.Past) > 0 {
		a.t.Errorf("%s at %s: window %d px, layout %d, content %d, past the edge %q; want all %d and none past it", where, a.vp, w.Inner, w.Client, w.Scroll, w.Past, a.width)
	}
}

// analystClasses are the classes of machines in the order and words of the
// page's cards and readout.
var analystClasses = [...]struct{ name, one, many string }{
	{"bot", "declared bot", "declared bots"}, {"preview", "preview", "previews"}, {"scanner", "scanner", "scanners"},
	{"prefetch", "prefetch", "prefetches"}, {"internal", "internal visit", "internal visits"},
}

// classCurves checks, on the page of path, the curve of each class of
// machines the API's answer to the page's own request has (class_points):
// drawn at the chart's scale through every value, keyed by a pressed
// button in the legend, and its range total on the machines' card. Hiding
// the humans in the legend (and with them the previous period's, and its
// key) fits the y-axis to the machines, whose curves are drawn again at
// the new scale; pressing it again shows them.
func (a *analyst) classCurves(path string) {
	a.t.Helper()
	var api string
	a.p.Eval(`document.body.dataset.api`, &api)
	var ans struct {
		Points      [][]*int64
		ClassPoints map[string][]*int64 `json:"class_points"`
		Classes     map[string]struct {
			RangeTotal int64 `json:"range_total"`
		}
	}
	_, body := testkit.Do(a.t, "GET", a.gw.url(path+api), nil, "Accept", "application/json", "Authorization", "Bearer analyst-s3cret")
	if err := json.Unmarshal([]byte(body), &ans); err != nil {
		a.t.Fatalf("%s%s: %v in %s", path, api, err, body)
	}
	if ans.ClassPoints["scanner"] == nil || ans.ClassPoints["preview"] == nil {
		a.t.Fatalf("%s: class_points %v, want the scanners' and the preview's", path, ans.ClassPoints)
	}
	var cards []string
	for _, c := range analystClasses {
		if n := ans.Classes[c.name].RangeTotal; n == 1 {
			cards = append(cards, "1 "+c.one)
		} else if n > 1 {
			cards = append(cards, fmt.Sprintf("%d %s", n, c.many))
		}
	}
	var card string
	a.p.Eval(`document.getElementById("class_range").textContent`, &card)
	if want := strings.Join(cards, ", "); card != want {
		a.t.Errorf("%s at %s: the machines' card lists %q, want %q", path, a.vp, card, want)
	}
	// drawnAt returns, per class, the heights its curve is drawn at (lines,
	// the incomplete last segment and lone dots) and those of its values
	// at the chart's scale, and whether its legend button is pressed.
	curves := func() (top int64, humans bool) {
		for c, vals := range ans.ClassPoints {
			var got struct {
				Drawn, Want []string
				Pressed     string
			}
			a.p.Eval(fmt.Sprintf(`((c, vals) => {
				const ys = [...document.querySelectorAll("#class-" + c + ", #class-" + c + "-partial")].flatMap(p => p.getAttribute("d").split(/[ML]/).filter(Boolean).map(s => s.split(",")[1]));
				for (const d of document.querySelectorAll("#chart circle[data-class=" + c + "]")) ys.push(d.getAttribute("cy"));
				const b = document.querySelector("#legend button[data-series=" + c + "]");
				const uniq = a => [...new Set(a)].sort();
				return {drawn: uniq(ys.map(y => (+y).toFixed(1))), want: uniq(vals.filter(v => v !== null).map(v => drawn.y(v).toFixed(1))), pressed: b ? b.getAttribute("aria-pressed") : "none"};
			})(%q, %s)`, c, jsonOf(a.t, vals)), &got)
			if len(got.Drawn) == 0 || fmt.Sprint(got.Drawn) != fmt.Sprint(got.Want) || got.Pressed != "true" {
				a.t.Errorf("%s at %s: the %s curve is drawn at heights %v, its values are at %v; legend button pressed: %s", path, a.vp, c, got.Drawn, got.Want, got.Pressed)
			}
		}
		var st struct {
			Top    int64
			Humans bool
		}
		a.p.Eval(`({top: Math.max(...[...document.querySelectorAll("#chart .ytick")].map(e => +e.dataset.v)),
			humans: !!document.getElementById("humans") && !!document.getElementById("cmp-key").getClientRects().length})`, &st)
		return st.Top, st.Humans
	}
	var maxHuman, maxClass int64
	for i, p := range ans.Points {
		if p[1] != nil {
			maxHuman = max(maxHuman, *p[1])
		}
		for _, vals := range ans.ClassPoints {
			if vals[i] != nil {
				maxClass = max(maxClass, *vals[i])
			}
		}
	}
	if top, humans := curves(); !humans || top < maxHuman {
		a.t.Errorf("%s at %s: humans drawn %v, y-axis up to %d; want them drawn, up to at least %d", path, a.vp, humans, top, maxHuman)
	}
	a.p.Eval(`document.querySelector("#legend button[data-series=humans]").click()`, nil)
	if top, humans := curves(); humans || top < maxClass || top >= maxHuman {
		a.t.Errorf("%s at %s, humans hidden: humans drawn %v, y-axis up to %d; want them hidden and the axis fit to the machines' %d", path, a.vp, humans, top, maxClass)
	}
	if path == "/stats/go" {
		a.p.Eval(`document.getElementById("chart-section").scrollIntoView({block: "start"})`, nil)
		a.shot("link-classes")
	}
	a.p.Eval(`document.querySelector("#legend button[data-series=humans]").click()`, nil)
	if _, humans := curves(); !humans {
		a.t.Errorf("%s at %s: the humans are not drawn again when their legend button is pressed again", path, a.vp)
	}
}

// jsonOf returns v as JSON, for a script.
func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// uniques: over a range inside one UTC day the card says it covers today
// (UTC) and shows no change (the previous period is the same day).
func (a *analyst) uniques() {
	a.t.Helper()
	a.p.Navigate(a.gw.url("/stats/go?last=30m"))
	ready(a.t, a.p, "the link's last 30 minutes")
	var u struct{ Count, Change, Cover string }
	a.p.Eval(`({count: document.getElementById("uniques").textContent, change: document.getElementById("uniques_chg").textContent,
		cover: document.getElementById("uniques_cover").textContent})`, &u)
	if u.Count == "–" || u.Change != "" || u.Cover != "today (UTC)" {
		// A run across midnight covers two days: say so rather than fail.
		if !strings.HasPrefix(u.Cover, "UTC days") || u.Change != "" {
			a.t.Errorf("unique visitors over 30 minutes: %+v; want the UTC day it covers and no change", u)
		}
	}
}

// quietLink: a link without visits, on a gateway with a country
// database, says it has no visits.
// tenantPage: a link of a tenant, opened by the operator with tenant=,
// names its tenant in its heading and in the window's title.
func (a *analyst) tenantPage() {
	a.t.Helper()
	a.p.Navigate(a.gw.url("/stats/go?tenant=acme"))
	ready(a.t, a.p, "acme's go")
	var got struct{ Key, Title string }
	a.p.Eval(`({key: document.getElementById("key").textContent, title: document.title})`, &got)
	if got.Key != "acme: go" || !strings.Contains(got.Title, "acme: go") {
		a.t.Errorf("acme's go: heading %q, title %q; want both to name acme", got.Key, got.Title)
	}
}

func (a *analyst) quietLink() {
	a.t.Helper()
	a.p.Navigate(a.gw.url("/stats/quiet"))
	ready(a.t, a.p, "a link without visits")
	texts, _ := a.rows("#dim-country")
	if len(texts) != 1 || texts[0] != "no visits" {
		a.t.Errorf("countries of a link without visits: %q, want \"no visits\"", texts)
	}
}

// oneVisit: the live strip of a link with one visit says "1 visit", not
// "1 visits" (or, once the visit is older than the strip's 15 minutes,
// "0 visits").
func (a *analyst) oneVisit() {
	a.t.Helper()
	a.p.Navigate(a.gw.url("/stats/team"))
	ready(a.t, a.p, "a link with one visit")
	a.p.WaitFor(10*time.Second, "the live counter", `document.getElementById("live-count").dataset.n !== undefined`)
	var live struct {
		N    int
		Text string
	}
	a.p.Eval(`({n: +document.getElementById("live-count").dataset.n, text: document.querySelector("#live-section .row > span").textContent})`, &live)
	want := map[bool]string{true: "visit in the last 15 minutes (0 machines)", false: "visits in the last 15 minutes"}[live.N == 1]
	if live.N > 1 || !strings.HasPrefix(live.Text, want) {
		a.t.Errorf("the live strip of a link with one visit: %q (%d); want %q", live.Text, live.N, want)
	}
}

// TestLiveStripAfterRestart: a gateway counts visits and stops; another
// starts on the same store. Its live stream says since when it counts and
// carries the store's minutes of the window before that (the visits of the
// gateway before it), and the page's live strip shows them at once: the
// counter has them, they are drawn as the store's, and a line marks where
// this gateway began counting.
func TestLiveStripAfterRestart(t *testing.T) {
	t.Parallel()
	b := browser.Shared(t)
	const chrome = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
	up := tinyURL(t)
	cfg := analyticsConfig(up.URL, embeddedStore(filepath.Join(t.TempDir(), "analytics")), "1h")
	gw := start(t, cfg)
	const humans = 3
	for range humans {
		if resp, _ := testkit.Do(t, "GET", gw.url("/go"), nil, testkit.Navigation(chrome)...); resp.StatusCode != http.StatusFound {
			t.Fatalf("a visit: %d", resp.StatusCode)
		}
	}
	if resp, _ := testkit.Do(t, "GET", gw.url("/go"), nil, "User-Agent", "Googlebot/2.1 (+http://www.google.com/bot.html)"); resp.StatusCode != http.StatusFound {
		t.Fatalf("a bot's visit: %d", resp.StatusCode)
	}
	if err := gw.shutdown(); err != nil { // the last flush writes the visits
		t.Fatal(err)
	}
	stopped := time.Now()
	gw2 := start(t, cfg)

	s := openLive(t, gw2.url("/stats/go?format=events"))
	e := s.next(t, 10*time.Second, "the first event", func(liveEvent) bool { return true })
	if e.Since < stopped.Unix() || e.Since > time.Now().Unix() || e.RangeTotal+e.BotRangeTotal != 0 {
		t.Errorf("the new gateway's first event: since %d (stopped at %d), %d humans and %d machines of its own; want since after the stop and none",
			e.Since, stopped.Unix(), e.RangeTotal, e.BotRangeTotal)
	}
	if e.Stored == nil || e.Stored.Step != 60 || e.Stored.RangeTotal != humans || e.Stored.BotRangeTotal != 1 {
		t.Fatalf("the new gateway's first event: stored %+v; want the store's minutes with the %d humans and the bot", e.Stored, humans)
	}
	for _, p := range e.Stored.Points {
		if p[0] < e.From || p[0] >= e.Since {
			t.Errorf("a stored minute at %d, outside the window's part before the gateway started [%d, %d)", p[0], e.From, e.Since)
		}
	}

	p := b.NewPage(t, browser.Options{Width: 1280, Height: 800})
	p.Navigate(gw2.url("/stats/go"))
	ready(t, p, "the link's page on the new gateway")
	p.WaitFor(10*time.Second, "the live strip with the stored visits", `document.getElementById("live-count").dataset.n === "4"`)
	var strip struct {
		Stored, Since int
		Whose         string
	}
	p.Eval(`({stored: [...document.querySelectorAll("#live g.stored")].reduce((n, g) => n + +g.dataset.n, 0),
		since: document.querySelectorAll("#live line.since").length, whose: document.getElementById("live-whose").textContent})`, &strip)
	if strip.Stored != humans+1 || strip.Since != 1 || !strings.Contains(strip.Whose, "since it started at") || !strings.Contains(strip.Whose, "store's") {
		t.Errorf("the live strip after a restart: %d visits drawn as the store's, %d start lines, %q; want %d, 1 and words saying so", strip.Stored, strip.Since, strip.Whose, humans+1)
	}
	if errs := p.Errors(); len(errs) > 0 {
		t.Errorf("page errors: %q", errs)
	}
	p.Eval(`document.getElementById("live-section").scrollIntoView({block: "center"})`, nil)
	a := &analyst{t: t, p: p, gw: gw2, scheme: "light", vp: "desktop", width: 1280, shots: os.Getenv("LINKGATE_SCREENSHOTS")}
	a.shot("live-restart")
}
