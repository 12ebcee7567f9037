package gateway

import (
	"fmt"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/tenant"
)

// checkTenantRetention refuses a tenant's retention longer than the
// service's (the longest its tiers keep counts), naming the field: a
// tenant can keep its counts for less time than the service, never more.
func checkTenantRetention(cfg *config.Config, tenants *tenant.Plan, an *analytics.Plan) error {
	keep := tenants.Retentions()
	if len(keep) == 0 {
		return nil
	}
	var longest rollup.Tier
	for _, t := range an.Config().Retention {
		if t.Expires() && t.Retention > longest.Retention {
			longest = t
		}
	}
	for i, t := range cfg.Tenants {
		d, ok := keep[t.Name]
		switch {
		case !ok:
		case d > longest.Retention:
			return fmt.Errorf("tenants[%d].retention: %s is longer than the service keeps counts (%s, analytics.retention's %v): a tenant's retention can only be shorter",
				i, rollup.FormatDuration(d), rollup.FormatDuration(longest.Retention), longest)
		}
	}
	return nil
}
