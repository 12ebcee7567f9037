package main

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/linkgate/linkgate/problem"
)

// seedLinks are the links every new server starts with, so that the quick
// start and the benchmarks have something to redirect without a POST first.
var seedLinks = map[string]string{
	"go": "https://go.dev",
	"gh": "https://github.com",
	"ex": "https://example.com",
}

const (
	keyLen       = 6       // 62^6 keys; never the name of a route ("login", "healthz", ...)
	maxLinks     = 1 << 20 // the demo keeps links in memory: refuse more than this
	maxURLLen    = 2048
	maxBodyBytes = 64 << 10
)

// options configure newServer. The zero value logs nothing, derives short
// URLs from each request, accepts only an empty password and keeps links in
// memory only.
type options struct {
	Password  string       // the password POST /login accepts
	BaseURL   string       // prefix of short_url; "" derives it from the request
	Log       *slog.Logger // one line per request when non-nil
	LinksFile string       // where /shorten's links are kept across restarts; "": nowhere
	// Domains are the customers' branded short domains (names, or
	// *.suffix for every name one label under suffix): GET
	// /tls/ask?domain= answers 200 for them, which is what the gateway's
	// server.tls.on_demand.ask wants before it obtains a certificate.
	Domains []string
}

// server holds the links. It is safe for concurrent use.
type server struct {
	o     options
	mu    sync.RWMutex
	links map[string][]string // key → the Location header value, shared read-only between requests
	added map[string]string   // the links /shorten made: what LinksFile holds

	saveMu sync.Mutex // one save at a time, each of the state when it began
}

// newServer returns the demo service's handler, seeded with seedLinks and
// with the links of o.LinksFile; it fails when that file cannot be read.
func newServer(o options) (http.Handler, error) {
	s := &server{o: o, links: make(map[string][]string, len(seedLinks)), added: map[string]string{}}
	for k, v := range seedLinks {
		s.links[k] = []string{v}
	}
	if o.LinksFile != "" {
		added, err := loadLinks(o.LinksFile)
		if err != nil {
			return nil, err
		}
		for k, v := range added {
			s.links[k] = []string{v}
		}
		s.added = added
	}
	r := chi.NewRouter()
	if o.Log != nil {
		r.Use(s.logRequests)
	}
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, http.StatusNotFound, "no route for "+r.URL.Path)
	})
	r.MethodNotAllowed(problem.MethodNotAllowed)
	r.Get("/", s.index)
	r.Get("/healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	r.Post("/shorten", s.shorten)
	r.Post("/login", s.login)
	r.Get("/api/me", s.me)
	r.Get("/tls/ask", s.ask)
	r.Get("/{key}", s.redirect)
	r.Head("/{key}", s.redirect)
	return r, nil
}

var noStore = []string{"no-store"}

// ask answers the gateway's on-demand question "may I obtain a certificate
// for this name?": 200 for a branded domain of the service, 404 for any
// other name, 400 without one.
func (s *server) ask(w http.ResponseWriter, r *http.Request) {
	name := strings.ToLower(strings.TrimSuffix(r.URL.Query().Get("domain"), "."))
	if name == "" {
		problem.Write(w, http.StatusBadRequest, "ask: the domain parameter is missing")
		return
	}
	for _, d := range s.o.Domains {
		d = strings.ToLower(d)
		if suffix, ok := strings.CutPrefix(d, "*"); ok {
			if rest, ok := strings.CutSuffix(name, suffix); ok && rest != "" && !strings.Contains(rest, ".") {
				w.WriteHeader(http.StatusOK)
				return
			}
		} else if name == d {
			w.WriteHeader(http.StatusOK)
			return
		}
	}
	problem.Write(w, http.StatusNotFound, fmt.Sprintf("%s is not a domain of this service", name))
}

// redirect answers 302 to the key's long URL. It is the benchmarks' hot
// path: one read lock, no allocation of its own.
func (s *server) redirect(w http.ResponseWriter, r *http.Request) {
	key := chi.URLParam(r, "key")
	s.mu.RLock()
	loc, ok := s.links[key]
	s.mu.RUnlock()
	if !ok {
		problem.Write(w, http.StatusNotFound, fmt.Sprintf("no link with key %q", key))
		return
	}
	h := w.Header()
	h["Location"] = loc
	h["Cache-Control"] = noStore // every visit must reach the gateway to be counted
	w.WriteHeader(http.StatusFound)
}

// shorten stores the url field of a form or JSON body under a new key.
func (s *server) shorten(w http.ResponseWriter, r *http.Request) {
	f, err := readFields(w, r, "url")
	if err != nil {
		problem.Write(w, http.StatusBadRequest, err.Error())
		return
	}
	long, err := checkURL(f["url"])
	if err != nil {
		problem.Write(w, http.StatusBadRequest, err.Error())
		return
	}
	key, err := s.add(long)
	if err != nil {
		problem.Write(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if err := s.save(); err != nil {
		// A link the next start would not know is not handed out.
		s.mu.Lock()
		delete(s.links, key)
		delete(s.added, key)
		s.mu.Unlock()
		if s.o.Log != nil {
			s.o.Log.Error("shorten: cannot keep the link", "err", err)
		}
		problem.Write(w, http.StatusServiceUnavailable, "the link could not be saved: "+err.Error())
		return
	}
	short := s.base(r) + "/" + key
	w.Header().Set("Location", short)
	writeJSON(w, http.StatusCreated, map[string]string{"short_key": key, "short_url": short, "url": long})
}

// add stores long under a fresh random key.
func (s *server) add(long string) (string, error) {
	const alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.links) >= maxLinks {
		return "", fmt.Errorf("the demo holds at most %d links", maxLinks)
	}
	var b [keyLen]byte
	for {
		for i := range b {
			b[i] = alphabet[rand.IntN(len(alphabet))]
		}
		if _, taken := s.links[string(b[:])]; !taken {
			key := string(b[:])
			s.links[key] = []string{long}
			s.added[key] = long
			return key, nil
		}
	}
}

// save writes the links /shorten made to o.LinksFile, if any. Each save
// copies the links as they are when it gets its turn, so the last one to
// finish holds every link added before it began: the file never goes back
// to an older state, and a link is in it once its /shorten answered.
func (s *server) save() error {
	if s.o.LinksFile == "" {
		return nil
	}
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	s.mu.RLock()
	snapshot := maps.Clone(s.added)
	s.mu.RUnlock()
	return saveLinks(s.o.LinksFile, snapshot)
}

// base is the scheme and host short URLs start with. The demo believes
// X-Forwarded-Proto and X-Forwarded-Host because it only ever runs behind
// the gateway; a real service would believe them only from its proxies.
func (s *server) base(r *http.Request) string {
	if s.o.BaseURL != "" {
		return strings.TrimSuffix(s.o.BaseURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if p := r.Header.Get("X-Forwarded-Proto"); p == "http" || p == "https" {
		scheme = p
	}
	host := r.Host
	if h, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Host"), ","); strings.TrimSpace(h) != "" {
		host = strings.TrimSpace(h)
	}
	return scheme + "://" + host
}

// checkURL accepts absolute http(s) URLs with a host.
func checkURL(s string) (string, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return "", errors.New("url: missing")
	case len(s) > maxURLLen:
		return "", fmt.Errorf("url: longer than %d bytes", maxURLLen)
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", fmt.Errorf("url: %q does not parse", s)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		return "", fmt.Errorf("url: %q is not an absolute http(s) URL", s)
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return "", fmt.Errorf("url: %q contains white space", s)
	}
	return s, nil
}

// login answers 200 when the password is the demo password and 401
// otherwise: the failed logins the gateway's login_email rule counts.
func (s *server) login(w http.ResponseWriter, r *http.Request) {
	f, err := readFields(w, r, "email", "password")
	if err != nil {
		problem.Write(w, http.StatusBadRequest, err.Error())
		return
	}
	email := strings.ToLower(strings.TrimSpace(f["email"]))
	if email == "" {
		problem.Write(w, http.StatusBadRequest, "email: missing")
		return
	}
	if subtle.ConstantTimeCompare([]byte(f["password"]), []byte(s.o.Password)) != 1 {
		problem.Write(w, http.StatusUnauthorized, "wrong email or password")
		return
	}
	sum := sha256.Sum256([]byte(email))
	writeJSON(w, http.StatusOK, map[string]string{"email": email, "user_id": "u_" + hex.EncodeToString(sum[:6])})
}

// me echoes the user id a trusted hop put in X-User-ID.
func (s *server) me(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-User-ID")
	writeJSON(w, http.StatusOK, map[string]any{"user_id": id, "authenticated": id != ""})
}

func (s *server) index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, `tinyurl: the linkgate demo service
  curl -i BASE/go                                   302 to https://go.dev (also /gh, /ex)
  curl -i -d url=https://example.org BASE/shorten   201 with a new short_key
  curl -i -d email=a@example.com -d password=demo BASE/login   200; another password: 401
  curl -i -H 'X-User-ID: alice' BASE/api/me
`)
}

// readFields reads the named string fields of a JSON object body
// (Content-Type application/json or +json) or of a form body (or query).
func readFields(w http.ResponseWriter, r *http.Request, names ...string) (map[string]string, error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	out := make(map[string]string, len(names))
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "application/json" || strings.HasSuffix(mt, "+json") {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			return nil, fmt.Errorf("body: not a JSON object: %v", err)
		}
		for _, n := range names {
			switch v := body[n].(type) {
			case nil:
			case string:
				out[n] = v
			default:
				return nil, fmt.Errorf("%s: not a string", n)
			}
		}
		return out, nil
	}
	if err := r.ParseForm(); err != nil {
		return nil, fmt.Errorf("body: not a form: %v", err)
	}
	for _, n := range names {
		out[n] = r.Form.Get(n)
	}
	return out, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// logRequests logs one line per request after it is answered.
func (s *server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		s.o.Log.Info("request", "method", r.Method, "path", r.URL.Path, "status", sw.status,
			"duration", time.Since(start), "remote", r.RemoteAddr)
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
