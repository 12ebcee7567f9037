// Package route matches requests against the method + chi-style path
// patterns that limiter rules and the analytics route are configured with
// ("/login", "/{short_key}", "/api/*"). Several patterns may match one request
// (every matching limiter rule is checked), so each pattern gets its own
// matcher instead of being one route of a shared router; the matching itself
// is chi's, so patterns mean exactly what they mean in chi. Hosts matches a
// request's host against exact names and one-label wildcards, for the
// gateway's routes to upstream pools, the limiter rules that name hosts and
// the stats host.
package route

import (
	"fmt"
	"net/http"
	"path"
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
	// simple is the pattern split into its segments when each is a
	// literal or a whole "{name}" (the common "/{short_key}", "/login"):
	// matchPath then walks the path itself, as chi would match it,
	// without a routing context. nil: chi matches.
	simple []segment
}

// segment is one segment of a simple pattern: the literal it must be, or
// the name of the parameter it is.
type segment struct {
	literal, param string
}

// simplePattern splits pattern into segments when each is a literal
// without chi's special characters or a whole "{name}" without a regular
// expression; ok is false otherwise.
func simplePattern(pattern string) (segs []segment, ok bool) {
	for _, s := range strings.Split(pattern[1:], "/") {
		switch {
		case !strings.ContainsAny(s, "{}*:"):
			segs = append(segs, segment{literal: s})
		case len(s) > 2 && s[0] == '{' && s[len(s)-1] == '}' && !strings.ContainsAny(s[1:len(s)-1], "{}*:/"):
			segs = append(segs, segment{param: s[1 : len(s)-1]})
		default:
			return nil, false
		}
	}
	return segs, true
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
	mt = &Matcher{mux: mux, methods: m.Methods}
	mt.simple, _ = simplePattern(m.Path)
	return mt, nil
}

// Match reports whether a request with method and path matches.
func (mt *Matcher) Match(method, path string) bool {
	_, ok := mt.find(method, path, "")
	return ok
}

// MatchFolded reports whether a request with method and path matches as
// written or once folded: the method upper-cased, the path without the
// ";" parameters of its segments ("/login;jsessionid=1" is "/login"),
// cleaned (path.Clean: no "//", "/./", "/../" or trailing slash) and its
// ASCII letters lower-cased.
// Web servers in front of which the gateway sits often route "/LOGIN",
// "/login/" and "//login" to the same handler as "/login", servlet
// containers (Tomcat, Jetty) and Spring drop path parameters before
// routing, and Go's r.FormValue handlers often answer "post" as they
// answer "POST": a limiter rule written for /login must not be stepped
// around by them. Patterns are matched as written, so write them in lower
// case. To try one request against several matchers, or under other
// methods too, use a Folding.
func (mt *Matcher) MatchFolded(method, p string) bool {
	return (&Folding{Method: method, Path: p}).Match(mt)
}

// Folding is a request's method and path tried against matchers as
// MatchFolded does, folded at most once (on the first miss) however many
// matchers it is tried against; the folded path is tried only when it
// differs, so a request already in that form costs one lookup per matcher.
type Folding struct {
	Method, Path string
	// Also are other methods, upper-case, that the upstream may route the
	// request as (those a method override names): Match tries each beside
	// Method. The caller may set it between calls.
	Also []string

	fmDone, fpDone bool   // fm, fp are set
	fm, fp         string // the folded method and path
}

// Match reports whether q matches mt: its path as written or folded, with
// its method as written, upper-cased, or one of Also.
func (q *Folding) Match(mt *Matcher) bool {
	return q.methodIn(mt) && q.MatchPath(mt)
}

// MatchPath reports whether q's path, as written or folded, matches mt's
// pattern, whatever the methods.
func (q *Folding) MatchPath(mt *Matcher) bool {
	if _, ok := mt.matchPath(q.Path, ""); ok {
		return true
	}
	if !q.fpDone {
		q.fp, q.fpDone = foldPath(q.Path), true
	}
	if q.fp == q.Path {
		return false
	}
	_, ok := mt.matchPath(q.fp, "")
	return ok
}

// methodIn reports whether mt takes q's method, upper-cased or not, or one
// of Also.
func (q *Folding) methodIn(mt *Matcher) bool {
	if mt.allows(q.Method) {
		return true
	}
	if !q.fmDone {
		q.fm, q.fmDone = strings.ToUpper(q.Method), true
	}
	if q.fm != q.Method && mt.allows(q.fm) {
		return true
	}
	return slices.ContainsFunc(q.Also, mt.allows)
}

// foldPath drops the ";" parameters of p's segments, cleans it and
// lower-cases it, allocating only when it changes.
func foldPath(p string) string {
	if isFolded(p) {
		return p
	}
	return lowerASCII(path.Clean("/" + dropParams(p)))
}

// dropParams removes from each segment of p what follows its first ';',
// as servlet containers do (RFC 3986 section 3.3 leaves ';' to the scheme:
// "/login;jsessionid=1" is "/login" to Tomcat, Jetty and Spring).
func dropParams(p string) string {
	if strings.IndexByte(p, ';') < 0 {
		return p
	}
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); {
		j := strings.IndexByte(p[i:], ';')
		if j < 0 {
			b.WriteString(p[i:])
			break
		}
		b.WriteString(p[i : i+j])
		i += j
		k := strings.IndexByte(p[i:], '/')
		if k < 0 {
			break
		}
		i += k
	}
	return b.String()
}

// lowerASCII lower-cases the ASCII letters of s, leaving other bytes (and
// invalid UTF-8) as they are.
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// isFolded reports whether p is already clean and lower-case: it starts
// with "/", has no upper-case letter, no ';', no empty, "." or ".."
// segment and no trailing slash (but for "/" itself).
func isFolded(p string) bool {
	if p == "" || p[0] != '/' || len(p) > 1 && p[len(p)-1] == '/' {
		return false
	}
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case 'A' <= c && c <= 'Z' || c == ';':
			return false
		case c == '/' && i+1 < len(p) && (p[i+1] == '/' || p[i+1] == '.' && (i+2 == len(p) || p[i+2] == '/' || p[i+2] == '.')):
			return false
		}
	}
	return true
}

// Param reports whether the request matches and returns the value of the
// named path parameter ("short_key" in "/{short_key}").
func (mt *Matcher) Param(method, path, name string) (string, bool) {
	return mt.find(method, path, name)
}

func (mt *Matcher) find(method, path, name string) (string, bool) {
	if !mt.allows(method) {
		return "", false
	}
	return mt.matchPath(path, name)
}

// allows reports whether mt takes method: it lists it, or lists none.
func (mt *Matcher) allows(method string) bool {
	return len(mt.methods) == 0 || slices.Contains(mt.methods, method)
}

// matchPath reports whether path matches mt's pattern, whatever the
// method, and returns the value of the path parameter name. The pattern is
// routed for every method chi knows; it is looked up as GET, so that a
// pattern without methods matches methods chi does not know too (PROPFIND,
// FOO), which an upstream may route to the same handler.
func (mt *Matcher) matchPath(path, name string) (string, bool) {
	if mt.simple != nil {
		return matchSimple(mt.simple, path, name)
	}
	rctx := ctxPool.Get().(*chi.Context)
	rctx.Reset()
	ok := mt.mux.Find(rctx, http.MethodGet, path) != ""
	var v string
	if ok && name != "" {
		v = rctx.URLParam(name)
	}
	ctxPool.Put(rctx)
	return v, ok
}

// matchSimple is matchPath for a simple pattern: path has as many
// segments, each literal one equal, and the last not empty if it is a
// parameter's.
func matchSimple(segs []segment, path, name string) (v string, ok bool) {
	if path == "" || path[0] != '/' {
		return "", false
	}
	rest := path[1:]
	for i, sg := range segs {
		s := rest
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			if i == len(segs)-1 {
				return "", false // more segments than the pattern
			}
			s, rest = rest[:j], rest[j+1:]
		} else if i < len(segs)-1 {
			return "", false // fewer
		}
		if sg.param == "" {
			if s != sg.literal {
				return "", false
			}
		} else {
			if s == "" && i == len(segs)-1 {
				return "", false // chi: a parameter matches nothing only where more path follows
			}
			if sg.param == name {
				v = s
			}
		}
	}
	return v, true
}
