package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"

	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/cassandra"
	"github.com/linkgate/linkgate/analytics/pebble"
	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/limit/memcached"
	"github.com/linkgate/linkgate/problem"
	"github.com/linkgate/linkgate/proxy"
	"github.com/linkgate/linkgate/rollup"
)

// gateway owns the long-lived parts (metrics, analytics pipeline, limiter
// store) and the current snapshot: everything one config implies, built and
// validated before it replaces the previous one in one atomic swap. A request
// reads the snapshot once, so it finishes on the config it started with.
type gateway struct {
	path      string
	watchFile bool // reload on changes of the file, not only on SIGHUP and the endpoint
	getenv    func(string) string
	log       *slog.Logger

	reg     *prometheus.Registry
	m       *metrics
	proxyM  *proxy.Metrics
	limitM  *limit.Metrics
	mcM     *memcached.Metrics
	visitsM *analytics.Metrics

	// Analytics run for the life of the process: in-memory counts survive
	// reloads, and the store is chosen at start.
	recorder *analytics.Recorder
	reader   analytics.Reader

	mu    sync.Mutex // serializes reloads
	cur   atomic.Pointer[snapshot]
	hooks []func(context.Context) error // run in order at shutdown
}

// snapshot is everything one config implies. It is never modified.
type snapshot struct {
	cfg        *config.Config
	gen        int64
	handler    http.Handler
	proxy      *proxy.Proxy
	limitStore limitStore
	limiter    *limit.Limiter
	adminToken [sha256.Size]byte // zero: no token configured, /admin/* answers 403
	hasToken   bool
}

// limitStore is a limiter store and how to release it.
type limitStore interface {
	limit.Store
	Close() error
}

func newGateway(ctx context.Context, path string, cfg *config.Config, getenv func(string) string, log *slog.Logger) (*gateway, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	g := &gateway{
		path: path, getenv: getenv, log: log, reg: reg,
		m:       newMetrics(reg),
		proxyM:  proxy.NewMetrics(reg),
		limitM:  limit.NewMetrics(reg),
		mcM:     memcached.NewMetrics(reg),
		visitsM: analytics.NewMetrics(reg),
	}
	if err := g.startAnalytics(ctx, cfg); err != nil {
		return nil, err
	}
	s, err := g.build(cfg, nil)
	if err != nil {
		g.close(context.Background())
		return nil, err
	}
	g.cur.Store(s)
	g.m.generation.Set(float64(s.gen))
	return g, nil
}

func (g *gateway) current() *snapshot { return g.cur.Load() }

// ServeHTTP serves a client request on the current snapshot.
func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.cur.Load().handler.ServeHTTP(w, r)
}

// startAnalytics opens the analytics store and starts the flush loop.
func (g *gateway) startAnalytics(ctx context.Context, cfg *config.Config) error {
	a := cfg.Analytics
	if !a.Enabled {
		return nil
	}
	var (
		store interface {
			analytics.Store
			rollup.Store
		}
		closeStore func() error
	)
	switch a.Store {
	case "embedded":
		st, err := pebble.Open(a.Embedded.Path, a.Retention, g.log)
		if err != nil {
			return fmt.Errorf("gateway: analytics.embedded: %w", err)
		}
		expireCtx, stopExpire := context.WithCancel(context.Background())
		go st.Run(expireCtx, time.Hour)
		store = st
		closeStore = func() error { stopExpire(); return st.Close() }
	case "cassandra":
		st, err := cassandra.Open(ctx, a.Cassandra, a.Retention, g.log)
		if err != nil {
			return fmt.Errorf("gateway: analytics.cassandra: %w", err)
		}
		store = st
		closeStore = func() error { st.Close(); return nil }
	}
	g.recorder = analytics.NewRecorder(a.MaxKeys, g.visitsM)
	fl := analytics.NewFlusher(g.recorder, store, a.Retention, analytics.FlusherOptions{
		Interval:  a.FlushInterval,
		Grace:     a.Grace(),
		SpillPath: analytics.DefaultSpillPath(a),
	}, g.visitsM, g.log)
	g.reader = fl.Reader(store)
	plan, err := rollup.NewPlan(a.Retention, a.Grace())
	if err != nil {
		closeStore()
		return fmt.Errorf("gateway: analytics: %w", err)
	}
	roller := rollup.NewWorker(store, plan, rollup.WorkerOptions{Metrics: g.visitsM, Log: g.log})
	loopCtx, stopLoop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { fl.Run(loopCtx); close(done) }()
	rolled := make(chan struct{})
	go func() { roller.Run(loopCtx); close(rolled) }()
	g.hooks = append(g.hooks,
		func(ctx context.Context) error {
			stopLoop()
			<-done
			<-rolled
			return fl.Close(ctx)
		},
		func(context.Context) error { return closeStore() },
	)
	return nil
}

// build makes the snapshot cfg implies, reusing the parts of old whose
// config did not change (the proxy's connection pool, the limiter store and
// so its counters). On error nothing it built is left running.
func (g *gateway) build(cfg *config.Config, old *snapshot) (s *snapshot, err error) {
	s = &snapshot{cfg: cfg, gen: 1}
	if old != nil {
		s.gen = old.gen + 1
	}
	defer func() {
		if err != nil {
			s.closeReplaced(old)
		}
	}()
	trusted := cfg.Server.Trusted()
	if old != nil && reflect.DeepEqual(old.cfg.Upstream, cfg.Upstream) && reflect.DeepEqual(old.cfg.Server.TrustedProxies, cfg.Server.TrustedProxies) {
		s.proxy = old.proxy
	} else if s.proxy, err = proxy.New(cfg.Upstream, trusted, g.proxyM, g.log); err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	if old != nil && old.cfg.Limiter.Store == cfg.Limiter.Store && reflect.DeepEqual(old.cfg.Limiter.Memcached, cfg.Limiter.Memcached) {
		s.limitStore = old.limitStore
	} else if s.limitStore, err = g.newLimitStore(cfg.Limiter); err != nil {
		return nil, err
	}
	if s.limiter, err = limit.New(cfg.Rules, cfg.Identity, cfg.Limiter, trusted, s.limitStore, g.limitM, g.log); err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	var next http.Handler = s.proxy
	if g.recorder != nil && cfg.Analytics.Enabled {
		mw, err := analytics.NewMiddleware(cfg.Analytics, g.recorder)
		if err != nil {
			return nil, fmt.Errorf("analytics: %w", err)
		}
		next = mw(next)
	}
	next = s.limiter.Middleware(next)

	r := chi.NewRouter()
	r.Use(g.m.middleware(g.log, cfg.Server.AccessLog))
	stats := g.statsHandler(cfg)
	r.Handle(cfg.Stats.Prefix, stats)
	r.Handle(cfg.Stats.Prefix+"/*", stats)
	r.Handle("/*", next)
	s.handler = r

	if name := cfg.Admin.TokenEnv; name != "" {
		if tok := g.getenv(name); tok != "" {
			s.adminToken, s.hasToken = sha256.Sum256([]byte(tok)), true
		}
	}
	return s, nil
}

// statsHandler serves the stats API under the reserved prefix: it is never
// proxied, whether analytics are on or not.
func (g *gateway) statsHandler(cfg *config.Config) http.Handler {
	if g.reader == nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			problem.Write(w, http.StatusNotFound, "analytics are disabled on this gateway")
		})
	}
	var token string
	if name := cfg.Stats.TokenEnv; name != "" {
		token = g.getenv(name)
	}
	h := analytics.NewStats(g.reader, cfg.Analytics.Retention, token, time.Now, g.log)
	prefix := cfg.Stats.Prefix
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r2 := r.Clone(r.Context())
		r2.URL.Path = strings.TrimPrefix(r.URL.Path, prefix)
		r2.URL.RawPath = ""
		if r2.URL.Path == "" {
			r2.URL.Path = "/"
		}
		h.ServeHTTP(w, r2)
	})
}

// newLimitStore is the one place that picks the limiter's backend.
func (g *gateway) newLimitStore(cfg limit.Config) (limitStore, error) {
	switch cfg.Store {
	case "memcached":
		st, err := memcached.New(cfg.Memcached, g.mcM, g.log)
		if err != nil {
			return nil, fmt.Errorf("limiter.memcached: %w", err)
		}
		return st, nil
	default:
		return limit.NewMemory(), nil
	}
}

// closeReplaced releases what s built that old does not share.
func (s *snapshot) closeReplaced(old *snapshot) {
	if s.proxy != nil && (old == nil || s.proxy != old.proxy) {
		s.proxy.Close()
	}
	if s.limitStore != nil && (old == nil || s.limitStore != old.limitStore) {
		s.limitStore.Close()
	}
}

// reload loads the file again and swaps in the snapshot it implies. A bad
// file changes nothing. Fields that only take effect on restart keep their
// running values and are named in the result.
func (g *gateway) reload(source string) (gen int64, restart []string, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	defer func() {
		if err != nil {
			g.m.reloads.WithLabelValues("failed").Inc()
			g.log.Error("config reload failed, running config kept", "source", source, "err", err)
		}
	}()
	cfg, err := config.Load(g.path)
	if err != nil {
		return 0, nil, err
	}
	old := g.cur.Load()
	restart = keepRestartOnly(old.cfg, cfg)
	s, err := g.build(cfg, old)
	if err != nil {
		return 0, nil, fmt.Errorf("config: %s: %w", g.path, err)
	}
	g.cur.Store(s)
	old.closeReplaced(s)
	if g.recorder != nil {
		g.recorder.SetMaxKeys(cfg.Analytics.MaxKeys)
	}
	g.m.reloads.WithLabelValues("ok").Inc()
	g.m.generation.Set(float64(s.gen))
	g.log.Info("config reloaded", "source", source, "generation", s.gen, "restart_required", restart)
	return s.gen, restart, nil
}

// keepRestartOnly copies into cfg the fields that cannot change without a
// restart and names those that differed: the listeners and the settings of
// their http.Server (which it reads on every connection, so they cannot be
// changed under it), and the analytics pipeline, which lives as long as the
// process so that counts in memory survive reloads. Everything else, the
// trusted proxies and the rules above all, takes effect on reload.
func keepRestartOnly(old, cfg *config.Config) []string {
	var changed []string
	keep := func(name string, dst, src any) {
		d, s := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem()
		if !reflect.DeepEqual(d.Interface(), s.Interface()) {
			changed = append(changed, name)
			d.Set(s)
		}
	}
	keep("server.listen", &cfg.Server.Listen, &old.Server.Listen)
	keep("server.read_header_timeout", &cfg.Server.ReadHeaderTimeout, &old.Server.ReadHeaderTimeout)
	keep("server.read_timeout", &cfg.Server.ReadTimeout, &old.Server.ReadTimeout)
	keep("server.write_timeout", &cfg.Server.WriteTimeout, &old.Server.WriteTimeout)
	keep("server.idle_timeout", &cfg.Server.IdleTimeout, &old.Server.IdleTimeout)
	keep("server.max_header_bytes", &cfg.Server.MaxHeaderBytes, &old.Server.MaxHeaderBytes)
	keep("admin.listen", &cfg.Admin.Listen, &old.Admin.Listen)
	keep("analytics.enabled", &cfg.Analytics.Enabled, &old.Analytics.Enabled)
	keep("analytics.store", &cfg.Analytics.Store, &old.Analytics.Store)
	keep("analytics.embedded", &cfg.Analytics.Embedded, &old.Analytics.Embedded)
	keep("analytics.cassandra", &cfg.Analytics.Cassandra, &old.Analytics.Cassandra)
	keep("analytics.retention", &cfg.Analytics.Retention, &old.Analytics.Retention)
	keep("analytics.rollup_grace", &cfg.Analytics.RollupGrace, &old.Analytics.RollupGrace)
	keep("analytics.flush_interval", &cfg.Analytics.FlushInterval, &old.Analytics.FlushInterval)
	return changed
}

// close runs the shutdown hooks in order, then releases the snapshot's parts.
func (g *gateway) close(ctx context.Context) {
	for _, h := range g.hooks {
		if err := h(ctx); err != nil {
			g.log.Error("shutdown", "err", err)
		}
	}
	if s := g.cur.Load(); s != nil {
		s.closeReplaced(nil)
	}
}

// authorized reports whether r carries the admin bearer token, compared in
// constant time (on digests, so the length does not leak either).
func (s *snapshot) authorized(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || !s.hasToken {
		return false
	}
	sum := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(sum[:], s.adminToken[:]) == 1
}
