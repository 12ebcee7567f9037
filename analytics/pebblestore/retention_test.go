package pebblestore_test

import (
	"slices"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/analytics/pebblestore"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
)

// TestTenantRetention: with acme's retention at 3 days, Expire deletes
// acme's counts of ten days ago (hourly and daily buckets, breakdown,
// unique visitors, top lists) and keeps those of today; the same counts of
// another tenant's link and of a link of the default tenant stay, as the
// service's tiers keep them.
func TestTenantRetention(t *testing.T) {
	st, err := pebblestore.Open(t.TempDir(), analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := t.Context()
	now := time.Now().UTC()
	old, recent := now.Add(-10*rollup.Day), now.Add(-2*time.Hour)
	keys := []string{"acme/go", "other/go", "go"}
	var b analytics.Batch
	b.At = now
	var sk hll.Sketch
	sk.Add(0x9e3779b97f4a7c15)
	for _, k := range keys {
		for _, at := range []time.Time{old, recent} {
			day := rollup.Align(at, rollup.Day)
			b.Counts = append(b.Counts,
				analytics.Count{Key: k, Step: time.Hour, Start: rollup.Align(at, time.Hour), Visits: analytics.Visits{Human: 1}},
				analytics.Count{Key: k, Step: rollup.Day, Start: day, Visits: analytics.Visits{Human: 1}})
			b.Dims = append(b.Dims,
				analytics.DimCount{Key: k, Day: day, Dim: visitor.Referrer, Value: "news.example", N: 1, Cum: 1},
				analytics.DimCount{Key: analytics.AllLinks, Day: day, Dim: analytics.DimLink, Value: k, N: 1, Cum: 1})
			b.Uniques = append(b.Uniques, analytics.UniqueSketch{Key: k, Day: day, Sketch: sk.AppendBinary(nil)})
		}
	}
	if err := st.Write(ctx, b); err != nil {
		t.Fatal(err)
	}
	st.SetTenantRetention(map[string]time.Duration{"acme": 3 * rollup.Day})
	if err := st.Expire(now); err != nil {
		t.Fatal(err)
	}
	from, to := rollup.Align(old, rollup.Day), now.Add(rollup.Day)
	for _, k := range keys {
		want := 2 // old and recent
		if k == "acme/go" {
			want = 1
		}
		for _, step := range []time.Duration{time.Hour, rollup.Day} {
			pts, err := st.Points(ctx, k, step, from, to)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, p := range pts {
				n += int(p.Human)
				if k == "acme/go" && p.Start.Before(now.Add(-3*rollup.Day)) {
					t.Errorf("%s: a %v bucket of %v kept", k, step, p.Start)
				}
			}
			if n != want {
				t.Errorf("%s: %d visits in the %v tier, want %d", k, n, step, want)
			}
		}
		dims, err := st.Dims(ctx, k, visitor.Referrer, from, to)
		if err != nil {
			t.Fatal(err)
		}
		if len(dims) != 1 || dims[0].Count != int64(want) {
			t.Errorf("%s: breakdown %v, want %d visits", k, dims, want)
		}
		u, err := st.Uniques(ctx, k, from, rollup.Align(old, rollup.Day).Add(rollup.Day))
		if err != nil {
			t.Fatal(err)
		}
		if got := u.Estimate(); (got > 0) != (want == 2) {
			t.Errorf("%s: %d unique visitors ten days ago", k, got)
		}
		top, err := st.Top(ctx, from, rollup.Align(old, rollup.Day).Add(rollup.Day), 10)
		if err != nil {
			t.Fatal(err)
		}
		if listed := slices.ContainsFunc(top, func(l analytics.TopLink) bool { return l.Key == k }); listed != (want == 2) {
			t.Errorf("%s in the top list of ten days ago: %v (%v)", k, listed, top)
		}
	}
	top, err := st.TenantTop(ctx, "acme", from, to, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(top) != 1 || top[0].Visits != 1 {
		t.Errorf("acme's top list: %v, want go with today's visit", top)
	}
}
