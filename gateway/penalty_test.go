package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/gateway"
	"github.com/linkgate/linkgate/internal/testkit"
)

// penaltyConfig is BaseConfig with the access log on, the limiter section
// limiter (its body) and the rules rules (their list items).
func penaltyConfig(upstream, limiter, rules string) string {
	cfg := strings.Replace(testkit.BaseConfig(upstream), "  shutdown_timeout: 10s\n", "  shutdown_timeout: 10s\n  access_log: true\n", 1)
	return cfg + "limiter:\n" + limiter + "\nrules:\n" + rules
}

// burstRule is the rule of the acceptance test: 2/s on the redirects, a
// penalty of 4 s doubling at each trip.
const burstRule = `  - name: burst_ip
    match: {methods: [GET], path: "/{short_key}"}
    key: ip
    limits: [2/s]
    penalty: {duration: 4s, factor: 2}
`

// startClocked runs a gateway on cfg whose limiter reads clock.
func startClocked(t *testing.T, cfg string, clock func() time.Time) *running {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	testkit.WriteFile(t, path, cfg)
	plan, err := gateway.Load(path, getenv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return startPlan(t, plan, path, false, func(o *gateway.Options) { o.LimitClock = clock })
}

// getGo asks gw for /go from the client address addr (through the trusted
// loopback proxy) and checks the status.
func getGo(t *testing.T, gw *running, addr string, want int, what string) (*http.Response, string) {
	t.Helper()
	resp, body := testkit.Do(t, "GET", gw.url("/go"), nil, "X-Forwarded-For", addr)
	if resp.StatusCode != want {
		t.Fatalf("%s: %d %s, want %d", what, resp.StatusCode, body, want)
	}
	return resp, body
}

// tripBox sends GET url with the header pairs hdr to a rule of 2/s, four
// requests at once (four at once land in one second however slowly a busy
// machine answers each), until a round is refused boxed. It returns when
// that round began: the box began no earlier. Every 429 of the round must
// say boxed.
func tripBox(t *testing.T, url string, hdr ...string) time.Time {
	t.Helper()
	for range 10 {
		began := time.Now()
		var mu sync.Mutex
		var boxed int
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				req, _ := http.NewRequest("GET", url, nil)
				for i := 0; i+1 < len(hdr); i += 2 {
					req.Header.Set(hdr[i], hdr[i+1])
				}
				resp, err := testkit.Client.Do(req)
				if err != nil {
					t.Errorf("GET %s: %v", url, err)
					return
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusTooManyRequests {
					return
				}
				if !strings.Contains(string(body), `"boxed":true`) {
					t.Errorf("the trip: %s, want boxed", body)
					return
				}
				mu.Lock()
				boxed++
				mu.Unlock()
			})
		}
		wg.Wait()
		if boxed > 0 {
			return began
		}
	}
	t.Fatalf("%s %v never refused boxed in 10 rounds of 4 requests at once to 2/s", url, hdr)
	return time.Time{}
}

func retryAfterOf(t *testing.T, resp *http.Response) int {
	t.Helper()
	n, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil {
		t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	return n
}

// TestPenaltyBoxOverHTTP is the penalty box through the whole gateway, its
// limiter's time driven by the test: a rule of 2/s with penalty
// {duration: 4s, factor: 2}. The third request in a second is 429; 1.5 s
// later (the window has passed) still 429, Retry-After the box's end;
// after 4 s a 302; tripped again, 429 for 8 s. The refusals are problems
// naming the rule and saying boxed, the access log names the rule and
// boxed, /admin/boxed lists the client and DELETE lets it out.
func TestPenaltyBoxOverHTTP(t *testing.T) {
	up := tinyURL(t)
	t0 := time.Date(2026, 3, 28, 12, 0, 10, 0, time.UTC)
	clk := testkit.NewClock(t0)
	gw := startClocked(t, penaltyConfig(up.URL, "  store: memory", burstRule), clk.Now)
	const client = "203.0.113.50"

	getGo(t, gw, client, 302, "first")
	getGo(t, gw, client, 302, "second")
	resp, body := getGo(t, gw, client, 429, "third in the second")
	p := testkit.Problem(t, resp, body, 429)
	if p["rule"] != "burst_ip" || p["boxed"] != true || retryAfterOf(t, resp) != 4 {
		t.Errorf("the trip: %s Retry-After %s, want the rule, boxed and 4", body, resp.Header.Get("Retry-After"))
	}

	clk.Advance(1500 * time.Millisecond)
	resp, body = getGo(t, gw, client, 429, "1.5 s later")
	if got := retryAfterOf(t, resp); got != 3 {
		t.Errorf("1.5 s later: Retry-After %d, want 3 (the box ends 2.5 s later, rounded up)", got)
	}
	if p := testkit.Problem(t, resp, body, 429); p["until"] != t0.Add(4*time.Second).Format(time.RFC3339) {
		t.Errorf("1.5 s later: %s, want until the box's end", body)
	}

	clk.Set(t0.Add(4 * time.Second))
	getGo(t, gw, client, 302, "after 4 s")
	getGo(t, gw, client, 302, "after 4 s, second")
	resp, _ = getGo(t, gw, client, 429, "tripped again")
	if got := retryAfterOf(t, resp); got != 8 {
		t.Errorf("the second trip: Retry-After %d, want 8", got)
	}
	for _, d := range []time.Duration{time.Second, 4 * time.Second, 8*time.Second - time.Millisecond} {
		clk.Set(t0.Add(4*time.Second + d))
		getGo(t, gw, client, 429, fmt.Sprintf("%v into the second box", d))
	}

	// Operators see the box, and the access log says why.
	code, v := adminJSON(t, gw, "GET", "/admin/boxed")
	boxed, _ := v["boxed"].([]any)
	if code != 200 || len(boxed) != 1 {
		t.Fatalf("GET /admin/boxed: %d %v", code, v)
	}
	if b := boxed[0].(map[string]any); b["rule"] != "burst_ip" || b["value"] != client || b["trips"] != 2.0 ||
		b["until"] != t0.Add(12*time.Second).Format(time.RFC3339) {
		t.Errorf("GET /admin/boxed: %v", b)
	}
	refused := gw.logs.Records("access", map[string]string{"status": "429"})
	if len(refused) != 6 {
		t.Errorf("%d access lines of 429, want 6", len(refused))
	}
	for _, l := range refused {
		if l["limit_rule"] != "burst_ip" || l["boxed"] != "true" {
			t.Errorf("access line of a boxed request: %v, want limit_rule=burst_ip boxed=true", l)
		}
	}
	for _, l := range gw.logs.Records("access", map[string]string{"status": "302"}) {
		if _, ok := l["limit_rule"]; ok {
			t.Errorf("access line of a request let through names a rule: %v", l)
		}
	}
	metrics := testkit.Body(t, gw.admin("/metrics"))
	for _, want := range []string{`linkgate_limit_trips_total{rule="burst_ip"} 2`, `linkgate_limit_escalations_total{rule="burst_ip"} 1`,
		`linkgate_limit_boxed{rule="burst_ip"} 1`, `linkgate_limit_decisions_total{outcome="boxed",rule="burst_ip"} 4`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	if code, v := adminJSON(t, gw, "DELETE", "/admin/boxed/burst_ip/"+client); code != 204 {
		t.Fatalf("DELETE /admin/boxed: %d %v", code, v)
	}
	getGo(t, gw, client, 302, "let out")
	if _, v := adminJSON(t, gw, "GET", "/admin/boxed"); len(v["boxed"].([]any)) != 0 {
		t.Errorf("GET /admin/boxed after DELETE: %v", v)
	}
}

// adminJSON calls the admin API with the token and decodes its JSON.
func adminJSON(t *testing.T, gw *running, method, path string) (int, map[string]any) {
	t.Helper()
	resp, body := testkit.Do(t, method, gw.admin(path), nil, "Authorization", "Bearer "+testkit.AdminToken)
	var v map[string]any
	if body != "" {
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("%s %s: %d %q: %v", method, path, resp.StatusCode, body, err)
		}
	}
	return resp.StatusCode, v
}

// TestPenaltyBoxSharedByFleet: two gateways on one memcached. A client
// boxed on one is refused by the other at its next request (a read of
// memcached made after the trip); one that went through the other just
// before the trip is refused by it once the other's read of a moment ago
// (1 ms) no longer answers. Either gateway lists it; a DELETE on one lets
// it out of both, the other's memory of the box lasting a second at most.
func TestPenaltyBoxSharedByFleet(t *testing.T) {
	mc := testkit.StartMemcached(t)
	up := tinyURL(t)
	rule := strings.Replace(burstRule, "penalty: {duration: 4s, factor: 2}", "penalty: {duration: 1m, factor: 2}", 1)
	cfg := penaltyConfig(up.URL, memcachedStore(mc.Addr, "deny"), rule)
	a, b := start(t, cfg), start(t, cfg)

	// trip sends requests from client to gw until they are refused boxed,
	// and returns when the round that tripped it began.
	trip := func(gw *running, client string) time.Time {
		t.Helper()
		return tripBox(t, gw.url("/go"), "X-Forwarded-For", client)
	}

	// A client the other gateway never saw.
	tripped := trip(a, "198.51.100.1")
	resp, body := getGo(t, b, "198.51.100.1", 429, "the other gateway, at once")
	// The box ends a minute after the trip, no earlier than a minute after
	// tripped; a busy machine may have spent seconds since.
	if p, least := testkit.Problem(t, resp, body, 429), 58-int(time.Since(tripped)/time.Second); p["boxed"] != true || retryAfterOf(t, resp) < least {
		t.Errorf("the other gateway: %s Retry-After %s, want boxed for the minute (at least %d s left)", body, resp.Header.Get("Retry-After"), least)
	}

	// A client that went through the other gateway just before: its read
	// answers the other's checks for at most a millisecond.
	getGo(t, b, "198.51.100.2", 302, "through the other gateway first")
	tripped = trip(a, "198.51.100.2")
	time.Sleep(2 * time.Millisecond) // past the read's millisecond, whatever the machine's load
	getGo(t, b, "198.51.100.2", 429, "the other gateway, a read later")
	t.Logf("boxed on the other gateway %v after the trip's answer", time.Since(tripped))

	for _, gw := range []*running{a, b} {
		_, v := adminJSON(t, gw, "GET", "/admin/boxed")
		var values []string
		for _, e := range v["boxed"].([]any) {
			values = append(values, e.(map[string]any)["value"].(string))
		}
		if strings.Join(values, " ") != "198.51.100.1 198.51.100.2" {
			t.Errorf("GET /admin/boxed of a gateway: %v, want both clients (put or met)", values)
		}
	}
	if code, _ := adminJSON(t, b, "DELETE", "/admin/boxed/burst_ip/198.51.100.1"); code != 204 {
		t.Fatalf("DELETE on the other gateway: %d", code)
	}
	getGo(t, b, "198.51.100.1", 302, "let out, on the gateway that let it out")
	testkit.Eventually(t, 10*time.Second, "the gateway that boxed it lets it out", func() bool {
		resp, _ := testkit.Do(t, "GET", a.url("/go"), nil, "X-Forwarded-For", "198.51.100.1")
		return resp.StatusCode == 302
	})
	if _, v := adminJSON(t, a, "GET", "/admin/boxed"); len(v["boxed"].([]any)) != 1 {
		t.Errorf("GET /admin/boxed after the DELETE elsewhere: %v, want the other client alone", v)
	}
}

// TestPairKeyLogin: the login pair mode through the gateway, in front of a
// login service. 20 wrong passwords for one email from 20 addresses:
// with key [email, ip] a 21st address can still log in as the email's
// owner; with key email, it is locked out.
func TestPairKeyLogin(t *testing.T) {
	up := tinyURL(t)
	for _, tc := range []struct {
		key    string
		status int // of the owner, logging in from a 21st address
	}{
		{"[email, ip]", 200},
		{"email", 429},
	} {
		t.Run(tc.key, func(t *testing.T) {
			gw := start(t, penaltyConfig(up.URL, "  store: memory", `  - name: login
    match: {methods: [POST], path: /login}
    key: `+tc.key+`
    limits: [5/m, 10/d]
    count_status: [401]
    penalty: {duration: 15m, factor: 2, max: 24h, forget_after: 168h}
`))
			login := func(addr, password string) int {
				form := url.Values{"email": {"victim@example.com"}, "password": {password}}.Encode()
				resp, _ := testkit.Do(t, "POST", gw.url("/login"), strings.NewReader(form),
					"Content-Type", "application/x-www-form-urlencoded", "X-Forwarded-For", addr)
				return resp.StatusCode
			}
			for i := 1; i <= 20; i++ {
				login(fmt.Sprintf("198.51.100.%d", i), "guess")
			}
			if got := login("203.0.113.21", "demo"); got != tc.status {
				t.Errorf("the owner from a 21st address after 20 guesses from 20: %d, want %d", got, tc.status)
			}
		})
	}
}

// TestOnDemandBoxedClient: an address in the box of a rule marked edge
// gets no handshake for a name without an answer: no ask, no order in
// pebble. Let out, its handshake asks, naming it in the client parameter,
// and is served a certificate from pebble.
func TestOnDemandBoxedClient(t *testing.T) {
	t.Parallel()
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{})
	var asked atomic.Int64
	var clients sync.Map
	ask := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		clients.Store(r.URL.Query().Get("client"), true)
		if !strings.HasSuffix(r.URL.Query().Get("domain"), ".ok.test") {
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(ask.Close)
	cfg := tlsConfig(echoProto(t).URL, fmt.Sprintf(`  internal_listen: 127.0.0.1:0
  tls:
    handshake_timeout: %v
    acme: {ca: %s, ca_root: %s, email: ops@example.com}
    on_demand: {ask: %s}
    storage: {path: %s}
`, handshakeTimeout(), p.Directory, p.CARootFile, ask.URL, t.TempDir())) + `limiter:
  store: memory
rules:
  - name: edge_ip
    match: {methods: [GET], path: "/{short_key}"}
    key: ip
    limits: [2/s]
    penalty: {duration: 1h}
    edge: true
`
	gw := start(t, cfg)
	// The client trips the rule over plain HTTP on the internal listener,
	// from the address its handshakes come from.
	tripBox(t, "http://"+gw.g.InternalAddr().String()+"/go")
	if c, err := handshake(gw.g.Addr(), p, "edgebox.ok.test"); err == nil {
		c.Close()
		t.Fatal("a boxed client's handshake for a new name succeeded")
	}
	if n, orders := asked.Load(), p.Orders(); n != 0 || orders != 0 {
		t.Errorf("a boxed client's handshake: %d asks and %d orders, want none", n, orders)
	}
	if metrics := testkit.Body(t, gw.admin("/metrics")); !strings.Contains(metrics, `linkgate_tls_on_demand_decisions_total{decision="boxed"} 1`) {
		t.Errorf("metrics do not count the boxed decision:\n%s", grepLines(metrics, "linkgate_tls_on_demand"))
	}

	if code, v := adminJSON(t, gw, "DELETE", "/admin/boxed/edge_ip/127.0.0.1"); code != 204 {
		t.Fatalf("DELETE /admin/boxed: %d %v", code, v)
	}
	c, err := handshake(gw.g.Addr(), p, "edgebox.ok.test")
	if err != nil {
		t.Fatalf("the handshake once let out: %v", err)
	}
	c.Close()
	if _, ok := clients.Load("127.0.0.1"); asked.Load() != 1 || !ok || p.Orders() != 1 {
		t.Errorf("once let out: %d asks (client 127.0.0.1 named: %v) and %d orders, want one of each", asked.Load(), ok, p.Orders())
	}
}
