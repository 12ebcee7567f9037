package main

import (
	"encoding/json"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.yaml.in/yaml/v3"

	"github.com/linkgate/linkgate/problem"
)

// adminHandler serves the operator's listener: /healthz, /readyz and
// /metrics open; /admin/* behind the bearer token from admin.token_env.
func (g *gateway) adminHandler() http.Handler {
	r := chi.NewRouter()
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, http.StatusNotFound, "no admin endpoint at "+r.URL.Path)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, http.StatusMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path)
	})
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok\n")) })
	r.Get("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !g.current().proxy.Ready() {
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
		r.Handle("/limits/*", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.StripPrefix("/admin/limits", g.current().limiter.AdminHandler()).ServeHTTP(w, r)
		}))
	})
	return r
}

func (g *gateway) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := g.current()
		switch {
		case !s.hasToken:
			problem.Write(w, http.StatusForbidden, "the admin API is off: set the environment variable named by admin.token_env")
		case !s.authorized(r):
			w.Header().Set("WWW-Authenticate", `Bearer realm="linkgate admin"`)
			problem.Write(w, http.StatusUnauthorized, "missing or wrong bearer token")
		default:
			next.ServeHTTP(w, r)
		}
	})
}

func (g *gateway) handleReload(w http.ResponseWriter, r *http.Request) {
	gen, restart, err := g.reload("admin")
	if err != nil {
		problem.Write(w, http.StatusBadRequest, err.Error())
		return
	}
	if restart == nil {
		restart = []string{}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"generation": gen, "restart_required": restart})
}

// handleConfig shows the effective config in the file's own shape: the
// file as loaded, with the running values of the restart-only fields. It
// needs no redaction because the config holds no secret: the tokens live in
// the environment variables it names (admin.token_env, stats.token_env), and
// only those names are shown.
func (g *gateway) handleConfig(w http.ResponseWriter, r *http.Request) {
	s := g.current()
	out, err := yaml.Marshal(s.cfg)
	if err != nil {
		problem.Write(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/yaml")
	w.Header().Set("X-Config-Generation", itoa(s.gen))
	w.Write(out)
}
