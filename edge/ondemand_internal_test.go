package edge

import (
	"testing"
	"time"
)

// TestOrderCaps: new orders are charged to the gateway, and those made for
// a handshake to its client and to the name's registered domain (the
// public suffix and one label); each cap refuses without charging anyone,
// and an hour after an order its charge is gone. An order no handshake
// asked for (acme.domains) is charged to the gateway alone.
func TestOrderCaps(t *testing.T) {
	g := &gate{charged: map[string][]time.Time{}}
	g.plan.Store(&Plan{cfg: Config{OnDemand: OnDemand{OrdersPerHour: 4, OrdersPerHourPerClient: 2, OrdersPerHourPerDomain: 2}}})
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	for _, step := range []struct {
		at           time.Duration
		name, client string
		want         error
	}{
		{0, "a.brand.co.uk", "198.51.100.1", nil},
		{1 * time.Minute, "b.brand.co.uk", "198.51.100.2", nil},
		{2 * time.Minute, "c.brand.co.uk", "198.51.100.3", errDomainOrderCap}, // brand.co.uk has had 2
		{3 * time.Minute, "other.example", "198.51.100.1", nil},
		{4 * time.Minute, "third.example", "198.51.100.1", errClientOrderCap},           // 198.51.100.1 has had 2
		{5 * time.Minute, "listed.example", "", nil},                                    // acme.domains: the gateway's alone
		{6 * time.Minute, "fourth.example", "198.51.100.9", errOrderCap},                // 4 this hour
		{60 * time.Minute, "c.brand.co.uk", "198.51.100.3", nil},                        // the first order's charges are gone
		{60*time.Minute + 30*time.Second, "d.brand.co.uk", "198.51.100.5", errOrderCap}, // b, other, listed, c
		{61 * time.Minute, "com", "198.51.100.4", nil},                                  // a public suffix counts as its own domain
	} {
		if got := g.order(step.name, step.client, t0.Add(step.at)); got != step.want {
			t.Errorf("at %v, %s for %s: %v, want %v", step.at, step.name, step.client, got, step.want)
		}
	}
	if n := len(g.charged); n > 2*4 {
		t.Errorf("%d keys charged, want at most twice orders_per_hour", n)
	}
}
