package stats_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/stats"
	"github.com/linkgate/linkgate/visitclass"

	"github.com/google/go-cmp/cmp"
	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files under testdata/")

// statsNow is the clock of the stats tests: a Monday morning.
var statsNow = time.Date(2026, 11, 23, 10, 17, 42, 0, time.UTC)

// statsRange is one Points call the handler made.
type statsRange struct {
	Key      string
	Step     time.Duration
	From, To time.Time
}

// statsReader is an in-memory stats.Reader for the handler's unit
// tests. Its buckets follow a fixed pattern with gaps, so zero-filling shows.
type statsReader struct {
	err    error
	totals map[string]analytics.Visits
	quiet  bool // keep no calls: for benchmarks

	mu    sync.Mutex
	calls []statsRange
}

// statsVisits is the stored count of the bucket starting at t: nothing in
// every fifth bucket, so the handler has to fill zeros.
func statsVisits(key string, step time.Duration, t time.Time) analytics.Visits {
	if key != "abc" && key != analytics.AllLinks {
		return analytics.Visits{}
	}
	n := t.Unix() / int64(step/time.Second)
	if n%5 == 0 {
		return analytics.Visits{}
	}
	v := analytics.Visits{Human: n%7 + 1, Bot: n % 3}
	if n%3 == 2 { // a scanner's visit beside a declared bot's
		v.Other[visitclass.Scanner-visitclass.Preview] = 1
	}
	if key == analytics.AllLinks {
		v.Human *= 10
	}
	return v
}

func (s *statsReader) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]analytics.Point, error) {
	if !s.quiet {
		s.mu.Lock()
		s.calls = append(s.calls, statsRange{key, step, from, to})
		s.mu.Unlock()
	}
	if s.err != nil {
		return nil, s.err
	}
	var out []analytics.Point
	for t := rollup.Align(from, step); t.Before(to); t = t.Add(step) {
		if t.Before(from) {
			continue
		}
		if v := statsVisits(key, step, t); v != (analytics.Visits{}) {
			out = append(out, analytics.Point{Start: t, Visits: v})
		}
	}
	return out, nil
}

func (s *statsReader) Total(ctx context.Context, key string) (analytics.Visits, error) {
	if s.err != nil {
		return analytics.Visits{}, s.err
	}
	return s.totals[key], nil
}

func newStatsReader() *statsReader {
	return &statsReader{totals: map[string]analytics.Visits{
		"abc":              {Human: 123456, Bot: 789, Other: [rollup.NumOther]int64{100, 50, 20, 9}},
		analytics.AllLinks: {Human: 9876543, Bot: 4321},
	}}
}

// smallTiers make a stitched curve short enough for a golden file.
var smallTiers = []rollup.Tier{
	{Step: time.Minute, Retention: 2 * time.Hour}, {Step: time.Hour, Retention: rollup.Day},
	{Step: rollup.Day, Retention: rollup.Week}, {Step: rollup.Week, Retention: rollup.Year},
}

func statsGet(t testing.TB, h http.Handler, target string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestStatsGolden(t *testing.T) {
	for _, tc := range []struct {
		file, target, accept, ctype string
		tiers                       []rollup.Tier
	}{
		{"link_90m.json", "/abc?last=90m", "", "application/json", nil},
		{"link_3d_1h.csv", "/abc?last=3d&step=1h&format=csv", "", "text/csv; charset=utf-8", nil},
		{"link_2w_accept.csv", "/abc?last=2w&step=1d", "text/csv", "text/csv; charset=utf-8", nil},
		{"all_from_to.json", "/?from=2026-11-01T00:00:00Z&to=1793664000", "application/json", "application/json", nil},
		{"all_stitched.json", "/?last=3d&stitch=true", "", "application/json", smallTiers},
		{"all_stitched.csv", "http://gw?last=3d&stitch=true&format=csv", "", "text/csv; charset=utf-8", smallTiers},
		{"unknown_6h_5m.json", "/nope?last=6h&step=5m", "", "application/json", nil},
	} {
		t.Run(tc.file, func(t *testing.T) {
			tiers := tc.tiers
			if tiers == nil {
				tiers = rollup.DefaultTiers()
			}
			h := stats.New(newStatsReader(), tiers, stats.Options{Now: func() time.Time { return statsNow }})
			w := statsGet(t, h, tc.target, "Accept", tc.accept)
			if w.Code != http.StatusOK || w.Header().Get("Content-Type") != tc.ctype {
				t.Fatalf("GET %s: %d %q %s; want 200 %q", tc.target, w.Code, w.Header().Get("Content-Type"), w.Body, tc.ctype)
			}
			path := filepath.Join("testdata", tc.file)
			if *updateGolden {
				if err := os.WriteFile(path, w.Body.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if d := cmp.Diff(string(want), w.Body.String()); d != "" {
				t.Errorf("GET %s differs from %s (-want +got):\n%s", tc.target, path, d)
			}
		})
	}
}

// statsAnswer is the JSON answer, decoded for checks.
type statsAnswer struct {
	ShortKey      *string   `json:"short_key"`
	Known         *bool     `json:"known"`
	Partial       bool      `json:"partial"`
	PartialReason string    `json:"partial_reason"`
	Total         int64     `json:"total"`
	BotTotal      int64     `json:"bot_total"`
	RangeTotal    int64     `json:"range_total"`
	BotRangeTotal int64     `json:"bot_range_total"`
	From          int64     `json:"from"`
	To            int64     `json:"to"`
	Step          int64     `json:"step"`
	ExpiredBefore *int64    `json:"expired_before"`
	Points        [][]int64 `json:"points"` // a null count decodes as 0: see nulls
	Classes       map[string]struct {
		Total      int64 `json:"total"`
		RangeTotal int64 `json:"range_total"`
	} `json:"classes"`
	ClassPoints map[string][]*int64 `json:"class_points"`

	nulls []bool // per point: its counts are null
}

// checkClasses checks that the non-human classes of a add up to its bots:
// every class listed, their totals summing to bot_total and
// bot_range_total, and the curve of each class with visits a count per
// point, null where the point is, summing to the point's bots.
func checkClasses(t *testing.T, a *statsAnswer) {
	t.Helper()
	var total, rangeTotal int64
	for _, name := range []string{"bot", "preview", "scanner", "prefetch", "internal"} {
		c, ok := a.Classes[name]
		if !ok {
			t.Fatalf("classes %v: no %s", a.Classes, name)
		}
		total += c.Total
		rangeTotal += c.RangeTotal
		if pts, ok := a.ClassPoints[name]; ok != (c.RangeTotal != 0) {
			t.Errorf("class %s: range_total %d, curve given %v", name, c.RangeTotal, ok)
		} else if ok && len(pts) != len(a.Points) {
			t.Fatalf("class %s: %d points, the curve has %d", name, len(pts), len(a.Points))
		}
	}
	if len(a.Classes) != 5 || total != a.BotTotal || rangeTotal != a.BotRangeTotal {
		t.Errorf("classes %v sum to %d, %d; bot totals %d, %d", a.Classes, total, rangeTotal, a.BotTotal, a.BotRangeTotal)
	}
	for i, p := range a.Points {
		var sum int64
		for name, pts := range a.ClassPoints {
			if (pts[i] == nil) != a.nulls[i] {
				t.Fatalf("class %s, point %d: null %v, the point's %v", name, i, pts[i] == nil, a.nulls[i])
			}
			if pts[i] != nil {
				sum += *pts[i]
			}
		}
		if sum != p[2] {
			t.Errorf("point %d: classes sum to %d, bots %d", i, sum, p[2])
		}
	}
}

func decodeStats(t *testing.T, w *httptest.ResponseRecorder) statsAnswer {
	t.Helper()
	var a statsAnswer
	raw := w.Body.Bytes()
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		t.Fatalf("decode %d answer: %v", w.Code, err)
	}
	// Decode the points again to tell null from 0.
	var ptrs struct{ Points [][]*int64 }
	if err := json.Unmarshal(raw, &ptrs); err != nil {
		t.Fatal(err)
	}
	a.nulls = make([]bool, len(ptrs.Points))
	for i, p := range ptrs.Points {
		if len(p) < 3 || p[0] == nil || (p[1] == nil) != (p[2] == nil) || len(p) == 4 && p[3] == nil {
			t.Fatalf("point %d = %v: want a start, two counts both null or both numbers (and a step)", i, p)
		}
		a.nulls[i] = p[1] == nil
	}
	checkClasses(t, &a)
	return a
}

// numNull returns how many points of a are null.
func (a statsAnswer) numNull() int {
	n := 0
	for _, null := range a.nulls {
		if null {
			n++
		}
	}
	return n
}

// TestStatsCurve checks every answer against the fake store directly: all
// buckets present and contiguous, each point the stored count or zero,
// range totals the sum of the points, one Reader range per segment.
func TestStatsCurve(t *testing.T) {
	tiers := rollup.DefaultTiers()
	for _, tc := range []struct {
		target    string
		key       string
		step      time.Duration // 0: stitched
		maxRanges int
	}{
		{"/abc?last=6h", "abc", time.Minute, 1},
		{"/abc?last=2d", "abc", 5 * time.Minute, 1},
		{"/abc?last=2w", "abc", time.Hour, 1},
		{"/abc?last=2mo", "abc", rollup.Day, 1},
		{"/abc?last=1y", "abc", rollup.Day, 1},
		{"/abc?last=3y", "abc", rollup.Week, 1},
		{"/?last=1y&stitch=1", analytics.AllLinks, 0, len(tiers)},
		{"/abc?last=5y&stitch=true", "abc", 0, len(tiers)},
		{"/abc?last=1d&step=1w", "abc", rollup.Week, 1},
	} {
		t.Run(tc.target, func(t *testing.T) {
			r := newStatsReader()
			h := stats.New(r, tiers, stats.Options{Now: func() time.Time { return statsNow }})
			w := statsGet(t, h, tc.target)
			if w.Code != http.StatusOK {
				t.Fatalf("GET %s: %d %s", tc.target, w.Code, w.Body)
			}
			a := decodeStats(t, w)
			if a.Partial || a.ExpiredBefore != nil || a.numNull() != 0 || a.Known == nil || !*a.Known {
				t.Errorf("partial %v, expired_before %v, %d null points, known %v; want a whole answer of a known key", a.Partial, a.ExpiredBefore, a.numNull(), a.Known)
			}
			if want := r.totals[tc.key]; a.Total != want.Human || a.BotTotal != want.Bot {
				t.Errorf("totals %d, %d; want %v", a.Total, a.BotTotal, want)
			}
			if a.Step != int64(tc.step/time.Second) || a.To != statsNow.Unix() {
				t.Errorf("step %d, to %d; want %d, %d", a.Step, a.To, int64(tc.step/time.Second), statsNow.Unix())
			}
			var human, bot int64
			for i, p := range a.Points {
				step := a.Step
				if tc.step == 0 {
					if len(p) != 4 {
						t.Fatalf("stitched point %d = %v, want 4 numbers", i, p)
					}
					step = p[3]
				} else if len(p) != 3 {
					t.Fatalf("point %d = %v, want 3 numbers", i, p)
				}
				start := time.Unix(p[0], 0).UTC()
				d := time.Duration(step) * time.Second
				if !rollup.Align(start, d).Equal(start) {
					t.Fatalf("point %d at %v is not aligned to %v", i, start, d)
				}
				if i == 0 && p[0] != a.From || i > 0 && p[0] != a.Points[i-1][0]+prevStep(a, i) {
					t.Fatalf("point %d at %v does not follow the one before (from %d)", i, start, a.From)
				}
				if want := statsVisits(tc.key, d, start); p[1] != want.Human || p[2] != want.Bot {
					t.Fatalf("point %d at %v = %v, stored %v", i, start, p, want)
				}
				human += p[1]
				bot += p[2]
			}
			last := a.Points[len(a.Points)-1]
			if end := last[0] + prevStep(a, len(a.Points)); last[0] >= a.To || end < a.To {
				t.Errorf("last point [%d, %d) does not hold to %d", last[0], end, a.To)
			}
			if human != a.RangeTotal || bot != a.BotRangeTotal {
				t.Errorf("range totals %d, %d; points sum to %d, %d", a.RangeTotal, a.BotRangeTotal, human, bot)
			}
			if n := len(r.calls); n == 0 || n > tc.maxRanges {
				t.Errorf("%d Reader ranges %v, want 1 to %d", n, r.calls, tc.maxRanges)
			}
			for _, c := range r.calls {
				if !rollup.Align(c.From, c.Step).Equal(c.From) || c.Key != tc.key {
					t.Errorf("Reader range %+v: want key %q and a bucket-aligned start", c, tc.key)
				}
			}
			if tc.step != 0 && len(a.Points) > rollup.MaxPoints+1 {
				t.Errorf("%d points, more than about %d", len(a.Points), rollup.MaxPoints)
			}
		})
	}
}

// prevStep is the step of point i-1 in seconds.
func prevStep(a statsAnswer, i int) int64 {
	if a.Step != 0 {
		return a.Step
	}
	return a.Points[i-1][3]
}

// problemBody is an RFC 9457 answer.
type problemBody struct {
	Type, Title, Detail string
	Status              int
	InvalidParams       []struct{ Name, Reason string } `json:"invalid-params"`
}

func decodeProblem(t *testing.T, w *httptest.ResponseRecorder) problemBody {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("%d answer has Content-Type %q, want application/problem+json: %s", w.Code, ct, w.Body)
	}
	var p problemBody
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil || p.Status != w.Code {
		t.Fatalf("problem body %s: %v", w.Body, err)
	}
	return p
}

func TestStatsBadRequests(t *testing.T) {
	h := stats.New(newStatsReader(), rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return statsNow }})
	for _, tc := range []struct {
		target, param, detail string
	}{
		{"/abc?last=3x", "last", "3x"},
		{"/abc?last=6h&from=1", "last", "combined"},
		{"/abc?from=tomorrow", "from", "RFC 3339"},
		{"/abc?from=1763856000&to=1763856000", "from", "not before"},
		{"/abc?step=2m", "step", "valid steps are 1m, 5m, 1h, 1d, 1w"},
		{"/abc?step=1m&last=1y", "step", "more than 50000"},
		{"/abc?stitch=yes", "stitch", "yes"},
		{"/abc?format=xml", "format", "xml"},
	} {
		w := statsGet(t, h, tc.target)
		if w.Code != http.StatusBadRequest {
			t.Errorf("GET %s: %d %s, want 400", tc.target, w.Code, w.Body)
			continue
		}
		p := decodeProblem(t, w)
		if len(p.InvalidParams) != 1 || p.InvalidParams[0].Name != tc.param || !strings.Contains(p.Detail, tc.detail) {
			t.Errorf("GET %s: problem %+v; want it to name %q and say %q", tc.target, p, tc.param, tc.detail)
		}
	}
	if w := statsGet(t, h, "/a/b"); w.Code != http.StatusNotFound {
		t.Errorf("GET /a/b: %d, want 404", w.Code)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/abc", nil))
	if decodeProblem(t, w); w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %d, Allow %q", w.Code, w.Header().Get("Allow"))
	}
}

// TestStatsUnknownKey: a key never counted answers zeros, not nulls (the
// store was read: it has nothing), and says "known": false, in JSON and in
// CSV's header; a counted key says true.
func TestStatsUnknownKey(t *testing.T) {
	r := newStatsReader()
	h := stats.New(r, rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return statsNow }})
	w := statsGet(t, h, "/never-seen?last=6h")
	if w.Code != http.StatusOK {
		t.Fatalf("unknown key: %d %s", w.Code, w.Body)
	}
	a := decodeStats(t, w)
	if a.Total != 0 || a.RangeTotal != 0 || len(a.Points) != 361 || a.ShortKey == nil || *a.ShortKey != "never-seen" {
		t.Errorf("unknown key: %+v (%d points); want zeros in 361 points", a, len(a.Points))
	}
	if a.Known == nil || *a.Known || a.Partial || a.numNull() != 0 {
		t.Errorf("unknown key: known %v, partial %v, %d null points; want known false, a whole answer of zeros", a.Known, a.Partial, a.numNull())
	}
	if r.calls[0].Key != "never-seen" {
		t.Errorf("read key %q", r.calls[0].Key)
	}
	for _, tc := range []struct{ target, known string }{
		{"/never-seen?last=6h&format=csv", "false"},
		{"/abc?last=6h&format=csv", "true"},
		{"/?last=6h&format=csv", "true"},
	} {
		if got := statsGet(t, h, tc.target).Header().Get("Linkgate-Known"); got != tc.known {
			t.Errorf("GET %s: Linkgate-Known %q, want %q", tc.target, got, tc.known)
		}
	}
	// A key with visits before the range only is known: its total says so.
	r.totals["old"] = analytics.Visits{Bot: 1}
	if a := decodeStats(t, statsGet(t, h, "/old?last=1h")); a.Known == nil || !*a.Known || a.RangeTotal != 0 {
		t.Errorf("a key with one bot visit long ago: known %v, range_total %d; want true, 0", a.Known, a.RangeTotal)
	}
	a = decodeStats(t, statsGet(t, h, `/a%22b%3C%5C?last=1h`))
	if a.ShortKey == nil || *a.ShortKey != `a"b<\` {
		t.Errorf("short_key %v, want a\"b<\\", a.ShortKey)
	}
	if w := statsGet(t, h, "/%2F"); w.Code != http.StatusNotFound {
		t.Errorf("GET /%%2F (the AllLinks key as a short key): %d, want 404", w.Code)
	}
	for _, target := range []string{"/", "", "/?last=1h"} {
		r.calls = nil
		a := decodeStats(t, statsGet(t, h, "http://gw"+target))
		if r.calls[0].Key != analytics.AllLinks || a.ShortKey == nil || *a.ShortKey != "" {
			t.Errorf("GET %q read key %q, answered short_key %v; want AllLinks and \"\"", target, r.calls[0].Key, a.ShortKey)
		}
	}
}

// TestStatsReaderErrorIsPartial: a Reader that fails with nothing of its
// own to offer (a rollup.Reader's, on a store that is down) gets a 200 whose
// points are all null, not zeros, flagged partial in JSON and in a header,
// with "known" undecided; the store's error stays in the log.
func TestStatsReaderErrorIsPartial(t *testing.T) {
	r := newStatsReader()
	r.err = errors.New("store down")
	h := stats.New(r, rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return statsNow }})
	w := statsGet(t, h, "/abc?last=1h")
	if w.Code != http.StatusOK {
		t.Fatalf("reader error: %d %s, want 200", w.Code, w.Body)
	}
	a := decodeStats(t, w)
	if !a.Partial || a.PartialReason != "store unreachable" || w.Header().Get("Linkgate-Partial") != "store unreachable" {
		t.Errorf("partial %v %q, header %q; want a partial answer saying store unreachable", a.Partial, a.PartialReason, w.Header().Get("Linkgate-Partial"))
	}
	if a.numNull() != len(a.Points) || len(a.Points) != 61 || a.Known != nil || a.Total != 0 || a.RangeTotal != 0 {
		t.Errorf("%d of %d points null, known %v, totals %d, %d; want all 61 null, known null, zero totals", a.numNull(), len(a.Points), a.Known, a.Total, a.RangeTotal)
	}
	if strings.Contains(w.Body.String(), "store down") {
		t.Errorf("the answer leaks the store's error: %s", w.Body)
	}
	w = statsGet(t, h, "/abc?last=3m&format=csv")
	if w.Code != http.StatusOK || w.Header().Get("Linkgate-Partial") != "store unreachable" || w.Header().Get("Linkgate-Known") != "unknown" {
		t.Fatalf("CSV: %d, Linkgate-Partial %q, Linkgate-Known %q", w.Code, w.Header().Get("Linkgate-Partial"), w.Header().Get("Linkgate-Known"))
	}
	want := "unix_seconds,count,bot_count,class_bot,class_preview,class_scanner,class_prefetch,class_internal\n1795428840,,,,,,,\n1795428900,,,,,,,\n1795428960,,,,,,,\n1795429020,,,,,,,\n"
	if got := w.Body.String(); got != want {
		t.Errorf("CSV body %q, want %q", got, want)
	}
}

func TestStatsToken(t *testing.T) {
	h := stats.New(newStatsReader(), rollup.DefaultTiers(), stats.Options{Token: "s3cret", Now: func() time.Time { return statsNow }})
	for _, tc := range []struct {
		auth string
		code int
	}{
		{"", http.StatusUnauthorized},
		{"Bearer wrong", http.StatusUnauthorized},
		{"Bearer s3cre", http.StatusUnauthorized},
		{"Bearer s3cret2", http.StatusUnauthorized},
		{"Basic s3cret", http.StatusUnauthorized},
		{"s3cret", http.StatusUnauthorized},
		{"Bearer s3cret", http.StatusOK},
		{"bearer s3cret", http.StatusOK},
	} {
		w := statsGet(t, h, "/abc", "Authorization", tc.auth)
		if w.Code != tc.code {
			t.Errorf("Authorization %q: %d, want %d", tc.auth, w.Code, tc.code)
		}
		if tc.code == http.StatusUnauthorized {
			decodeProblem(t, w)
			if !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer ") {
				t.Errorf("Authorization %q: WWW-Authenticate %q", tc.auth, w.Header().Get("WWW-Authenticate"))
			}
		}
	}
	// The chart page holds no data: it is served without the token and
	// asks for it when the JSON answer is 401.
	w := statsGet(t, h, "/abc?format=html")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "<svg") {
		t.Errorf("chart page with a token set: %d", w.Code)
	}
}

func TestStatsChartPage(t *testing.T) {
	h := stats.New(newStatsReader(), rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return statsNow }})
	browser := "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
	for _, hdr := range [][]string{{"Accept", browser}, {}} {
		target := "/abc?last=3d"
		if len(hdr) == 0 {
			target += "&format=html"
		}
		w := statsGet(t, h, target, hdr...)
		body := w.Body.String()
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != "text/html; charset=utf-8" || !strings.Contains(body, "<script>") {
			t.Fatalf("GET %s %v: %d %q", target, hdr, w.Code, w.Header().Get("Content-Type"))
		}
		csp := w.Header().Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'sha256-") || !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("CSP %q", csp)
		}
		for _, banned := range []string{"http://", "https://", "cdn"} {
			if i := strings.Index(body, banned); i >= 0 && !strings.Contains(body[i:i+40], "www.w3.org/2000/svg") {
				t.Errorf("chart page refers to %q: %s", banned, body[i:i+40])
			}
		}
	}
	if vary := statsGet(t, h, "/abc").Header().Values("Vary"); len(vary) != 1 || vary[0] != "Accept, Accept-Encoding" {
		t.Errorf("Vary %q, want one header naming Accept and Accept-Encoding", vary)
	}
}

// TestEmbedFrameAncestors: no page may frame the chart page; the embed view
// may be framed by the configured sources only, and by none without them.
func TestEmbedFrameAncestors(t *testing.T) {
	now := func() time.Time { return statsNow }
	open := stats.New(newStatsReader(), rollup.DefaultTiers(), stats.Options{Now: now})
	framed := stats.New(newStatsReader(), rollup.DefaultTiers(), stats.Options{Now: now,
		FrameAncestors: []string{"https://blog.example", "https://*.example.com"}})
	for _, c := range []struct {
		h      *stats.API
		target string
		want   string
	}{
		{open, "/abc?format=html", "frame-ancestors 'none'"},
		{open, "/abc?format=embed", "frame-ancestors 'none'"},
		{framed, "/abc?format=html", "frame-ancestors 'none'"},
		{framed, "/abc?format=embed&last=7d", "frame-ancestors https://blog.example https://*.example.com"},
	} {
		w := statsGet(t, c.h, c.target)
		if csp := w.Header().Get("Content-Security-Policy"); w.Code != 200 || !strings.HasSuffix(csp, c.want) {
			t.Errorf("GET %s: %d, CSP %q; want it to end with %q", c.target, w.Code, csp, c.want)
		}
	}
	for _, bad := range []string{"https://a.example; script-src *", "'none'", "https://a.example b.example", "**", "'unsafe-inline'", "https://a.example,b"} {
		cfg := stats.DefaultConfig()
		cfg.Embed.FrameAncestors = []string{"https://ok.example", bad}
		if err := stats.Compile(cfg); err == nil || !strings.Contains(err.Error(), "stats.embed.frame_ancestors[1]") {
			t.Errorf("frame_ancestors %q: %v, want an error naming stats.embed.frame_ancestors[1]", bad, err)
		}
	}
	for _, good := range []string{"*", "'self'", "https:", "https://blog.example:8443", "http://localhost:3000", "https://*.example.com/embed/"} {
		cfg := stats.DefaultConfig()
		cfg.Embed.FrameAncestors = []string{good}
		if err := stats.Compile(cfg); err != nil {
			t.Errorf("frame_ancestors %q: %v", good, err)
		}
	}
}

func BenchmarkStatsYear(b *testing.B) {
	for _, target := range []string{"/abc?last=1y", "/abc?last=1y&stitch=true", "/abc?last=1y&format=csv"} {
		b.Run(target, func(b *testing.B) {
			r := newStatsReader()
			r.quiet = true
			h := stats.New(r, rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return statsNow }})
			req := httptest.NewRequest(http.MethodGet, target, nil)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatal(w.Code)
				}
			}
		})
	}
}

// statsFixedReader returns the same points for every range, as a store that
// keeps one row per writer might: unaligned, repeated, some out of range.
type statsFixedReader []analytics.Point

func (r statsFixedReader) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]analytics.Point, error) {
	return r, nil
}

func (r statsFixedReader) Total(ctx context.Context, key string) (analytics.Visits, error) {
	return analytics.Visits{}, nil
}

func TestStatsSumsPointsIntoBuckets(t *testing.T) {
	h0 := rollup.Align(statsNow, time.Hour) // 10:00
	r := statsFixedReader{
		{Start: h0.Add(-3 * time.Hour), Visits: analytics.Visits{Human: 100}}, // before the range
		{Start: h0, Visits: analytics.Visits{Human: 1}},
		{Start: h0.Add(17 * time.Minute), Visits: analytics.Visits{Human: 2, Bot: 1}}, // unaligned: the 10:15 bucket
		{Start: h0, Visits: analytics.Visits{Human: 4, Bot: 2}},                       // a second writer's row
		{Start: h0.Add(-time.Hour + 59*time.Minute), Visits: analytics.Visits{Bot: 8}},
		{Start: h0.Add(time.Hour), Visits: analytics.Visits{Human: 100}}, // after the range
	}
	h := stats.New(r, rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return statsNow }})
	a := decodeStats(t, statsGet(t, h, "/abc?last=90m&step=5m"))
	got := map[int64][]int64{}
	for _, p := range a.Points {
		if p[1] != 0 || p[2] != 0 {
			got[p[0]] = p[1:]
		}
	}
	want := map[int64][]int64{
		h0.Unix():                       {5, 2},
		h0.Add(15 * time.Minute).Unix(): {2, 1},
		h0.Add(-5 * time.Minute).Unix(): {0, 8},
	}
	if d := cmp.Diff(want, got); d != "" || a.RangeTotal != 7 || a.BotRangeTotal != 11 || len(a.Points) != 19 {
		t.Errorf("non-zero buckets (-want +got):\n%s\nrange totals %d, %d (want 7, 11), %d points (want 19)", d, a.RangeTotal, a.BotRangeTotal, len(a.Points))
	}
}

// TestStatsPartialLogThrottled: a burst of reads that fall back to the
// unsaved counts logs one line, not one per read.
func TestStatsPartialLogThrottled(t *testing.T) {
	r := newStatsReader()
	r.err = errors.New("store down")
	var logs bytes.Buffer
	h := stats.New(r, rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return statsNow }, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	for range 50 {
		if w := statsGet(t, h, "/abc?last=1h"); w.Code != http.StatusOK {
			t.Fatalf("reader error: %d", w.Code)
		}
	}
	if n := strings.Count(logs.String(), "answering from unsaved counts"); n < 1 || n > 2 {
		t.Errorf("%d lines for 50 partial reads within a second or two, want 1 (2 across a second's edge):\n%s", n, logs.String())
	}
}

// TestLastAll: last=all is everything the store keeps (the coarsest tier's
// retention, 5 years of weeks by default): no point of it expired; with
// from or to it is a 400 naming last.
func TestLastAll(t *testing.T) {
	h := stats.New(newStatsReader(), rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return statsNow }})
	w := statsGet(t, h, "/abc?last=all")
	var a struct {
		From, Step    int64
		ExpiredBefore *int64 `json:"expired_before"`
		Points        [][]*int64
	}
	if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil || w.Code != 200 {
		t.Fatalf("last=all: %d %s", w.Code, w.Body)
	}
	years := float64(statsNow.Unix()-a.From) / (365.25 * 86400)
	if a.Step != 604800 || a.ExpiredBefore != nil || years < 4.97 || years > 5.02 || a.Points[0][1] == nil {
		t.Errorf("last=all: from %d (%.2f years back), step %d, expired_before %v; want 5 years of weeks, none expired", a.From, years, a.Step, a.ExpiredBefore)
	}
	w = statsGet(t, h, "/abc?last=all&to=1795000000")
	if w.Code != 400 || !strings.Contains(w.Body.String(), `"name":"last"`) {
		t.Errorf("last=all&to: %d %s, want a 400 naming last", w.Code, w.Body)
	}
}

// TestPrefixIsACleanPath: stats.prefix is refused unless it is a clean
// absolute path that a request's path matches as written and as decoded
// alike: no "." or ".." segment, no "//" or trailing "/", nothing escaped
// with %, no pattern or query characters.
func TestPrefixIsACleanPath(t *testing.T) {
	for _, bad := range []string{"", "/", "stats", "/stats/", "/stats/../admin", "/../stats", "/./stats", "/stats/.", "//stats", "/a//b",
		"/st%61ts", "/stats%2F", "/{x}", "/stats*", "/stats?x", "/stats#x", "/stats x", "/stats\x00", "/stäts", "/stats;x"} {
		cfg := stats.DefaultConfig()
		cfg.Prefix = bad
		if err := stats.Compile(cfg); err == nil || !strings.HasPrefix(err.Error(), "stats.prefix:") {
			t.Errorf("prefix %q: %v, want an error naming stats.prefix", bad, err)
		}
	}
	for _, good := range []string{"/stats", "/s", "/_lg/stats", "/lg-stats.v1", "/a/b~c"} {
		cfg := stats.DefaultConfig()
		cfg.Prefix = good
		if err := stats.Compile(cfg); err != nil {
			t.Errorf("prefix %q: %v", good, err)
		}
	}
}
