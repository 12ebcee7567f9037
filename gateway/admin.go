package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.yaml.in/yaml/v3"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/bearer"
	"github.com/linkgate/linkgate/cache"
	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/problem"
)

// AdminHandler serves the operator's listener: /healthz, /readyz and
// /metrics open; /admin/* behind the bearer token named by admin.token_env.
//
// /healthz and /readyz are about the process and the proxy only: a broken
// analytics store must not get the gateway restarted or taken out of a
// load balancer while it proxies fine. How analytics fare is the metric
// linkgate_analytics_state (open, for alerts) and /admin/health (the
// detail, behind the token like /admin/config, since its reasons name
// folders and hosts).
func (g *Gateway) AdminHandler() http.Handler {
	r := chi.NewRouter()
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, http.StatusNotFound, "no admin endpoint at "+r.URL.Path)
	})
	r.MethodNotAllowed(problem.MethodNotAllowed)
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	r.Get("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !g.current().ready() {
			problem.Write(w, http.StatusServiceUnavailable, "no healthy upstream target")
			return
		}
		w.Write([]byte("ready\n"))
	})
	r.Handle("/metrics", promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{}))
	r.Route("/admin", func(r chi.Router) {
		r.Use(g.requireToken)
		r.Post("/reload", g.handleReload)
		r.Get("/config", g.handleConfig)
		r.Get("/health", g.handleHealth)
		r.Get("/certificates", g.handleCertificates)
		r.Post("/share", g.handleShare)
		r.Post("/tokens", g.handleTokens)
		r.Post("/erase", g.handleErase)
		r.Post("/cache/purge", g.handlePurge)
		limits := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.StripPrefix("/admin/limits", g.current().limiter.AdminHandler()).ServeHTTP(w, r)
		})
		r.Handle("/limits", limits)
		r.Handle("/limits/*", limits)
		boxes := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.StripPrefix("/admin/boxed", g.current().limiter.BoxedHandler()).ServeHTTP(w, r)
		})
		r.Handle("/boxed", boxes)
		r.Handle("/boxed/*", boxes)
	})
	// A target that is this listener gets 508, not /metrics.
	return g.loop.refuse(refuseDoubleAuthorization(r))
}

func (g *Gateway) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := g.current()
		switch {
		case s.plan.adminToken == "":
			problem.Write(w, http.StatusForbidden, "the admin API is off: set the environment variable named by admin.token_env")
		case !bearer.Match(r, s.plan.adminToken):
			bearer.Challenge(w, r, "linkgate admin")
			problem.Write(w, http.StatusUnauthorized, "missing or wrong bearer token")
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// handleReload reloads the config file: 200 with the new generation and the
// fields that need a restart, or 400 with why the running config stays.
func (g *Gateway) handleReload(w http.ResponseWriter, r *http.Request) {
	res, err := g.Reload("admin")
	if err != nil {
		d := problem.Details{Status: http.StatusBadRequest, Detail: err.Error()}
		var ce *config.Error
		if errors.As(err, &ce) && ce.Path != "" {
			d.Extra = map[string]any{"field": ce.Path, "line": ce.Line}
		}
		problem.WriteDetails(w, d)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(res)
}

// handlePurge purges the cache: one key (?key=sho.rt/abc: the key, its
// query strings and variants), every key under a prefix
// (?prefix=sho.rt/), or everything (?all=true), here and, when the
// limiter's store is memcached, on every gateway sharing it. It answers
// how many entries this gateway removed.
func (g *Gateway) handlePurge(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var p cache.Purge
	given := 0
	if v := q.Get("key"); v != "" {
		p.Key, given = v, given+1
	}
	if v := q.Get("prefix"); v != "" {
		p.Prefix, given = v, given+1
	}
	if v := q.Get("all"); v != "" {
		all, err := strconv.ParseBool(v)
		if err != nil || !all {
			problem.Write(w, http.StatusBadRequest, "all: want all=true")
			return
		}
		p.All, given = true, given+1
	}
	if given != 1 {
		problem.Write(w, http.StatusBadRequest, "give one of key (sho.rt/abc), prefix (sho.rt/) or all=true")
		return
	}
	n := g.cache.Apply(p, "admin")
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]int{"purged": n})
}

// HealthDetail is what GET /admin/health answers.
type HealthDetail struct {
	// Ready is /readyz's answer: some upstream target is healthy.
	Ready bool `json:"ready"`
	// Pools is the health of each upstream pool: the default pool
	// (upstream) and each route's.
	Pools []PoolHealth `json:"pools"`
	// Analytics is the analytics pipeline's health; nil (null) when
	// analytics are off.
	Analytics *analytics.Health `json:"analytics"`
	// TLSStorage is the certificate storage's state; nil (null) when no
	// certificate is obtained by ACME.
	TLSStorage *StorageHealth `json:"tls_storage"`
}

// StorageHealth is whether a store answers and takes writes.
type StorageHealth struct {
	// State is "ok"; "connecting" until it answers; "failing" while a write
	// to it (the edge's check, or certmagic's before an order) fails.
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"` // why it is not ok
}

// handleHealth answers the health detail as JSON, 200 whatever the state:
// the state is in the body, and the request itself succeeded.
func (g *Gateway) handleHealth(w http.ResponseWriter, r *http.Request) {
	s := g.current()
	d := HealthDetail{Ready: s.ready(), Pools: s.poolHealth()}
	if g.pipeline != nil {
		h := g.pipeline.Health()
		d.Analytics = &h
	}
	if e := g.edge; e != nil && e.Managed() {
		state, err := e.StorageState()
		d.TLSStorage = &StorageHealth{State: state}
		if err != nil {
			d.TLSStorage.Reason = err.Error()
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(d)
}

// handleConfig shows the effective config in the file's own shape: the
// file as loaded, with the running values of the restart-only fields. It
// needs no redaction because the config holds no secret: the tokens live in
// the environment variables it names (admin.token_env, stats.token_env), and
// only those names are shown.
func (g *Gateway) handleConfig(w http.ResponseWriter, r *http.Request) {
	s := g.current()
	out, err := yaml.Marshal(s.eff)
	if err != nil {
		problem.Write(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("X-Config-Generation", strconv.FormatInt(s.gen, 10))
	w.Write(out)
}
