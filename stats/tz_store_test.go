package stats_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/pebblestore"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/stats"
)

// recentChange finds a DST change between 36 and 2 days before now in one
// of a few zones (whose changes fall in March, April, September, October
// and November): its zone and the instant.
func recentChange(now time.Time) (*time.Location, time.Time, bool) {
	for _, name := range []string{"Europe/Paris", "America/New_York", "Australia/Sydney", "America/Santiago", "Pacific/Auckland", "America/Asuncion"} {
		loc, err := time.LoadLocation(name)
		if err != nil {
			continue
		}
		t := rollup.Align(now.Add(-36*rollup.Day), time.Hour)
		_, prev := t.In(loc).Zone()
		for ; t.Before(now.Add(-2 * rollup.Day)); t = t.Add(time.Hour) {
			if _, off := t.In(loc).Zone(); off != prev {
				return loc, t, true
			}
		}
	}
	return nil, time.Time{}, false
}

// TestTimeZoneOnStore: on the embedded store, one visit an hour around the
// most recent DST change gives local days of 23 or 25 visits on its day
// and 24 on the others, through the tier-correct reader.
func TestTimeZoneOnStore(t *testing.T) {
	now := time.Now().UTC()
	loc, change, ok := recentChange(now)
	if !ok {
		t.Skip("*** no DST change in the test zones between 36 and 2 days ago (December to February): SKIPPED ***")
	}
	s, err := pebblestore.Open(t.TempDir(), analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := change.In(loc)
	first := time.Date(l.Year(), l.Month(), l.Day()-1, 0, 0, 0, 0, loc) // the local day before the change's
	last := time.Date(l.Year(), l.Month(), l.Day()+2, 0, 0, 0, 0, loc)
	b := analytics.Batch{At: now}
	for h := first.UTC(); h.Before(last); h = h.Add(time.Hour) {
		b.Counts = append(b.Counts, analytics.Count{Key: "k", Step: time.Minute, Start: h, Visits: analytics.Visits{Human: 1}})
	}
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	h := stats.New(rollup.NewReader(s, analyticstest.DefaultPlan), rollup.DefaultTiers(), stats.Options{})
	q := fmt.Sprintf("/k?from=%d&to=%d&step=1d&tz=%s", first.Unix(), last.Unix(), loc)
	w := statsGet(t, h, q)
	var a struct {
		TZ     string `json:"tz"`
		Points [][]int64
	}
	if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &a) != nil {
		t.Fatalf("%s: %d %s", q, w.Code, w.Body)
	}
	t.Logf("%s changes at %v", loc, change)
	if a.TZ != loc.String() || len(a.Points) != 3 {
		t.Fatalf("tz %q, %d points: %v", a.TZ, len(a.Points), a.Points)
	}
	for i, p := range a.Points {
		start := time.Unix(p[0], 0).In(loc)
		end := time.Date(start.Year(), start.Month(), start.Day()+1, 0, 0, 0, 0, loc)
		if start.Hour() != 0 || p[1] != int64(end.Sub(start)/time.Hour) {
			t.Errorf("day %d starts %v with %d visits, want a local midnight and %d (its hours)", i, start, p[1], int64(end.Sub(start)/time.Hour))
		}
	}
	if a.Points[1][1] == 24 {
		t.Errorf("the day of the change has 24 hours: %v", a.Points)
	}
}

// TestCompareOnStore: on the embedded store, through the tier-correct
// reader, compare=previous answers the two hours before the two asked,
// point for point, and compare=year a year back, where nothing was.
func TestCompareOnStore(t *testing.T) {
	s, err := pebblestore.Open(t.TempDir(), analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := rollup.Align(time.Now().UTC(), time.Hour).Add(-10 * time.Minute) // whole hours before it
	b := analytics.Batch{At: time.Now()}
	minute := func(ago time.Duration, n int64) {
		b.Counts = append(b.Counts, analytics.Count{Key: "k", Step: time.Minute, Start: rollup.Align(now.Add(-ago), time.Minute), Visits: analytics.Visits{Human: n}})
	}
	minute(30*time.Minute, 5)  // this range: 5 + 2
	minute(90*time.Minute, 2)  //
	minute(150*time.Minute, 7) // the previous range: 7 + 1
	minute(200*time.Minute, 1) //
	minute(5*time.Hour, 100)   // neither
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	h := stats.New(rollup.NewReader(s, analyticstest.DefaultPlan), rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return now }})
	for _, tc := range []struct {
		kind             string
		main, earlier    int64
		earlierStepsSame bool
	}{{"previous", 7, 8, true}, {"year", 7, 0, false}} {
		w := statsGet(t, h, "/k?from="+fmt.Sprint(now.Add(-2*time.Hour).Unix())+"&to="+fmt.Sprint(now.Unix())+"&step=5m&compare="+tc.kind)
		var a struct {
			RangeTotal int64 `json:"range_total"`
			Step       int64
			Points     [][]*int64
			Compare    struct {
				Kind       string
				RangeTotal int64 `json:"range_total"`
				Step       int64
				From, To   int64
				Points     [][]*int64
			}
		}
		if w.Code != 200 || json.Unmarshal(w.Body.Bytes(), &a) != nil {
			t.Fatalf("%s: %d %s", tc.kind, w.Code, w.Body)
		}
		if a.RangeTotal != tc.main || a.Compare.RangeTotal != tc.earlier || a.Compare.Kind != tc.kind {
			t.Errorf("compare=%s: %d visits against %d (%s), want %d against %d", tc.kind, a.RangeTotal, a.Compare.RangeTotal, a.Compare.Kind, tc.main, tc.earlier)
		}
		if tc.earlierStepsSame && (a.Compare.Step != a.Step || len(a.Compare.Points) != len(a.Points) || a.Compare.To != now.Add(-2*time.Hour).Unix()) {
			t.Errorf("compare=%s: step %d, %d points, to %d; want %d, %d, %d", tc.kind, a.Compare.Step, len(a.Compare.Points), a.Compare.To, a.Step, len(a.Points), now.Add(-2*time.Hour).Unix())
		}
	}
}
