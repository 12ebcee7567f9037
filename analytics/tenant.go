package analytics

import (
	"strings"
	"time"

	"github.com/linkgate/linkgate/visitclass"
	"github.com/linkgate/linkgate/visitor"
)

// Tenants
//
// A link is a tenant and a short key (package tenant). The default tenant's
// links are stored under their short keys, as they always were, so that an
// install without tenants stores exactly what it did; a tenant's link is
// stored under "<tenant>/<short_key>", and the tenant's links together
// under "<tenant>/" (TenantAll), beside AllLinks ("/"), which counts every
// visit of every tenant. No short key holds a "/" (a path segment cannot,
// and the visit counter counts none that does), and a tenant's name holds
// none either, so no key of one tenant is a key of another.
//
// The recorder counts a tenant's visit in its link's entry and in the
// tenant's all-links entry at once (SplitKey tells them from the key), and
// the stores keep a top list per tenant beside the service's (TopSource's
// TenantTop), from the same per-link counts of the day.

// TenantKey returns the key the link short of tenant is stored under:
// short itself in the default tenant ("").
func TenantKey(tenant, short string) string {
	if tenant == "" {
		return short
	}
	return tenant + "/" + short
}

// TenantAll returns the key the visits of all of tenant's links together
// are stored under: AllLinks for the default tenant, which is every visit
// of every tenant.
func TenantAll(tenant string) string {
	if tenant == "" {
		return AllLinks
	}
	return tenant + "/"
}

// SplitKey returns the tenant and the short key of a stored key: short is
// "" for a key of all links (AllLinks, or a tenant's TenantAll).
func SplitKey(key string) (tenant, short string) {
	if key == AllLinks {
		return "", ""
	}
	if i := strings.IndexByte(key, '/'); i > 0 {
		return key[:i], key[i+1:]
	}
	return "", key
}

// isTenantAll reports whether key is a tenant's TenantAll key.
func isTenantAll(key string) bool {
	return len(key) > 1 && key[len(key)-1] == '/'
}

// recordTenantAll counts a visit in its tenant's all-links entry of s, agg
// being the tenant's TenantAll key (it may point into the shard's scratch):
// tracked and followed live whatever the caps, since there are as many
// as tenants. Called with s.mu held.
func (r *Recorder) recordTenantAll(s *shard, agg string, minute int64, day int32, tick uint32, class visitclass.Class, f *visitor.Features, uniq uint64, maxValues int) {
	e := s.links[agg]
	if e == nil {
		agg = strings.Clone(agg)
		e = &entry{last: minuteCount{minute: minute}}
		s.links[agg] = e
		cost := int64(len(agg)) + linkOverhead
		s.bytes += cost
		r.bytes.Add(cost)
	}
	e.add(minute, class)
	if lr := e.live; lr == nil || lr.dead {
		if e.live = s.live[agg]; e.live == nil {
			if s.live == nil {
				s.live = make(map[string]*liveRing)
			}
			e.live = &liveRing{}
			s.live[strings.Clone(agg)] = e.live
			r.liveRings.Add(1) // counted, so that a sweep's decrement balances it
		}
	}
	e.live.add(tick, class)
	r.addFeatures(s, e, day, class == visitclass.Human, f, uniq, maxValues)
}

// TenantRetainer is a Store that keeps some tenants' counts for less time
// than its tiers do.
type TenantRetainer interface {
	// SetTenantRetention sets each named tenant's retention; a tenant
	// not named keeps the tiers'.
	SetTenantRetention(map[string]time.Duration)
}

// SetTenantRetention passes each tenant's retention to the store, when it
// applies them (TenantRetainer).
func (p *Pipeline) SetTenantRetention(m map[string]time.Duration) {
	if r, ok := p.store.(TenantRetainer); ok {
		r.SetTenantRetention(m)
	}
}
