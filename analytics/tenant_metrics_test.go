package analytics_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/visitclass"
)

// TestTenantMetrics: linkgate_tenant_visits_total counts each tenant's
// visits by kind, the default tenant's not; beyond MaxTenantLabels
// tenants, the others' visits are counted under OtherTenants, so that the
// series stay bounded: a tenant named once stays named.
func TestTenantMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := analytics.NewMetrics(reg)
	rec := analytics.NewRecorder(1000, m)
	f := analytics.NewFlusher(rec, newMemStore(), analyticstest.DefaultPlan, analytics.FlusherOptions{Now: func() time.Time { return monday.Add(time.Second) }}, m, nil)
	rec.RecordTenantVisit("acme", "go", monday, visitclass.Human, nil, 0)
	rec.RecordTenantVisit("acme", "gh", monday, visitclass.Human, nil, 0)
	rec.RecordTenantVisit("acme", "go", monday, visitclass.Bot, nil, 0)
	rec.RecordTenantVisit("", "go", monday, visitclass.Human, nil, 0)
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	series := func() map[string]float64 {
		out := map[string]float64{}
		for _, s := range testkit.Samples(t, reg)["linkgate_tenant_visits_total"] {
			out[s.Labels["tenant"]+" "+s.Labels["kind"]] = s.Value
		}
		return out
	}
	if got := fmt.Sprint(series()); got != "map[acme bot:1 acme human:2]" {
		t.Errorf("after acme's visits and the default tenant's: %s", got)
	}
	for i := range analytics.MaxTenantLabels + 20 {
		rec.RecordTenantVisit(fmt.Sprintf("t%03d", i), "go", monday, visitclass.Human, nil, 0)
	}
	rec.RecordTenantVisit("acme", "go", monday, visitclass.Human, nil, 0)
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	got := series()
	named, other := 0, got[analytics.OtherTenants+" human"]
	for k := range got {
		if k != analytics.OtherTenants+" human" && k != "acme bot" {
			named++
		}
	}
	if named != analytics.MaxTenantLabels || other != 21 || got["acme human"] != 3 {
		t.Errorf("with %d more tenants: %d tenants named, %v visits under %s, acme's %v: want %d named, 21 under %s, acme's 3",
			analytics.MaxTenantLabels+20, named, other, analytics.OtherTenants, got["acme human"], analytics.MaxTenantLabels, analytics.OtherTenants)
	}
}
