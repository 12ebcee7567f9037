package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/pebblestore"
	"github.com/linkgate/linkgate/internal/browser"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/visitor"
	"github.com/linkgate/linkgate/visitor/visitortest"
)

// dstZones are zones whose clocks change at 02:00 or 03:00 local time, so
// that every local midnight exists; between them a change happened in the
// last four and a half months whatever the date.
var dstZones = []string{"America/New_York", "Europe/Berlin", "Australia/Sydney", "Pacific/Auckland"}

// recentDSTZone returns the zone of dstZones whose last clock change before
// now is the most recent, and when it was.
func recentDSTZone(t *testing.T, now time.Time) (*time.Location, time.Time) {
	var best *time.Location
	var when time.Time
	for _, name := range dstZones {
		loc, err := time.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		for at := now; at.After(now.AddDate(-1, 0, 0)); {
			start, _ := at.In(loc).ZoneBounds()
			if start.IsZero() {
				break
			}
			if start.Before(now) && start.After(when) && start.After(now.AddDate(-1, 0, 0)) {
				best, when = loc, start
				break
			}
			at = start.Add(-time.Second)
		}
	}
	if best == nil {
		t.Fatal("no zone of dstZones changed its clocks in the last year")
	}
	return best, when
}

// seedVisits writes a year of visits to several links into the embedded
// store at path, through the real recorder and flusher, with referrers,
// countries, devices, browsers, systems, bots and visitors: what a gateway
// would have counted.
func seedVisits(t *testing.T, path string, now time.Time) {
	t.Helper()
	st, err := pebblestore.Open(path, analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := analytics.NewRecorder(1000, nil)
	rec.SetMaxValues(100)
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{
		Now: func() time.Time { return now }, JournalPath: filepath.Join(t.TempDir(), "journal")}, nil, nil)
	r := rand.New(rand.NewPCG(22, 1))
	links := []struct {
		key  string
		rate float64 // human visits an hour on average
	}{{"go", 4}, {"gh", 2}, {"docs", 1}, {"blog", 0.5}, {"x.y", 0.25}}
	referrers := []string{"news.example", "direct", "t.co", "google.com", "lobste.rs", "mail.example"}
	countries := []string{"DE", "FR", "US", "JP", "BR", "unknown"}
	devices := []string{"desktop", "mobile", "mobile", "tablet"}
	browsers := []string{"Chrome", "Firefox", "Safari", "Edge"}
	systems := []string{"Windows", "macOS", "iOS", "Android", "Linux"}
	pick := func(vs []string) string { return vs[r.IntN(len(vs))] }
	visit := func(key string, at time.Time, bot bool) {
		var f visitor.Features
		f[visitor.Referrer] = pick(referrers)
		f[visitor.Source] = f[visitor.Referrer]
		f[visitor.Country] = pick(countries)
		if bot {
			f[visitor.Device], f[visitor.Browser], f[visitor.OS] = "bot", "other", "other"
			rec.RecordVisit(key, at, true, &f, 0)
			return
		}
		f[visitor.Device], f[visitor.Browser], f[visitor.OS] = pick(devices), pick(browsers), pick(systems)
		rec.RecordVisit(key, at, false, &f, 1+uint64(r.IntN(400))*0x9E3779B97F4A7C15)
	}
	start := now.Add(-400 * 24 * time.Hour).Truncate(time.Hour)
	for h := start; h.Before(now.Add(-time.Minute)); h = h.Add(time.Hour) {
		// A flush every ten days, as the recorder caps the values of a
		// dimension per link and interval (100), whatever their days.
		if h.Sub(start)%(10*24*time.Hour) == 0 && h != start {
			if err := f.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		// Busier in the afternoon, on weekdays, and more and more lately.
		daily := 0.6 + 0.4*math.Sin(float64(h.Hour()-9)/24*2*math.Pi)
		if wd := h.Weekday(); wd == time.Saturday || wd == time.Sunday {
			daily *= 0.6
		}
		growth := 0.2 + 0.8*float64(h.Sub(start))/float64(now.Sub(start))
		for _, l := range links {
			n := int(l.rate*daily*growth + r.Float64())
			for range n {
				at := h.Add(time.Duration(r.IntN(3600)) * time.Second)
				if at.After(now.Add(-time.Minute)) {
					continue
				}
				visit(l.key, at, false)
				if r.IntN(6) == 0 {
					visit(l.key, at, true)
				}
			}
		}
	}
	// Every link visited within the last day, whatever the day: the
	// rarest one's hours may all draw no visit on a weekend, and the
	// all-links page's top list is checked to hold every link.
	for _, l := range links {
		visit(l.key, now.Add(-2*time.Hour), false)
	}
	if err := f.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}

// dashboard is a seeded gateway and what the test asks of it.
type dashboard struct {
	t     *testing.T
	gw    *running
	zone  *time.Location
	dst   time.Time // the zone's last clock change
	token string
	share string
	shots string // where screenshots go ("": none)
}

// api GETs path (a page's API request, relative to the page's path) with
// the stats token and returns the body. It fails t, the (sub)test whose
// goroutine calls it: a failure of the parent's t there would end the
// goroutine without ending the subtest.
func (d *dashboard) api(t *testing.T, page, query string) []byte {
	t.Helper()
	resp, b := testkit.Do(t, "GET", d.gw.url(page+query), nil, "Authorization", "Bearer "+d.token)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s%s: %d %s", page, query, resp.StatusCode, b)
	}
	return []byte(b)
}

// apiAnswer is the part of a /stats answer the page shows.
type apiAnswer struct {
	Partial       bool       `json:"partial"`
	ShortKey      string     `json:"short_key"`
	Total         int64      `json:"total"`
	BotTotal      int64      `json:"bot_total"`
	RangeTotal    int64      `json:"range_total"`
	BotRangeTotal int64      `json:"bot_range_total"`
	From, To      int64      `json:"-"`
	FromJ         int64      `json:"from"`
	ToJ           int64      `json:"to"`
	Step          int64      `json:"step"`
	TZ            string     `json:"tz"`
	Points        [][]*int64 `json:"points"`
	Uniques       *struct{ Count int64 }
	Breakdown     map[string][]struct {
		Value string
		Count int64
	}
	Compare *struct {
		RangeTotal int64 `json:"range_total"`
		Uniques    *struct{ Count int64 }
	}
	Top []struct {
		ShortKey     string  `json:"short_key"`
		RangeTotal   int64   `json:"range_total"`
		CompareTotal *int64  `json:"compare_range_total"`
		Points       [][]any `json:"points"`
	}
}

func (d *dashboard) answer(t *testing.T, page, query string) apiAnswer {
	t.Helper()
	var a apiAnswer
	if err := json.Unmarshal(d.api(t, page, query), &a); err != nil {
		t.Fatalf("%s%s: %v", page, query, err)
	}
	a.From, a.To = a.FromJ, a.ToJ
	return a
}

// grouped writes n as the page does (en-US): 12,345.
func grouped(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// TestDashboard drives the chart pages in headless Chromium at a desktop's
// 1280 × 800 and a phone's 390 × 844 against a gateway whose store holds a
// year of visits to several links, from several referrers, countries and
// devices, bots among them, in a browser set to a zone whose clocks changed
// recently, and checks what a person would: tick labels on round times of
// the zone (across its DST change), integer counts, the lit range button
// kept in the URL, totals, changes and breakdown rows equal to the API's,
// the dashed incomplete bucket, readable labels on the phone with no
// scaling, a tap's readout and the keyboard's, the table of the series, a
// CSV download equal to the API's CSV, the time-zone picker, a custom
// range, the top links of the all-links page and their links, the embed
// view with a share token, and the live counter moving when visits arrive.
// With LINKGATE_SCREENSHOTS=dir it writes a PNG of each view at each width
// there (docs/dashboard, shown by docs/stats-api.md).
func TestDashboard(t *testing.T) {
	t.Parallel()
	b := browser.Shared(t)
	now := time.Now().UTC()
	zone, dst := recentDSTZone(t, now)
	dir := t.TempDir()
	db := filepath.Join(dir, "analytics")
	began := time.Now()
	seedVisits(t, db, now)
	t.Logf("seeded in %v", time.Since(began))

	setenv(t, "LG_DASH_TOKEN", "dash-s3cret")
	setenv(t, "LG_DASH_UNIQUES", "a-secret-of-32-bytes-for-uniques")
	setenv(t, "LG_DASH_SHARE", "a-share-key-of-32-bytes-long-too")
	geo := visitortest.CountryDB(t, visitortest.GeoLite2, map[string]string{"127.0.0.0/8": "DE"})
	up := tinyURL(t)
	cfg := withStats(analyticsConfig(up.URL, embeddedStore(db), "1s"),
		"  token_env: LG_DASH_TOKEN\n  share: {key_env: LG_DASH_SHARE}\n  embed: {frame_ancestors: [\"'self'\"]}\n") +
		"  geoip: {path: " + geo + "}\n  uniques: {secret_env: LG_DASH_UNIQUES}\n"
	// A year of visits read with the race detector: 20 s, stretched by
	// the machine's pace, before an answer is partial.
	cfg = strings.Replace(cfg, fmt.Sprintf("  read_timeout: %v\n", statsReadTimeout()), fmt.Sprintf("  read_timeout: %v\n", min(testkit.Slack(20*time.Second), time.Minute)), 1)
	gw := start(t, cfg)
	plan, err := gatewayPlan(gw.path)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := plan.MakeShare("", "go", false, 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	d := &dashboard{t: t, gw: gw, zone: zone, dst: dst, token: "dash-s3cret", share: sh.Token, shots: os.Getenv("LINKGATE_SCREENSHOTS")}
	t.Logf("zone %s, its clocks changed at %v", zone, dst)
	// Until the rollup worker has rolled the seeded year, an all-time
	// total sums a year of minutes: on a loaded machine longer than the
	// read timeout, and the pages would show partial answers ("≥").
	// The pages are opened once the API answers them whole.
	testkit.Eventually(t, 2*time.Minute, "the API answering the pages whole (the seeded year rolled)", func() bool {
		return !d.answer(t, "/stats/go", "?last=24h&compare=previous").Partial && !d.answer(t, "/stats", "?last=24h").Partial
	})

	viewports := []struct {
		name          string
		width, height int
		mobile        bool
	}{{"desktop", 1280, 800, false}, {"phone", 390, 844, true}}
	pages := make([]*browser.Page, len(viewports))
	// The two widths at once: they only read.
	t.Run("views", func(t *testing.T) {
		for i, vp := range viewports {
			t.Run(vp.name, func(t *testing.T) {
				t.Parallel()
				dl := t.TempDir()
				p := b.NewPage(d.t, browser.Options{Width: vp.width, Height: vp.height, Mobile: vp.mobile, TimeZone: zone.String(), DownloadDir: dl})
				pages[i] = p
				d.linkPage(t, p, vp.name, vp.mobile, dl)
				d.allLinksPage(t, p, vp.name)
				d.embedView(t, p, vp.name)
			})
		}
	})
	// Then visits arrive, one width after the other.
	for i, vp := range viewports {
		t.Run("live/"+vp.name, func(t *testing.T) {
			if pages[i] == nil {
				t.Skip("the page did not open")
			}
			d.live(t, pages[i], vp.name)
			if errs := pages[i].Errors(); len(errs) > 0 {
				t.Errorf("page errors (a CSP violation is one): %q", errs)
			}
		})
	}
}
