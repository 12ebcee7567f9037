// Package tenant holds the tenants of a gateway: named sets of hosts, one
// per customer of the link service, whose links are counted and read apart.
// With tenants, a link is a tenant and a short key: go.acme.example/x and
// go.other.example/x are two links when their hosts belong to two tenants,
// and within one tenant a key is one link on all its hosts. A host in no
// tenant is in the default tenant (""), whose links are counted as they
// always were.
//
// A tenant is declared in the config (the "tenants" list, compiled into a
// Plan), or learned from the on-demand ask endpoint's answers (Learned: the
// edge tells it the tenant an allowed name belongs to). A Resolver answers
// a request's tenant from both, the config first; it is read on every visit
// and costs two map reads and no allocation.
package tenant

import (
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/route"
)

// Config is one entry of the "tenants" list.
type Config struct {
	// Name names the tenant in tokens, in the stats API's tenant=
	// parameter, in metrics and in stored keys: 1 to 63 lower-case
	// letters, digits and "-", starting with a letter or a digit.
	Name string `yaml:"name"`
	// Hosts are the tenant's names as a request's Host names them:
	// exact names (or IP addresses) and *.suffix wildcards one label deep.
	// A host is in one tenant at most.
	Hosts []string `yaml:"hosts"`
	// Retention is how long the tenant's counts are kept, when shorter
	// than the service's: a duration like 90d ("" keeps the service's).
	Retention string `yaml:"retention,omitempty"`
}

// nameRE is a tenant's name: what a DNS label or a Prometheus label value
// holds without quoting, and nothing a stored key, a URL or a Graphite
// path would have to escape.
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidName reports whether s can name a tenant.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// Plan is the compiled "tenants" list: which tenant each configured host
// pattern is in. It is immutable; the zero Plan (or nil) has no tenant.
type Plan struct {
	cfg   []Config
	hosts route.Hosts[string]
	names map[string]int           // name → index in cfg
	keep  map[string]time.Duration // name → retention, for those that have one
}

// Compile checks the "tenants" list and returns its Plan. Errors start
// with the field's path in the config file (tenants[1].hosts[0]: ...).
func Compile(list []Config) (*Plan, error) {
	p := &Plan{cfg: list, names: make(map[string]int, len(list))}
	where := map[string]string{} // a normalized host pattern → where it was first listed
	for i, t := range list {
		field := fmt.Sprintf("tenants[%d]", i)
		if !ValidName(t.Name) {
			return nil, fmt.Errorf("%s.name: %q is not a tenant name: 1 to 63 lower-case letters, digits and -, starting with a letter or a digit", field, t.Name)
		}
		if j, dup := p.names[t.Name]; dup {
			return nil, fmt.Errorf("%s.name: %q is also tenants[%d]'s name", field, t.Name, j)
		}
		p.names[t.Name] = i
		if t.Retention != "" {
			d, err := rollup.ParseDuration(t.Retention)
			if err != nil || d < MinRetention {
				return nil, fmt.Errorf("%s.retention: %q is not a duration of at least an hour, like 90d", field, t.Retention)
			}
			if p.keep == nil {
				p.keep = make(map[string]time.Duration)
			}
			p.keep[t.Name] = d
		}
		if len(t.Hosts) == 0 {
			return nil, fmt.Errorf("%s.hosts: none given; list the tenant's names, like [go.acme.example, \"*.acme.example\"]", field)
		}
		for j, h := range t.Hosts {
			at := fmt.Sprintf("%s.hosts[%d]", field, j)
			n, err := route.HostPattern(h)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", at, err)
			}
			if first, dup := where[n]; dup {
				return nil, fmt.Errorf("%s: %q is already in %s: a host is in one tenant", at, h, first)
			}
			where[n] = at
			if err := p.hosts.Add(n, t.Name); err != nil {
				return nil, fmt.Errorf("%s: %w", at, err) // not reached: HostPattern and where checked it
			}
		}
	}
	return p, nil
}

// MinRetention is the shortest retention a tenant may have: the embedded
// store expires old counts hourly.
const MinRetention = time.Hour

// Retentions returns the retention of each tenant that has one, by name.
func (p *Plan) Retentions() map[string]time.Duration {
	if p == nil {
		return nil
	}
	return p.keep
}

// Len returns the number of tenants p declares.
func (p *Plan) Len() int {
	if p == nil {
		return 0
	}
	return len(p.cfg)
}

// Names returns the names of the tenants p declares, in config order.
func (p *Plan) Names() []string {
	if p == nil {
		return nil
	}
	out := make([]string, len(p.cfg))
	for i, t := range p.cfg {
		out[i] = t.Name
	}
	return out
}

// Declared reports whether p declares the tenant name.
func (p *Plan) Declared(name string) bool {
	if p == nil {
		return false
	}
	_, ok := p.names[name]
	return ok
}

// Of returns the tenant p puts host in (a request's Host or :authority, as
// route.Hosts.Lookup takes it), ok false when none.
func (p *Plan) Of(host string) (string, bool) {
	if p == nil {
		return "", false
	}
	return p.hosts.Lookup(host)
}

// MaxLearned is how many hosts a Learned remembers at most: as many as the
// edge keeps answers of the ask endpoint.
const MaxLearned = 100_000

// Learned is what the on-demand ask endpoint said of the hosts it allowed:
// the tenant each is in. It lives as long as the process (the edge asks
// again for every name after a restart, before serving it), keeps at most
// MaxLearned hosts, and is safe for concurrent use; its zero value is
// empty and ready. Reading it takes no lock.
type Learned struct {
	m    sync.Map // host (route.RequestHost form) → tenant name
	n    atomic.Int64
	full atomic.Bool // a host was not learned because MaxLearned were
}

// Set records that the ask endpoint put host in tenant ("" or a name that
// is not valid: in no tenant, so a host it moved out of its tenant is
// forgotten). It reports false when tenant is not a valid name, or when
// MaxLearned hosts are known already and host is not one of them.
func (l *Learned) Set(host, tenant string) bool {
	host = route.RequestHost(host)
	if tenant == "" || !ValidName(tenant) {
		if _, had := l.m.LoadAndDelete(host); had {
			l.n.Add(-1)
		}
		return tenant == ""
	}
	if old, ok := l.m.Load(host); ok {
		if old != tenant {
			l.m.Store(host, tenant)
		}
		return true
	}
	if l.n.Add(1) > MaxLearned {
		l.n.Add(-1)
		l.full.Store(true)
		return false
	}
	if _, loaded := l.m.LoadOrStore(host, tenant); loaded {
		l.n.Add(-1)
		l.m.Store(host, tenant)
	}
	return true
}

// Of returns the tenant learned for host, ok false when none.
func (l *Learned) Of(host string) (string, bool) {
	if l == nil || l.n.Load() == 0 {
		return "", false
	}
	v, ok := l.m.Load(route.RequestHost(host))
	if !ok {
		return "", false
	}
	return v.(string), true
}

// Len returns how many hosts l knows the tenant of.
func (l *Learned) Len() int { return int(l.n.Load()) }

// Resolver answers the tenant of a request's host: the config's, else the
// ask endpoint's, else the default tenant (""). It is safe for concurrent
// use; build one per config snapshot with NewResolver.
type Resolver struct {
	plan    *Plan
	learned *Learned
}

// NewResolver returns the Resolver of plan and learned (either may be nil).
func NewResolver(plan *Plan, learned *Learned) *Resolver {
	return &Resolver{plan: plan, learned: learned}
}

// Of returns the tenant of host ("" for the default tenant).
func (r *Resolver) Of(host string) string {
	if r == nil {
		return ""
	}
	if t, ok := r.plan.Of(host); ok {
		return t
	}
	t, _ := r.learned.Of(host)
	return t
}

// Declared reports whether the config declares the tenant name.
func (r *Resolver) Declared(name string) bool { return r != nil && r.plan.Declared(name) }
