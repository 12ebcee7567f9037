package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// limitConfig is testkit.BaseConfig in front of upstream, trusting the
// proxies trusted, with login and API rules like the example's on the
// limiter store store (the limiter section's body).
func limitConfig(upstream, trusted, store string) string {
	return strings.Replace(testkit.BaseConfig(upstream), "trusted_proxies: [127.0.0.1/32]", "trusted_proxies: ["+trusted+"]", 1) + fmt.Sprintf(`limiter:
%s
rules:
  - name: login_email
    match: {methods: [POST], path: /login}
    key: email
    limits: [5/m, 10/d]
    count_status: [401, 403]
  - name: login_ip
    match: {methods: [POST], path: /login}
    key: ip
    limits: [2/s, 100/m]
  - name: api_user
    match: {methods: [GET, POST], path: "/api/*"}
    key: user
    limits: [3/m]
`, store)
}

const memoryStore = "  store: memory"

var ipSeq = 0

// login posts a form login from a distinct client address (through
// X-Forwarded-For from the trusted loopback peer), so that only the email
// rule can bite.
func login(t *testing.T, gw *running, email, password string) (*http.Response, string) {
	t.Helper()
	ipSeq++
	form := url.Values{"email": {email}, "password": {password}}.Encode()
	return testkit.Do(t, "POST", gw.url("/login"), strings.NewReader(form),
		"Content-Type", "application/x-www-form-urlencoded", "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", ipSeq%250+1))
}

func TestLoginEmailCountsOnlyFailures(t *testing.T) {
	up := tinyURL(t)
	gw := start(t, limitConfig(up.URL, "127.0.0.1/32", memoryStore))

	for i := 0; i < 8; i++ { // successful logins are not counted
		if resp, _ := login(t, gw, "ok@example.com", "demo"); resp.StatusCode != 200 {
			t.Fatalf("good login %d: %d", i, resp.StatusCode)
		}
	}
	// Case and surrounding spaces do not make a new counter; JSON bodies count too.
	variants := []string{"Victim@Example.com", " victim@example.com", "VICTIM@example.com ", "victim@example.com", "json"}
	for i, e := range variants {
		var resp *http.Response
		if e == "json" {
			resp, _ = testkit.Do(t, "POST", gw.url("/login"), strings.NewReader(`{"email":" Victim@EXAMPLE.com","password":"nope"}`),
				"Content-Type", "application/json", "X-Forwarded-For", "203.0.113.99")
		} else {
			resp, _ = login(t, gw, e, "wrong")
		}
		if resp.StatusCode != 401 {
			t.Fatalf("failed login %d (%q): %d, want 401", i+1, e, resp.StatusCode)
		}
		if strings.Contains(resp.Header.Get("RateLimit-Policy"), "login_email") {
			t.Errorf("email rule headers leaked on an allowed response: %q", resp.Header.Get("RateLimit-Policy"))
		}
	}
	resp, b := login(t, gw, "victim@example.com", "demo")
	p := testkit.Problem(t, resp, b, http.StatusTooManyRequests)
	if p["rule"] != "login_email" || !strings.Contains(fmt.Sprint(p["limit"]), "5/m") {
		t.Errorf("problem body does not name the rule and limit: %s", b)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After = %q, want 1..60 seconds", resp.Header.Get("Retry-After"))
	}
	if resp, _ := login(t, gw, "other@example.com", "wrong"); resp.StatusCode != 401 {
		t.Errorf("another email: %d, want 401", resp.StatusCode)
	}

	// The operator unblocks the victim, naming the email as a client sends it.
	admin := gw.admin("/admin/limits/login_email/" + url.PathEscape(" VICTIM@example.com"))
	resp, b = testkit.Do(t, "GET", admin, nil, "Authorization", "Bearer "+testkit.AdminToken)
	var shown struct {
		Limited bool
		Limits  []struct {
			Limit string
			Count int
		}
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(b), &shown) != nil || !shown.Limited || len(shown.Limits) != 2 ||
		shown.Limits[0].Limit != "5/m" || shown.Limits[0].Count != 5 {
		t.Errorf("inspect: %d %s", resp.StatusCode, b)
	}
	resp, b = testkit.Do(t, "DELETE", admin, nil, "Authorization", "Bearer "+testkit.AdminToken)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("reset: %d %s", resp.StatusCode, b)
	}
	if resp, _ := login(t, gw, "victim@example.com", "demo"); resp.StatusCode != 200 {
		t.Errorf("after reset: %d, want 200", resp.StatusCode)
	}
}

func TestIPLimitAndHeaders(t *testing.T) {
	up := tinyURL(t)
	gw := start(t, limitConfig(up.URL, "127.0.0.1/32", memoryStore))
	// Five logins within a fraction of a second from one address: at most two
	// per one-second bucket pass, so at least one of them is refused.
	var limited, allowed int
	for i := 0; i < 5; i++ {
		form := url.Values{"email": {fmt.Sprintf("u%d@example.com", i)}, "password": {"demo"}}.Encode()
		resp, b := testkit.Do(t, "POST", gw.url("/login"), strings.NewReader(form),
			"Content-Type", "application/x-www-form-urlencoded", "X-Forwarded-For", "192.0.2.10")
		switch resp.StatusCode {
		case 200:
			allowed++
			if !strings.Contains(resp.Header.Get("RateLimit-Policy"), `"login_ip`) || resp.Header.Get("RateLimit") == "" {
				t.Errorf("allowed response lacks the ip rule's RateLimit headers: %v", resp.Header)
			}
		case 429:
			limited++
			testkit.Problem(t, resp, b, 429)
			if !strings.Contains(b, "login_ip") || resp.Header.Get("Retry-After") != "1" {
				t.Errorf("429: Retry-After %q body %s", resp.Header.Get("Retry-After"), b)
			}
		default:
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if limited == 0 || allowed < 2 || allowed > 4 {
		t.Errorf("allowed %d, limited %d of 5 requests under 2/s", allowed, limited)
	}
	// Another address is not affected.
	form := url.Values{"email": {"x@example.com"}, "password": {"demo"}}.Encode()
	if resp, _ := testkit.Do(t, "POST", gw.url("/login"), strings.NewReader(form),
		"Content-Type", "application/x-www-form-urlencoded", "X-Forwarded-For", "192.0.2.11"); resp.StatusCode != 200 {
		t.Errorf("other address: %d", resp.StatusCode)
	}
}

// TestUserIdentityOnlyFromTrustedPeer: X-User-ID is believed, by the
// limiter and by the upstream, only from a trusted proxy; from anyone else
// it never reaches the upstream.
func TestUserIdentityOnlyFromTrustedPeer(t *testing.T) {
	up := tinyURL(t)
	for _, tt := range []struct {
		trusted string
		trust   bool
	}{{"127.0.0.1/32", true}, {"10.0.0.0/8", false}} {
		t.Run(tt.trusted, func(t *testing.T) {
			gw := start(t, limitConfig(up.URL, tt.trusted, memoryStore))
			limited := false
			for i := 0; i < 5; i++ {
				resp, b := testkit.Do(t, "GET", gw.url("/api/me"), nil, "X-User-ID", "admin")
				limited = limited || resp.StatusCode == 429
				if resp.StatusCode == 200 && strings.Contains(b, `"user_id":"admin"`) != tt.trust {
					t.Errorf("the upstream saw %s from a peer trusted=%v", b, tt.trust)
				}
			}
			if limited != tt.trust {
				t.Errorf("limited = %v, want %v (X-User-ID believed only from trusted peers)", limited, tt.trust)
			}
		})
	}
}

func memcachedStore(addr, policy string) string {
	return fmt.Sprintf("  store: memcached\n  memcached: {servers: [%s], timeout: 100ms}\n  on_store_error: %s", addr, policy)
}

func TestTwoGatewaysShareMemcached(t *testing.T) {
	mc := testkit.StartMemcached(t)
	up := tinyURL(t)
	gw1 := start(t, limitConfig(up.URL, "127.0.0.1/32", memcachedStore(mc.Addr, "allow")))
	gw2 := start(t, limitConfig(up.URL, "127.0.0.1/32", memcachedStore(mc.Addr, "allow")))
	for i := 0; i < 3; i++ {
		if resp, _ := testkit.Do(t, "GET", gw1.url("/api/me"), nil, "X-User-ID", "bob"); resp.StatusCode != 200 {
			t.Fatalf("gw1 request %d: %d", i, resp.StatusCode)
		}
	}
	// gw1 sends its increments asynchronously: gw2 sees them within moments.
	testkit.Eventually(t, 3*time.Second, "gw2 refuses bob's 4th request", func() bool {
		resp, _ := testkit.Do(t, "GET", gw2.url("/api/me"), nil, "X-User-ID", "bob")
		return resp.StatusCode == 429
	})
}

func TestMemcachedDownAppliesPolicy(t *testing.T) {
	t.Parallel()
	mc := testkit.StartMemcached(t)
	up := tinyURL(t)
	// A store timeout far above what a request takes on a busy machine
	// (2 s, stretched by its pace, within the field's bound of 10 s): a
	// decision that waited it out would stand out.
	timeout := min(testkit.Slack(2*time.Second), 10*time.Second)
	store := strings.Replace(memcachedStore(mc.Addr, "allow"), "timeout: 100ms", fmt.Sprintf("timeout: %v", timeout), 1)
	gw := start(t, limitConfig(up.URL, "127.0.0.1/32", store))
	user := func(u string) int {
		resp, _ := testkit.Do(t, "GET", gw.url("/api/me"), nil, "X-User-ID", u)
		return resp.StatusCode
	}
	for i := 0; i < 3; i++ {
		user("carol")
	}
	if got := user("carol"); got != 429 {
		t.Fatalf("4th request with memcached up: %d", got)
	}
	mc.Kill()
	// on_store_error: allow — every request passes, none is a 5xx, and a
	// decision does not wait out the store timeout once the breaker is open.
	for i := 0; i < 20; i++ {
		begin := time.Now()
		if got := user(fmt.Sprintf("dave%d", i%2)); got != 200 {
			t.Fatalf("request %d with memcached down: %d, want 200 (allow)", i, got)
		}
		if d := time.Since(begin); i > 5 && d > timeout/2 {
			t.Errorf("request %d took %v with the breaker open (store timeout %v)", i, d, timeout)
		}
	}
	mc.Start()
	// The breaker closes at the next probe (every 200 ms) once its 128
	// connections are dialed: moments, or seconds on a machine loaded to 10.
	testkit.Eventually(t, 15*time.Second, "limits apply again after memcached returns", func() bool {
		return user("erin") == 429
	})
}

// TestRuleCatchesPathVariants: an upstream that routes "/LOGIN", "/login/"
// and "//login" to its login handler (many frameworks do) cannot be used
// to step around the rule written for POST /login.
func TestRuleCatchesPathVariants(t *testing.T) {
	lenient := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.ToLower(path.Clean(r.URL.Path)) == "/login" && r.FormValue("password") != "demo" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	defer lenient.Close()
	gw := start(t, limitConfig(lenient.URL, "127.0.0.1/32", memoryStore))
	var codes []int
	for i, p := range []string{"/LOGIN", "/login/", "//login", "/Login", "/x/../login", "/login"} {
		form := url.Values{"email": {"victim@example.com"}, "password": {"wrong"}}.Encode()
		resp, _ := testkit.Do(t, "POST", gw.url(p), strings.NewReader(form),
			"Content-Type", "application/x-www-form-urlencoded", "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", 100+i))
		codes = append(codes, resp.StatusCode)
	}
	if fmt.Sprint(codes) != "[401 401 401 401 401 429]" {
		t.Errorf("answers %v, want five 401s counted under login_email, then 429", codes)
	}
}
