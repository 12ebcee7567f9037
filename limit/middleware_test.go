package limit_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/ongoing"
)

// env is a limiter in front of a tiny upstream, served over real HTTP on
// loopback, with a fake clock.
type env struct {
	t     *testing.T
	clk   *testkit.Clock
	store limit.Store
	reg   *prometheus.Registry
	l     *limit.Limiter
	srv   *httptest.Server

	mu       sync.Mutex
	lastBody []byte // the body the upstream last received
	lastLen  int64  // its Content-Length
	hits     atomic.Int64
}

type envOpt struct {
	id      limit.Identity
	cfg     limit.Config
	trusted []string
	store   limit.Store
	log     *slog.Logger
}

func newEnv(t *testing.T, rules []limit.Rule, o envOpt) *env {
	t.Helper()
	e := &env{t: t, clk: testkit.NewClock(time.Date(2026, 3, 28, 12, 0, 10, 0, time.UTC)), reg: prometheus.NewRegistry()}
	e.store = o.store
	if e.store == nil {
		e.store = limit.NewMemoryAt(e.clk.Now)
	}
	if o.cfg.Precision == "" {
		o.cfg = limit.DefaultConfig()
	}
	if o.id.IPv6Prefix == 0 {
		o.id = limit.DefaultIdentity()
	}
	l := limit.New(compile(t, rules, o.id, o.cfg, o.trusted...), e.store, limit.NewMetrics(e.reg), o.log)
	e.l = l.WithClock(e.clk.Now)
	// The upstream answers the status asked for in ?status= and keeps the
	// body it received.
	upstream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("upstream: reading body: %v", err)
		}
		e.mu.Lock()
		e.lastBody, e.lastLen = b, r.ContentLength
		e.mu.Unlock()
		e.hits.Add(1)
		status := 200
		fmt.Sscan(r.URL.Query().Get("status"), &status)
		w.WriteHeader(status)
	})
	e.srv = httptest.NewServer(e.l.Middleware(upstream))
	t.Cleanup(e.srv.Close)
	return e
}

// do sends a request and returns the response with its body read.
func (e *env) do(method, path string, body io.Reader, hdr ...string) (*http.Response, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func (e *env) loginForm(email string, status int) *http.Response {
	e.t.Helper()
	resp, _ := e.do("POST", fmt.Sprintf("/login?status=%d", status), strings.NewReader(url.Values{"email": {email}, "password": {"x"}}.Encode()),
		"Content-Type", "application/x-www-form-urlencoded")
	return resp
}

// metric returns linkgate_limit_decisions_total{rule,outcome}.
func (e *env) metric(rule, outcome string) float64 {
	e.t.Helper()
	return testkit.Metric(e.t, e.reg, "linkgate_limit_decisions_total", "rule", rule, "outcome", outcome)
}

func limits(t *testing.T, specs ...string) []limit.Limit {
	t.Helper()
	var ls []limit.Limit
	for _, s := range specs {
		l, err := limit.ParseLimit(s)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	return ls
}

var loginPost = limit.Match{Methods: []string{"POST"}, Path: "/login"}

func loginEmailRule(t *testing.T) limit.Rule {
	return limit.Rule{Name: "login_email", Match: loginPost, Key: limit.Email, Limits: limits(t, "5/m", "10/d"), CountStatus: []int{401, 403}}
}

func TestOnlyListedStatusesCount(t *testing.T) {
	e := newEnv(t, []limit.Rule{loginEmailRule(t)}, envOpt{})
	for i := range 10 {
		if r := e.loginForm("alice@example.com", 200); r.StatusCode != 200 {
			t.Fatalf("successful login %d: status %d, want 200 (successes are not counted)", i+1, r.StatusCode)
		}
	}
	for i := range 5 {
		if r := e.loginForm("alice@example.com", 401); r.StatusCode != 401 {
			t.Fatalf("failed login %d: status %d, want the upstream's 401", i+1, r.StatusCode)
		}
	}
	r := e.loginForm("alice@example.com", 401)
	if r.StatusCode != 429 {
		t.Fatalf("6th failed login: status %d, want 429", r.StatusCode)
	}
	if r.Header.Get("Retry-After") == "" {
		t.Error("429 without Retry-After")
	}
	if r := e.loginForm("bob@example.com", 401); r.StatusCode != 401 {
		t.Errorf("another email: status %d, want 401 (not limited)", r.StatusCode)
	}
	// The same email written differently shares the counter.
	for _, v := range []string{"  Alice@Example.COM ", "ALICE@example.com"} {
		if r := e.loginForm(v, 401); r.StatusCode != 429 {
			t.Errorf("email %q: status %d, want 429 (same counter as alice@example.com)", v, r.StatusCode)
		}
	}
	// A JSON body names the same email.
	resp, body := e.do("POST", "/login?status=401", strings.NewReader(`{"email": "Alice@example.com", "password": "x"}`), "Content-Type", "application/json")
	if resp.StatusCode != 429 {
		t.Errorf("JSON body: status %d, want 429", resp.StatusCode)
	}
	// Email rules do not expose their counts, even on a 429 the headers
	// only say what the client already knows.
	var p map[string]any
	if err := json.Unmarshal(body, &p); err != nil || p["rule"] != "login_email" || p["limit"] != "5/m" {
		t.Errorf("problem body %s (%v), want rule login_email, limit 5/m", body, err)
	}
	if got := e.metric("login_email", "limited"); got != 4 {
		t.Errorf("limited decisions = %v, want 4", got)
	}
	// After a minute the 5/m limit lets alice try again.
	e.clk.Advance(time.Minute)
	if r := e.loginForm("alice@example.com", 401); r.StatusCode != 401 {
		t.Errorf("a minute later: status %d, want 401", r.StatusCode)
	}
}

// TestCountStatusReusesTheWrap: behind a count_status rule the next
// handler gets the very ongoing.Recorder the limiter was
// given (the gateway makes one per request), and the rule counts by the
// status written through it: a handler that writes nothing answers 200.
func TestCountStatusReusesTheWrap(t *testing.T) {
	rule := limit.Rule{Name: "ok_ip", Match: loginPost, Key: limit.IP, Limits: limits(t, "2/m"), CountStatus: []int{200}}
	l := limit.New(compile(t, []limit.Rule{rule}, limit.DefaultIdentity(), limit.DefaultConfig()), limit.NewMemory(), nil, nil)
	var status int // 0: the handler writes nothing
	var got http.ResponseWriter
	h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = w
		if status != 0 {
			w.WriteHeader(status)
		}
	}))
	for i, tc := range []struct{ status, want int }{
		{401, 401}, {401, 401}, {401, 401}, // not counted
		{0, 200}, {0, 200}, // counted
		{0, 429},
	} {
		status, got = tc.status, nil
		rec := httptest.NewRecorder()
		ww := ongoing.StatusWriter(rec)
		h.ServeHTTP(ww, httptest.NewRequest("POST", "/login", nil))
		if rec.Code != tc.want {
			t.Errorf("request %d: status %d, want %d", i+1, rec.Code, tc.want)
		}
		if got != nil && got != ww {
			t.Errorf("request %d: the handler got %T, a wrap of the limiter's own, want the wrap it was given", i+1, got)
		}
	}
}

func TestEmailFromJSON(t *testing.T) {
	for _, policy := range []string{"", limit.OnUnreadableSkip} {
		t.Run("on_unreadable="+policy, func(t *testing.T) {
			e := newEnv(t, []limit.Rule{{Name: "signup", Match: limit.Match{Path: "/signup"}, Key: limit.Email, Limits: limits(t, "2/h"), OnUnreadable: policy}}, envOpt{})
			post := func(body string) int {
				r, _ := e.do("POST", "/signup", strings.NewReader(body), "Content-Type", "application/json; charset=utf-8")
				return r.StatusCode
			}
			for i, b := range []string{`{"email":"Carol@Example.com"}`, `{"name":"c","email":" carol@example.com "}`} {
				if s := post(b); s != 200 {
					t.Fatalf("signup %d: status %d", i+1, s)
				}
			}
			if s := post(`{"email":"CAROL@EXAMPLE.COM"}`); s != 429 {
				t.Errorf("third signup for one email: status %d, want 429", s)
			}
			if s := post(`{"email":"dave@example.com"}`); s != 200 {
				t.Errorf("another email: status %d, want 200", s)
			}
			// No email at all: the upstream finds none either.
			for _, b := range []string{`{}`, `{"email":""}`, `{"user":{"email":"carol@example.com"}}`} {
				if s := post(b); s != 200 {
					t.Errorf("body %s: status %d, want 200 (rule skipped)", b, s)
				}
			}
			if got := e.metric("signup", "skipped"); got != 3 {
				t.Errorf("skipped = %v, want 3", got)
			}
			// An email the gateway cannot read: refused by default,
			// passed uncounted under skip.
			want := 400
			if policy == limit.OnUnreadableSkip {
				want = 200
			}
			for _, b := range []string{`{"email":42}`, `not json`} {
				if s := post(b); s != want {
					t.Errorf("body %s: status %d, want %d", b, s, want)
				}
			}
			if got := e.metric("signup", "unreadable"); got != 2 {
				t.Errorf("unreadable = %v, want 2", got)
			}
		})
	}
}

func TestBodyPassesIntact(t *testing.T) {
	id := limit.DefaultIdentity()
	id.MaxBodyBytes = 1024
	big := make([]byte, 3<<20)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	bigForm := append([]byte("email=eve%40example.com&blob="), []byte(url.QueryEscape(string(big[:5000])))...)
	cases := []struct {
		name    string
		body    []byte
		ctype   string
		chunked bool
		reject  int // the answer under on_unreadable: reject; 0: passed on
	}{
		{"small form", []byte("email=eve%40example.com&password=hunter2"), "application/x-www-form-urlencoded", false, 0},
		{"small json", []byte(`{"email":"eve@example.com","password":"ü"}`), "application/json", false, 0},
		{"form larger than max_body_bytes", bigForm, "application/x-www-form-urlencoded", false, 413},
		{"binary larger than max_body_bytes", big, "application/x-www-form-urlencoded", false, 413},
		{"chunked form larger than max_body_bytes", bigForm, "application/x-www-form-urlencoded", true, 413},
		{"chunked small form", []byte("email=eve%40example.com"), "application/x-www-form-urlencoded", true, 0},
		{"other content type", big[:1000], "application/octet-stream", false, 415},
	}
	for _, policy := range []string{limit.OnUnreadableSkip, limit.OnUnreadableReject} {
		t.Run(policy, func(t *testing.T) {
			rule := loginEmailRule(t)
			rule.OnUnreadable = policy
			e := newEnv(t, []limit.Rule{rule}, envOpt{id: id})
			refused := 0
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					var body io.Reader = bytes.NewReader(tc.body)
					if tc.chunked {
						body = io.MultiReader(body) // hides the length: sent chunked
					}
					before := e.hits.Load()
					resp, _ := e.do("POST", "/login", body, "Content-Type", tc.ctype)
					if policy == limit.OnUnreadableReject && tc.reject != 0 {
						refused++
						if resp.StatusCode != tc.reject || e.hits.Load() != before {
							t.Errorf("status %d, upstream saw %d requests: want %d and none", resp.StatusCode, e.hits.Load()-before, tc.reject)
						}
						return
					}
					if resp.StatusCode != 200 {
						t.Fatalf("status %d", resp.StatusCode)
					}
					e.mu.Lock()
					got, n := e.lastBody, e.lastLen
					e.mu.Unlock()
					if sha256.Sum256(got) != sha256.Sum256(tc.body) {
						t.Errorf("upstream received %d bytes, want the %d sent, byte for byte", len(got), len(tc.body))
					}
					if want := int64(len(tc.body)); !tc.chunked && n != want {
						t.Errorf("upstream Content-Length %d, want %d", n, want)
					}
				})
			}
			want := 4.0 // three bodies over max_body_bytes, one not a form
			if got := e.metric("login_email", "unreadable"); got != want {
				t.Errorf("unreadable = %v, want %v", got, want)
			}
			if policy == limit.OnUnreadableReject && refused != 4 {
				t.Errorf("%d refused, want 4", refused)
			}
		})
	}
}

func ipRule(t *testing.T, specs ...string) limit.Rule {
	return limit.Rule{Name: "login_ip", Match: loginPost, Key: limit.IP, Limits: limits(t, specs...)}
}

func TestTwoPerSecondPerIP(t *testing.T) {
	e := newEnv(t, []limit.Rule{ipRule(t, "2/s", "5/m", "10/h", "100/d")}, envOpt{})
	e.clk.Set(time.Date(2026, 3, 28, 12, 0, 10, 400e6, time.UTC))
	post := func() *http.Response { r, _ := e.do("POST", "/login", nil); return r }
	for i := range 2 {
		if r := post(); r.StatusCode != 200 {
			t.Fatalf("request %d: %d", i+1, r.StatusCode)
		}
	}
	r := post()
	if r.StatusCode != 429 || r.Header.Get("Retry-After") != "1" {
		t.Fatalf("3rd request in a second: %d Retry-After %q, want 429 and 1", r.StatusCode, r.Header.Get("Retry-After"))
	}
	// Other methods and paths are not limited.
	if r, _ := e.do("GET", "/login", nil); r.StatusCode != 200 {
		t.Errorf("GET /login: %d", r.StatusCode)
	}
	e.clk.Set(time.Date(2026, 3, 28, 12, 0, 11, 0, time.UTC))
	if r := post(); r.StatusCode != 200 {
		t.Errorf("next second: %d, want 200", r.StatusCode)
	}
	if r := post(); r.StatusCode != 200 {
		t.Errorf("next second, 2nd: %d, want 200", r.StatusCode)
	}
	// 4 counted hits so far (rejected ones are not counted): the 5th of the
	// minute passes, the 6th is over 5/m until 12:01:10.
	e.clk.Set(time.Date(2026, 3, 28, 12, 0, 12, 0, time.UTC))
	if r := post(); r.StatusCode != 200 {
		t.Errorf("5th in the minute: %d, want 200", r.StatusCode)
	}
	e.clk.Set(time.Date(2026, 3, 28, 12, 0, 15, 500e6, time.UTC))
	r = post()
	if r.StatusCode != 429 || r.Header.Get("Retry-After") != "55" {
		t.Errorf("6th in the minute: %d Retry-After %q, want 429 and 55", r.StatusCode, r.Header.Get("Retry-After"))
	}
	if got, want := r.Header.Get("RateLimit"), `"login_ip-1m";r=0;t=55`; got != want {
		t.Errorf("RateLimit = %s, want %s", got, want)
	}
	e.clk.Set(time.Date(2026, 3, 28, 12, 1, 10, 0, time.UTC))
	if r := post(); r.StatusCode != 200 {
		t.Errorf("at 12:01:10: %d, want 200", r.StatusCode)
	}
}

func TestHeadersAndProblem(t *testing.T) {
	rules := []limit.Rule{ipRule(t, "2/s", "5/m"), loginEmailRule(t)}
	e := newEnv(t, rules, envOpt{})
	resp, _ := e.do("POST", "/login", strings.NewReader("email=a%40b.c"), "Content-Type", "application/x-www-form-urlencoded")
	if got, want := resp.Header.Get("RateLimit-Policy"), `"login_ip-1s";q=2;w=1, "login_ip-1m";q=5;w=60`; got != want {
		t.Errorf("RateLimit-Policy = %s, want %s (ip rule only, never the email rule)", got, want)
	}
	if got, want := resp.Header.Get("RateLimit"), `"login_ip-1s";r=1;t=1`; got != want {
		t.Errorf("RateLimit = %s, want %s", got, want)
	}
	e.do("POST", "/login", nil)
	resp, body := e.do("POST", "/login", nil)
	if resp.StatusCode != 429 {
		t.Fatalf("status %d, want 429", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q", ct)
	}
	var p map[string]any
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"type": "about:blank", "title": "Too Many Requests", "status": 429.0, "rule": "login_ip", "limit": "2/s", "retry_after": 1.0}
	for k, v := range want {
		if p[k] != v {
			t.Errorf("problem %s = %v, want %v", k, p[k], v)
		}
	}
	if d, _ := p["detail"].(string); !strings.Contains(d, "login_ip") {
		t.Errorf("detail %q does not name the rule", d)
	}
	if got, want := resp.Header.Get("RateLimit"), `"login_ip-1s";r=0;t=1`; got != want {
		t.Errorf("RateLimit on 429 = %s, want %s", got, want)
	}
}

func TestUserRuleOnlyFromTrustedPeer(t *testing.T) {
	rule := limit.Rule{Name: "api_user", Match: limit.Match{Path: "/api/*"}, Key: limit.User, Limits: limits(t, "2/m")}
	untrusted := newEnv(t, []limit.Rule{rule}, envOpt{trusted: []string{"10.0.0.0/8"}})
	for i := range 5 {
		if r, _ := untrusted.do("GET", "/api/x", nil, "X-User-ID", "u1"); r.StatusCode != 200 {
			t.Fatalf("untrusted peer, request %d: %d, want 200 (header not believed)", i+1, r.StatusCode)
		}
	}
	if got := untrusted.metric("api_user", "skipped"); got != 5 {
		t.Errorf("skipped = %v, want 5", got)
	}
	trusted := newEnv(t, []limit.Rule{rule}, envOpt{trusted: []string{"127.0.0.0/8", "::1/128"}})
	for i := range 2 {
		if r, _ := trusted.do("GET", "/api/x", nil, "X-User-ID", "u1"); r.StatusCode != 200 {
			t.Fatalf("trusted peer, request %d: %d", i+1, r.StatusCode)
		}
	}
	if r, _ := trusted.do("GET", "/api/x", nil, "X-User-ID", "u1"); r.StatusCode != 429 {
		t.Errorf("trusted peer, 3rd request: %d, want 429", r.StatusCode)
	}
	if r, _ := trusted.do("GET", "/api/x", nil, "X-User-ID", "u2"); r.StatusCode != 200 {
		t.Errorf("another user: %d, want 200", r.StatusCode)
	}
}

func TestXForwardedForFromTrustedProxy(t *testing.T) {
	e := newEnv(t, []limit.Rule{ipRule(t, "1/m")}, envOpt{trusted: []string{"127.0.0.0/8", "10.0.0.0/8"}})
	// The client forges a leftmost entry; the trusted hops are skipped.
	if r, _ := e.do("POST", "/login", nil, "X-Forwarded-For", "1.2.3.4, 198.51.100.7, 10.0.0.2"); r.StatusCode != 200 {
		t.Fatal(r.StatusCode)
	}
	if r, _ := e.do("POST", "/login", nil, "X-Forwarded-For", "9.9.9.9, 198.51.100.7"); r.StatusCode != 429 {
		t.Errorf("same client behind another forged entry: %d, want 429", r.StatusCode)
	}
	if r, _ := e.do("POST", "/login", nil, "X-Forwarded-For", "198.51.100.8"); r.StatusCode != 200 {
		t.Errorf("another client: %d, want 200", r.StatusCode)
	}
	// IPv6 clients of one /64 share a counter.
	if r, _ := e.do("POST", "/login", nil, "X-Forwarded-For", "2001:db8:1:2::1"); r.StatusCode != 200 {
		t.Errorf("IPv6 client: %d", r.StatusCode)
	}
	if r, _ := e.do("POST", "/login", nil, "X-Forwarded-For", "2001:db8:1:2:ffff::9"); r.StatusCode != 429 {
		t.Errorf("IPv6 client in the same /64: %d, want 429", r.StatusCode)
	}
}

func TestShadow(t *testing.T) {
	r := ipRule(t, "1/m")
	r.Shadow = true
	e := newEnv(t, []limit.Rule{r}, envOpt{})
	for i := range 4 {
		resp, _ := e.do("POST", "/login", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d, want 200 (shadow blocks nothing)", i+1, resp.StatusCode)
		}
		if h := resp.Header.Get("RateLimit"); h != "" {
			t.Errorf("request %d: RateLimit %q from a shadow rule", i+1, h)
		}
	}
	if got := e.metric("login_ip", "shadow_limited"); got != 3 {
		t.Errorf("shadow_limited = %v, want 3", got)
	}
	if got := e.metric("login_ip", "allowed"); got != 1 {
		t.Errorf("allowed = %v, want 1", got)
	}
}

func TestAllowlist(t *testing.T) {
	ip := ipRule(t, "1/m")
	ip.Allow = []string{"127.0.0.0/8", "::1"}
	em := loginEmailRule(t)
	em.CountStatus = nil
	em.Limits = limits(t, "1/m")
	em.Allow = []string{" VIP@example.com"}
	e := newEnv(t, []limit.Rule{ip, em}, envOpt{})
	for i := range 3 {
		if r := e.loginForm("vip@example.com", 200); r.StatusCode != 200 {
			t.Fatalf("allowlisted request %d: %d", i+1, r.StatusCode)
		}
	}
	e.loginForm("joe@example.com", 200)
	if r := e.loginForm("joe@example.com", 200); r.StatusCode != 429 {
		t.Errorf("email not allowlisted: %d, want 429", r.StatusCode)
	}
}

// failingStore fails every call.
type failingStore struct{ loads atomic.Int64 }

var errDown = errors.New("store down")

func (s *failingStore) Load(context.Context, limit.Counter, []limit.Bucket, []int64) error {
	s.loads.Add(1)
	return errDown
}
func (s *failingStore) Add(context.Context, limit.Counter, []limit.Bucket, int64) error {
	return errDown
}
func (s *failingStore) AddNow(context.Context, limit.Counter, []limit.Bucket, int64) error {
	return errDown
}
func (s *failingStore) Reset(context.Context, limit.Counter, []limit.Bucket) error { return errDown }
func (s *failingStore) PutBox(context.Context, limit.Counter, limit.Box, int64) error {
	return errDown
}
func (s *failingStore) Boxes(context.Context, int64, func(limit.Boxed) bool) error { return errDown }

func TestStoreError(t *testing.T) {
	for _, tc := range []struct {
		policy string
		want   int
	}{{"allow", 200}, {"deny", 503}} {
		t.Run(tc.policy, func(t *testing.T) {
			cfg := limit.DefaultConfig()
			cfg.OnStoreError = tc.policy
			e := newEnv(t, []limit.Rule{ipRule(t, "1/m")}, envOpt{cfg: cfg, store: &failingStore{}})
			for range 3 {
				resp, body := e.do("POST", "/login", nil)
				if resp.StatusCode != tc.want {
					t.Fatalf("status %d, want %d", resp.StatusCode, tc.want)
				}
				if tc.want == 503 && (resp.Header.Get("Retry-After") != "1" || !bytes.Contains(body, []byte(`"status":503`))) {
					t.Errorf("503 answer: Retry-After %q body %s", resp.Header.Get("Retry-After"), body)
				}
			}
			if got := e.metric("login_ip", "store_error"); got != 3 {
				t.Errorf("store_error = %v, want 3", got)
			}
			if tc.want == 200 && e.hits.Load() != 3 {
				t.Errorf("upstream saw %d requests, want 3", e.hits.Load())
			}
		})
	}
}

// countingStore counts the operations reaching a Memory store.
type countingStore struct {
	*limit.Memory
	loads atomic.Int64
}

func (s *countingStore) Load(ctx context.Context, c limit.Counter, b []limit.Bucket, n []int64) error {
	s.loads.Add(1)
	return s.Memory.Load(ctx, c, b, n)
}

func TestBlockedClientCostsNoStoreOp(t *testing.T) {
	clk := testkit.NewClock(time.Date(2026, 3, 28, 12, 0, 10, 0, time.UTC))
	cs := &countingStore{Memory: limit.NewMemoryAt(clk.Now)}
	e := newEnv(t, []limit.Rule{ipRule(t, "2/m")}, envOpt{store: cs})
	e.clk = clk
	e.l.WithClock(clk.Now)
	for range 3 {
		e.do("POST", "/login", nil)
	}
	before := cs.loads.Load()
	for range 20 {
		if r, _ := e.do("POST", "/login", nil); r.StatusCode != 429 {
			t.Fatalf("status %d, want 429", r.StatusCode)
		}
	}
	if n := cs.loads.Load() - before; n != 0 {
		t.Errorf("%d store loads for 20 requests of a blocked client, want 0", n)
	}
	clk.Set(time.Date(2026, 3, 28, 12, 1, 10, 0, time.UTC))
	if r, _ := e.do("POST", "/login", nil); r.StatusCode != 200 {
		t.Errorf("after the window: %d, want 200", r.StatusCode)
	}
}

func TestAdmin(t *testing.T) {
	em := loginEmailRule(t)
	ip := ipRule(t, "1/m")
	ip.Match = limit.Match{Path: "/ip"}
	e := newEnv(t, []limit.Rule{em, ip}, envOpt{trusted: []string{"127.0.0.0/8"}})
	// Mounted as cmd/gateway does: a chi sub-route, then StripPrefix.
	call := boxedAdmin(t, e)
	for range 6 {
		e.loginForm("frank@example.com", 401)
	}
	if r := e.loginForm("frank@example.com", 401); r.StatusCode != 429 {
		t.Fatalf("status %d, want 429", r.StatusCode)
	}
	code, v := call("GET", "/admin/limits/login_email/%20Frank%40Example.com")
	if code != 200 || v["value"] != "frank@example.com" || v["limited"] != true {
		t.Fatalf("GET: %d %v", code, v)
	}
	ls, _ := v["limits"].([]any)
	if len(ls) != 2 {
		t.Fatalf("GET limits: %v", v["limits"])
	}
	first := ls[0].(map[string]any)
	if first["limit"] != "5/m" || first["count"] != 5.0 || first["remaining"] != 0.0 || first["free_at"] != "2026-03-28T12:01:10Z" {
		t.Errorf("GET first limit: %v", first)
	}
	if code, _ := call("DELETE", "/admin/limits/login_email/FRANK@example.com"); code != 204 {
		t.Errorf("DELETE: %d, want 204", code)
	}
	if r := e.loginForm("frank@example.com", 401); r.StatusCode != 401 {
		t.Errorf("after reset: %d, want 401 (unblocked)", r.StatusCode)
	}
	if code, v := call("GET", "/admin/limits/nope/x"); code != 404 || v["status"] != 404.0 {
		t.Errorf("unknown rule: %d %v", code, v)
	}
	if code, _ := call("GET", "/admin/limits/login_ip/not-an-ip"); code != 400 {
		t.Errorf("bad ip: %d, want 400", code)
	}
	// IPv6 values are grouped like clients: any address of the /64, or the
	// prefix itself (escaped), names the counter.
	e.do("POST", "/ip", nil, "X-Forwarded-For", "2001:db8:1:2::1")
	if r, _ := e.do("POST", "/ip", nil, "X-Forwarded-For", "2001:db8:1:2::2"); r.StatusCode != 429 {
		t.Fatalf("second IPv6 request: %d", r.StatusCode)
	}
	code, v = call("GET", "/admin/limits/login_ip/2001:db8:1:2::77")
	if code != 200 || v["value"] != "2001:db8:1:2::/64" {
		t.Errorf("GET IPv6: %d %v", code, v)
	}
	if code, _ := call("DELETE", "/admin/limits/login_ip/2001:db8:1:2::%2F64"); code != 204 {
		t.Errorf("DELETE IPv6 prefix: %d", code)
	}
	if r, _ := e.do("POST", "/ip", nil, "X-Forwarded-For", "2001:db8:1:2::3"); r.StatusCode != 200 {
		t.Errorf("IPv6 after reset: %d, want 200", r.StatusCode)
	}
}

// TestReloadKeepsCounts builds a second Limiter on the same store with the
// limit edited: the counts carry over because keys hold the rule's name.
func TestReloadKeepsCounts(t *testing.T) {
	e := newEnv(t, []limit.Rule{ipRule(t, "3/m")}, envOpt{})
	for range 3 {
		e.do("POST", "/login", nil)
	}
	l2 := limit.New(compile(t, []limit.Rule{ipRule(t, "4/m")}, limit.DefaultIdentity(), limit.DefaultConfig()), e.store, nil, nil)
	srv := httptest.NewServer(l2.WithClock(e.clk.Now).Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	codes := []int{}
	for range 2 {
		resp, err := http.Post(srv.URL+"/login", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if codes[0] != 200 || codes[1] != 429 {
		t.Errorf("after reload to 4/m with 3 counted: %v, want [200 429]", codes)
	}
}

// compile compiles the limiter's sections with the given trusted proxies.
func compile(t testing.TB, rules []limit.Rule, id limit.Identity, cfg limit.Config, trusted ...string) *limit.Plan {
	t.Helper()
	tr, err := forwarded.Parse(trusted)
	if err != nil {
		t.Fatal(err)
	}
	p, err := limit.Compile(rules, id, cfg, tr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCompileRejects checks that every config the limiter could not run
// is refused by Compile, with the field's path in the file.
func TestCompileRejects(t *testing.T) {
	good := ipRule(t, "1/s")
	for _, tc := range []struct {
		name  string
		rules []limit.Rule
		id    func(*limit.Identity)
		cfg   func(*limit.Config)
		field string
	}{
		{"duplicate name", []limit.Rule{good, good}, nil, nil, "rules[1].name:"},
		{"no name", []limit.Rule{{Match: loginPost, Key: limit.IP, Limits: limits(t, "1/s")}}, nil, nil, "rules[0].name:"},
		{"name with space", []limit.Rule{good, {Name: "a b", Match: loginPost, Key: limit.IP, Limits: limits(t, "1/s")}}, nil, nil, "rules[1].name:"},
		{"bad key", []limit.Rule{{Name: "x", Match: loginPost, Key: "cookie", Limits: limits(t, "1/s")}}, nil, nil, "rules[0].key:"},
		{"no limits", []limit.Rule{{Name: "x", Match: loginPost, Key: limit.IP}}, nil, nil, "rules[0].limits:"},
		{"bad path", []limit.Rule{{Name: "x", Match: limit.Match{Path: "login"}, Key: limit.IP, Limits: limits(t, "1/s")}}, nil, nil, "rules[0].match:"},
		{"bad status", []limit.Rule{{Name: "x", Match: loginPost, Key: limit.IP, Limits: limits(t, "1/s"), CountStatus: []int{401, 42}}}, nil, nil, "rules[0].count_status[1]:"},
		{"strict and count_status", []limit.Rule{{Name: "x", Match: loginPost, Key: limit.Email, Limits: limits(t, "1/s"), Strict: true, CountStatus: []int{401}}}, nil, nil, "rules[0].strict:"},
		{"bad allow", []limit.Rule{{Name: "x", Match: loginPost, Key: limit.IP, Limits: limits(t, "1/s"), Allow: []string{"10.0.0.0/8", "not-a-cidr"}}}, nil, nil, "rules[0].allow[1]:"},
		{"allow /33", []limit.Rule{{Name: "x", Match: loginPost, Key: limit.IP, Limits: limits(t, "1/s"), Allow: []string{"10.0.0.0/33"}}}, nil, nil, "rules[0].allow[0]:"},
		{"user rule without header", []limit.Rule{{Name: "x", Match: loginPost, Key: limit.User, Limits: limits(t, "1/s")}}, func(id *limit.Identity) { id.UserHeader = "" }, nil, "rules[0].key:"},
		{"bad precision", []limit.Rule{good}, nil, func(c *limit.Config) { c.Precision = "fuzzy" }, "limiter.precision:"},
		{"bad policy", []limit.Rule{good}, nil, func(c *limit.Config) { c.OnStoreError = "maybe" }, "limiter.on_store_error:"},
		{"memcached listed twice", nil, nil, func(c *limit.Config) {
			c.Store = "memcached"
			c.Memcached.Servers = []string{"127.0.0.1:11211", "127.0.0.1:11211"}
		}, "limiter.memcached.servers[1]:"},
		{"memcached no port", nil, nil, func(c *limit.Config) { c.Store = "memcached"; c.Memcached.Servers = []string{"127.0.0.1"} }, "limiter.memcached.servers[0]:"},
		{"bad ipv6 prefix", nil, func(id *limit.Identity) { id.IPv6Prefix = 129 }, nil, "identity.ipv6_prefix:"},
		{"zero body", nil, func(id *limit.Identity) { id.MaxBodyBytes = 0 }, nil, "identity.max_body_bytes:"},
		{"bad header name", nil, func(id *limit.Identity) { id.UserHeader = "X User" }, nil, "identity.user_header:"},
	} {
		cfg, id := limit.DefaultConfig(), limit.DefaultIdentity()
		if tc.cfg != nil {
			tc.cfg(&cfg)
		}
		if tc.id != nil {
			tc.id(&id)
		}
		_, err := limit.Compile(tc.rules, id, cfg, nil)
		if err == nil || !strings.HasPrefix(err.Error(), tc.field) {
			t.Errorf("%s: Compile error %v, want one starting with %s", tc.name, err, tc.field)
		}
	}
}

func TestStrict(t *testing.T) {
	r := ipRule(t, "2/m")
	r.Strict = true
	e := newEnv(t, []limit.Rule{r}, envOpt{})
	codes := []int{}
	for range 3 {
		resp, _ := e.do("POST", "/login", nil)
		codes = append(codes, resp.StatusCode)
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Errorf("strict 2/m: %v, want [200 200 429]", codes)
	}
	// The rejected hit was counted (strict counts first).
	var rs []int64 = make([]int64, 1)
	start := e.clk.Now().Unix() / 1 * 1
	if err := e.store.Load(t.Context(), limit.Counter{Rule: "login_ip", Value: "127.0.0.1"}, []limit.Bucket{{Level: limit.Second, Start: start}}, rs); err != nil {
		t.Fatal(err)
	}
	if rs[0] != 3 {
		t.Errorf("strict count after 3 requests = %d, want 3", rs[0])
	}
}

// TestPrecision contrasts the two precisions on 3/h: a hit 59:55 ago has
// left the minute buckets of precision bucket but is still in the window of
// precision exact, which frees the client exactly an hour after it.
func TestPrecision(t *testing.T) {
	for _, tc := range []struct {
		precision string
		want      int
		retry     string
	}{{"bucket", 200, ""}, {"exact", 429, "5"}} {
		t.Run(tc.precision, func(t *testing.T) {
			cfg := limit.DefaultConfig()
			cfg.Precision = tc.precision
			e := newEnv(t, []limit.Rule{ipRule(t, "3/h")}, envOpt{cfg: cfg})
			for _, at := range []string{"12:00:10", "12:20:00", "12:40:00"} {
				e.clk.Set(mustTime(t, at))
				if r, _ := e.do("POST", "/login", nil); r.StatusCode != 200 {
					t.Fatalf("hit at %s: %d", at, r.StatusCode)
				}
			}
			e.clk.Set(mustTime(t, "13:00:05"))
			r, _ := e.do("POST", "/login", nil)
			if r.StatusCode != tc.want || r.Header.Get("Retry-After") != tc.retry {
				t.Errorf("at 13:00:05: %d Retry-After %q, want %d %q", r.StatusCode, r.Header.Get("Retry-After"), tc.want, tc.retry)
			}
			if tc.want == 429 {
				e.clk.Set(mustTime(t, "13:00:10"))
				if r, _ := e.do("POST", "/login", nil); r.StatusCode != 200 {
					t.Errorf("at 13:00:10: %d, want 200", r.StatusCode)
				}
			}
		})
	}
}

func mustTime(t *testing.T, hms string) time.Time {
	t.Helper()
	tm, err := time.Parse("2006-01-02 15:04:05", "2026-03-28 "+hms)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// TestRejectedNotCounted checks that a request rejected by one rule is not
// counted under the other rules it matched.
func TestRejectedNotCounted(t *testing.T) {
	em := loginEmailRule(t)
	em.CountStatus = nil
	em.Limits = limits(t, "100/m")
	e := newEnv(t, []limit.Rule{ipRule(t, "1/m"), em}, envOpt{})
	if r := e.loginForm("gina@example.com", 200); r.StatusCode != 200 {
		t.Fatal(r.StatusCode)
	}
	for range 3 {
		if r := e.loginForm("gina@example.com", 200); r.StatusCode != 429 {
			t.Fatalf("status %d, want 429 from login_ip", r.StatusCode)
		}
	}
	admin := httptest.NewServer(e.l.AdminHandler())
	defer admin.Close()
	resp, err := http.Get(admin.URL + "/login_email/gina@example.com")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct {
		Limits []struct{ Count int64 } `json:"limits"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || len(v.Limits) != 1 {
		t.Fatalf("admin answer: %v %+v", err, v)
	}
	if v.Limits[0].Count != 1 {
		t.Errorf("login_email count = %d after 1 allowed and 3 rejected requests, want 1", v.Limits[0].Count)
	}
}

// TestExactPrecisionFarEdge: in precision exact, hits a day old are counted
// until the second they leave a 1-day window (read from the seconds of
// yesterday's tail), and Retry-After is that second, not the end of the
// hour bucket that also holds them.
func TestExactPrecisionFarEdge(t *testing.T) {
	cfg := limit.DefaultConfig()
	cfg.Precision = "exact"
	e := newEnv(t, []limit.Rule{ipRule(t, "3/d")}, envOpt{cfg: cfg, trusted: []string{"127.0.0.0/8"}})
	post := func(client string) *http.Response {
		r, _ := e.do("POST", "/login", nil, "X-Forwarded-For", client)
		return r
	}
	e.clk.Set(mustTime(t, "10:00:40"))
	for _, client := range []string{"198.51.100.1", "198.51.100.2"} {
		for i := range 3 {
			if r := post(client); r.StatusCode != 200 {
				t.Fatalf("%s hit %d: %d", client, i+1, r.StatusCode)
			}
		}
	}
	nextDay := func(hms string) { e.clk.Set(mustTime(t, hms).Add(24 * time.Hour)) }
	for _, tc := range []struct {
		at, client string
		status     int
		retry      string
	}{
		{"09:00:00", "198.51.100.1", 429, "3640"}, // the hits leave at 10:00:40, inside the 10:00 hour bucket
		{"10:00:20", "198.51.100.2", 429, "20"},   // counted from yesterday's 10:00:21–59 seconds
		{"10:00:40", "198.51.100.1", 200, ""},
		{"10:00:40", "198.51.100.2", 200, ""},
	} {
		nextDay(tc.at)
		r := post(tc.client)
		if r.StatusCode != tc.status || r.Header.Get("Retry-After") != tc.retry {
			t.Errorf("%s at %s the next day: %d Retry-After %q, want %d %q", tc.client, tc.at, r.StatusCode, r.Header.Get("Retry-After"), tc.status, tc.retry)
		}
	}
}

// TestRepeatedLogsThrottled: a failing store and a shadow rule log one line
// a second per rule, not one per request; the line after a quiet second
// says how many it held back, and the metrics count every request.
func TestRepeatedLogsThrottled(t *testing.T) {
	for _, tc := range []struct {
		name    string
		store   limit.Store
		rule    limit.Rule
		msg     string
		outcome string
	}{
		{"store error", &failingStore{}, ipRule(t, "100/s"), "limit: store failed", "store_error"},
		{"shadow", nil, limit.Rule{Name: "login_ip", Match: loginPost, Key: limit.IP, Limits: limits(t, "1/h"), Shadow: true}, "limit: shadow rule would limit", "shadow_limited"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs testkit.Logs
			e := newEnv(t, []limit.Rule{tc.rule}, envOpt{store: tc.store, log: slog.New(logs.Handler())})
			const perSecond = 50
			for range 3 { // three seconds
				for range perSecond {
					e.do("POST", "/login", nil)
				}
				e.clk.Advance(time.Second)
			}
			got := e.metric("login_ip", tc.outcome)
			lines := logs.Records(tc.msg, nil)
			if len(lines) != 3 {
				t.Errorf("%d lines %q in 3 s, want 3 (one a second)", len(lines), tc.msg)
			}
			var suppressed int64
			for _, l := range lines {
				if n, ok := l["suppressed"]; ok {
					v, err := strconv.ParseInt(n, 10, 64)
					if err != nil {
						t.Fatalf("suppressed=%q: %v", n, err)
					}
					suppressed += v
				}
			}
			// Every event is a line or held back; the third second's held
			// back events have not been reported yet.
			if reported := float64(len(lines)) + float64(suppressed); reported != got-(perSecond-1) {
				t.Errorf("lines plus suppressed = %v, want %v (metric %v minus the last second's %d held back)", reported, got-(perSecond-1), got, perSecond-1)
			}
			if min := float64(3*perSecond - 1); got < min { // a shadow rule's first request is within its limit
				t.Errorf("%s decisions = %v, want at least %v", tc.outcome, got, min)
			}
		})
	}
}

// TestRuleHosts: a rule whose match lists hosts applies to the requests
// for those hosts only (exact names and one-label wildcards, port and case
// aside), counting them together under its name; on other hosts it is not
// checked at all.
func TestRuleHosts(t *testing.T) {
	rule := limit.Rule{Name: "brand_ip", Match: limit.Match{Path: "/{short_key}", Hosts: []string{"*.brand.example", "Sho.RT"}},
		Key: limit.IP, Limits: limits(t, "2/m")}
	e := newEnv(t, []limit.Rule{rule}, envOpt{})
	get := func(host string) int {
		t.Helper()
		req, err := http.NewRequest("GET", e.srv.URL+"/go", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i, tc := range []struct {
		host string
		want int
	}{
		{"a.brand.example", 200},
		{"sho.rt:443", 200},
		{"B.Brand.Example", 429}, // the third of the rule's hosts together
		{"other.example", 200},   // not the rule's
		{"brand.example", 200},   // a wildcard needs one label more
		{"a.b.brand.example", 200},
		{"sho.rt.", 429},
	} {
		if got := get(tc.host); got != tc.want {
			t.Errorf("request %d, Host %s: %d, want %d", i, tc.host, got, tc.want)
		}
	}
	if got, want := e.metric("brand_ip", "allowed")+e.metric("brand_ip", "limited"), 4.0; got != want {
		t.Errorf("%v decisions of the rule, want %v: other hosts were checked", got, want)
	}
}

func TestRuleHostsCompile(t *testing.T) {
	r := limit.Rule{Name: "r", Match: limit.Match{Path: "/x", Hosts: []string{"sho.rt", "a.*.example"}}, Key: limit.IP, Limits: limits(t, "1/s")}
	_, err := limit.Compile([]limit.Rule{r}, limit.DefaultIdentity(), limit.DefaultConfig(), nil)
	if err == nil || !strings.HasPrefix(err.Error(), `rules[0].match.hosts[1]: "a.*.example" is not`) {
		t.Errorf("error %v, want one naming rules[0].match.hosts[1]", err)
	}
	r.Match.Hosts = []string{"sho.rt", "SHO.rt"}
	_, err = limit.Compile([]limit.Rule{r}, limit.DefaultIdentity(), limit.DefaultConfig(), nil)
	if err == nil || !strings.HasPrefix(err.Error(), "rules[0].match.hosts[1]:") || !strings.Contains(err.Error(), "twice") {
		t.Errorf("error %v, want one naming rules[0].match.hosts[1] listed twice", err)
	}
}

// TestTenantRule: a rule keyed on the tenant counts each tenant's requests
// apart, whichever of its hosts they name, so that one tenant's campaign
// leaves the others' budget whole; a host in no tenant is not counted.
func TestTenantRule(t *testing.T) {
	rule := limit.Rule{Name: "per_tenant", Match: limit.Match{Path: "/{short_key}"}, Key: limit.Tenant, Limits: limits(t, "2/m")}
	e := newEnv(t, []limit.Rule{rule}, envOpt{})
	e.l.WithTenants(func(host string) string {
		switch host {
		case "go.acme.example", "x.acme.example":
			return "acme"
		case "go.other.example":
			return "other"
		}
		return ""
	})
	for i, tc := range []struct {
		host string
		want int
	}{
		{"go.acme.example", 200},
		{"x.acme.example", 200},
		{"go.acme.example", 429}, // acme's third, on either host
		{"go.other.example", 200},
		{"go.other.example", 200},
		{"x.acme.example", 429},
		{"go.other.example", 429},
		{"plain.example", 200}, // in no tenant: not the rule's
		{"plain.example", 200},
		{"plain.example", 200},
	} {
		req, err := http.NewRequest("GET", e.srv.URL+"/go", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tc.host
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("request %d, Host %s: %d, want %d", i, tc.host, resp.StatusCode, tc.want)
		}
	}
}
