package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// linkService is an upstream that asks the gateway to keep its redirects
// (CDN-Cache-Control) and tells browsers not to (Cache-Control: no-store),
// counting its requests per path. Until release is closed, its answers
// wait: the requests of a key that arrive meanwhile must wait for the
// first one's.
type linkService struct {
	srv     *httptest.Server
	release chan struct{}
	testkit.Counts
}

func newLinkService(t *testing.T, control string) *linkService {
	l := &linkService{release: make(chan struct{})}
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		l.Add(r.URL.Path)
		<-l.release
		if strings.HasPrefix(r.URL.Path, "/unknown") {
			w.Header().Set("CDN-Cache-Control", control)
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("CDN-Cache-Control", control)
		w.Header().Set("Linkgate-Cache-Control", control)
		http.Redirect(w, r, "https://example.com"+r.URL.Path, http.StatusFound)
	}))
	t.Cleanup(l.srv.Close)
	return l
}

// cacheConfig is healthConfig with the access log on, and extra after.
func cacheConfig(upstream, dir, extra string) string {
	return within(healthConfig(upstream, dir), "server", "  access_log: true\n") + extra
}

// TestCacheCountsEveryVisit: N visits over K keys, sent at once, reach
// the upstream once per key (the others wait for the first answer, or
// hit the cache), and /stats counts all N; the access log says what the
// cache did with each, and the metrics agree.
func TestCacheCountsEveryVisit(t *testing.T) {
	t.Parallel()
	up := newLinkService(t, "max-age=300")
	gw := start(t, cacheConfig(up.srv.URL, t.TempDir(), ""))
	const keys, clients, each = 4, 16, 10
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range each {
				path := fmt.Sprintf("/k%d", (c+i)%keys)
				resp, _ := testkit.Do(t, "GET", gw.url(path), nil)
				if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "https://example.com"+path {
					t.Errorf("GET %s: %d Location %q", path, resp.StatusCode, resp.Header.Get("Location"))
				}
				if resp.Header.Get("Linkgate-Cache-Control") != "" || resp.Header.Get("Cache-Control") != "no-store" || resp.Header.Get("Cdn-Cache-Control") != "max-age=300" {
					t.Errorf("GET %s: fields %v: want Cache-Control and CDN-Cache-Control passed on, Linkgate-Cache-Control removed", path, resp.Header)
				}
			}
		})
	}
	// Some requests of each key arrive while its first one waits.
	testkit.Eventually(t, 10*time.Second, "every key asked upstream", func() bool {
		for k := range keys {
			if up.Count(fmt.Sprintf("/k%d", k)) == 0 {
				return false
			}
		}
		return true
	})
	close(up.release)
	wg.Wait()
	for k := range keys {
		path := fmt.Sprintf("/k%d", k)
		if n := up.Count(path); n != 1 {
			t.Errorf("%s: %d requests upstream, want 1", path, n)
		}
		// A loaded store may answer a read partially (stats.read_timeout):
		// read until the total is whole; more would never match.
		var got int64
		testkit.Eventually(t, 30*time.Second, "/stats"+path+" whole", func() bool {
			got = stats(t, gw, "/stats"+path+"?last=1h").Total
			return got == clients*each/keys
		})
		if got != clients*each/keys {
			t.Errorf("/stats%s: total %d, want %d", path, got, clients*each/keys)
		}
	}
	results := map[string]int{}
	for _, r := range gw.logs.Records("access", nil) {
		results[r["cache"]]++
	}
	if results["miss"] != keys || results["hit"]+results["coalesced"] != clients*each-keys {
		t.Errorf("access log cache= counts %v: want %d misses, %d hits and coalesced", results, keys, clients*each-keys)
	}
	reg := gw.g.Registry()
	for _, res := range []string{"miss", "hit", "coalesced"} {
		if got := testkit.Metric(t, reg, "linkgate_cache_requests_total", "result", res); int(got) != results[res] {
			t.Errorf("linkgate_cache_requests_total{result=%q} = %v, the access log says %d", res, got, results[res])
		}
	}
	if testkit.Metric(t, reg, "linkgate_cache_entries") != keys || testkit.Metric(t, reg, "linkgate_cache_bytes") == 0 {
		t.Errorf("linkgate_cache_entries %v, bytes %v: want %d entries", testkit.Metric(t, reg, "linkgate_cache_entries"), testkit.Metric(t, reg, "linkgate_cache_bytes"), keys)
	}
}

// TestCacheBehindLimiter: an answer from the cache is limited as one from
// the upstream: the limiter runs before the cache.
func TestCacheBehindLimiter(t *testing.T) {
	t.Parallel()
	up := newLinkService(t, "max-age=300")
	close(up.release)
	gw := start(t, cacheConfig(up.srv.URL, t.TempDir(), `rules:
  - name: redirect_ip
    match: {methods: [GET], path: "/{short_key}"}
    key: ip
    limits: [3/m]
`))
	for i := range 5 {
		resp, _ := testkit.Do(t, "GET", gw.url("/go"), nil)
		want := http.StatusFound
		if i >= 3 {
			want = http.StatusTooManyRequests
		}
		if resp.StatusCode != want {
			t.Errorf("visit %d: %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	if n := up.Count("/go"); n != 1 {
		t.Errorf("%d requests upstream, want 1", n)
	}
	if got := stats(t, gw, "/stats/go?last=1h"); got.Total != 3 {
		t.Errorf("/stats/go total %d, want the 3 visits let through", got.Total)
	}
}

// TestCacheUpstreamDown: with the upstream stopped, the kept links keep
// redirecting (stale-if-error), counted as visits and logged cache=stale;
// a link never kept gets the usual 502 problem.
func TestCacheUpstreamDown(t *testing.T) {
	t.Parallel()
	up := newLinkService(t, "max-age=1, stale-if-error=600")
	close(up.release)
	gw := start(t, cacheConfig(up.srv.URL, t.TempDir(), ""))
	for _, p := range []string{"/a", "/b"} {
		if resp, _ := testkit.Do(t, "GET", gw.url(p), nil); resp.StatusCode != http.StatusFound {
			t.Fatalf("GET %s: %d", p, resp.StatusCode)
		}
	}
	up.srv.Close()
	visits := 2
	testkit.Eventually(t, 20*time.Second, "a stale answer served", func() bool {
		for _, p := range []string{"/a", "/b"} {
			resp, _ := testkit.Do(t, "GET", gw.url(p), nil)
			if resp.StatusCode != http.StatusFound {
				t.Fatalf("GET %s with the upstream stopped: %d, want the kept 302", p, resp.StatusCode)
			}
			visits++
		}
		return gw.logs.Count("access", map[string]string{"cache": "stale"}) >= 2
	})
	resp, b := testkit.Do(t, "GET", gw.url("/never"), nil)
	testkit.Problem(t, resp, b, http.StatusBadGateway)
	var a, bb int64
	testkit.Eventually(t, 30*time.Second, "/stats whole", func() bool { // see TestCacheCountsEveryVisit
		a, bb = stats(t, gw, "/stats/a?last=1h").Total, stats(t, gw, "/stats/b?last=1h").Total
		return int(a+bb) == visits
	})
	if int(a+bb) != visits {
		t.Errorf("/stats: %d + %d visits, want %d", a, bb, visits)
	}
	if testkit.Metric(t, gw.g.Registry(), "linkgate_cache_requests_total", "result", "stale") < 2 {
		t.Error("linkgate_cache_requests_total{result=\"stale\"} < 2")
	}
}

// TestCachePurgeAdmin: the admin API purges a key (with its query
// strings), a prefix, everything; the next visit goes upstream again. A
// request without exactly one of them is a 400 problem.
func TestCachePurgeAdmin(t *testing.T) {
	t.Parallel()
	up := newLinkService(t, "max-age=300")
	close(up.release)
	gw := start(t, cacheConfig(up.srv.URL, t.TempDir(), ""))
	host := gw.g.Addr().String()
	auth := []string{"Authorization", "Bearer " + testkit.AdminToken}
	visit := func(p string) {
		if resp, _ := testkit.Do(t, "GET", gw.url(p), nil); resp.StatusCode != http.StatusFound {
			t.Fatalf("GET %s: %d", p, resp.StatusCode)
		}
	}
	purge := func(q string, want int) {
		resp, b := testkit.Do(t, "POST", gw.admin("/admin/cache/purge?"+q), nil, auth...)
		if resp.StatusCode != 200 || b != fmt.Sprintf("{\"purged\":%d}\n", want) {
			t.Errorf("purge %s: %d %s, want %d purged", q, resp.StatusCode, b, want)
		}
	}
	visit("/ab")
	visit("/ab?utm=x")
	visit("/ac")
	purge("key="+host+"/ab", 2)
	visit("/ab")
	visit("/ac")
	if up.Count("/ab") != 3 || up.Count("/ac") != 1 {
		t.Errorf("after a key purge: /ab asked %d times (want 3), /ac %d (want 1)", up.Count("/ab"), up.Count("/ac"))
	}
	purge("prefix="+strings.ToUpper(host)+"/a", 2)
	purge("all=true", 0)
	for _, q := range []string{"", "all=false", "key=x&prefix=y"} {
		resp, b := testkit.Do(t, "POST", gw.admin("/admin/cache/purge?"+q), nil, auth...)
		testkit.Problem(t, resp, b, http.StatusBadRequest)
	}
	if resp, _ := testkit.Do(t, "POST", gw.admin("/admin/cache/purge?all=true"), nil); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("purge without the token: %d, want 401", resp.StatusCode)
	}
}

// TestCacheNoVarySearchCounts: visits to one link with a different
// utm_source each, which the link service's No-Vary-Search says does not
// change its answer, reach it once, and /stats counts every one.
func TestCacheNoVarySearchCounts(t *testing.T) {
	t.Parallel()
	var upstream atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		upstream.Add(1)
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("CDN-Cache-Control", "max-age=300")
		w.Header().Set("No-Vary-Search", `params=("utm_source" "utm_medium")`)
		http.Redirect(w, r, "https://example.com"+r.URL.Path, http.StatusFound)
	}))
	t.Cleanup(up.Close)
	gw := start(t, cacheConfig(up.URL, t.TempDir(), ""))
	const visits = 20
	for i := range visits {
		resp, _ := testkit.Do(t, "GET", gw.url(fmt.Sprintf("/nvs?utm_source=s%d&utm_medium=m", i)), nil)
		if resp.StatusCode != http.StatusFound || resp.Header.Get("No-Vary-Search") == "" {
			t.Fatalf("visit %d: %d, No-Vary-Search %q", i, resp.StatusCode, resp.Header.Get("No-Vary-Search"))
		}
	}
	if n := upstream.Load(); n != 1 {
		t.Errorf("%d requests upstream for %d visits differing only in utm_*, want 1", n, visits)
	}
	var got int64
	testkit.Eventually(t, 30*time.Second, "/stats/nvs whole", func() bool {
		got = stats(t, gw, "/stats/nvs?last=1h").Total
		return got == visits
	})
	if got != visits {
		t.Errorf("/stats/nvs: total %d, want %d", got, visits)
	}
	results := map[string]int{}
	for _, r := range gw.logs.Records("access", nil) {
		results[r["cache"]]++
	}
	if results["miss"] != 1 || results["hit"] != visits-1 {
		t.Errorf("access log cache= counts %v: want 1 miss, %d hits", results, visits-1)
	}
}
