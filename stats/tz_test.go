package stats_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/stats"
)

// TestTimeZoneDays: with tz, day buckets start at the zone's midnights,
// across the end of summer time in Paris (25 October 2026: a day of 25
// hours) and in New York (1 November: 25 hours), each summed from the
// hourly tier; a zone 5:30 from UTC is summed from the 5-minute tier while
// it keeps the range; past what the fine tiers keep, the answer keeps UTC
// days and says so.
func TestTimeZoneDays(t *testing.T) {
	h := stats.New(newStatsReader(), rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return statsNow }})
	type answer struct {
		From, Step int64
		TZ         string `json:"tz"`
		TZAsked    string `json:"tz_asked"`
		RangeTotal int64  `json:"range_total"`
		Points     [][]*int64
	}
	get := func(q string) answer {
		t.Helper()
		w := statsGet(t, h, "/abc?"+q)
		var a answer
		if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &a) != nil {
			t.Fatalf("%s: %d %.300s", q, w.Code, w.Body)
		}
		return a
	}
	// sum is the reference: every stored bucket of step in [from, to).
	sum := func(step time.Duration, from, to time.Time) int64 {
		var n int64
		for b := from; b.Before(to); b = b.Add(step) {
			n += statsVisits("abc", step, b).Human
		}
		return n
	}
	for _, tc := range []struct {
		zone, from, to string
		src            time.Duration
		hours          []int
	}{
		{"Europe/Paris", "2026-10-24T00:00:00+02:00", "2026-10-27T00:00:00+01:00", time.Hour, []int{24, 25, 24}},
		{"America/New_York", "2026-10-31T00:00:00-04:00", "2026-11-03T00:00:00-05:00", time.Hour, []int{24, 25, 24}},
		{"Asia/Kolkata", "2026-11-20T00:00:00+05:30", "2026-11-22T00:00:00+05:30", 5 * time.Minute, []int{24, 24}},
	} {
		loc, _ := time.LoadLocation(tc.zone)
		from, _ := time.Parse(time.RFC3339, tc.from)
		to, _ := time.Parse(time.RFC3339, tc.to)
		a := get("from=" + url.QueryEscape(tc.from) + "&to=" + url.QueryEscape(tc.to) + "&step=1d&tz=" + tc.zone)
		if a.TZ != tc.zone || a.TZAsked != "" || len(a.Points) != len(tc.hours) || a.From != from.Unix() {
			t.Fatalf("%s: tz %q (asked %q), %d points from %d; want %s, %d from %d", tc.zone, a.TZ, a.TZAsked, len(a.Points), a.From, tc.zone, len(tc.hours), from.Unix())
		}
		start := from
		for i, p := range a.Points {
			end := start.Add(time.Duration(tc.hours[i]) * time.Hour)
			if l := start.In(loc); l.Hour() != 0 || l.Minute() != 0 {
				t.Errorf("%s: point %d starts at %v, not a local midnight", tc.zone, i, l)
			}
			if *p[0] != start.Unix() || p[1] == nil || *p[1] != sum(tc.src, start, end) {
				t.Errorf("%s: point %d = [%d %v], want [%d %d] (%d hours)", tc.zone, i, *p[0], p[1], start.Unix(), sum(tc.src, start, end), tc.hours[i])
			}
			start = end
		}
		if !start.Equal(to) {
			t.Errorf("%s: the days end at %v, want %v", tc.zone, start, to)
		}
	}
	// Two months back the hours are gone: UTC days, and the answer says so.
	a := get("last=60d&step=1d&tz=Europe/Paris")
	if a.TZ != "UTC" || a.TZAsked != "Europe/Paris" || a.From%86400 != 0 {
		t.Errorf("60 days: tz %q asked %q from %d; want UTC days, saying Europe/Paris was asked", a.TZ, a.TZAsked, a.From)
	}
	// Weeks start on the zone's Mondays.
	a = get("last=3w&step=1w&tz=Europe/Paris")
	if a.TZ != "Europe/Paris" || time.Unix(a.From, 0).In(mustZone("Europe/Paris")).Weekday() != time.Monday {
		t.Errorf("weeks: tz %q from %v", a.TZ, time.Unix(a.From, 0))
	}
	// Hours: the same instants in Paris, not in Kolkata.
	if a := get("last=6h&step=1h&tz=Europe/Paris"); a.TZ != "Europe/Paris" {
		t.Errorf("hours in Paris: tz %q", a.TZ)
	}
	if a := get("last=6h&step=1h&tz=Asia/Kolkata"); a.TZ != "UTC" || a.TZAsked != "Asia/Kolkata" {
		t.Errorf("hours in Kolkata: tz %q asked %q, want UTC buckets, saying so", a.TZ, a.TZAsked)
	}
	if a := get("last=6h&step=5m&tz=Asia/Kolkata"); a.TZ != "Asia/Kolkata" {
		t.Errorf("5 minutes in Kolkata: tz %q", a.TZ)
	}
	w := statsGet(t, h, "/abc?tz=Mars/Olympus")
	if w.Code != 400 || !strings.Contains(w.Body.String(), `"name":"tz"`) {
		t.Errorf("tz=Mars/Olympus: %d %s", w.Code, w.Body)
	}
}

func mustZone(name string) *time.Location {
	l, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return l
}
