// Package gateway is linkgate as a whole: it compiles a config file into a
// Plan (Compile, the one step check-config, start-up and every reload run),
// builds from it the snapshot that serves requests, swaps a new snapshot in
// on reload, serves the client and admin listeners, and shuts down in
// order. The command (cmd/gateway) only parses flags and signals.
//
// A request goes: Gateway.ServeHTTP → the current snapshot's chain → the
// stats API (under stats.prefix, on stats.host when set; never proxied),
// or the pool of its host (routes, else the upstream section, else a 421)
// → the limiter (limit.Limiter.Middleware) → the visit counter
// (analytics.Pipeline.Middleware) → the redirect cache (cache.Store's
// Handler) → the pool's reverse proxy (proxy.Proxy).
//
// What lives how long:
//   - the process: metrics, the analytics pipeline (recorder, flusher,
//     store), the cache's entries, the listeners and their http.Server
//     settings;
//   - a snapshot: the compiled plan, the router, the limiter (over a store
//     kept while its settings do not change), a proxy per pool (kept while
//     the pool's section and the trusted proxies do not change; a proxy
//     built on reload keeps the connections of the targets that stay, in
//     whichever pool they were).
//
// A reload compiles the file, builds a new snapshot and swaps it in
// atomically; a request reads the snapshot once, so it finishes on the
// config it started with. A reload that fails for any reason, a panic in
// a constructor included, leaves the running snapshot serving, releases
// what it built, counts linkgate_config_reloads_total{result="failed"}
// and says why.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/cassandra"
	"github.com/linkgate/linkgate/analytics/pebblestore"
	"github.com/linkgate/linkgate/bound"
	"github.com/linkgate/linkgate/cache"
	cachefleet "github.com/linkgate/linkgate/cache/memcached"
	"github.com/linkgate/linkgate/cidroute"
	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/edge"
	"github.com/linkgate/linkgate/h2guard"
	"github.com/linkgate/linkgate/internal/cqlsession"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/limit/memcached"
	"github.com/linkgate/linkgate/logthrottle"
	"github.com/linkgate/linkgate/problem"
	"github.com/linkgate/linkgate/proxy"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/route"
	"github.com/linkgate/linkgate/stats"
	"github.com/linkgate/linkgate/tenant"
	"github.com/linkgate/linkgate/tracing"
	"github.com/linkgate/linkgate/upgrade"
)

// Options are what a Gateway needs besides its Plan.
type Options struct {
	// Path is the config file, read again by every reload. Empty: reloads
	// fail (a Gateway built from a Plan of bytes).
	Path string
	// Getenv reads the environment variables the file names for tokens.
	// Nil: os.Getenv.
	Getenv func(string) string
	// Log receives the gateway's logs. Nil: discarded.
	Log *slog.Logger
	// Watch reloads the config when the file's content changes.
	Watch bool
	// Hangup delivers SIGHUP: each value reloads the config. Nil: none.
	Hangup <-chan os.Signal
	// Version is logged at start.
	Version string
	// Listen makes New bind the listeners (as Listen does) before it
	// starts anything else, the analytics pipeline above all: a start that
	// cannot listen then fails with nothing started, stopped or logged.
	// Otherwise Listen, or Serve, binds them later.
	Listen bool
	// LimitClock is the clock the limiter's windows and penalty boxes
	// count in. Nil: the system clock. Tests drive it.
	LimitClock func() time.Time
	// Upgrade is the process's side of binary upgrades: the listeners are
	// bound through it (those the process this one replaces handed over,
	// when it was started by an upgrade: the journal and the embedded
	// store are then opened once that process is done with them), Serve
	// says through it when it serves (to that process, and to systemd),
	// and each value of Upgrades starts the new process through it. Nil:
	// listeners bound directly, no upgrades.
	Upgrade *upgrade.Process
	// Upgrades delivers SIGUSR2: each value starts a new process of the
	// binary (Upgrade) and, once it serves, stops this one as its context
	// ending would, but for systemd's STOPPING=1. Nil: none.
	Upgrades <-chan os.Signal
	// UpgradeTimeout bounds the wait for a new process to say it serves.
	// Default DefaultUpgradeTimeout.
	UpgradeTimeout time.Duration
}

// DefaultUpgradeTimeout is how long a binary upgrade waits for the new
// process to serve before it kills it and serves on: compiling the
// config, binding and opening what the new process opens at start takes
// seconds even on a loaded machine.
const DefaultUpgradeTimeout = time.Minute

// Gateway is a running linkgate: the long-lived parts and the current
// snapshot. Its methods are safe for concurrent use. Create it with New,
// run it with Serve (or Listen then Serve), stop it by cancelling Serve's
// context; Close releases a Gateway that never served.
type Gateway struct {
	opts Options
	log  *slog.Logger

	reg     *prometheus.Registry
	m       *metrics
	proxyM  *proxy.Metrics
	limitM  *limit.Metrics
	mcM     *memcached.Metrics
	visitsM *analytics.Metrics
	edgeM   *edge.Metrics
	h2M     *h2guard.Metrics
	cacheM  *cache.Metrics
	traceM  *tracing.Metrics

	// tracer exports the traces of requests and background runs for the
	// life of the process (nil when tracing is off): the collector, its
	// fields and the queue change only on restart, the sample on reload.
	tracer *tracing.Tracer

	// pipeline runs for the life of the process (nil when analytics are
	// off): counts in memory survive reloads, the store is chosen at start.
	pipeline *analytics.Pipeline
	// cache holds the upstream's answers for the life of the process:
	// a reload resizes it (cache.max_bytes) and keeps its entries.
	cache *cache.Store
	// streams bounds the live streams of /stats, which outlive reloads.
	streams *stats.Streams
	// loop is the mark this gateway sets on the requests it proxies, and
	// refuses on those it receives (see loopMark).
	loop loopMark
	// withheld throttles the log of the tokens withhold removes: a line
	// per token and 10 s.
	withheld logthrottle.Throttle[string]
	// cql holds the Cassandra sessions: the analytics store and the
	// certificate storage share one when they name the same cluster.
	cql *cqlsession.Pool
	// learned is the tenants the on-demand ask endpoint named, which
	// outlive reloads; tenantLog throttles what is said of those it could
	// not take.
	learned   *tenant.Learned
	tenantLog logthrottle.Throttle[string]

	mu     sync.Mutex // serializes reloads and Close
	closed bool       // guarded by mu
	cur    atomic.Pointer[snapshot]

	ln, aln   net.Listener   // bound by Listen
	hln, cln  net.Listener   // server.http_listen, server.internal_listen; bound by Listen
	uln       *cidroute.Conn // server.http3's UDP socket at server.listen's address; bound by Listen
	started   bool           // Listen bound the listeners and started the edge
	edge      *edge.Edge     // the TLS edge, built by Listen; nil without server.tls
	closeOnce sync.Once
	closeErr  error
}

// snapshot is everything one config implies. It is never modified.
type snapshot struct {
	plan       *Plan
	eff        *config.Config // the file, with the running values of the restart-only fields
	gen        int64
	handler    http.Handler
	pools      []*pool // in plan.pools' order
	limitStore limitStore
	limiter    *limit.Limiter
	fleet      *cachefleet.Fleet // the cache's purges through the limiter's memcached; nil without
	stats      *stats.API        // nil when analytics are off
}

// limitStore is a limiter backend and how to release it.
type limitStore interface {
	limit.Store
	io.Closer
}

// New builds a Gateway from plan: the metrics, the analytics pipeline
// and the first snapshot. The analytics store, embedded or Cassandra,
// opens in the background (see Health), so a broken store never keeps the
// gateway from proxying. New fails only when a resource cannot be had
// (with opts.Listen, a listener: its port in use), never on config
// grounds: plan was checked by Compile.
func New(plan *Plan, opts Options) (*Gateway, error) {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	g := &Gateway{
		opts: opts, log: opts.Log, reg: reg,
		m:       newMetrics(reg),
		proxyM:  proxy.NewMetrics(reg),
		limitM:  limit.NewMetrics(reg),
		mcM:     memcached.NewMetrics(reg),
		visitsM: analytics.NewMetrics(reg),
		edgeM:   edge.NewMetrics(reg),
		h2M:     h2guard.NewMetrics(reg),
		cacheM:  cache.NewMetrics(reg),
		traceM:  tracing.NewMetrics(reg),
		streams: stats.NewStreams(plan.cfg.Stats.Live),
		loop:    newLoopMark(),
		cql:     cqlsession.NewPool(opts.Log.With("component", "cassandra")),
		learned: &tenant.Learned{},
	}
	g.withheld.Every = 10 * time.Second
	g.tenantLog.Every = 10 * time.Second
	g.cache = cache.NewStore(plan.cache.Config().MaxBytes, g.cacheM, nil)
	if opts.Listen {
		if err := g.bind(plan.cfg); err != nil {
			return nil, err
		}
	}
	var err error
	if g.tracer, err = tracing.Start(plan.tracing, opts.Version, g.traceM, g.log.With("component", "tracing")); err != nil {
		g.closeListeners()
		return nil, err
	}
	if plan.cfg.Analytics.Enabled {
		store, err := g.openAnalyticsStore(plan.analytics)
		if err != nil {
			g.tracer.Shutdown(context.Background())
			g.closeListeners()
			return nil, err
		}
		g.pipeline = analytics.NewPipelineAfter(g.predecessor(), plan.analytics, store, g.visitsM, g.log, g.tracer.Tracer())
		g.pipeline.SetTenantRetention(plan.tenants.Retentions())
	}
	s, err := g.build(plan, plan.cfg, nil)
	if err != nil {
		if g.pipeline != nil {
			g.pipeline.Close(context.Background())
		}
		g.tracer.Shutdown(context.Background())
		g.closeListeners()
		return nil, err
	}
	if plan.adminToken == "" {
		g.log.Warn("the admin API is off: /admin/* answers 403", "reason", adminOffReason(plan.cfg))
	}
	applyRuntime(plan.cfg.Runtime)
	g.cur.Store(s)
	g.useCache(s)
	g.limitM.Serve(s.limiter)
	g.useStreams(s)
	g.m.generation.Set(float64(s.gen))
	return g, nil
}

// Bounds of runtime.memory_limit. The floor is what a gateway runs in:
// 7 MiB of runtime memory idle and 24 MiB under 32 connections of load
// (with the embedded store and a rule on the visits), and, in the image
// (built without cgo), the embedded store's block cache (64 MiB) and two
// memtables (4 to 32 MiB each) on the Go heap besides: under a lower limit
// the collector would run without end once they fill. The top is the
// journal's.
const (
	minMemoryLimit = 128 << 20
	maxMemoryLimit = 1 << 40
)

// runtimeBounds are the ranges of the runtime section's numbers, checked
// first.
var runtimeBounds = bound.Section[config.Runtime]{
	bound.At("memory_limit", bound.Sizes(minMemoryLimit, maxMemoryLimit).OrZero("none"), func(r config.Runtime) int64 { return r.MemoryLimit }),
}

// compileRuntime checks the runtime section.
func compileRuntime(r config.Runtime) error {
	if err := runtimeBounds.Check("runtime", r); err != nil {
		return err
	}
	switch {
	case r.GOGC < -1:
		return fmt.Errorf("runtime.gogc: %d: want a percentage, or -1 for no collection until runtime.memory_limit", r.GOGC)
	case r.GOGC == -1 && r.MemoryLimit == 0:
		return fmt.Errorf("runtime.gogc: -1 (no collection) needs a runtime.memory_limit, or the heap grows without bound")
	}
	return nil
}

// applyRuntime sets the garbage collector from the runtime section, over
// the GOGC and GOMEMLIMIT environment variables. It is process-wide: the
// last gateway started or reloaded in a process sets it.
func applyRuntime(r config.Runtime) {
	debug.SetGCPercent(r.GOGC)
	limit := r.MemoryLimit
	if limit == 0 {
		limit = math.MaxInt64
	}
	debug.SetMemoryLimit(limit)
}

func adminOffReason(c *config.Config) string {
	if c.Admin.TokenEnv == "" {
		return "admin.token_env is empty"
	}
	return "the environment variable " + c.Admin.TokenEnv + " (admin.token_env) is not set"
}

// openAnalyticsStore is the one place that picks the analytics backend.
func (g *Gateway) openAnalyticsStore(p *analytics.Plan) (analytics.Store, error) {
	cfg := p.Config()
	switch cfg.Store {
	case "cassandra":
		// Connects in the background: the gateway serves while Cassandra
		// boots, and the flusher keeps counts until it answers.
		st, err := cassandra.Open(context.Background(), g.cql, cfg.Cassandra, p.Rollup(), g.log)
		if err != nil {
			return nil, fmt.Errorf("gateway: analytics.cassandra: %w", err)
		}
		st.SetDimRetention(p.DimRetention())
		return st, nil
	default:
		// Opens in the background too: a folder that is read-only, not a
		// folder, or held by another process must not keep the gateway
		// from proxying. The flusher keeps the counts until it opens, and
		// the health detail and linkgate_analytics_state say why it has
		// not.
		start := pebblestore.Start
		if after := g.predecessor(); after != nil {
			// The folder is the process this one replaces until it is done.
			start = func(path string, plan *rollup.Plan, log *slog.Logger) (*pebblestore.Store, error) {
				return pebblestore.StartAfter(after, path, plan, log)
			}
		}
		st, err := start(cfg.Embedded.Path, p.Rollup(), g.log)
		if err != nil {
			return nil, fmt.Errorf("gateway: analytics.embedded.path: %w", err)
		}
		st.SetDimRetention(p.DimRetention())
		return st, nil
	}
}

// predecessor returns a channel closed once the process this one replaces
// (a binary upgrade) is done with what one process at a time may hold;
// nil when this process replaces none.
func (g *Gateway) predecessor() <-chan struct{} {
	if up := g.opts.Upgrade; up != nil && up.Inherited() {
		return up.PredecessorDone()
	}
	return nil
}

// newLimitStore is the one place that picks the limiter's backend.
func (g *Gateway) newLimitStore(p *limit.Plan) limitStore {
	cfg := p.Store()
	switch cfg.Store {
	case "memcached":
		return memcached.New(cfg.Memcached, g.mcM, g.log)
	default:
		if g.opts.LimitClock != nil {
			return limit.NewMemoryAt(g.opts.LimitClock)
		}
		return limit.NewMemory()
	}
}

// current returns the snapshot serving now.
func (g *Gateway) current() *snapshot { return g.cur.Load() }

// ServeHTTP serves a client request on the current snapshot.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.cur.Load().handler.ServeHTTP(w, r)
}

// Registry returns the gateway's Prometheus registry (what /metrics serves).
func (g *Gateway) Registry() *prometheus.Registry { return g.reg }

// build makes the snapshot plan implies, eff being the config to report
// (plan's file with the running values of restart-only fields), reusing
// the parts of old whose settings did not change: the proxy (its
// connections and its targets' health) and the limiter store (so its
// counters). On any failure, a panic included, it releases what it built
// and returns an error.
func (g *Gateway) build(plan *Plan, eff *config.Config, old *snapshot) (s *snapshot, err error) {
	s = &snapshot{plan: plan, eff: eff, gen: 1}
	if old != nil {
		s.gen = old.gen + 1
	}
	defer func() {
		if r := recover(); r != nil {
			g.log.Error("building the config panicked", "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("gateway: building the config failed: %v", r)
		}
		if err != nil {
			s.closeReplaced(old)
			s = nil
		}
	}()
	g.buildPools(s, old)
	if old != nil && old.plan.limit.SameStore(plan.limit) {
		s.limitStore = old.limitStore
	} else {
		s.limitStore = g.newLimitStore(plan.limit)
	}
	if h := buildHook.Load(); h != nil {
		(*h)(s)
	}
	if mc, ok := s.limitStore.(*memcached.Store); ok {
		// The purges go through the limiter's client: one per server.
		if old != nil && old.fleet != nil && old.limitStore == s.limitStore {
			s.fleet = old.fleet
		} else {
			s.fleet = cachefleet.New(mc.Client(cachefleet.Name), g.cache, g.cacheM, g.log)
		}
	}
	tenants := tenant.NewResolver(plan.tenants, g.learned)
	s.limiter = limit.New(plan.limit, s.limitStore, g.limitM, g.log).WithTenants(tenants.Of)
	if g.opts.LimitClock != nil {
		s.limiter.WithClock(g.opts.LimitClock)
	}

	sc := plan.cfg.Server
	var access *accessLog
	if sc.AccessLog {
		access = &accessLog{log: g.log, trust: plan.trust}
	}
	// Each pool's proxy behind the limiter and the visit counter, which
	// see every host alike: a short key is one link on every domain of a
	// tenant (of the default tenant, the hosts in none), and a rule may
	// name hosts.
	for _, p := range s.pools {
		next := g.loop.set(p.proxy)
		if access != nil {
			next = upstreamTimer(next)
		}
		if g.tracer != nil {
			next = g.tracer.Upstream(p.plan.name, next)
		}
		next = g.cache.Handler(plan.cache, p.plan.cacheTTL, next)
		if g.pipeline != nil {
			next = g.pipeline.Middleware(plan.analytics, tenants)(next)
		}
		p.handler = s.limiter.Middleware(next)
		if g.tracer != nil {
			p.handler = routeNote(p.plan.name, p.handler)
		}
	}
	outer := []func(http.Handler) http.Handler{requestID(plan.trust)}
	if g.tracer != nil {
		outer = append(outer, traced(g.tracer, plan.trust))
	}
	chain := chi.Chain(append(outer, g.m.middleware(access), g.loop.refuse, refuseDoubleAuthorization, refuseUnknownClient(plan.trust), refuseAmbiguousFraming, refuseMethods(sc.AllowMethods),
		proxy.BodyDeadline(sc.BodyTimeout, sc.ReadTimeout))...)
	var statsH http.Handler
	statsH, s.stats = g.statsHandler(plan)
	if g.tracer != nil {
		statsH = routeNote("stats", statsH)
	}
	s.handler = chain.Handler(splitStats(plan.cfg.Stats.Prefix, plan.statsHost, statsH, g.withhold(plan.statsToken, plan.adminToken, s.router())))
	return s, nil
}

// useCache gives the cache, which outlives snapshots, the settings of s,
// just swapped in: its bound, and the fleet its purges go to. A cache
// turned off is emptied, so that turning it on again serves nothing
// kept before.
func (g *Gateway) useCache(s *snapshot) {
	cfg := s.plan.cache.Config()
	g.cache.Resize(cfg.MaxBytes)
	if !cfg.Enabled {
		g.cache.ApplyLocal(cache.Purge{All: true}, "") // not a purge anyone asked for
	}
	if s.fleet != nil {
		g.cache.SetPublisher(s.fleet)
	} else {
		g.cache.SetPublisher(nil)
	}
}

// useStreams gives the live streams, which outlive snapshots, the stats
// API of s, just swapped in: its limits, and its credentials for the
// streams open (a share key or stats token changed by the reload ends
// the streams opened with the old one).
func (g *Gateway) useStreams(s *snapshot) {
	if s.stats != nil {
		g.streams.Use(s.stats)
	}
}

// splitStats sends the requests under prefix (prefix itself and
// prefix/...) to stats and every other to next, as a chi router with the
// patterns prefix, prefix/* and /* would route them (by the escaped path
// when the request has one; 405 for a method chi does not know, so that
// PROPFIND or FOO never reach the upstream), without the router: the
// proxied path, every visit's, pays no routing context. With host set
// (stats.host), only the requests for that host go to stats: on every
// other host the prefix is a path like any other, proxied (a branded
// domain may have a short key "stats").
func splitStats(prefix, host string, stats, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
			http.MethodDelete, http.MethodOptions, http.MethodTrace, http.MethodConnect:
		default:
			// A method the router does not know (PROPFIND, FOO): never
			// proxied, and answered with a problem body like every other
			// refusal.
			w.Header().Set("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
			problem.Write(w, http.StatusMethodNotAllowed, "method "+r.Method+" is not served through this gateway")
			return
		}
		p := r.URL.RawPath
		if p == "" {
			p = r.URL.Path
		}
		if rest, ok := strings.CutPrefix(p, prefix); ok && (rest == "" || rest[0] == '/') && (host == "" || route.RequestHost(r.Host) == host) {
			stats.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// statsHandler serves the stats API under the reserved prefix: it is never
// proxied, whether analytics are on or not. It returns the API too, nil
// when analytics are off.
func (g *Gateway) statsHandler(plan *Plan) (http.Handler, *stats.API) {
	if g.pipeline == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			problem.Write(w, http.StatusNotFound, "analytics are disabled on this gateway")
		}), nil
	}
	trust, prefix6 := plan.trust, plan.cfg.Identity.IPv6Prefix
	h := stats.New(g.pipeline.Reader(), g.pipeline.Tiers(), stats.Options{Token: plan.statsToken, ReadTimeout: plan.cfg.Stats.ReadTimeout, Log: g.log,
		MaxValues: plan.cfg.Analytics.Dimensions.MaxValues, Uniques: plan.analytics.Uniques(),
		Live: g.pipeline, Streams: g.streams, StreamLimits: plan.cfg.Stats.Live, Share: plan.share,
		ClientKey: func(r *http.Request) string {
			// The client as the limiter keys it: an IPv6 client per prefix.
			if c, ok := trust.Client(r); ok {
				return limit.IPValue(c.Addr, prefix6)
			}
			return ""
		},
		FrameAncestors: plan.cfg.Stats.Embed.FrameAncestors, Prefix: plan.cfg.Stats.Prefix})
	prefix := plan.cfg.Stats.Prefix
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r2 := r.Clone(r.Context())
		r2.URL.Path = strings.TrimPrefix(r.URL.Path, prefix)
		r2.URL.RawPath = ""
		if r2.URL.Path == "" {
			r2.URL.Path = "/"
		}
		h.ServeHTTP(w, r2)
	}), h
}

// buildHook, when set (by tests only), is called by build once the new
// snapshot's proxy and limiter store exist: a panic from it is a panic in
// a constructor.
var buildHook atomic.Pointer[func(*snapshot)]

// refuseMethods answers 405 to TRACE and CONNECT unless allow lists them:
// TRACE echoes the request, credentials included, back to a script
// (cross-site tracing), and CONNECT would make the gateway an open tunnel.
func refuseMethods(allow []string) func(http.Handler) http.Handler {
	trace, connect := slices.Contains(allow, http.MethodTrace), slices.Contains(allow, http.MethodConnect)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodTrace && !trace || r.Method == http.MethodConnect && !connect {
				w.Header().Set("Allow", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS")
				problem.Write(w, http.StatusMethodNotAllowed, r.Method+" is not allowed through this gateway (server.allow_methods)")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// closeReplaced releases what s built that old does not share.
func (s *snapshot) closeReplaced(old *snapshot) {
	var keep []*proxy.Proxy
	if old != nil {
		keep = old.proxies()
	}
	for _, p := range s.proxies() {
		if !slices.Contains(keep, p) {
			p.Close()
		}
	}
	// The fleet first: it uses the limiter store's client.
	if s.fleet != nil && (old == nil || s.fleet != old.fleet) {
		s.fleet.Close()
	}
	if s.limitStore != nil && (old == nil || s.limitStore != old.limitStore) {
		s.limitStore.Close()
	}
}

// ReloadResult is what a successful reload did.
type ReloadResult struct {
	Generation int64 `json:"generation"`
	// RestartRequired names the fields that changed in the file but keep
	// their running values until a restart.
	RestartRequired []string `json:"restart_required"`
}

// Reload reads and compiles the config file again and swaps in the
// snapshot it implies. Whatever goes wrong (a bad file, a resource that
// cannot be had, a panic) the running snapshot keeps serving, what the
// attempt built is released, the failure is logged and counted, and the
// error says why. source names the trigger in the log ("SIGHUP", "file
// change", "admin").
func (g *Gateway) Reload(source string) (res ReloadResult, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			g.log.Error("reload panicked", "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("gateway: reload failed: %v", r)
		}
		if err != nil {
			g.m.reloads.WithLabelValues("failed").Inc()
			g.log.Error("config reload failed, running config kept", "source", source, "err", err)
		}
	}()
	if g.closed {
		return res, errors.New("gateway: closed")
	}
	old := g.cur.Load()
	if g.opts.Path == "" {
		return res, errors.New("gateway: no config file to reload")
	}
	plan, err := Load(g.opts.Path, g.opts.Getenv)
	if err != nil {
		return res, err
	}
	if err := keepsAdmin(old.plan, plan); err != nil {
		return res, err
	}
	eff, restart := restartOnly(old.eff, plan.cfg)
	s, err := g.build(plan, eff, old)
	if err != nil {
		return res, err
	}
	applyRuntime(plan.cfg.Runtime)
	g.cur.Store(s)
	g.useCache(s)
	g.limitM.Serve(s.limiter)
	g.useStreams(s)
	g.tracer.SetSample(eff.Tracing.Sample)
	old.closeReplaced(s)
	if g.pipeline != nil {
		g.pipeline.Apply(plan.analytics)
		g.pipeline.SetTenantRetention(plan.tenants.Retentions())
	}
	if g.edge != nil && !slices.Contains(restart, "server.tls") {
		g.edge.Apply(plan.tls)
	}
	if plan.adminToken == "" {
		g.log.Warn("the admin API is off: /admin/* answers 403", "reason", adminOffReason(plan.cfg))
	}
	g.m.reloads.WithLabelValues("ok").Inc()
	g.m.generation.Set(float64(s.gen))
	g.log.Info("config reloaded", "source", source, "generation", s.gen, "restart_required", restart)
	if restart == nil {
		restart = []string{}
	}
	return ReloadResult{Generation: s.gen, RestartRequired: restart}, nil
}

// keepsAdmin refuses a reload from run to next that would turn the admin
// API off by accident: next's admin.token_env names a variable that this
// process does not have (or has empty) while run's gave a token. A
// process's environment is fixed when it starts, so no reload could turn
// it back on, and the endpoint that reloads is behind that very token: only
// a restart would. At start the same file is valid (unset: /admin/* answers
// 403, as the contract says); token_env: "" turns the API off on purpose,
// and a reload takes that.
func keepsAdmin(run, next *Plan) error {
	name := next.cfg.Admin.TokenEnv
	if run.adminToken == "" || next.adminToken != "" || name == "" {
		return nil
	}
	return next.cfg.Locate(fmt.Errorf("admin.token_env: the environment variable %s is not set (or empty) in this process, so the reload would turn /admin/* off until a restart (a process's environment is fixed when it starts); keep token_env: %s, or set %s and restart; token_env: \"\" turns the admin API off on purpose",
		name, run.cfg.Admin.TokenEnv, name))
}

// restartOnly returns the config a reload runs with, eff: next with the
// running values (from run) of the fields that cannot change without a
// restart, and the names of those that differed. They are, explicitly:
// the listeners and the settings of their http.Server (which it reads on
// every connection, so they cannot change under it), and the analytics
// fields that analytics.RestartOnly names (the pipeline lives as long as
// the process, so that counts in memory survive reloads), and the tracing
// fields but the sample (tracing.RestartOnly: the exporter is built once,
// at start). Everything else,
// the trusted proxies and the rules above all, takes effect on reload.
// next is not modified.
func restartOnly(run, next *config.Config) (eff *config.Config, changed []string) {
	c := *next
	keep := func(name string, same bool, restore func()) {
		if !same {
			changed = append(changed, name)
			restore()
		}
	}
	rs, rn := run.Server, next.Server
	keep("server.listen", rs.Listen == rn.Listen, func() { c.Server.Listen = rs.Listen })
	keep("server.read_header_timeout", rs.ReadHeaderTimeout == rn.ReadHeaderTimeout, func() { c.Server.ReadHeaderTimeout = rs.ReadHeaderTimeout })
	keep("server.write_timeout", rs.WriteTimeout == rn.WriteTimeout, func() { c.Server.WriteTimeout = rs.WriteTimeout })
	keep("server.idle_timeout", rs.IdleTimeout == rn.IdleTimeout, func() { c.Server.IdleTimeout = rs.IdleTimeout })
	keep("server.max_header_bytes", rs.MaxHeaderBytes == rn.MaxHeaderBytes, func() { c.Server.MaxHeaderBytes = rs.MaxHeaderBytes })
	keep("admin.listen", run.Admin.Listen == next.Admin.Listen, func() { c.Admin.Listen = run.Admin.Listen })
	changed = append(changed, restartOnlyEdge(rs, rn, &c.Server)...)
	var fixed []string
	c.Analytics, fixed = analytics.RestartOnly(run.Analytics, next.Analytics)
	changed = append(changed, fixed...)
	c.Tracing, fixed = tracing.RestartOnly(run.Tracing, next.Tracing)
	return &c, append(changed, fixed...)
}

// Close releases a Gateway: it makes the final analytics flush (journaling
// what the store refuses), closes the stores and stops the health checks.
// Serve calls it after draining; call it directly only for a Gateway that
// never served. ctx bounds the final flush. Later calls return the first
// call's result.
func (g *Gateway) Close(ctx context.Context) error {
	g.closeOnce.Do(func() {
		g.mu.Lock() // no reload may swap a snapshot in under Close
		defer g.mu.Unlock()
		g.closed = true
		g.streams.Close()
		var errs []error
		if g.pipeline != nil {
			errs = append(errs, g.pipeline.Close(ctx))
		}
		// Last, so that the final flush's span goes too.
		if err := g.tracer.Shutdown(ctx); err != nil {
			g.log.Warn("tracing: spans left unexported at exit", "err", err)
		}
		if s := g.cur.Load(); s != nil {
			s.closeReplaced(nil)
		}
		if g.edge != nil {
			g.edge.Close()
		}
		g.closeListeners()
		g.closeErr = errors.Join(errs...)
	})
	return g.closeErr
}
