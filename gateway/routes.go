package gateway

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/linkgate/linkgate/cache"
	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/problem"
	"github.com/linkgate/linkgate/proxy"
	"github.com/linkgate/linkgate/route"
)

// poolPlan is one upstream pool of a Plan: the default pool (the upstream
// section) or a route's.
type poolPlan struct {
	name  string   // "upstream" or "routes[2]", as logs and the health detail name it
	hosts []string // the route's hosts as written; none for the default pool
	proxy *proxy.Plan
	// cacheTTL is the cache's default_ttl for the pool's hosts: the
	// route's, else the cache section's.
	cacheTTL time.Duration
}

// compilePools compiles the upstream section, the default pool, and the
// routes: each route's hosts (exact names and *.suffix, each in one route
// at most) and pool. Without routes the upstream section is required, as
// it always was; with routes it may list no target, and then a host no
// route names has no pool (421). It returns the pools, the default one
// first when there is one, the route of each host pattern as an index
// into them, and the default pool's index, -1 for none.
func compilePools(cfg *config.Config, trust *forwarded.Trust, headers forwarded.Policy) (pools []poolPlan, hosts *route.Hosts[int], fallback int, err error) {
	fallback = -1
	if len(cfg.Upstream.Targets) > 0 || len(cfg.Routes) == 0 {
		pp, err := proxy.Compile(cfg.Upstream, trust, headers)
		if err != nil {
			return nil, nil, 0, err
		}
		fallback = 0
		pools = append(pools, poolPlan{name: "upstream", proxy: pp, cacheTTL: cfg.Cache.DefaultTTL})
	} else if cfg.Upstream.TLS != (proxy.TLS{}) {
		return nil, nil, 0, fmt.Errorf("upstream.tls: set, but upstream lists no targets: with routes and no upstream.targets there is no default pool, and requests for other hosts are answered 421")
	} else if err := proxy.CheckBounds("upstream", cfg.Upstream); err != nil {
		return nil, nil, 0, err
	}
	hosts = &route.Hosts[int]{}
	seen := map[string]string{} // normalized pattern → where it was first listed
	for i, r := range cfg.Routes {
		field := fmt.Sprintf("routes[%d]", i)
		if len(r.Hosts) == 0 {
			return nil, nil, 0, fmt.Errorf("%s.hosts: none given; list the names the route serves, like [sho.rt, \"*.sho.rt\"]", field)
		}
		for j, h := range r.Hosts {
			n, err := route.HostPattern(h)
			if err != nil {
				return nil, nil, 0, fmt.Errorf("%s.hosts[%d]: %w", field, j, err)
			}
			at := fmt.Sprintf("%s.hosts[%d]", field, j)
			if first, dup := seen[n]; dup {
				return nil, nil, 0, fmt.Errorf("%s: %q is already in %s: a host has one route", at, h, first)
			}
			seen[n] = at
			if err := hosts.Add(n, len(pools)); err != nil {
				return nil, nil, 0, fmt.Errorf("%s: %w", at, err) // not reached: HostPattern and seen checked it
			}
		}
		pp, err := proxy.CompileAt(field+".upstream", r.Upstream, trust, headers)
		if err != nil {
			return nil, nil, 0, err
		}
		if err := cache.CheckRoute(field+".cache", r.Cache); err != nil {
			return nil, nil, 0, err
		}
		ttl := cfg.Cache.DefaultTTL
		if r.Cache.DefaultTTL != nil {
			ttl = *r.Cache.DefaultTTL
		}
		pools = append(pools, poolPlan{name: field, hosts: slices.Clone(r.Hosts), proxy: pp, cacheTTL: ttl})
	}
	return pools, hosts, fallback, nil
}

// pool is a poolPlan running in a snapshot: its Proxy (shared with the
// other pools of the snapshot whose plans are Equal, and kept from the
// running snapshot on reload while its plan does not change) and the
// chain in front of it.
type pool struct {
	plan    *poolPlan
	proxy   *proxy.Proxy
	handler http.Handler // limiter → visit counter → cache → proxy, set by build
}

// buildPools makes the pools of s's plan, their handlers left to build:
// it reuses the Proxies of old whose plans are Equal and renews the others
// from old's, so that the targets that stay keep their connections. A
// Proxy whose plan is Equal to another pool's of s is shared.
func (g *Gateway) buildPools(s *snapshot, old *snapshot) {
	var running []*proxy.Proxy
	var oldPools []*pool
	if old != nil {
		running, oldPools = old.proxies(), old.pools
	}
	for i := range s.plan.pools {
		pp := &s.plan.pools[i]
		var px *proxy.Proxy
		for _, p := range slices.Concat(s.pools, oldPools) {
			if p.plan.proxy.Equal(pp.proxy) {
				px = p.proxy
				break
			}
		}
		if px == nil {
			px = proxy.Renew(slices.Concat(running, s.proxies()), pp.proxy, g.proxyM, g.log.With("pool", pp.name))
		}
		s.pools = append(s.pools, &pool{plan: pp, proxy: px})
	}
}

// proxies returns the distinct Proxies of s's pools, in pool order.
func (s *snapshot) proxies() []*proxy.Proxy {
	var out []*proxy.Proxy
	for _, p := range s.pools {
		if !slices.Contains(out, p.proxy) {
			out = append(out, p.proxy)
		}
	}
	return out
}

// ready reports whether some target of some pool is healthy: the gateway
// can serve something. A pool whose targets are all down answers 502 for
// its hosts alone; taking the gateway out of its load balancer would take
// the other hosts down with it.
func (s *snapshot) ready() bool {
	return slices.ContainsFunc(s.pools, func(p *pool) bool { return p.proxy.Ready() })
}

// router returns the handler that sends a request to the pool of its
// host (Request.Host: the Host header, or the host of an absolute request
// line, as the upstream receives it; never X-Forwarded-Host, which a
// client could set): the route naming it, else the default pool, else a
// 421. Without routes it is the default pool's handler itself.
func (s *snapshot) router() http.Handler {
	hosts, fallback := s.plan.hosts, s.plan.fallback
	if hosts.Len() == 0 {
		return s.pools[fallback].handler
	}
	handlers := make([]http.Handler, len(s.pools))
	for i, p := range s.pools {
		handlers[i] = p.handler
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if i, ok := hosts.Lookup(r.Host); ok {
			handlers[i].ServeHTTP(w, r)
			return
		}
		if fallback >= 0 {
			handlers[fallback].ServeHTTP(w, r)
			return
		}
		misdirected(w)
	})
}

// misdirected answers a request for a host this gateway has no pool for:
// 421 Misdirected Request (RFC 9110 section 15.5.20), which tells an
// HTTP/2 client that reused a connection for another name to retry on a
// connection of its own (RFC 9113 section 9.1.2). The host is not echoed.
func misdirected(w http.ResponseWriter) {
	problem.Write(w, http.StatusMisdirectedRequest, "this gateway serves no route for the request's host (routes), and has no default pool (upstream.targets)")
}

// PoolHealth is one pool in the health detail.
type PoolHealth struct {
	Pool    string               `json:"pool"`            // "upstream" or "routes[2]"
	Hosts   []string             `json:"hosts,omitempty"` // as the route lists them
	Ready   bool                 `json:"ready"`           // some target is healthy
	Targets []proxy.TargetStatus `json:"targets"`
}

// poolHealth returns the health of s's pools, in config order.
func (s *snapshot) poolHealth() []PoolHealth {
	out := make([]PoolHealth, len(s.pools))
	for i, p := range s.pools {
		out[i] = PoolHealth{Pool: p.plan.name, Hosts: p.plan.hosts, Ready: p.proxy.Ready(), Targets: p.proxy.Status()}
	}
	return out
}
