package cassandra_test

import (
	"context"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/cassandra"
	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
)

// TestTenantRetentionOnNode: with the tenant ret's retention at 2 hours,
// the rows of its link and of its all-links total written with a batch
// time that leaves them 15 s of it (an hour's bucket, a day's breakdown,
// unique visitors and top-list count) expire on the node, while the same
// rows of a link of the default tenant, in the same batches, stay.
func TestTenantRetentionOnNode(t *testing.T) {
	hs := hosts(t)
	s := cassandra.OpenConnected(t, config(hs), analyticstest.DefaultPlan)
	defer s.Close()
	const keep, ttl = 2 * time.Hour, 15 * time.Second
	s.SetTenantRetention(map[string]time.Duration{"ret": keep})
	ctx := context.Background()
	id := time.Now().UTC().Format("20060102T150405.000000000")
	tenantKey, tenantAll, control := "ret/go-"+id, analytics.TenantAll("ret"), "ctl-"+id
	now := time.Now().UTC()
	hour := rollup.Align(now.Add(-3*time.Hour), time.Hour)
	day := rollup.Align(now, rollup.Day).Add(-2 * rollup.Day)
	var sk hll.Sketch
	sk.Add(0x9e3779b97f4a7c15)
	for _, k := range []string{tenantKey, control} {
		// The hour's bucket: its end plus the tenant's retention is 15 s
		// after At.
		b := analytics.Batch{At: hour.Add(time.Hour + keep - ttl), Counts: []analytics.Count{
			{Key: k, Step: time.Hour, Start: hour, Visits: analytics.Visits{Human: 1}},
		}}
		if k == tenantKey {
			b.Counts = append(b.Counts, analytics.Count{Key: tenantAll, Step: time.Hour, Start: hour, Visits: analytics.Visits{Human: 1}})
		}
		if err := s.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
		// The day's: likewise.
		b = analytics.Batch{At: day.Add(rollup.Day + keep - ttl),
			Dims: []analytics.DimCount{
				{Key: k, Day: day, Dim: visitor.OS, Value: "Linux", N: 3},
				{Key: analytics.AllLinks, Day: day, Dim: analytics.DimLink, Value: k, N: 3},
			},
			Uniques: []analytics.UniqueSketch{{Key: k, Day: day, Sketch: sk.AppendBinary(nil)}},
		}
		if err := s.Write(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	// held returns what the node holds of key: its hour's visits, the
	// day's breakdown, unique visitors and top-list count.
	held := func(key string) (visits, dims, uniques, top int64) {
		t.Helper()
		pts, err := s.Points(ctx, key, time.Hour, hour, hour.Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pts {
			visits += p.Human
		}
		ds, err := s.Dims(ctx, key, visitor.OS, day, day.Add(rollup.Day))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			dims += d.Count
		}
		u, err := s.Uniques(ctx, key, day, day.Add(rollup.Day))
		if err != nil {
			t.Fatal(err)
		}
		tc, err := s.TopCounts(ctx, []string{key}, day, day.Add(rollup.Day))
		if err != nil {
			t.Fatal(err)
		}
		return visits, dims, u.Estimate(), tc[key]
	}
	if v, d, u, tc := held(tenantKey); v != 1 || d != 3 || u != 1 || tc != 3 {
		t.Fatalf("just written, %s holds %d visits, %d in the breakdown, %d unique, %d in the top list", tenantKey, v, d, u, tc)
	}
	deadline := time.Now().Add(testkit.Slack(2 * time.Minute))
	for {
		v, d, u, tc := held(tenantKey)
		all, _, _, _ := held(tenantAll)
		if v == 0 && d == 0 && u == 0 && tc == 0 && all == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still holds %d visits, %d in the breakdown, %d unique, %d in the top list; its tenant %d visits",
				tenantKey, v, d, u, tc, all)
		}
		time.Sleep(time.Second) // waiting for the node's clock to pass the TTLs
	}
	if v, d, u, tc := held(control); v != 1 || d != 3 || u != 1 || tc != 3 {
		t.Errorf("the default tenant's %s holds %d visits, %d in the breakdown, %d unique, %d in the top list; want them kept", control, v, d, u, tc)
	}
}
