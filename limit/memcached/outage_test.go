package memcached_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/limit/memcached"
)

// TestOutageLogsAFewLinesPerSecond: while memcached is down under load,
// every request meets a store error and a shadow rule would limit every
// request; the log gets at most one line a second per rule and kind, with
// the count held back, while the metrics count every request.
func TestOutageLogsAFewLinesPerSecond(t *testing.T) {
	t.Parallel()
	mc := testkit.StartMemcached(t)
	var logs testkit.Logs
	log := slog.New(logs.Handler())
	reg := prometheus.NewRegistry()
	store := memcached.New(limit.Memcached{Servers: []string{mc.Addr}, Timeout: 100 * time.Millisecond, MaxIdleConns: 32}, memcached.NewMetrics(reg), log)
	defer store.Close()
	post := limit.Match{Methods: []string{"POST"}, Path: "/login"}
	lim := func(s string) []limit.Limit { l, _ := limit.ParseLimit(s); return []limit.Limit{l} }
	rules := []limit.Rule{
		{Name: "login_ip", Match: post, Key: limit.IP, Limits: lim("100000/s")},
		{Name: "login_shadow", Match: post, Key: limit.IP, Limits: lim("1/h"), Shadow: true},
		{Name: "login_email", Match: post, Key: limit.Email, Limits: lim("100000/s"), CountStatus: []int{401}},
	}
	lm := limit.NewMetrics(reg)
	l := limit.New(compile(t, rules, limit.DefaultIdentity(), limit.DefaultConfig()), store, lm, log)
	srv := httptest.NewServer(l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusUnauthorized)
	})))
	defer srv.Close()

	// A loopback load of 16 connections; memcached is killed once it
	// runs.
	const conns = 16
	stop := make(chan struct{})
	var sent atomic.Int64
	var wg sync.WaitGroup
	for i := range conns {
		wg.Go(func() {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			body := "email=" + url.QueryEscape(fmt.Sprintf("u%d@example.com", i)) + "&password=x"
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Post(srv.URL+"/login", "application/x-www-form-urlencoded", strings.NewReader(body))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				sent.Add(1)
			}
		})
	}
	testkit.Eventually(t, 5*time.Second, "the load running before the outage", func() bool { return sent.Load() >= 50 })
	mc.Kill()
	logs.Clear() // the lines of the outage only
	killed, sentAtKill := time.Now(), sent.Load()
	// The outage lasts 2 s and 100 requests, however slow the machine
	// makes them.
	time.Sleep(2 * time.Second)
	testkit.Eventually(t, 10*time.Second, "100 requests during the outage", func() bool { return sent.Load()-sentAtKill >= 100 })
	close(stop)
	testkit.Await(t, wg.Wait, 5*time.Minute, "the load ending")
	window := time.Since(killed)
	during := sent.Load() - sentAtKill

	lines := logs.Records("", nil)
	per := map[string]int{} // msg + rule → lines
	var reported int64      // store errors the log accounts for: lines plus their suppressed counts
	for _, r := range lines {
		per[r["msg"]+" "+r["rule"]]++
		if r["msg"] == "limit: store failed" {
			var n int64
			fmt.Sscan(r["suppressed"], &n)
			reported += 1 + n
		}
	}
	perSecond := float64(len(lines)) / window.Seconds()
	t.Logf("outage of %.1f s under a load of %d connections: %d requests, %d log lines (%.1f a second): %v",
		window.Seconds(), conns, during, len(lines), perSecond, per)
	if during < 100 {
		t.Fatalf("only %d requests during the outage: the load did not run", during)
	}
	seconds := int(window/time.Second) + 1
	for k, n := range per {
		if n > seconds+1 {
			t.Errorf("%q: %d lines in %.1f s, want at most one a second", k, n, window.Seconds())
		}
	}
	var storeErrors float64
	for _, rule := range []string{"login_ip", "login_shadow", "login_email"} {
		storeErrors += testkit.Metric(t, reg, "linkgate_limit_decisions_total", "rule", rule, "outcome", limit.OutcomeStoreError)
	}
	if storeErrors < float64(during) {
		t.Errorf("store_error decisions %v, want one per rule per request during the outage (%d requests)", storeErrors, during)
	}
	if float64(reported) > storeErrors {
		t.Errorf("the log reports %d store errors, the metrics %v", reported, storeErrors)
	}
}

// TestStorePolicyAnswers: what a client gets while memcached is down,
// under each on_store_error policy, over real HTTP: allow passes the
// request to the upstream; deny answers 503 with Retry-After: 1 and a
// problem naming the rule, and the upstream never sees it.
func TestStorePolicyAnswers(t *testing.T) {
	mc := testkit.StartMemcached(t)
	mc.Kill()
	for _, tc := range []struct {
		policy          string
		status          int
		reachesUpstream bool
	}{
		{"allow", http.StatusTeapot, true},
		{"deny", http.StatusServiceUnavailable, false},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			store := memcached.New(limit.Memcached{Servers: []string{mc.Addr}, Timeout: 100 * time.Millisecond, MaxIdleConns: 4}, nil, nil)
			defer store.Close()
			cfg := limit.DefaultConfig()
			cfg.OnStoreError = tc.policy
			lim, _ := limit.ParseLimit("10/m")
			rule := limit.Rule{Name: "login_ip", Match: limit.Match{Path: "/login"}, Key: limit.IP, Limits: []limit.Limit{lim}}
			l := limit.New(compile(t, []limit.Rule{rule}, limit.DefaultIdentity(), cfg), store, nil, nil)
			var reached atomic.Int64
			srv := httptest.NewServer(l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reached.Add(1)
				w.WriteHeader(http.StatusTeapot)
			})))
			defer srv.Close()
			for i := range 5 { // before and after the breaker opens
				resp, err := srv.Client().Get(srv.URL + "/login")
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.status {
					t.Fatalf("request %d: status %d, want %d", i+1, resp.StatusCode, tc.status)
				}
				if tc.policy == "deny" && (resp.Header.Get("Retry-After") != "1" || resp.Header.Get("Content-Type") != "application/problem+json" ||
					!strings.Contains(string(body), `"rule":"login_ip"`)) {
					t.Errorf("deny answer: Retry-After %q, Content-Type %q, body %s", resp.Header.Get("Retry-After"), resp.Header.Get("Content-Type"), body)
				}
			}
			if got := reached.Load() == 5; got != tc.reachesUpstream {
				t.Errorf("upstream saw %d of 5 requests", reached.Load())
			}
		})
	}
}
