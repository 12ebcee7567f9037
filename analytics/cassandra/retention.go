package cassandra

import (
	"maps"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// Per-tenant retention
//
// A tenant may keep its counts for less time than the service's tiers do
// (SetTenantRetention). Cassandra expires rows by themselves, so every row
// of a tenant's link is written with the shorter of two TTLs: its tier's
// (or the breakdowns' retention) and the tenant's, counted from the end
// of the time the row is about. Rows of the all-time tier, which have no
// TTL otherwise, get the tenant's. Rows written before a retention was set
// or shortened keep the TTL they were written with.

// SetTenantRetention sets how long each tenant's counts are kept, by
// name: at most the service's retention (the gateway's config checks it);
// a tenant not in m keeps the service's. It applies to rows written from
// now on.
func (s *Store) SetTenantRetention(m map[string]time.Duration) {
	c := maps.Clone(m)
	s.tenantKeep.Store(&c)
}

// retentionOf returns the retention of key's tenant, when it has one.
func (s *Store) retentionOf(key string) (time.Duration, bool) {
	m := s.tenantKeep.Load()
	if m == nil || len(*m) == 0 {
		return 0, false
	}
	tenant, _ := analytics.SplitKey(logicalKey(key)) // a TenantAll key's too, in any epoch
	d, ok := (*m)[tenant]
	return d, ok && tenant != ""
}

// tierTTL is ttlSeconds for a row of key: the tenant's retention, when it
// has one, shortens the TTL, and gives the all-time tier's rows one.
func (s *Store) tierTTL(key string, t rollup.Tier, start, at time.Time) (ttl int, keep bool) {
	ttl, keep = ttlSeconds(t, start, at)
	d, ok := s.retentionOf(key)
	if !ok || !keep {
		return ttl, keep
	}
	tt := ttlOf(start.Add(t.Step + d).Sub(at))
	if t.Expires() {
		tt = min(tt, ttl)
	}
	return tt, tt > 0
}

// dayTTL returns ttl, the TTL of a row of key about the UTC day day,
// shortened by the retention of key's tenant when it has one.
func (s *Store) dayTTL(key string, ttl int, day, at time.Time) int {
	d, ok := s.retentionOf(key)
	if !ok {
		return ttl
	}
	return min(ttl, ttlOf(day.Add(rollup.Day+d).Sub(at)))
}
