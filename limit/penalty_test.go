package limit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/limit"
)

// penaltyRule is an ip rule on POST /login with limits and a penalty.
func penaltyRule(t *testing.T, p limit.Penalty, specs ...string) limit.Rule {
	return limit.Rule{Name: "login_ip", Match: loginPost, Key: limit.IP, Limits: limits(t, specs...), Penalty: p}
}

// retryAfter returns the Retry-After of resp in seconds.
func retryAfter(t *testing.T, resp *http.Response) int {
	t.Helper()
	n, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	if err != nil {
		t.Fatalf("Retry-After %q: %v", resp.Header.Get("Retry-After"), err)
	}
	return n
}

// want checks the statuses of n requests to POST /login.
func (e *env) want(what string, statuses ...int) []*http.Response {
	e.t.Helper()
	var out []*http.Response
	for i, st := range statuses {
		resp, body := e.do("POST", "/login", nil)
		if resp.StatusCode != st {
			e.t.Fatalf("%s: request %d: %d %s, want %d", what, i+1, resp.StatusCode, body, st)
		}
		out = append(out, resp)
	}
	return out
}

// TestPenaltyBox: a rule of 2/s with penalty {duration: 4s, factor: 2},
// time driven: the third request in a second is 429 and puts the client
// in the box for 4 s; 1.5 s later (the window has passed) it is still 429
// with Retry-After the box's end; after 4 s it passes at a clean window;
// tripped again, it stays out 8 s. Every refusal names the rule and says
// boxed; the upstream sees only the requests let through.
func TestPenaltyBox(t *testing.T) {
	e := newEnv(t, []limit.Rule{penaltyRule(t, limit.Penalty{Duration: 4 * time.Second, Factor: 2}, "2/s")}, envOpt{})
	t0 := e.clk.Now()
	rs := e.want("a burst", 200, 200, 429)
	if got := retryAfter(t, rs[2]); got != 4 {
		t.Errorf("the trip: Retry-After %d, want 4 (the box)", got)
	}
	if got := rs[2].Header.Get("RateLimit"); !strings.Contains(got, `"login_ip-1s";r=0;t=4`) {
		t.Errorf("the trip: RateLimit %q, want r=0 and t=4", got)
	}
	e.clk.Advance(1500 * time.Millisecond)
	resp, body := e.do("POST", "/login", nil)
	if resp.StatusCode != 429 || retryAfter(t, resp) != 3 {
		t.Fatalf("1.5 s after the trip: %d Retry-After %s, want 429 and 3 (the box ends 2.5 s later)", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	var p map[string]any
	if err := json.Unmarshal(body, &p); err != nil || p["rule"] != "login_ip" || p["boxed"] != true || p["until"] != t0.Add(4*time.Second).Format(time.RFC3339) {
		t.Errorf("the problem of a boxed request: %s, want the rule, boxed and the box's end", body)
	}
	if !strings.Contains(resp.Header.Get("RateLimit-Policy"), `"login_ip-1s";q=2;w=1`) {
		t.Errorf("RateLimit-Policy %q", resp.Header.Get("RateLimit-Policy"))
	}
	e.clk.Set(t0.Add(4*time.Second - time.Millisecond))
	e.want("just before the box ends", 429)
	e.clk.Set(t0.Add(4 * time.Second))
	rs = e.want("after the box, then a burst again", 200, 200, 429)
	if got := retryAfter(t, rs[2]); got != 8 {
		t.Errorf("the second trip: Retry-After %d, want 8 (the box doubled)", got)
	}
	e.clk.Set(t0.Add(12*time.Second - time.Millisecond))
	e.want("just before the second box ends", 429)
	e.clk.Set(t0.Add(12 * time.Second))
	e.want("after the second box", 200, 200)

	if got := e.hits.Load(); got != 6 {
		t.Errorf("the upstream saw %d requests, want the 6 let through", got)
	}
	if got := testkit.Metric(t, e.reg, "linkgate_limit_trips_total", "rule", "login_ip"); got != 2 {
		t.Errorf("trips: %v, want 2", got)
	}
	if got := testkit.Metric(t, e.reg, "linkgate_limit_escalations_total", "rule", "login_ip"); got != 1 {
		t.Errorf("escalations: %v, want 1", got)
	}
	if got, want := e.metric("login_ip", limit.OutcomeLimited), 2.0; got != want {
		t.Errorf("limited: %v, want %v (the trips)", got, want)
	}
	if got, want := e.metric("login_ip", limit.OutcomeBoxed), 3.0; got != want {
		t.Errorf("boxed: %v, want %v", got, want)
	}
}

// TestPenaltyForgetAndMax: boxes grow by the factor up to max, and a
// trip more than forget_after after the one before starts again.
func TestPenaltyForgetAndMax(t *testing.T) {
	e := newEnv(t, []limit.Rule{penaltyRule(t, limit.Penalty{Duration: 2 * time.Second, Factor: 3, Max: 10 * time.Second, ForgetAfter: 30 * time.Second}, "1/s")}, envOpt{})
	for i, want := range []int{2, 6, 10, 10} {
		rs := e.want(fmt.Sprintf("trip %d", i+1), 200, 429)
		if got := retryAfter(t, rs[1]); got != want {
			t.Fatalf("trip %d: Retry-After %d, want %d", i+1, got, want)
		}
		e.clk.Advance(time.Duration(want) * time.Second)
	}
	e.clk.Advance(31 * time.Second)
	if rs := e.want("a trip past forget_after", 200, 429); retryAfter(t, rs[1]) != 2 {
		t.Errorf("a trip past forget_after: Retry-After %s, want 2 (a first trip's)", rs[1].Header.Get("Retry-After"))
	}
}

// TestPenaltyEndsWhenTheLimitsFree: a box ends no sooner than the request
// that tripped could have passed. The seed's login rule (5 wrong
// passwords per email a minute, 10 a day) with a 15-minute penalty: the
// trip at the day's limit keeps the email out until the day frees, not
// for 30 minutes.
func TestPenaltyEndsWhenTheLimitsFree(t *testing.T) {
	r := loginEmailRule(t)
	r.Penalty = limit.Penalty{Duration: 15 * time.Minute, Factor: 2}
	e := newEnv(t, []limit.Rule{r}, envOpt{})
	for range 5 {
		if resp := e.loginForm("grace@example.com", 401); resp.StatusCode != 401 {
			t.Fatalf("a wrong password: %d, want 401", resp.StatusCode)
		}
	}
	resp := e.loginForm("grace@example.com", 401)
	if resp.StatusCode != 429 || retryAfter(t, resp) != 15*60 {
		t.Fatalf("the sixth in a minute: %d Retry-After %s, want 429 and 900", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	e.clk.Advance(15 * time.Minute)
	for range 5 {
		if resp := e.loginForm("grace@example.com", 401); resp.StatusCode != 401 {
			t.Fatalf("after the box: %d, want 401", resp.StatusCode)
		}
	}
	resp = e.loginForm("grace@example.com", 401)
	// Ten counted in the hour bucket of 12:00: the day frees when it
	// leaves the window, at 12:00 the next day.
	if got, want := retryAfter(t, resp), int(time.Date(2026, 3, 29, 12, 0, 0, 0, time.UTC).Sub(e.clk.Now())/time.Second); resp.StatusCode != 429 || got != want {
		t.Errorf("the eleventh in a day: %d Retry-After %d, want 429 and %d (until the day frees)", resp.StatusCode, got, want)
	}
}

// TestPenaltyShadow: a rule in shadow mode with a penalty boxes (the box
// and its trips show what it would do) and refuses nothing.
func TestPenaltyShadow(t *testing.T) {
	r := penaltyRule(t, limit.Penalty{Duration: time.Minute}, "1/s")
	r.Shadow = true
	e := newEnv(t, []limit.Rule{r}, envOpt{})
	e.want("shadow", 200, 200, 200, 200)
	if got := testkit.Metric(t, e.reg, "linkgate_limit_trips_total", "rule", "login_ip"); got != 1 {
		t.Errorf("trips in shadow mode: %v, want 1", got)
	}
	if got := e.metric("login_ip", limit.OutcomeShadowLimited); got != 3 {
		t.Errorf("shadow_limited: %v, want 3 (the trip and the two in the box)", got)
	}
	if got := e.hits.Load(); got != 4 {
		t.Errorf("the upstream saw %d, want all 4", got)
	}
}

// TestPenaltyBoxNotKept: a store that cannot keep a box (PutBox fails)
// leaves the request refused as over the limit, the failure counted.
func TestPenaltyBoxNotKept(t *testing.T) {
	var e *env
	st := &noBoxStore{Memory: limit.NewMemoryAt(func() time.Time { return e.clk.Now() })}
	e = newEnv(t, []limit.Rule{penaltyRule(t, limit.Penalty{Duration: time.Minute}, "1/s")}, envOpt{store: st})
	rs := e.want("a burst", 200, 429)
	if got := retryAfter(t, rs[1]); got != 1 {
		t.Errorf("Retry-After %d, want 1: the limit's, no box", got)
	}
	if got := e.metric("login_ip", limit.OutcomeStoreError); got != 1 {
		t.Errorf("store_error: %v, want 1", got)
	}
	e.clk.Advance(time.Second)
	e.want("a second later", 200)
}

type noBoxStore struct{ *limit.Memory }

func (noBoxStore) PutBox(context.Context, limit.Counter, limit.Box, int64) error { return errDown }

// TestPenaltyCompileRejects: every penalty and key the limiter could not
// run is refused, the error naming the field.
func TestPenaltyCompileRejects(t *testing.T) {
	pen := func(p limit.Penalty) []limit.Rule { return []limit.Rule{penaltyRule(t, p, "1/s")} }
	for _, tc := range []struct {
		name  string
		rules []limit.Rule
		field string
	}{
		{"factor without duration", pen(limit.Penalty{Factor: 2}), "rules[0].penalty.duration:"},
		{"negative duration", pen(limit.Penalty{Duration: -time.Second}), "rules[0].penalty.duration:"},
		{"sub-second duration", pen(limit.Penalty{Duration: time.Millisecond}), "rules[0].penalty.duration:"},
		{"duration over a week", pen(limit.Penalty{Duration: 8 * 24 * time.Hour}), "rules[0].penalty.duration:"},
		{"max below duration", pen(limit.Penalty{Duration: time.Hour, Max: time.Minute}), "rules[0].penalty.max:"},
		{"max over a week", pen(limit.Penalty{Duration: time.Hour, Max: 8 * 24 * time.Hour}), "rules[0].penalty.max:"},
		{"factor below 1", pen(limit.Penalty{Duration: time.Hour, Factor: 0.5}), "rules[0].penalty.factor:"},
		{"negative factor", pen(limit.Penalty{Duration: time.Hour, Factor: -2}), "rules[0].penalty.factor:"},
		{"factor NaN", pen(limit.Penalty{Duration: time.Hour, Factor: math.NaN()}), "rules[0].penalty.factor:"},
		{"factor infinite", pen(limit.Penalty{Duration: time.Hour, Factor: math.Inf(1)}), "rules[0].penalty.factor:"},
		{"factor over 100", pen(limit.Penalty{Duration: time.Hour, Factor: 101}), "rules[0].penalty.factor:"},
		{"forget_after over 30 days", pen(limit.Penalty{Duration: time.Hour, ForgetAfter: 31 * 24 * time.Hour}), "rules[0].penalty.forget_after:"},
		{"negative forget_after", pen(limit.Penalty{Duration: time.Hour, ForgetAfter: -1}), "rules[0].penalty.forget_after:"},
		{"edge without penalty", []limit.Rule{{Name: "x", Match: loginPost, Key: limit.IP, Limits: limits(t, "1/s"), Edge: true}}, "rules[0].edge:"},
		{"edge on an email rule", []limit.Rule{{Name: "x", Match: loginPost, Key: limit.Email, Limits: limits(t, "1/s"), Edge: true, Penalty: limit.Penalty{Duration: time.Minute}}}, "rules[0].edge:"},
		{"edge on a pair", []limit.Rule{{Name: "x", Match: loginPost, Key: limit.Pair(limit.Email, limit.IP), Limits: limits(t, "1/s"), Edge: true, Penalty: limit.Penalty{Duration: time.Minute}}}, "rules[0].edge:"},
		{"pair of one feature", []limit.Rule{{Name: "x", Match: loginPost, Key: limit.Pair(limit.IP, limit.IP), Limits: limits(t, "1/s")}}, "rules[0].key:"},
		{"pair with an unknown feature", []limit.Rule{{Name: "x", Match: loginPost, Key: limit.Pair(limit.Email, "cookie"), Limits: limits(t, "1/s")}}, "rules[0].key:"},
		{"on_unreadable on an ip and user pair", []limit.Rule{{Name: "x", Match: loginPost, Key: limit.Pair(limit.User, limit.IP), Limits: limits(t, "1/s"), OnUnreadable: "skip"}}, "rules[0].on_unreadable:"},
		{"bad allow of a pair with ip", []limit.Rule{{Name: "x", Match: loginPost, Key: limit.Pair(limit.Email, limit.IP), Limits: limits(t, "1/s"), Allow: []string{" "}}}, "rules[0].allow[0]:"},
	} {
		_, err := limit.Compile(tc.rules, limit.DefaultIdentity(), limit.DefaultConfig(), nil)
		if err == nil || !strings.HasPrefix(err.Error(), tc.field) {
			t.Errorf("%s: Compile error %v, want one starting with %s", tc.name, err, tc.field)
		}
	}
	// At the edges of the ranges, and the zeros that mean the defaults.
	for _, p := range []limit.Penalty{
		{Duration: time.Second}, {Duration: 7 * 24 * time.Hour}, {Duration: time.Second, Max: time.Second, Factor: 1, ForgetAfter: time.Second},
		{Duration: time.Hour, Max: 7 * 24 * time.Hour, Factor: 100, ForgetAfter: 30 * 24 * time.Hour},
	} {
		if _, err := limit.Compile(pen(p), limit.DefaultIdentity(), limit.DefaultConfig(), nil); err != nil {
			t.Errorf("%+v refused: %v", p, err)
		}
	}
}

// TestKeyYAML: a rule's key is a word or a list of two; a pair reads back
// as it is written, and other shapes are refused.
func TestKeyYAML(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want limit.Feature
	}{
		{"key: email", limit.Email},
		{"key: [email, ip]", limit.Pair(limit.Email, limit.IP)},
		{"key:\n  - user\n  - ip", limit.Pair(limit.User, limit.IP)},
	} {
		var r limit.Rule
		if err := yaml.Unmarshal([]byte(tc.yaml), &r); err != nil || r.Key != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.yaml, r.Key, err, tc.want)
			continue
		}
		out, err := yaml.Marshal(struct {
			Key limit.Feature `yaml:"key"`
		}{r.Key})
		var back limit.Rule
		if err != nil || yaml.Unmarshal(out, &back) != nil || back.Key != tc.want {
			t.Errorf("%q marshals to %q, which reads as %q", tc.yaml, out, back.Key)
		}
	}
	if out, _ := yaml.Marshal(map[string]limit.Feature{"key": limit.Pair(limit.Email, limit.IP)}); string(out) != "key:\n    - email\n    - ip\n" {
		t.Errorf("a pair marshals to %q, want a list", out)
	}
	for _, bad := range []string{"key: [email]", "key: [email, ip, user]", "key: {email: ip}", "key: [[email], ip]"} {
		var r limit.Rule
		if err := yaml.Unmarshal([]byte(bad), &r); err == nil {
			t.Errorf("%q read as %q, want an error", bad, r.Key)
		}
	}
}

// TestPairKey: a rule keyed by [email, ip] counts each email from each
// address apart: 20 wrong passwords for one email from 20 addresses do
// not lock the email for a 21st address, while a rule keyed by the email
// alone does. Through trusted proxies, over HTTP.
func TestPairKey(t *testing.T) {
	for _, tc := range []struct {
		key    limit.Feature
		locked bool
	}{
		{limit.Pair(limit.Email, limit.IP), false},
		{limit.Email, true},
	} {
		t.Run(strings.ReplaceAll(string(tc.key), "+", "_"), func(t *testing.T) {
			r := loginEmailRule(t)
			r.Key = tc.key
			r.Penalty = limit.Penalty{Duration: 15 * time.Minute, Factor: 2}
			e := newEnv(t, []limit.Rule{r}, envOpt{trusted: []string{"127.0.0.0/8"}})
			from := func(i int) *http.Response {
				resp, _ := e.do("POST", "/login?status=401", strings.NewReader("email=Victim%40Example.com&password=guess"),
					"Content-Type", "application/x-www-form-urlencoded", "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i))
				return resp
			}
			refused := 0
			for i := 1; i <= 20; i++ {
				if from(i).StatusCode == 429 {
					refused++
				}
			}
			resp := from(21)
			if locked := resp.StatusCode == 429; locked != tc.locked {
				t.Fatalf("after 20 wrong passwords from 20 addresses (%d refused), a 21st address gets %d; locked out: %v, want %v", refused, resp.StatusCode, locked, tc.locked)
			}
			if tc.locked {
				return
			}
			if refused != 0 {
				t.Errorf("%d of 20 guesses from distinct addresses refused, want none", refused)
			}
			// The pair still holds each address to the rule: the guesser's
			// own address is boxed after its sixth guess.
			for range 5 {
				from(1)
			}
			if resp := from(1); resp.StatusCode != 429 {
				t.Errorf("the sixth guess from one address: %d, want 429", resp.StatusCode)
			}
			if resp := from(2); resp.StatusCode != 401 {
				t.Errorf("the same email from another address: %d, want 401 (not boxed)", resp.StatusCode)
			}
		})
	}
}

// boxedAdmin mounts e's admin handlers as the gateway does.
func boxedAdmin(t *testing.T, e *env) func(method, path string) (int, map[string]any) {
	mux := chi.NewRouter()
	mux.Route("/admin", func(r chi.Router) {
		r.Handle("/limits/*", http.StripPrefix("/admin/limits", e.l.AdminHandler()))
		boxed := http.StripPrefix("/admin/boxed", e.l.BoxedHandler())
		r.Handle("/boxed", boxed)
		r.Handle("/boxed/*", boxed)
	})
	admin := httptest.NewServer(mux)
	t.Cleanup(admin.Close)
	return func(method, path string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, admin.URL+path, nil)
		resp, err := admin.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
}

// TestBoxedAdmin: GET /admin/boxed lists the clients in a box by rule and
// value, a page at a time; GET /admin/limits shows a client's box;
// DELETE /admin/boxed lets a client out at once, at a clean window.
func TestBoxedAdmin(t *testing.T) {
	r := loginEmailRule(t)
	r.Name, r.Key = "login_pair", limit.Pair(limit.Email, limit.IP)
	r.Penalty = limit.Penalty{Duration: 15 * time.Minute, Factor: 2}
	ip := penaltyRule(t, limit.Penalty{Duration: time.Minute}, "1/s")
	ip.Match = limit.Match{Path: "/ip"}
	plain := ipRule(t, "1/s")
	plain.Name, plain.Match = "plain_ip", limit.Match{Path: "/plain"}
	e := newEnv(t, []limit.Rule{r, ip, plain}, envOpt{trusted: []string{"127.0.0.0/8"}})
	call := boxedAdmin(t, e)
	guess := func(email, addr string) int {
		resp, _ := e.do("POST", "/login?status=401", strings.NewReader(url.Values{"email": {email}}.Encode()),
			"Content-Type", "application/x-www-form-urlencoded", "X-Forwarded-For", addr)
		return resp.StatusCode
	}
	for _, who := range []struct{ email, addr string }{{"b@example.com", "203.0.113.2"}, {"a@example.com", "203.0.113.1"}, {"c@example.com", "2001:db8::1"}} {
		for range 5 {
			guess(who.email, who.addr)
		}
		if got := guess(who.email, who.addr); got != 429 {
			t.Fatalf("%s from %s: %d, want 429", who.email, who.addr, got)
		}
	}
	for range 2 {
		e.do("POST", "/ip", nil, "X-Forwarded-For", "192.0.2.9")
	}

	code, v := call("GET", "/admin/boxed?limit=2")
	if code != 200 {
		t.Fatalf("GET /admin/boxed: %d %v", code, v)
	}
	until := e.clk.Now().Add(15 * time.Minute).UTC().Format(time.RFC3339)
	want := []any{
		map[string]any{"rule": "login_ip", "key": "ip", "value": "192.0.2.9", "trips": 1.0,
			"since": e.clk.Now().UTC().Format(time.RFC3339), "until": e.clk.Now().Add(time.Minute).UTC().Format(time.RFC3339)},
		map[string]any{"rule": "login_pair", "key": []any{"email", "ip"}, "value": "a@example.com,203.0.113.1", "trips": 1.0,
			"since": e.clk.Now().UTC().Format(time.RFC3339), "until": until},
	}
	if d := cmp.Diff(want, v["boxed"]); d != "" || v["next"] != "login_pair/a@example.com%2C203.0.113.1" {
		t.Fatalf("first page (-want +got):\n%s\nnext %v", d, v["next"])
	}
	code, v = call("GET", "/admin/boxed?limit=2&after="+url.QueryEscape(v["next"].(string)))
	page := v["boxed"].([]any)
	if code != 200 || len(page) != 2 || page[0].(map[string]any)["value"] != "b@example.com,203.0.113.2" ||
		page[1].(map[string]any)["value"] != "c@example.com,2001:db8::/64" {
		t.Fatalf("second page: %d %v", code, v)
	}
	if code, v = call("GET", "/admin/boxed?limit=2&after="+url.QueryEscape("login_pair/c@example.com,2001:db8::/64")); code != 200 || len(v["boxed"].([]any)) != 0 || v["next"] != nil {
		t.Errorf("past the last: %d %v, want an empty page and no next", code, v)
	}

	code, v = call("GET", "/admin/limits/login_pair/A%40Example.com,203.0.113.1")
	box, _ := v["box"].(map[string]any)
	if code != 200 || v["limited"] != true || box["in"] != true || box["trips"] != 1.0 || box["until"] != until {
		t.Errorf("GET /admin/limits of a boxed pair: %d %v", code, v)
	}
	if code, _ := call("DELETE", "/admin/boxed/login_pair/a%40example.com,203.0.113.1"); code != 204 {
		t.Errorf("DELETE: %d, want 204", code)
	}
	if got := guess("a@example.com", "203.0.113.1"); got != 401 {
		t.Errorf("after DELETE: %d, want 401 (let out)", got)
	}
	if code, v := call("GET", "/admin/boxed"); code != 200 || len(v["boxed"].([]any)) != 3 {
		t.Errorf("after DELETE: %d %v, want the 3 others", code, v)
	}
	// Let out at a clean window: the count starts again.
	for range 4 {
		guess("a@example.com", "203.0.113.1")
	}
	if got := guess("a@example.com", "203.0.113.1"); got != 429 {
		t.Errorf("the sixth after DELETE: %d, want 429", got)
	}

	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/admin/boxed?limit=0", 400},
		{"GET", "/admin/boxed?limit=1001", 400},
		{"GET", "/admin/boxed?limit=x", 400},
		{"GET", "/admin/boxed?after=%25zz", 400},
		{"DELETE", "/admin/boxed/plain_ip/192.0.2.9", 404},
		{"DELETE", "/admin/boxed/nope/x", 404},
		{"DELETE", "/admin/boxed/login_pair/no-comma", 400},
		{"DELETE", "/admin/boxed/login_pair/a%40example.com,not-an-ip", 400},
		{"POST", "/admin/boxed", 405},
	} {
		if code, v := call(tc.method, tc.path); code != tc.status || v["status"] != float64(tc.status) {
			t.Errorf("%s %s: %d %v, want %d and a problem", tc.method, tc.path, code, v, tc.status)
		}
	}
}

// TestBoxedGauge: linkgate_limit_boxed counts the clients in each rule's
// box now, in the serving Limiter's store.
func TestBoxedGauge(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := limit.NewMetrics(reg)
	clk := testkit.NewClock(time.Date(2026, 3, 28, 12, 0, 10, 0, time.UTC))
	store := limit.NewMemoryAt(clk.Now)
	plain := ipRule(t, "1/s")
	plain.Name, plain.Match = "plain_ip", limit.Match{Path: "/plain"}
	rules := []limit.Rule{penaltyRule(t, limit.Penalty{Duration: time.Minute}, "1/s"), plain}
	l := limit.New(compile(t, rules, limit.DefaultIdentity(), limit.DefaultConfig(), "127.0.0.0/8"), store, m, nil).WithClock(clk.Now)
	m.Serve(l)
	h := l.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for i := range 3 {
		for range 2 {
			req := httptest.NewRequest("POST", "/login", nil)
			req.RemoteAddr = fmt.Sprintf("198.51.100.%d:1000", i+1)
			h.ServeHTTP(httptest.NewRecorder(), req)
		}
	}
	if got := testkit.Metric(t, reg, "linkgate_limit_boxed", "rule", "login_ip"); got != 3 {
		t.Errorf("boxed: %v, want 3", got)
	}
	clk.Advance(time.Minute)
	if got := testkit.Metric(t, reg, "linkgate_limit_boxed", "rule", "login_ip"); got != 0 {
		t.Errorf("boxed once the boxes ended: %v, want 0", got)
	}
	for _, s := range testkit.Samples(t, reg)["linkgate_limit_boxed"] {
		if s.Labels["rule"] == "plain_ip" {
			t.Errorf("a rule without a penalty has a linkgate_limit_boxed series: %v", s)
		}
	}
}

// TestPairAndEmailRules: the two login rules of the docs together. One
// address gets 10 guesses a day however hard it tries, and the email's
// owner, from another address, is not locked out by it; 100 wrong
// passwords in a day from many addresses lock the owner out.
func TestPairAndEmailRules(t *testing.T) {
	pair := loginEmailRule(t)
	pair.Name, pair.Key, pair.CountStatus = "login_pair", limit.Pair(limit.Email, limit.IP), []int{401}
	pair.Penalty = limit.Penalty{Duration: 15 * time.Minute, Factor: 2, Max: 24 * time.Hour, ForgetAfter: 7 * 24 * time.Hour}
	email := loginEmailRule(t)
	email.Limits, email.CountStatus = limits(t, "100/d"), []int{401}
	e := newEnv(t, []limit.Rule{pair, email}, envOpt{trusted: []string{"127.0.0.0/8"}})
	start := e.clk.Now()
	login := func(addr string, status int) *http.Response {
		resp, _ := e.do("POST", fmt.Sprintf("/login?status=%d", status), strings.NewReader("email=owner%40example.com&password=x"),
			"Content-Type", "application/x-www-form-urlencoded", "X-Forwarded-For", addr)
		return resp
	}
	// guess sends wrong passwords from addr, waiting out every
	// Retry-After of an hour at most, until n reached the login or addr is
	// out for longer; it returns how many reached the login.
	guess := func(addr string, n int) int {
		got := 0
		for got < n {
			resp := login(addr, 401)
			if resp.StatusCode == 401 {
				got++
				continue
			}
			wait := time.Duration(retryAfter(t, resp)) * time.Second
			if wait > time.Hour {
				break
			}
			e.clk.Advance(wait)
		}
		return got
	}
	if got := guess("198.51.100.1", 1000); got != 10 {
		t.Errorf("one address trying all day: %d guesses reached the login, want 10", got)
	}
	if resp := login("203.0.113.9", 200); resp.StatusCode != 200 {
		t.Fatalf("the owner after one address's guesses: %d, want 200", resp.StatusCode)
	}
	total := 10
	for i := 2; total < 100; i++ {
		total += guess(fmt.Sprintf("198.51.100.%d", i), 10)
	}
	if d := e.clk.Now().Sub(start); d > 12*time.Hour {
		t.Fatalf("%d guesses took %v: not within a day", total, d)
	}
	if resp := login("203.0.113.9", 200); resp.StatusCode != 429 {
		t.Errorf("the owner after %d wrong passwords in a day from many addresses: %d, want 429", total, resp.StatusCode)
	}
}

// TestEdgeBoxed: an address in the box of a rule marked edge is boxed for
// the TLS edge, until the box ends; rules not marked edge do not count;
// a failing store follows on_store_error.
func TestEdgeBoxed(t *testing.T) {
	edge := penaltyRule(t, limit.Penalty{Duration: time.Minute}, "1/s")
	edge.Edge = true
	other := penaltyRule(t, limit.Penalty{Duration: time.Hour}, "1/s")
	other.Name, other.Match = "api_ip", limit.Match{Path: "/api"}
	e := newEnv(t, []limit.Rule{edge, other}, envOpt{trusted: []string{"127.0.0.0/8"}})
	ctx := context.Background()
	for _, path := range []string{"/login", "/login"} {
		e.do("POST", path, nil, "X-Forwarded-For", "203.0.113.1")
	}
	for range 2 {
		e.do("POST", "/api", nil, "X-Forwarded-For", "203.0.113.2")
	}
	if !e.l.EdgeBoxed(ctx, "203.0.113.1") {
		t.Error("an address in an edge rule's box is not boxed for the edge")
	}
	if e.l.EdgeBoxed(ctx, "203.0.113.2") {
		t.Error("an address in the box of a rule not marked edge is boxed for the edge")
	}
	if e.l.EdgeBoxed(ctx, "203.0.113.3") {
		t.Error("an address in no box is boxed for the edge")
	}
	e.clk.Advance(time.Minute)
	if e.l.EdgeBoxed(ctx, "203.0.113.1") {
		t.Error("an address whose box ended is boxed for the edge")
	}
	for _, tc := range []struct {
		policy string
		want   bool
	}{{"allow", false}, {"deny", true}} {
		cfg := limit.DefaultConfig()
		cfg.OnStoreError = tc.policy
		l := limit.New(compile(t, []limit.Rule{edge}, limit.DefaultIdentity(), cfg), &failingStore{}, nil, nil)
		if got := l.EdgeBoxed(ctx, "203.0.113.1"); got != tc.want {
			t.Errorf("on_store_error %s, the store failing: boxed %v, want %v", tc.policy, got, tc.want)
		}
	}
}

// TestBoxSurvivesReload: a Limiter built on reload over the same store
// finds the boxes of the last one; one whose rule lost its penalty no
// longer refuses anyone for it.
func TestBoxSurvivesReload(t *testing.T) {
	r := penaltyRule(t, limit.Penalty{Duration: time.Hour}, "1/s")
	e := newEnv(t, []limit.Rule{r}, envOpt{})
	e.want("a trip", 200, 429)
	e.clk.Advance(time.Minute)
	serve := func(rule limit.Rule) int {
		l := limit.New(compile(t, []limit.Rule{rule}, limit.DefaultIdentity(), limit.DefaultConfig()), e.store, nil, nil).WithClock(e.clk.Now)
		w := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/login", nil)
		req.RemoteAddr = "127.0.0.1:1000"
		l.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, req)
		return w.Code
	}
	if got := serve(r); got != 429 {
		t.Errorf("after a reload keeping the penalty: %d, want 429 (still in the box)", got)
	}
	r.Penalty = limit.Penalty{}
	if got := serve(r); got != 200 {
		t.Errorf("after a reload dropping the penalty: %d, want 200", got)
	}
}
