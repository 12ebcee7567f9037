package configs_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/stats"
)

// TestGrafanaDashboard: the dashboard of grafana-dashboard.json is valid
// JSON for Grafana's import (a Graphite data source input, panels with
// targets), its template variable's query finds the links, and every
// target of every panel, with the variable set to one link and to several
// as Grafana writes them ({a,b}), renders series with points through the
// gateway's Graphite API.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Inputs []struct {
			Name, Type, PluginID string
		} `json:"__inputs"`
		Templating struct {
			List []struct{ Name, Query string }
		}
		Panels []struct {
			Title   string
			Targets []struct{ RefID, Target string }
		}
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	if len(d.Inputs) != 1 || d.Inputs[0].Type != "datasource" || !strings.EqualFold(d.Inputs[0].PluginID, "graphite") {
		t.Errorf("inputs %+v: want one Graphite data source", d.Inputs)
	}

	now := time.Now().UTC()
	store := analyticstest.NewMemory(analyticstest.DefaultPlan)
	rec := analytics.NewRecorder(100, nil)
	f := analytics.NewFlusher(rec, store, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: func() time.Time { return now }}, nil, nil)
	for i := range 300 {
		at := now.Add(-time.Duration(i) * 17 * time.Minute)
		rec.Record([]string{"go", "gh", "ex"}[i%3], at, i%5 == 0)
	}
	if err := f.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	h := stats.New(f.Reader(store), rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return now }})
	get := func(path string) []byte {
		t.Helper()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code != 200 {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		return w.Body.Bytes()
	}

	if len(d.Templating.List) != 1 || d.Templating.List[0].Name != "link" {
		t.Fatalf("template variables %+v, want link", d.Templating.List)
	}
	var found []struct{ Text string }
	json.Unmarshal(get("/graphite/metrics/find?query="+url.QueryEscape(d.Templating.List[0].Query)+"&from=-7d&until=now"), &found)
	if len(found) != 3 {
		t.Errorf("the variable's query finds %+v, want the 3 links", found)
	}

	targets := 0
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no target", p.Title)
		}
		for _, tg := range p.Targets {
			for _, link := range []string{"go", "{go,gh}"} {
				target := strings.ReplaceAll(tg.Target, "$link", link)
				var series []struct {
					Target     string
					Datapoints [][2]*float64
				}
				body := get("/graphite/render?format=json&from=-7d&until=now&maxDataPoints=800&target=" + url.QueryEscape(target))
				if err := json.Unmarshal(body, &series); err != nil || len(series) == 0 {
					t.Errorf("panel %q, %s: %v %.200s; want series", p.Title, target, err, body)
					continue
				}
				var sum float64
				for _, s := range series {
					for _, dp := range s.Datapoints {
						if dp[0] != nil {
							sum += *dp[0]
						}
					}
				}
				if sum == 0 {
					t.Errorf("panel %q, %s: no visits in %d series", p.Title, target, len(series))
				}
				targets++
			}
		}
	}
	if targets < 10 {
		t.Errorf("%d targets rendered, want every panel's", targets)
	}
}
