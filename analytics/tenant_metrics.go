package analytics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/internal/metric"
)

// MaxTenantLabels is how many tenants linkgate_tenant_visits_total names:
// the first seen since the process started; the visits of every other
// tenant are counted under OtherTenants, so that the series a gateway
// exports stay bounded however many tenants the ask endpoint names.
const MaxTenantLabels = 100

// OtherTenants is the tenant label value of the tenants beyond
// MaxTenantLabels: no tenant's name holds an underscore.
const OtherTenants = "_other"

// tenantVisits counts visits per tenant, under at most MaxTenantLabels
// tenant label values (and OtherTenants).
type tenantVisits struct {
	vec   *prometheus.CounterVec
	mu    sync.Mutex
	named map[string]bool
}

func newTenantVisits(s metric.Set) *tenantVisits {
	vec := s.CounterVec("linkgate_tenant_visits_total", "Visits recorded per tenant (the default tenant's not), by kind (human or bot); added when the flusher takes them. The first 100 tenants seen are named, the rest counted under tenant=\"_other\".", "tenant", "kind")
	return &tenantVisits{vec: vec, named: make(map[string]bool)}
}

// label returns the label value tenant is counted under.
func (tv *tenantVisits) label(tenant string) string {
	tv.mu.Lock()
	defer tv.mu.Unlock()
	if tv.named[tenant] {
		return tenant
	}
	if len(tv.named) < MaxTenantLabels {
		tv.named[tenant] = true
		return tenant
	}
	return OtherTenants
}

// tenantsRecorded adds the visits of each tenant's all-links entry
// (TenantAll) in the links taken by a swap.
func (m *Metrics) tenantsRecorded(links []map[string]*entry) {
	if m == nil {
		return
	}
	for _, l := range links {
		for key, e := range l {
			if !isTenantAll(key) {
				continue
			}
			var v Visits
			e.each(func(c minuteCount) {
				v.Human += c.Human
				v.Bot += c.Bot
			})
			name := m.tenants.label(key[:len(key)-1])
			if v.Human > 0 {
				m.tenants.vec.WithLabelValues(name, "human").Add(float64(v.Human))
			}
			if v.Bot > 0 {
				m.tenants.vec.WithLabelValues(name, "bot").Add(float64(v.Bot))
			}
		}
	}
}
