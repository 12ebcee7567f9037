package gateway_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/gateway"
	"github.com/linkgate/linkgate/internal/browser"
	"github.com/linkgate/linkgate/internal/testkit"
)

func gatewayPlan(path string) (*gateway.Plan, error) { return gateway.Load(path, getenv) }

// ready waits for the page's script to have drawn an answer.
func ready(t *testing.T, p *browser.Page, what string) {
	t.Helper()
	p.WaitFor(30*time.Second, what, `document.body.dataset.state === "ready"`)
}

// clickRange presses a range button and waits for the new answer.
func clickRange(t *testing.T, p *browser.Page, label string) {
	t.Helper()
	p.Eval(`document.body.dataset.state = "switching"`, nil)
	p.ClickSelector(fmt.Sprintf(`#ranges button[data-last=%q]`, label))
	ready(t, p, "the "+label+" range")
}

// view is what the page shows of one answer, read from its DOM.
type view struct {
	API       string            `json:"api"`
	Search    string            `json:"search"`
	Lit       []string          `json:"lit"`
	Text      map[string]string `json:"text"`
	Pct       map[string]string `json:"pct"`
	Unit      string            `json:"unit"`
	XTicks    []tick            `json:"xticks"`
	YTicks    []string          `json:"yticks"`
	Partial   *partialSeg       `json:"partial"`
	Dims      map[string][][2]string
	SVG       svgBox  `json:"svg"`
	ScrollW   float64 `json:"scrollW"`
	InnerW    float64 `json:"innerW"`
	ZoneValue string  `json:"zone"`
	// Data is the answer the page drew, as it received it.
	Data json.RawMessage `json:"data"`
}

type tick struct {
	T     int64   `json:"t"`
	X     float64 `json:"x"`
	Label string  `json:"label"`
	Font  float64 `json:"font"`
	H     float64 `json:"h"`
}

type partialSeg struct {
	Start int64  `json:"start"`
	Dash  string `json:"dash"`
}

type svgBox struct {
	Attr    float64 `json:"attr"`
	Width   float64 `json:"width"`
	Box     float64 `json:"box"`
	ViewBox string  `json:"viewBox"`
}

const readView = `(() => {
  const q = s => document.querySelector(s), all = s => [...document.querySelectorAll(s)];
  const text = {}, pct = {};
  for (const id of ["range_total", "bot_range_total", "total", "bot_total", "uniques", "key", "readout", "live-count"]) text[id] = q("#" + id) ? q("#" + id).textContent : null;
  for (const id of ["range_total_chg", "bot_range_total_chg", "uniques_chg"]) pct[id] = q("#" + id) && q("#" + id).dataset.pct !== undefined ? q("#" + id).dataset.pct : "";
  const dims = {};
  for (const tb of all(".dim table")) dims[tb.id.slice(4)] = [...tb.querySelectorAll("tbody tr[data-value]")].map(r => [r.dataset.value, r.dataset.count]);
  const part = q("#humans-partial");
  const svg = q("#chart");
  return {
    api: document.body.dataset.api, search: location.search,
    lit: all("#ranges button[aria-pressed=true]").map(b => b.textContent),
    text, pct, unit: svg.dataset.unit,
    xticks: all("#chart text.xtick").map(e => ({t: +e.dataset.t, x: +e.getAttribute("x"), label: e.textContent, font: parseFloat(getComputedStyle(e).fontSize), h: e.getBBox().height})),
    yticks: all("#chart text.ytick").map(e => e.dataset.v),
    partial: part ? {start: +part.dataset.start, dash: getComputedStyle(part).strokeDasharray} : null,
    Dims: dims,
    svg: {attr: +svg.getAttribute("width"), width: svg.getBoundingClientRect().width, box: q("#chartbox").clientWidth, viewBox: svg.getAttribute("viewBox") || ""},
    scrollW: document.documentElement.scrollWidth, innerW: innerWidth, zone: q("#tz").value, data,
  };
})()`

func readPage(t *testing.T, p *browser.Page) view {
	t.Helper()
	var v view
	p.Eval(readView, &v)
	return v
}

// pctOf is the page's change in percent: rounded to a whole number from
// 10 % on, to a tenth below, as JavaScript's Math.round rounds (a half
// up, toward +∞: −37.5 is −37, where Go's math.Round gives −38).
func pctOf(cur, prev int64) string {
	if prev == 0 {
		return ""
	}
	round := func(x float64) float64 { return math.Floor(x + 0.5) }
	p := float64(cur-prev) / float64(prev) * 100
	r := round(p*10) / 10
	if math.Abs(p) >= 10 {
		r = round(p)
	}
	if r == 0 {
		return ""
	}
	return strconv.FormatFloat(r, 'f', -1, 64)
}

// checkView compares what the page shows with the API's answer to the
// page's own request (asked again when fetch, else the answer the page
// received), and checks the axes: ticks on round times of zone, integer
// counts, the dashed incomplete bucket, readable labels at the page's own
// width.
func (d *dashboard) checkView(t *testing.T, p *browser.Page, page string, zone *time.Location, fetch bool) (view, apiAnswer) {
	t.Helper()
	v := readPage(t, p)
	var a apiAnswer
	if fetch {
		a = d.answer(t, page, v.API)
	} else if err := json.Unmarshal(v.Data, &a); err != nil {
		t.Fatalf("%s: the page's answer: %v", v.Search, err)
	} else {
		a.From, a.To = a.FromJ, a.ToJ
	}
	if v.ZoneValue != zone.String() && !(zone.String() == "Asia/Kolkata" && v.ZoneValue == "Asia/Calcutta") {
		t.Errorf("the zone picker shows %q, want %s", v.ZoneValue, zone)
	}
	for id, want := range map[string]int64{"range_total": a.RangeTotal, "bot_range_total": a.BotRangeTotal, "total": a.Total, "bot_total": a.BotTotal} {
		if v.Text[id] != grouped(want) {
			t.Errorf("%s: #%s shows %q, the API says %d", v.Search, id, v.Text[id], want)
		}
	}
	if a.Uniques == nil || v.Text["uniques"] != grouped(a.Uniques.Count) {
		t.Errorf("%s: unique visitors %q, the API says %+v", v.Search, v.Text["uniques"], a.Uniques)
	}
	if a.Compare == nil {
		t.Fatalf("%s: the page did not ask for the previous period (its request %q, the answer %+v)", v.Search, v.API, a)
	}
	if want := pctOf(a.RangeTotal, a.Compare.RangeTotal); v.Pct["range_total_chg"] != want {
		t.Errorf("%s: change of humans %q%%, want %q%% (%d against %d)", v.Search, v.Pct["range_total_chg"], want, a.RangeTotal, a.Compare.RangeTotal)
	}
	// Ticks on round times of the zone.
	if len(v.XTicks) < 2 {
		t.Errorf("%s: %d time ticks (%+v, unit %s) over %d points from %v, step %d; want at least 2", v.Search, len(v.XTicks), v.XTicks, v.Unit, len(a.Points), time.Unix(a.From, 0), a.Step)
	}
	unit, n := v.Unit[:1], 1
	if len(v.Unit) > 1 {
		n, _ = strconv.Atoi(v.Unit[1:])
	}
	first, last := *a.Points[0][0], *a.Points[len(a.Points)-1][0]
	for i, k := range v.XTicks {
		lt := time.Unix(k.T, 0).In(zone)
		round := lt.Minute() == 0 && lt.Second() == 0
		switch unit {
		case "h":
			round = round && lt.Hour()%n == 0
		case "d":
			round = round && lt.Hour() == 0
		case "w":
			round = round && lt.Hour() == 0 && lt.Weekday() == time.Monday
		case "m":
			round = round && lt.Hour() == 0 && lt.Day() == 1 && (int(lt.Month())-1)%n == 0
		case "y":
			round = round && lt.Hour() == 0 && lt.YearDay() == 1
		}
		if !round || k.Label == "" {
			t.Errorf("%s: tick %q at %v (%s) is not on a round %s of %s", v.Search, k.Label, lt, time.Unix(k.T, 0).UTC(), v.Unit, zone)
		}
		if k.T < first || k.T > last+a.Step+7*86400 {
			t.Errorf("%s: tick %q at %v outside the curve", v.Search, k.Label, lt)
		}
		if i > 0 && k.X-v.XTicks[i-1].X < 40 {
			t.Errorf("%s: ticks %q and %q are %.0f px apart: their labels overlap", v.Search, v.XTicks[i-1].Label, k.Label, k.X-v.XTicks[i-1].X)
		}
		if k.Font < 11 || k.H < 10 {
			t.Errorf("%s: tick %q is %.1f px (%.1f px high): unreadable", v.Search, k.Label, k.Font, k.H)
		}
	}
	prev := -1
	for _, y := range v.YTicks {
		n, err := strconv.Atoi(y)
		if err != nil || n <= prev {
			t.Errorf("%s: y-axis ticks %q: want whole counts, rising", v.Search, v.YTicks)
			break
		}
		prev = n
	}
	// The bucket still filling is dashed.
	lastStart := *a.Points[len(a.Points)-1][0]
	end := lastStart + a.Step
	if len(a.Points) > 1 && a.Step == 0 {
		end = lastStart + 1
	}
	switch incomplete := end > a.To; {
	case incomplete && (v.Partial == nil || v.Partial.Start != lastStart || v.Partial.Dash == "none" || v.Partial.Dash == ""):
		t.Errorf("%s: the incomplete last bucket (%v, the range ends at %v) is not drawn dashed: %+v", v.Search, time.Unix(lastStart, 0), time.Unix(a.To, 0), v.Partial)
	case !incomplete && v.Partial != nil:
		t.Errorf("%s: the last bucket (%v) ends with the range but is drawn dashed", v.Search, time.Unix(lastStart, 0))
	}
	// Breakdowns, row for row.
	for _, dim := range []string{"referrer", "country", "device", "browser", "os"} {
		var want [][2]string
		for _, r := range a.Breakdown[dim] {
			want = append(want, [2]string{r.Value, strconv.FormatInt(r.Count, 10)})
		}
		if len(want) < 3 || !slices.Equal(v.Dims[dim], want) {
			t.Errorf("%s: the %s table %v, the API says %v", v.Search, dim, v.Dims[dim], want)
		}
	}
	// Laid out at its own width: no scaled SVG, nothing wider than the
	// screen.
	if v.SVG.ViewBox != "" || math.Abs(v.SVG.Attr-v.SVG.Width) > 1 || math.Abs(v.SVG.Width-v.SVG.Box) > 2 {
		t.Errorf("%s: the chart is %+v: want it drawn at its box's width, not scaled", v.Search, v.SVG)
	}
	if v.ScrollW > v.InnerW+1 {
		t.Errorf("%s: the page is %.0f px wide in a %.0f px viewport", v.Search, v.ScrollW, v.InnerW)
	}
	return v, a
}

// paletted returns img in the 256 colours it uses most, each pixel the
// nearest of them: a page is a few flat colours and the antialiasing
// between them, so the PNG is a third of the size and looks the same.
func paletted(img image.Image) *image.Paletted {
	b := img.Bounds()
	counts := map[color.RGBA]int{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			counts[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), uint8(a >> 8)}]++
		}
	}
	cs := make([]color.RGBA, 0, len(counts))
	for c := range counts {
		cs = append(cs, c)
	}
	slices.SortFunc(cs, func(a, b color.RGBA) int {
		if counts[a] != counts[b] {
			return counts[b] - counts[a]
		}
		return int(a.R)<<16 | int(a.G)<<8 | int(a.B) - (int(b.R)<<16 | int(b.G)<<8 | int(b.B))
	})
	pal := make(color.Palette, 0, 256)
	for _, c := range cs[:min(256, len(cs))] {
		pal = append(pal, c)
	}
	out := image.NewPaletted(b, pal)
	index := map[color.RGBA]uint8{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			c := color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), uint8(a >> 8)}
			i, ok := index[c]
			if !ok {
				i = uint8(pal.Index(c))
				index[c] = i
			}
			out.SetColorIndex(x, y, i)
		}
	}
	return out
}

// screenshot writes the viewport as dir/<name>.png when screenshots are
// asked for, in 256 colours at the best compression.
func (d *dashboard) screenshot(t *testing.T, p *browser.Page, name string) {
	t.Helper()
	if d.shots == "" {
		return
	}
	img, err := png.Decode(bytes.NewReader(p.Screenshot()))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(&buf, paletted(img)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.shots, name+".png"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// linkPage: one link's page, from the token form to every range, the
// zone picker, a custom range, the readout, the table, the CSV and live.
func (d *dashboard) linkPage(t *testing.T, p *browser.Page, vp string, mobile bool, dl string) {
	p.Navigate(d.gw.url("/stats/go"))
	p.WaitFor(30*time.Second, "the token form", `document.body.dataset.state === "error" && getComputedStyle(document.getElementById("auth")).display !== "none"`)
	p.Eval(`document.getElementById("token").value = "dash-s3cret"; document.getElementById("auth").requestSubmit()`, nil)
	ready(t, p, "the link's page after the token")

	v, a := d.checkView(t, p, "/stats/go", d.zone, true)
	if !slices.Equal(v.Lit, []string{"24h"}) || v.Text["key"] != "go" {
		t.Errorf("on load: lit %q, key %q; want 24h, go", v.Lit, v.Text["key"])
	}
	d.screenshot(t, p, "link-24h-"+vp)

	// A tap (a click on the desktop) on the busiest bucket reads it out.
	best := 0
	for i, pt := range a.Points {
		if pt[1] != nil && *pt[1] > *a.Points[best][1] {
			best = i
		}
	}
	var at struct{ X, Y float64 }
	p.Eval(fmt.Sprintf(`(() => { const r = document.getElementById("chart").getBoundingClientRect(); document.getElementById("chart").scrollIntoView({block: "center"});
		const r2 = document.getElementById("chart").getBoundingClientRect(); return {x: r2.left + drawn.x(drawn.mid(%d)), y: r2.top + r2.height / 2}; })()`, best), &at)
	if mobile {
		p.Tap(at.X, at.Y)
	} else {
		p.Click(at.X, at.Y)
	}
	p.WaitFor(5*time.Second, "the readout of the tapped bucket", fmt.Sprintf(`document.getElementById("readout").dataset.i === "%d"`, best))
	pt := a.Points[best]
	plural := func(n int64, w string) string {
		if n == 1 {
			return "1 " + w
		}
		return grouped(n) + " " + w + "s"
	}
	if r := readPage(t, p).Text["readout"]; !strings.Contains(r, plural(*pt[1], "human")+", "+plural(*pt[2], "machine")) {
		t.Errorf("the readout of bucket %d says %q, want %d humans and %d machines", best, r, *pt[1], *pt[2])
	}
	// The keyboard moves it, and the table of the series has every point.
	if best > 0 {
		p.Eval(`document.getElementById("chart").focus()`, nil)
		p.Key("ArrowLeft")
		p.WaitFor(5*time.Second, "the readout one bucket to the left", fmt.Sprintf(`document.getElementById("readout").dataset.i === "%d"`, best-1))
	}
	p.Eval(`document.getElementById("tablebox").open = true`, nil)
	p.WaitFor(5*time.Second, "the table of the series", fmt.Sprintf(`document.querySelectorAll("#series tbody tr").length === %d`, len(a.Points)))
	var cells []string
	p.Eval(fmt.Sprintf(`[...document.querySelectorAll("#series tbody tr")[%d].cells].map(c => c.textContent)`, best), &cells)
	if len(cells) < 4 || cells[1] != grouped(*pt[1]) || cells[2] != grouped(*pt[2]) {
		t.Errorf("the table's row %d: %q, want %d humans, %d machines", best, cells, *pt[1], *pt[2])
	}
	p.Eval(`document.getElementById("tablebox").open = false`, nil)

	// The CSV downloaded is the API's CSV of what is shown.
	var csvURL string
	p.Eval(`document.getElementById("csv").dataset.url`, &csvURL)
	p.ClickSelector("#csv")
	file := p.Download(dl, 15*time.Second)
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if want := d.api(t, "/stats/go", csvURL); !bytes.Equal(got, want) || !bytes.HasPrefix(got, []byte("unix_seconds,count,bot_count,compare_unix_seconds")) {
		t.Errorf("the CSV downloaded (%d bytes) differs from the API's %s (%d bytes):\n%.300s", len(got), csvURL, len(want), got)
	}

	// The other ranges: each lit and kept in the URL.
	for _, r := range []string{"7d", "30d", "12mo", "all"} {
		clickRange(t, p, r)
		v, a := d.checkView(t, p, "/stats/go", d.zone, r == "30d")
		if !slices.Equal(v.Lit, []string{r}) || !strings.Contains(v.Search, "last="+r) {
			t.Errorf("after %s: lit %q, URL %q", r, v.Lit, v.Search)
		}
		switch r {
		case "30d":
			// Local days from the hourly tier: the day of a clock change
			// is 23 or 25 hours long.
			if a.TZ != d.zone.String() {
				t.Errorf("30d: buckets in %q, want %s", a.TZ, d.zone)
			}
			if d.dst.Unix() > *a.Points[0][0] {
				long := false
				for i := 0; i+1 < len(a.Points); i++ {
					if dd := *a.Points[i+1][0] - *a.Points[i][0]; dd == 23*3600 || dd == 25*3600 {
						long = true
					}
				}
				if !long {
					t.Errorf("30d: the clock change of %v is in the range but no day is 23 or 25 hours", d.dst)
				}
			}
			p.Eval(`select(data.points.length - 4)`, nil) // a bucket read out
			d.screenshot(t, p, "link-30d-"+vp)
		case "12mo":
			// Month ticks on local midnights, on both sides of a change.
			offsets := map[int]bool{}
			for _, k := range v.XTicks {
				_, off := time.Unix(k.T, 0).In(d.zone).Zone()
				offsets[off] = true
			}
			if len(offsets) < 2 {
				t.Errorf("12mo: the ticks %v are all at one UTC offset: the zone's clock change is not followed", v.XTicks)
			}
		}
	}

	// Another zone: ticks on its round times, the choice in the URL.
	clickRange(t, p, "24h")
	kolkata, _ := time.LoadLocation("Asia/Kolkata")
	// Chromium's list names the zone by its older name, Asia/Calcutta.
	p.Eval(`document.body.dataset.state = "switching"; const s = document.getElementById("tz");
		s.value = [...s.options].map(o => o.value).find(z => z === "Asia/Kolkata" || z === "Asia/Calcutta"); s.dispatchEvent(new Event("change"))`, nil)
	ready(t, p, "the page in Asia/Kolkata")
	if v, _ := d.checkView(t, p, "/stats/go", kolkata, false); !strings.Contains(v.Search, "tz=Asia%2FKolkata") && !strings.Contains(v.Search, "tz=Asia%2FCalcutta") {
		t.Errorf("the zone picked is not in the URL: %q", v.Search)
	}
	p.Eval(fmt.Sprintf(`document.body.dataset.state = "switching"; const s2 = document.getElementById("tz"); s2.value = %q; s2.dispatchEvent(new Event("change"))`, d.zone.String()), nil)
	ready(t, p, "the page back in its zone")

	// A custom range: two dates of the zone.
	from := time.Now().In(d.zone).AddDate(0, 0, -12).Format("2006-01-02")
	to := time.Now().In(d.zone).AddDate(0, 0, -3).Format("2006-01-02")
	p.ClickSelector(`#ranges button[data-last="custom"]`)
	p.Eval(fmt.Sprintf(`document.body.dataset.state = "switching"; document.getElementById("cfrom").value = %q; document.getElementById("cto").value = %q; document.getElementById("custom").requestSubmit()`, from, to), nil)
	ready(t, p, "the custom range")
	cv, _ := d.checkView(t, p, "/stats/go", d.zone, false)
	ca := d.answer(t, "/stats/go", cv.API)
	wantFrom := time.Now().In(d.zone).AddDate(0, 0, -12)
	wantFrom = time.Date(wantFrom.Year(), wantFrom.Month(), wantFrom.Day(), 0, 0, 0, 0, d.zone)
	if !slices.Equal(cv.Lit, []string{"custom"}) || !strings.Contains(cv.Search, "from=") || cv.Text["range_total"] != grouped(ca.RangeTotal) || ca.From > wantFrom.Unix() {
		t.Errorf("custom %s to %s: lit %q, URL %q, humans %q (API %d), from %d (want %d)", from, to, cv.Lit, cv.Search, cv.Text["range_total"], ca.RangeTotal, ca.From, wantFrom.Unix())
	}

}

// live: on the link's page, visits arrive and the live counter moves
// within seconds.
func (d *dashboard) live(t *testing.T, p *browser.Page, vp string) {
	p.Eval(`sessionStorage.setItem("linkgate-stats-token", "dash-s3cret")`, nil)
	p.Navigate(d.gw.url("/stats/go"))
	ready(t, p, "the link's page")
	p.WaitFor(10*time.Second, "the live counter", `document.getElementById("live-count").dataset.n !== undefined`)
	var n0 int
	p.Eval(`+document.getElementById("live-count").dataset.n`, &n0)
	for _, ua := range []string{"Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0", "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) Safari/604.1", "Twitterbot/1.0"} {
		if resp, _ := testkit.Do(t, "GET", d.gw.url("/go"), nil, "User-Agent", ua); resp.StatusCode != 302 {
			t.Fatalf("GET /go: %d", resp.StatusCode)
		}
	}
	p.WaitFor(10*time.Second, "the live counter to move by the 3 visits", fmt.Sprintf(`+document.getElementById("live-count").dataset.n === %d`, n0+3))
	p.Eval(`document.getElementById("live-section").scrollIntoView({block: "start"})`, nil)
	d.screenshot(t, p, "link-live-"+vp)
	if vp == "phone" { // on the desktop the live view's shot shows them
		p.Eval(`document.getElementById("dims-section").scrollIntoView({block: "start"})`, nil)
		d.screenshot(t, p, "link-breakdowns-"+vp)
	}
}

// allLinksPage: the top links first, each with its visits, change and
// sparkline, linking to its page; the service-wide breakdowns.
func (d *dashboard) allLinksPage(t *testing.T, p *browser.Page, vp string) {
	p.Navigate(d.gw.url("/stats"))
	ready(t, p, "the all-links page")
	p.WaitFor(10*time.Second, "the top links", `!document.getElementById("top-section").hidden`)
	var rows []struct {
		Key, Visits, Change, Href string
		Spark                     int
	}
	p.Eval(`[...document.querySelectorAll("#top tbody tr")].map(r => ({key: r.dataset.key, visits: r.cells[1].textContent, change: r.cells[2].textContent,
		href: r.querySelector("a").getAttribute("href"), spark: r.querySelector("polyline").getAttribute("points").split(" ").length}))`, &rows)
	var topAPI string
	p.Eval(`document.body.dataset.topApi`, &topAPI)
	ta := d.answer(t, "/stats", topAPI)
	if len(rows) != len(ta.Top) || len(rows) < 5 {
		t.Fatalf("top links: %d rows, the API has %d", len(rows), len(ta.Top))
	}
	for i, l := range ta.Top {
		r := rows[i]
		if r.Key != l.ShortKey || r.Visits != grouped(l.RangeTotal) || r.Spark != len(l.Points) || r.Href != "/stats/"+l.ShortKey && !strings.HasPrefix(r.Href, "/stats/"+l.ShortKey+"?") {
			t.Errorf("top row %d: %+v; the API says %s with %d visits and %d points", i, r, l.ShortKey, l.RangeTotal, len(l.Points))
		}
		if l.CompareTotal == nil {
			t.Errorf("top row %d: the API has no previous period", i)
		} else if want := pctOf(l.RangeTotal, *l.CompareTotal); want != "" && !strings.Contains(r.Change, strings.TrimPrefix(want, "-")+"%") {
			t.Errorf("top row %d: change %q, want %s%%", i, r.Change, want)
		}
	}
	v, _ := d.checkView(t, p, "/stats", d.zone, false)
	if v.Text["key"] != "all links" {
		t.Errorf("the all-links page is titled %q", v.Text["key"])
	}
	d.screenshot(t, p, "all-links-"+vp)
	// A row leads to its link's page.
	p.Eval(`document.body.dataset.state = "leaving"`, nil)
	p.ClickSelector("#top tbody tr:nth-child(2) a")
	p.WaitFor(30*time.Second, "the second link's page", fmt.Sprintf(`document.body.dataset.state === "ready" && document.getElementById("key").textContent === %q`, ta.Top[1].ShortKey))
}

// embedView: the embed view with a share token, no stats token: the chart
// and its totals, nothing else.
func (d *dashboard) embedView(t *testing.T, p *browser.Page, vp string) {
	p.Eval(`sessionStorage.clear()`, nil)
	p.Navigate(d.gw.url("/stats/go?format=embed&share=" + d.share))
	ready(t, p, "the embed view")
	var shown struct {
		Embed         bool
		Top, Dims, Up bool
		Humans        string
		API           string
	}
	p.Eval(`({embed: document.body.classList.contains("embed"), top: getComputedStyle(document.getElementById("top-section")).display !== "none",
		dims: getComputedStyle(document.getElementById("dims-section")).display !== "none", up: !document.getElementById("up").hidden,
		humans: document.getElementById("range_total").textContent, api: document.body.dataset.api})`, &shown)
	resp, b := testkit.Do(t, "GET", d.gw.url("/stats/go"+shown.API), nil)
	var a apiAnswer
	if resp.StatusCode != 200 || json.Unmarshal([]byte(b), &a) != nil {
		t.Fatalf("the embed view's request with the share token: %d %s", resp.StatusCode, b)
	}
	if !shown.Embed || shown.Top || shown.Dims || shown.Up || shown.Humans != grouped(a.RangeTotal) || !strings.Contains(shown.API, "share=") {
		t.Errorf("embed view: %+v; want only the chart and totals (%d humans), read with the share token", shown, a.RangeTotal)
	}
	d.screenshot(t, p, "embed-"+vp)
}
