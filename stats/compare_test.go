package stats_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/stats"
)

// TestCompare: compare=previous answers the range of the same length just
// before, compare=year the same dates a year earlier, each at the main
// answer's step with every field of an answer, point for point with the
// stored pattern; CSV gets its columns; a bad value is a 400 naming it.
func TestCompare(t *testing.T) {
	h := stats.New(newStatsReader(), rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return statsNow }})
	type answer struct {
		From, To, Step int64
		RangeTotal     int64 `json:"range_total"`
		Points         [][]*int64
		Compare        *struct {
			Kind           string
			From, To, Step int64
			RangeTotal     int64 `json:"range_total"`
			Total          int64
			Points         [][]*int64
		}
	}
	for _, tc := range []struct {
		query string
		shift time.Duration
		kind  string
	}{
		{"last=6h&step=1h&compare=previous", 6 * time.Hour, "previous"},
		{"last=2d&compare=previous", 2 * rollup.Day, "previous"},
		{"from=2026-11-20T00:00:00Z&to=2026-11-23T00:00:00Z&compare=year", 365 * rollup.Day, "year"},
	} {
		w := statsGet(t, h, "/abc?"+tc.query)
		var a answer
		if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &a) != nil || a.Compare == nil {
			t.Fatalf("%s: %d %.300s", tc.query, w.Code, w.Body)
		}
		c := a.Compare
		step, points := a.Step, len(a.Points)
		if tc.kind == "year" { // the hours of a year ago have expired: days
			step, points = 86400, 3
		}
		if c.Kind != tc.kind || c.Step != step || len(c.Points) != points || c.To != a.To-int64(tc.shift/time.Second) || c.Total != 123456 {
			t.Errorf("%s: compare kind %q step %d, %d points, to %d, total %d; want %s, step %d, %d points, to %d, the all-time total",
				tc.query, c.Kind, c.Step, len(c.Points), c.To, c.Total, tc.kind, step, points, a.To-int64(tc.shift/time.Second))
		}
		var sum int64
		for i, p := range c.Points {
			start := time.Unix(*p[0], 0)
			want := statsVisits("abc", time.Duration(c.Step)*time.Second, start)
			if p[1] == nil || *p[1] != want.Human {
				t.Fatalf("%s: compare point %d at %v = %v, want %d", tc.query, i, start, p[1], want.Human)
			}
			sum += *p[1]
		}
		if sum != c.RangeTotal {
			t.Errorf("%s: compare points sum to %d, range_total %d", tc.query, sum, c.RangeTotal)
		}
	}
	w := statsGet(t, h, "/abc?last=3h&step=1h&compare=previous&format=csv")
	lines := strings.Split(strings.TrimSpace(w.Body.String()), "\n")
	if lines[0] != "unix_seconds,count,bot_count,compare_unix_seconds,compare_count,compare_bot_count,class_bot,class_preview,class_scanner,class_prefetch,class_internal" || len(lines) != 5 {
		t.Errorf("CSV: %q", lines)
	}
	w = statsGet(t, h, "/abc?compare=lastweek")
	if w.Code != 400 || !strings.Contains(w.Body.String(), `"name":"compare"`) {
		t.Errorf("compare=lastweek: %d %s", w.Code, w.Body)
	}
}
