package stats_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/stats"
	"github.com/linkgate/linkgate/visitclass"
)

// graphiteNow is the clock of the Graphite tests.
var graphiteNow = time.Date(2026, 11, 23, 10, 17, 42, 0, time.UTC)

// graphiteAPI returns the stats API over the real write path (recorder,
// flusher, in-memory store) holding visits of the last two hours: go the
// most, gh, a key with a dot, and bots.
func graphiteAPI(t *testing.T, token string) http.Handler {
	t.Helper()
	store := analyticstest.NewMemory(analyticstest.DefaultPlan)
	rec := analytics.NewRecorder(100, nil)
	f := analytics.NewFlusher(rec, store, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: func() time.Time { return graphiteNow }}, nil, nil)
	for i := range 120 {
		at := graphiteNow.Add(-time.Duration(i) * time.Minute)
		for range i % 4 {
			rec.Record("go", at, false)
		}
		if i%3 == 0 {
			rec.Record("gh", at, false)
			rec.Record("go", at, true)
		}
		if i%5 == 0 {
			rec.RecordTenantVisit("", "go", at, visitclass.Scanner, nil, 0)
		}
		if i == 30 {
			for range 9 {
				rec.Record("gh", at, false) // gh's highest minute is the highest of all
			}
			rec.Record("a.b", at, false)
		}
	}
	if err := f.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return stats.New(f.Reader(store), rollup.DefaultTiers(), stats.Options{Token: token, Now: func() time.Time { return graphiteNow }})
}

// graphiteSeries is graphite-web's documented render JSON: a list of
// {"target": name, "datapoints": [[value or null, unix seconds], ...]}.
type graphiteSeries struct {
	Target     string
	Datapoints [][2]*float64
}

// render asks /graphite/render and checks the answer has exactly the
// documented shape (no other keys, two-element datapoints of a number or
// null and an integer time, in time order at a fixed step).
func render(t *testing.T, h http.Handler, query string) []graphiteSeries {
	t.Helper()
	w := statsGet(t, h, "/graphite/render?"+query)
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("render %s: %d %s", query, w.Code, w.Body)
	}
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(w.Body.Bytes(), &raw); err != nil {
		t.Fatalf("render %s: not a JSON list: %v", query, err)
	}
	out := make([]graphiteSeries, len(raw))
	for i, m := range raw {
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range m {
				if !yield(k) {
					return
				}
			}
		})
		if !slices.Equal(keys, []string{"datapoints", "target"}) {
			t.Fatalf("render %s: series keys %v, want datapoints and target", query, keys)
		}
		if err := json.Unmarshal(m["target"], &out[i].Target); err != nil {
			t.Fatalf("render %s: target %s is not a string", query, m["target"])
		}
		var dps []json.RawMessage
		if err := json.Unmarshal(m["datapoints"], &dps); err != nil {
			t.Fatalf("render %s: datapoints %.100s is not a list", query, m["datapoints"])
		}
		var prev, step float64
		for j, dp := range dps {
			var pair []*float64
			if err := json.Unmarshal(dp, &pair); err != nil || len(pair) != 2 || pair[1] == nil || *pair[1] != float64(int64(*pair[1])) {
				t.Fatalf("render %s: datapoint %s is not [value or null, unix seconds]", query, dp)
			}
			if j == 1 {
				step = *pair[1] - prev
			}
			if j > 1 && *pair[1]-prev != step || j > 0 && step <= 0 {
				t.Fatalf("render %s: datapoint %d at %v after %v: not in order at one step", query, j, *pair[1], prev)
			}
			prev = *pair[1]
			out[i].Datapoints = append(out[i].Datapoints, [2]*float64{pair[0], pair[1]})
		}
	}
	return out
}

func names(ss []graphiteSeries) []string {
	var n []string
	for _, s := range ss {
		n = append(n, s.Target)
	}
	return n
}

func total(s graphiteSeries) float64 {
	var sum float64
	for _, dp := range s.Datapoints {
		if dp[0] != nil {
			sum += *dp[0]
		}
	}
	return sum
}

// TestGraphiteRender: render answers graphite-web's JSON for the series of
// a link, all links, wildcards and brace lists, with the stats API's counts
// point for point, and the functions Grafana users reach for first.
func TestGraphiteRender(t *testing.T) {
	h := graphiteAPI(t, "")
	from, until := graphiteNow.Add(-2*time.Hour).Unix(), graphiteNow.Unix()
	rng := fmt.Sprintf("from=%d&until=%d&format=json", from, until)

	// One link, point for point with /stats.
	got := render(t, h, "target=linkgate.links.go.humans&target=linkgate.links.go.bots&target=linkgate.links.go.visits&"+rng)
	if want := []string{"linkgate.links.go.humans", "linkgate.links.go.bots", "linkgate.links.go.visits"}; !slices.Equal(names(got), want) {
		t.Fatalf("targets %v, want %v", names(got), want)
	}
	w := statsGet(t, h, fmt.Sprintf("/go?from=%d&to=%d&format=json", from, until))
	var a struct {
		Step   int64
		Points [][]*int64
	}
	if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil || len(a.Points) != len(got[0].Datapoints) {
		t.Fatalf("/stats/go: %v, %d points; render has %d", err, len(a.Points), len(got[0].Datapoints))
	}
	for i, p := range a.Points {
		for j, s := range got {
			v := got[j].Datapoints[i]
			want := float64(*p[1]) // humans
			switch j {
			case 1:
				want = float64(*p[2])
			case 2:
				want = float64(*p[1] + *p[2])
			}
			if *v[1] != float64(*p[0]) || v[0] == nil || *v[0] != want {
				t.Fatalf("%s point %d: %v at %v, want %v at %d", s.Target, i, v[0], *v[1], want, *p[0])
			}
		}
	}
	// The classes split the bots point for point: 24 scanner visits, 40
	// declared bots'.
	cls := render(t, h, "target=linkgate.links.go.class_bot&target=linkgate.links.go.class_scanner&target=linkgate.links.go.class_preview&"+rng)
	if len(cls) != 3 || total(cls[0]) != 40 || total(cls[1]) != 24 || total(cls[2]) != 0 {
		t.Fatalf("classes %v, want 40 declared bots, 24 scanners, no preview", cls)
	}
	for i, v := range got[1].Datapoints {
		if sum := *cls[0].Datapoints[i][0] + *cls[1].Datapoints[i][0]; sum != *v[0] {
			t.Fatalf("point %d: classes sum to %v, bots %v", i, sum, *v[0])
		}
	}
	if got[0].Datapoints[1][1] == nil || *got[0].Datapoints[1][1]-*got[0].Datapoints[0][1] != 60 {
		t.Errorf("two hours at the default maxDataPoints: step %v, want a minute", *got[0].Datapoints[1][1]-*got[0].Datapoints[0][1])
	}

	// Wildcards over the links visited, brace lists, a key with a dot.
	for _, c := range []struct {
		target string
		want   []string
	}{
		{"linkgate.links.*.visits", []string{"linkgate.links.go.visits", "linkgate.links.gh.visits", "linkgate.links.a%2Eb.visits"}},
		{"linkgate.links.g?.humans", []string{"linkgate.links.go.humans", "linkgate.links.gh.humans"}},
		{"linkgate.links.{gh,nope}.{humans,bots}", []string{"linkgate.links.gh.humans", "linkgate.links.gh.bots", "linkgate.links.nope.humans", "linkgate.links.nope.bots"}},
		{"linkgate.links.a%2Eb.visits", []string{"linkgate.links.a%2Eb.visits"}},
		{"linkgate.*.visits", []string{"linkgate.all.visits"}},
		{"other.metric", nil},
		{"highestMax(linkgate.links.*.humans,1)", []string{"linkgate.links.gh.humans"}},
		{"highestMax(linkgate.links.*.visits, 2)", []string{"linkgate.links.gh.visits", "linkgate.links.go.visits"}},
		{"sortByTotal(linkgate.links.*.visits)", []string{"linkgate.links.go.visits", "linkgate.links.gh.visits", "linkgate.links.a%2Eb.visits"}},
		{"limit(sortByTotal(linkgate.links.*.visits),1)", []string{"linkgate.links.go.visits"}},
		{"aliasByNode(linkgate.links.*.humans,2)", []string{"go", "gh", "a%2Eb"}},
		{"alias(linkgate.all.visits,'every link')", []string{"every link"}},
		{"sumSeries(linkgate.links.*.visits)", []string{"sumSeries(linkgate.links.*.visits)"}},
		{"groupByNode(linkgate.links.*.{humans,bots},3,'sum')", []string{"humans", "bots"}},
	} {
		got := render(t, h, "target="+url.QueryEscape(c.target)+"&"+rng)
		if !slices.Equal(names(got), c.want) {
			t.Errorf("%s: %v, want %v", c.target, names(got), c.want)
		}
	}

	// What the functions compute.
	sum := render(t, h, "target="+url.QueryEscape("sumSeries(linkgate.links.*.visits)")+"&target=linkgate.all.visits&"+rng)
	if total(sum[0]) != total(sum[1]) || total(sum[1]) == 0 {
		t.Errorf("sumSeries of every link %v, all links %v: want equal", total(sum[0]), total(sum[1]))
	}
	for i := range sum[0].Datapoints {
		if *sum[0].Datapoints[i][0] != *sum[1].Datapoints[i][0] {
			t.Fatalf("point %d: sumSeries %v, all links %v", i, *sum[0].Datapoints[i][0], *sum[1].Datapoints[i][0])
		}
	}
	hourly := render(t, h, "target="+url.QueryEscape(`summarize(linkgate.all.visits,"1h","sum")`)+"&"+rng)
	wh := statsGet(t, h, fmt.Sprintf("/?from=%d&to=%d&step=1h&format=json", from, until))
	var ah struct{ Points [][]int64 }
	json.Unmarshal(wh.Body.Bytes(), &ah)
	if len(hourly) != 1 || hourly[0].Target != `summarize(linkgate.all.visits, "1h", "sum")` || len(hourly[0].Datapoints) != len(ah.Points) {
		t.Fatalf("summarize 1h: %v with %d points, /stats step=1h has %d", names(hourly), len(hourly[0].Datapoints), len(ah.Points))
	}
	for i, p := range ah.Points {
		if dp := hourly[0].Datapoints[i]; *dp[1] != float64(p[0]) || *dp[0] != float64(p[1]+p[2]) {
			t.Errorf("summarize hour %d: %v at %v, /stats %d at %d", i, *dp[0], *dp[1], p[1]+p[2], p[0])
		}
	}
	integral := render(t, h, "target="+url.QueryEscape("integral(linkgate.links.go.visits)")+"&"+rng)
	if dps := integral[0].Datapoints; *dps[len(dps)-1][0] != total(got[2]) {
		t.Errorf("integral's last point %v, want go's total %v", *dps[len(dps)-1][0], total(got[2]))
	}
	if s := render(t, h, "target="+url.QueryEscape("scale(linkgate.links.go.visits,0.5)")+"&"+rng); total(s[0]) != total(got[2])/2 {
		t.Errorf("scale 0.5: %v, want %v", total(s[0]), total(got[2])/2)
	}

	// maxDataPoints: the coarsest resolution within it, then sums of runs.
	for _, m := range []int{10, 3, 1} {
		c := render(t, h, fmt.Sprintf("target=linkgate.links.go.visits&maxDataPoints=%d&%s", m, rng))
		if n := len(c[0].Datapoints); n > m || n == 0 || total(c[0]) != total(got[2]) {
			t.Errorf("maxDataPoints=%d: %d points summing to %v; want at most %d summing to %v", m, n, total(c[0]), m, total(got[2]))
		}
	}
	avg := render(t, h, "target="+url.QueryEscape(`consolidateBy(linkgate.links.go.visits,'max')`)+"&maxDataPoints=1&"+rng)
	if mx := render(t, h, "target=linkgate.links.go.visits&maxDataPoints=200&"+rng); *avg[0].Datapoints[0][0] > total(mx[0]) || *avg[0].Datapoints[0][0] >= total(got[2]) {
		t.Errorf("consolidateBy max to one point: %v, want the highest minute, under the total %v", *avg[0].Datapoints[0][0], total(got[2]))
	}

	// Grafana posts its render requests as a form, with relative times.
	req := httptest.NewRequest("POST", "/graphite/render", strings.NewReader("target=linkgate.all.bots&from=-2h&until=now&format=json&maxDataPoints=500"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rw := httptest.NewRecorder()
	h.ServeHTTP(rw, req)
	var posted []graphiteSeries
	if rw.Code != 200 || json.Unmarshal(rw.Body.Bytes(), &posted) != nil || len(posted) != 1 || total(posted[0]) != 64 {
		t.Errorf("POST render: %d %.300s; want all links' 64 bots (40 declared, 24 scanners)", rw.Code, rw.Body)
	}
}

// TestGraphiteTimes: from and until in graphite-web's forms.
func TestGraphiteTimes(t *testing.T) {
	h := graphiteAPI(t, "")
	first := func(q string) (int, float64) {
		got := render(t, h, "target=linkgate.all.visits&"+q)
		return len(got[0].Datapoints), *got[0].Datapoints[0][1]
	}
	day := rollup.Align(graphiteNow, rollup.Day)
	for _, c := range []struct {
		q    string
		from time.Time
	}{
		{"from=-2h", graphiteNow.Add(-2 * time.Hour)},
		{"from=now-90min&until=now", graphiteNow.Add(-90 * time.Minute)},
		{"from=-1d", graphiteNow.Add(-24 * time.Hour)},
		{fmt.Sprintf("from=%d", graphiteNow.Add(-3*time.Hour).Unix()), graphiteNow.Add(-3 * time.Hour)},
		{"from=08:00_" + day.Format("20060102"), day.Add(8 * time.Hour)},
		{"from=" + day.Format("20060102") + "&until=-1h", day},
		{"from=-1w", graphiteNow.Add(-7 * 24 * time.Hour)},
		{"from=-1mon", graphiteNow.Add(-30 * 24 * time.Hour)},
	} {
		_, start := first(c.q)
		if step := rollup.Align(c.from, time.Minute); start > float64(c.from.Unix()) || start < float64(c.from.Add(-rollup.Day).Unix()) {
			t.Errorf("%s: first point at %v, want the bucket holding %v (%d)", c.q, time.Unix(int64(start), 0).UTC(), c.from, step.Unix())
		}
	}
	for _, c := range []struct{ q, param string }{
		{"from=-2fortnights", "from"},
		{"from=yesterday", "from"},
		{"until=-3h&from=-1h", "from"},
		{"until=tomorrow", "until"},
		{"maxDataPoints=0", "maxDataPoints"},
		{"format=png", "format"},
		{"width=600", "width"},
		{"target=" + url.QueryEscape("nosuch(linkgate.all.visits)"), "target"},
		{"target=" + url.QueryEscape("sumSeries(linkgate.all.visits"), "target"},
		{"target=" + url.QueryEscape("highestMax(linkgate.links.*.visits,'two')"), "target"},
	} {
		w := statsGet(t, h, "/graphite/render?target=linkgate.all.visits&"+c.q)
		if w.Code != 400 || !strings.Contains(w.Body.String(), `"name":"`+c.param+`"`) {
			t.Errorf("render %s: %d %s, want a 400 naming %s", c.q, w.Code, w.Body, c.param)
		}
	}
}

// TestGraphiteFind: metrics/find answers graphite-web's treejson (branches
// then leaves, each with allowChildren, expandable, id, leaf and text) and
// its documented completer shape, walking linkgate.links.<key> and
// linkgate.all.
func TestGraphiteFind(t *testing.T) {
	h := graphiteAPI(t, "")
	type node struct {
		AllowChildren int    `json:"allowChildren"`
		Expandable    int    `json:"expandable"`
		ID            string `json:"id"`
		Leaf          int    `json:"leaf"`
		Text          string `json:"text"`
	}
	find := func(q string) []node {
		t.Helper()
		w := statsGet(t, h, "/graphite/metrics/find?"+q)
		if w.Code != 200 {
			t.Fatalf("find %s: %d %s", q, w.Code, w.Body)
		}
		dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
		dec.DisallowUnknownFields()
		var ns []node
		if err := dec.Decode(&ns); err != nil {
			t.Fatalf("find %s: %v in %s", q, err, w.Body)
		}
		for _, n := range ns {
			if n.Leaf != 1-n.AllowChildren || n.Leaf != 1-n.Expandable || n.Leaf < 0 || n.Leaf > 1 {
				t.Errorf("find %s: node %+v is neither a branch (0, 1, 1) nor a leaf", q, n)
			}
		}
		return ns
	}
	// leaves returns the leaf ids under prefix, as find lists them.
	leaves := func(prefix string) []string {
		var out []string
		for _, l := range []string{"visits", "humans", "bots", "class_bot", "class_preview", "class_scanner", "class_prefetch", "class_internal"} {
			out = append(out, prefix+l+"="+l+"/1")
		}
		return out
	}
	ids := func(ns []node) []string {
		var out []string
		for _, n := range ns {
			out = append(out, fmt.Sprintf("%s=%s/%d", n.ID, n.Text, n.Leaf))
		}
		return out
	}
	for _, c := range []struct {
		q    string
		want []string
	}{
		{"query=*", []string{"linkgate=linkgate/0"}},
		{"query=linkgate.*", []string{"linkgate.links=links/0", "linkgate.all=all/0"}},
		{"query=linkgate.links.*", []string{"linkgate.links.go=go/0", "linkgate.links.gh=gh/0", "linkgate.links.a%2Eb=a%2Eb/0"}},
		{"query=linkgate.links.g*&from=-3h&until=now", []string{"linkgate.links.go=go/0", "linkgate.links.gh=gh/0"}},
		{"query=linkgate.links.go.*", leaves("linkgate.links.go.")},
		// As graphite-web's find: ids are the query's parent path and the name.
		{"query=linkgate.*.*", append([]string{"linkgate.*.go=go/0", "linkgate.*.gh=gh/0", "linkgate.*.a%2Eb=a%2Eb/0"}, leaves("linkgate.*.")...)},
		{"query=linkgate.all.class_*", leaves("linkgate.all.")[3:]},
		{"query=linkgate.links.*&from=-10d&until=-9d", nil},
		{"query=linkgate.all.v*&wildcards=1", []string{"linkgate.all.visits=visits/1"}},
		{"query=linkgate.all.*&wildcards=1", append([]string{"linkgate.all.*=*/1"}, leaves("linkgate.all.")...)},
	} {
		if got := ids(find(c.q)); !slices.Equal(got, c.want) {
			t.Errorf("find %s: %v, want %v", c.q, got, c.want)
		}
	}
	// The documented example's shape: {"metrics": [{"is_leaf", "name", "path"}]}.
	w := statsGet(t, h, "/graphite/metrics/find?query=linkgate.all.*&format=completer")
	var comp struct {
		Metrics []struct {
			IsLeaf int    `json:"is_leaf"`
			Name   string `json:"name"`
			Path   string `json:"path"`
		} `json:"metrics"`
	}
	dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&comp); err != nil || len(comp.Metrics) != 8 || comp.Metrics[0].Path != "linkgate.all.visits" || comp.Metrics[0].IsLeaf != 1 {
		t.Errorf("completer: %v %s", err, w.Body)
	}
	w = statsGet(t, h, "/graphite/metrics/find?query=linkgate.*&format=completer")
	if !strings.Contains(w.Body.String(), `{"is_leaf":0,"name":"links","path":"linkgate.links."}`) {
		t.Errorf("completer of branches: %s, want paths ending with a dot as documented", w.Body)
	}
	for _, q := range []string{"", "query=linkgate.*&format=pickle", "query=linkgate.[z&from=-1h"} {
		w := statsGet(t, h, "/graphite/metrics/find?"+q)
		if w.Code != 400 || !strings.Contains(w.Body.String(), `"invalid-params"`) {
			t.Errorf("find %q: %d %s, want a 400 naming the parameter", q, w.Code, w.Body)
		}
	}
}

// TestGraphiteToken: the Graphite API is behind the stats token, and takes
// no share token.
func TestGraphiteToken(t *testing.T) {
	h := graphiteAPI(t, "graph-s3cret")
	for _, c := range []struct {
		auth string
		code int
	}{{"", 401}, {"Bearer nope", 401}, {"Bearer graph-s3cret", 200}} {
		for _, path := range []string{"/graphite/render?target=linkgate.all.visits", "/graphite/metrics/find?query=*"} {
			if w := statsGet(t, h, path, "Authorization", c.auth); w.Code != c.code {
				t.Errorf("%s with %q: %d, want %d", path, c.auth, w.Code, c.code)
			}
		}
	}
	if w := statsGet(t, h, "/graphite/nope", "Authorization", "Bearer graph-s3cret"); w.Code != 404 {
		t.Errorf("/graphite/nope: %d, want 404", w.Code)
	}
}
