// Package route matches requests against the method + chi-style path
// patterns that limiter rules and the analytics route are configured with
// ("/login", "/{short_key}", "/api/*"). Several patterns may match one request
// (every matching limiter rule is checked), so each pattern gets its own
// matcher instead of being one route of a shared router; the matching itself
// is chi's, so patterns mean exactly what they mean in chi.
package route

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/go-chi/chi/v5"
)

// Match is the configured form: the methods (all when empty) and the path
// pattern a request must have.
type Match struct {
	Methods []string `yaml:"methods,omitempty"`
	Path    string   `yaml:"path"`
}

// Matcher is a compiled Match. It is safe for concurrent use.
type Matcher struct {
	mux     *chi.Mux
	methods []string
}

var ctxPool = sync.Pool{New: func() any { return chi.NewRouteContext() }}

var knownMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace,
}

// Compile checks m and builds its Matcher.
func (m Match) Compile() (mt *Matcher, err error) {
	if !strings.HasPrefix(m.Path, "/") {
		return nil, fmt.Errorf("route: path %q: must start with /", m.Path)
	}
	for _, meth := range m.Methods {
		if !slices.Contains(knownMethods, meth) {
			return nil, fmt.Errorf("route: method %q: want one of %s", meth, strings.Join(knownMethods, ", "))
		}
	}
	defer func() { // chi panics on a malformed pattern
		if r := recover(); r != nil {
			mt, err = nil, fmt.Errorf("route: path %q: %v", m.Path, r)
		}
	}()
	mux := chi.NewMux()
	mux.HandleFunc(m.Path, func(http.ResponseWriter, *http.Request) {})
	return &Matcher{mux: mux, methods: m.Methods}, nil
}

// Match reports whether a request with method and path matches.
func (mt *Matcher) Match(method, path string) bool {
	_, ok := mt.find(method, path, "")
	return ok
}

// Param reports whether the request matches and returns the value of the
// named path parameter ("short_key" in "/{short_key}").
func (mt *Matcher) Param(method, path, name string) (string, bool) {
	return mt.find(method, path, name)
}

func (mt *Matcher) find(method, path, name string) (string, bool) {
	if len(mt.methods) > 0 && !slices.Contains(mt.methods, method) {
		return "", false
	}
	rctx := ctxPool.Get().(*chi.Context)
	rctx.Reset()
	ok := mt.mux.Find(rctx, method, path) != ""
	var v string
	if ok && name != "" {
		v = rctx.URLParam(name)
	}
	ctxPool.Put(rctx)
	return v, ok
}
