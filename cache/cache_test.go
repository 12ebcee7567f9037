package cache_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/cache"
	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/h1serve"
	"github.com/linkgate/linkgate/h2serve"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/ongoing"
	"github.com/linkgate/linkgate/proxy"
)

// upstream is a link service over real HTTP: it answers each path with
// the fields of answer (a redirect by default) and counts its requests per
// path.
type upstream struct {
	srv *httptest.Server
	testkit.Counts
	answer func(w http.ResponseWriter, r *http.Request)
}

func newUpstream(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *upstream {
	u := &upstream{answer: answer}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.Add(r.URL.RequestURI())
		u.answer(w, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// redirect answers as the link service asking the gateway to keep it:
// no-store for browsers, five minutes for the gateway.
func redirect(fields ...string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		for i := 0; i+1 < len(fields); i += 2 {
			w.Header().Add(fields[i], fields[i+1])
		}
		w.Header().Set("Location", "https://example.com"+r.URL.Path)
		w.WriteHeader(http.StatusFound)
		io.WriteString(w, "found\n")
	}
}

// gateway is the cache in front of a reverse proxy to u, over real HTTP.
type gateway struct {
	url    string
	client *http.Client // the front's
	store  *cache.Store
	clk    *testkit.Clock
}

// front is what stands around the cache: net/http's server and
// httputil.ReverseProxy, the answer's head passed through the header map;
// or, as the gateway serves HTTP/1 and HTTP/2, h1serve's or h2serve's
// loop and the proxy's own client, which relays the upstream's head as a
// list of fields.
type front string

const (
	mapped    front = "net-http"
	relayed   front = "loop"
	relayedH2 front = "loop-h2"
)

// eachFront runs test once with each front, in parallel.
func eachFront(t *testing.T, test func(t *testing.T, fr front)) {
	for _, fr := range []front{mapped, relayed, relayedH2} {
		t.Run(string(fr), func(t *testing.T) {
			t.Parallel()
			test(t, fr)
		})
	}
}

func newGateway(t *testing.T, fr front, u *upstream, cfg cache.Config, ttl time.Duration) *gateway {
	t.Helper()
	p, err := cache.Compile("cache", cfg)
	if err != nil {
		t.Fatal(err)
	}
	clk := testkit.NewClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC))
	st := cache.NewStore(cfg.MaxBytes, nil, clk.Now)
	g := &gateway{store: st, clk: clk, client: client}
	if fr != mapped {
		pcfg := proxy.DefaultConfig()
		pcfg.Targets = []string{u.srv.URL}
		pcfg.HealthCheck.Interval = time.Hour
		plan, err := proxy.Compile(pcfg, &forwarded.Trust{}, forwarded.NewPolicy(nil, false))
		if err != nil {
			t.Fatal(err)
		}
		px := proxy.New(plan, nil, nil)
		t.Cleanup(px.Close)
		h := st.Handler(p, ttl, px)
		hf := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(ongoing.StatusWriter(w), r)
		})
		if fr == relayedH2 {
			s := &h2serve.Server{Handler: hf}
			g.url = "http://" + testkit.Serve(t, testkit.AcceptLoop(func(nc net.Conn) { s.ServeConn(context.Background(), nc, false) }), s.Close)
			g.client = h2cClient
			return g
		}
		s := h1serve.New(&http.Server{Handler: hf})
		g.url = "http://" + testkit.Serve(t, s.Serve, s.Close)
		return g
	}
	target, _ := url.Parse(u.srv.URL)
	rp := httputil.NewSingleHostReverseProxy(target)
	// A transport of its own: an httptest server's Close closes the idle
	// connections of http.DefaultTransport, which would break a request
	// of a test running beside it.
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	rp.Transport = tr
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) { w.WriteHeader(http.StatusBadGateway) }
	srv := httptest.NewServer(st.Handler(p, ttl, rp))
	t.Cleanup(srv.Close)
	g.url = srv.URL
	return g
}

// client asks the gateways, through a transport of its own (not
// http.DefaultTransport, whose idle connections each httptest server's
// Close closes: a request of a test beside it failed with "connection
// broken: CloseIdleConnections called").
var client = &http.Client{Transport: &http.Transport{}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// h2cClient is client over HTTP/2 in clear text, with prior knowledge.
var h2cClient = func() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}, CheckRedirect: client.CheckRedirect}
}()

// get asks the gateway for path, and returns the answer with its body
// read.
func (g *gateway) get(t *testing.T, path string, fields ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, g.url+path, nil)
	for i := 0; i+1 < len(fields); i += 2 {
		req.Header.Set(fields[i], fields[i+1])
	}
	res, err := g.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

// TestTargetedFields: what is kept is what the upstream's targeted field
// (Linkgate-Cache-Control, else CDN-Cache-Control) or a default_ttl says,
// never what Cache-Control says; the client gets the upstream's answer
// with the gateway's own field removed and an Age.
func TestTargetedFields(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, fr front) {
		for _, tc := range []struct {
			name   string
			fields []string
			ttl    time.Duration
			kept   bool
		}{
			{"cdn max-age", []string{"CDN-Cache-Control", "max-age=300"}, 0, true},
			{"own max-age", []string{"Linkgate-Cache-Control", "max-age=300"}, 0, true},
			{"own over cdn", []string{"Linkgate-Cache-Control", "no-store", "CDN-Cache-Control", "max-age=300"}, 0, false},
			{"own invalid, cdn used", []string{"Linkgate-Cache-Control", "max-age=300,,", "CDN-Cache-Control", "max-age=300"}, 0, true},
			{"cdn private", []string{"CDN-Cache-Control", "private"}, 0, false},
			{"cdn max-age 0", []string{"CDN-Cache-Control", "max-age=0"}, 0, false},
			{"cdn max-age a string", []string{"CDN-Cache-Control", `max-age="300"`}, 0, false},
			{"no field", nil, 0, false},
			{"no field, default_ttl", nil, time.Minute, true},
			{"cdn no-store over default_ttl", []string{"CDN-Cache-Control", "no-store"}, time.Minute, false},
			{"set-cookie", []string{"CDN-Cache-Control", "max-age=300", "Set-Cookie", "a=b"}, 0, false},
			{"vary star", []string{"CDN-Cache-Control", "max-age=300", "Vary", "*"}, 0, false},
			{"vary not allowed", []string{"CDN-Cache-Control", "max-age=300", "Vary", "User-Agent"}, 0, false},
			{"age past max-age", []string{"CDN-Cache-Control", "max-age=300", "Age", "301"}, 0, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				u := newUpstream(t, redirect(tc.fields...))
				g := newGateway(t, fr, u, cache.DefaultConfig(), tc.ttl)
				for range 3 {
					res, body := g.get(t, "/abc")
					if res.StatusCode != http.StatusFound || body != "found\n" || res.Header.Get("Location") != "https://example.com/abc" {
						t.Fatalf("got %d %q Location %q, want the upstream's 302", res.StatusCode, body, res.Header.Get("Location"))
					}
					if v := res.Header.Get("Linkgate-Cache-Control"); v != "" {
						t.Errorf("the client got Linkgate-Cache-Control: %s", v)
					}
					if res.Header.Get("Cache-Control") != "no-store" {
						t.Errorf("Cache-Control: %q, want the upstream's no-store", res.Header.Get("Cache-Control"))
					}
				}
				want := 3
				if tc.kept {
					want = 1
				}
				if got := u.Count("/abc"); got != want {
					t.Errorf("upstream asked %d times for 3 requests, want %d", got, want)
				}
			})
		}
	})
}

// TestHitAnswer: a hit is the upstream's answer byte for byte (its
// CDN-Cache-Control too, for a CDN in front) with its Age; a HEAD is
// answered from a GET's entry without the body.
func TestHitAnswer(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, fr front) {
		u := newUpstream(t, redirect("CDN-Cache-Control", "max-age=300", "X-Link", "7"))
		g := newGateway(t, fr, u, cache.DefaultConfig(), 0)
		miss, missBody := g.get(t, "/k")
		g.clk.Advance(42 * time.Second)
		hit, hitBody := g.get(t, "/k")
		if hitBody != missBody {
			t.Errorf("hit body %q, miss body %q", hitBody, missBody)
		}
		for _, f := range []string{"Location", "Cache-Control", "Cdn-Cache-Control", "X-Link", "Content-Length", "Date"} {
			if hit.Header.Get(f) != miss.Header.Get(f) {
				t.Errorf("%s: hit %q, miss %q", f, hit.Header.Get(f), miss.Header.Get(f))
			}
		}
		if hit.Header.Get("Age") != "42" {
			t.Errorf("Age %q, want 42", hit.Header.Get("Age"))
		}
		req, _ := http.NewRequest(http.MethodHead, g.url+"/k", nil)
		res, err := g.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusFound || u.Count("/k") != 1 {
			t.Errorf("HEAD: %d, upstream asked %d times; want 302 from the cache", res.StatusCode, u.Count("/k"))
		}
	})
}

// TestOneRequestPerKeyPerFreshness: whatever the timing, the upstream
// receives one request per key per freshness period: 40 concurrent
// clients over 5 keys, in three periods, make 5 requests upstream per
// period; the others are hits or wait for the first (coalesced).
func TestOneRequestPerKeyPerFreshness(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, fr front) {
		release := make(chan struct{})
		u := newUpstream(t, nil)
		u.answer = func(w http.ResponseWriter, r *http.Request) {
			<-release // the first request of each key waits: the others arrive meanwhile
			redirect("CDN-Cache-Control", "max-age=60")(w, r)
		}
		g := newGateway(t, fr, u, cache.DefaultConfig(), 0)
		const clients, keys = 40, 5
		for period := 1; period <= 3; period++ {
			var wg sync.WaitGroup
			var bad atomic.Int64
			for i := range clients {
				wg.Go(func() {
					res, _ := g.get(t, fmt.Sprintf("/key%d", i%keys))
					if res.StatusCode != http.StatusFound {
						bad.Add(1)
					}
				})
			}
			close(release)
			wg.Wait()
			release = make(chan struct{})
			if bad.Load() > 0 {
				t.Fatalf("period %d: %d answers were not the 302", period, bad.Load())
			}
			for k := range keys {
				if got := u.Count(fmt.Sprintf("/key%d", k)); got != period {
					t.Errorf("period %d: /key%d asked upstream %d times in all, want %d", period, k, got, period)
				}
			}
			g.clk.Advance(61 * time.Second)
		}
	})
}

// TestNegative: a 404 is kept, but for negative_ttl at most.
func TestNegative(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, fr front) {
		u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("CDN-Cache-Control", "max-age=300")
			http.NotFound(w, r)
		})
		g := newGateway(t, fr, u, cache.DefaultConfig(), 0)
		g.get(t, "/gone")
		g.clk.Advance(9 * time.Second)
		if res, _ := g.get(t, "/gone"); res.StatusCode != 404 || u.Count("/gone") != 1 {
			t.Fatalf("within negative_ttl: %d, %d requests upstream; want 404 from the cache", res.StatusCode, u.Count("/gone"))
		}
		g.clk.Advance(2 * time.Second)
		g.get(t, "/gone")
		if u.Count("/gone") != 2 {
			t.Errorf("past negative_ttl (10s): %d requests upstream, want 2", u.Count("/gone"))
		}
	})
}

// TestQueryAndVary: the query is part of the key; an answer that varies
// on an allowed field is kept once per value of it.
func TestQueryAndVary(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, fr front) {
		u := newUpstream(t, redirect("CDN-Cache-Control", "max-age=300", "Vary", "Accept-Language"))
		cfg := cache.DefaultConfig()
		cfg.Vary = []string{"accept-language"}
		g := newGateway(t, fr, u, cfg, 0)
		for range 2 {
			g.get(t, "/v", "Accept-Language", "fr")
			g.get(t, "/v", "Accept-Language", "de")
			g.get(t, "/v?utm=1", "Accept-Language", "fr")
		}
		if u.Count("/v") != 2 || u.Count("/v?utm=1") != 1 {
			t.Errorf("upstream asked /v %d times (want 2: fr, de) and /v?utm=1 %d times (want 1)", u.Count("/v"), u.Count("/v?utm=1"))
		}
	})
}

// TestStaleIfError: with the upstream stopped, a key kept keeps
// redirecting past its freshness for stale-if-error; a key never kept
// gets the proxy's 502; past stale-if-error the kept one does too.
func TestStaleIfError(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, fr front) {
		u := newUpstream(t, redirect("CDN-Cache-Control", "max-age=60, stale-if-error=600"))
		g := newGateway(t, fr, u, cache.DefaultConfig(), 0)
		g.get(t, "/kept")
		u.srv.Close()
		g.clk.Advance(5 * time.Minute)
		for range 3 {
			if res, _ := g.get(t, "/kept"); res.StatusCode != http.StatusFound {
				t.Fatalf("kept key with the upstream stopped: %d, want the stale 302", res.StatusCode)
			}
		}
		if res, _ := g.get(t, "/never"); res.StatusCode != http.StatusBadGateway {
			t.Errorf("key never kept: %d, want 502", res.StatusCode)
		}
		g.clk.Advance(6 * time.Minute)
		if res, _ := g.get(t, "/kept"); res.StatusCode != http.StatusBadGateway {
			t.Errorf("past stale-if-error: %d, want 502", res.StatusCode)
		}
	})
}

// TestStaleWhileRevalidate: past freshness, within
// stale-while-revalidate, the stale answer is served at once and one
// request in the background renews it.
func TestStaleWhileRevalidate(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, fr front) {
		var version atomic.Int64
		u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("CDN-Cache-Control", "max-age=60, stale-while-revalidate=30")
			w.Header().Set("Location", fmt.Sprintf("https://example.com/v%d", version.Load()))
			w.WriteHeader(http.StatusMovedPermanently)
		})
		g := newGateway(t, fr, u, cache.DefaultConfig(), 0)
		g.get(t, "/s")
		version.Store(1)
		g.clk.Advance(70 * time.Second)
		res, _ := g.get(t, "/s")
		if loc := res.Header.Get("Location"); loc != "https://example.com/v0" {
			t.Fatalf("within stale-while-revalidate: Location %q, want the stale v0", loc)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			res, _ := g.get(t, "/s")
			if res.Header.Get("Location") == "https://example.com/v1" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the background renewal never replaced the stale answer")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if n := u.Count("/s"); n != 2 {
			t.Errorf("upstream asked %d times, want 2 (the first, one renewal)", n)
		}
	})
}

// TestPurge: a key (with its query strings), a prefix, everything, and
// the upstream's Linkgate-Purge field, which the client never sees.
func TestPurge(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, fr front) {
		u := newUpstream(t, redirect("CDN-Cache-Control", "max-age=300"))
		g := newGateway(t, fr, u, cache.DefaultConfig(), 0)
		fill := func() {
			for _, p := range []string{"/a", "/a?x=1", "/ab", "/b"} {
				g.get(t, p)
			}
		}
		fill()
		if n := g.store.Apply(cache.Purge{Key: strings.TrimPrefix(g.url, "http://") + "/a"}, "admin"); n != 2 {
			t.Errorf("key purge removed %d entries, want 2 (/a, /a?x=1)", n)
		}
		if n := g.store.Apply(cache.Purge{Prefix: strings.TrimPrefix(g.url, "http://") + "/a"}, "admin"); n != 1 {
			t.Errorf("prefix purge removed %d entries, want 1 (/ab)", n)
		}
		fill()
		if n := g.store.Apply(cache.Purge{All: true}, "admin"); n != 4 {
			t.Errorf("purge of all removed %d entries, want 4", n)
		}
		if u.Count("/a") != 2 || u.Count("/b") != 1 {
			t.Fatalf("upstream asked /a %d, /b %d times, want 2 and 1", u.Count("/a"), u.Count("/b"))
		}
		// The upstream purges /b when answering /c.
		u.answer = func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/c" {
				w.Header().Set("Linkgate-Purge", "/b")
			}
			redirect("CDN-Cache-Control", "max-age=300")(w, r)
		}
		g.get(t, "/b")
		res, _ := g.get(t, "/c")
		if v := res.Header.Get("Linkgate-Purge"); v != "" {
			t.Errorf("the client got Linkgate-Purge: %s", v)
		}
		g.get(t, "/b")
		if u.Count("/b") != 3 {
			t.Errorf("after the upstream's purge, /b asked %d times in all, want 3", u.Count("/b"))
		}
	})
}

// TestBypass: a request with credentials, a body or another method goes
// upstream every time, and still loses the gateway's own field.
func TestBypass(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, fr front) {
		u := newUpstream(t, redirect("CDN-Cache-Control", "max-age=300", "Linkgate-Cache-Control", "max-age=300"))
		g := newGateway(t, fr, u, cache.DefaultConfig(), 0)
		for range 2 {
			res, _ := g.get(t, "/p", "Authorization", "Bearer x")
			if res.Header.Get("Linkgate-Cache-Control") != "" {
				t.Error("bypass: the client got Linkgate-Cache-Control")
			}
			req, _ := http.NewRequest(http.MethodPost, g.url+"/p", strings.NewReader("x"))
			res, err := g.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
		}
		if n := u.Count("/p"); n != 4 {
			t.Errorf("upstream asked %d times, want 4", n)
		}
	})
}

// TestCompile: check-config refuses what the cache could not run with,
// naming the field.
func TestCompile(t *testing.T) {
	t.Parallel()
	ttl := func(d time.Duration) *time.Duration { return &d }
	for _, tc := range []struct {
		name string
		edit func(c *cache.Config)
		want string
	}{
		{"max_bytes too small", func(c *cache.Config) { c.MaxBytes = 1000 }, "cache.max_bytes:"},
		{"entry over the whole", func(c *cache.Config) { c.MaxBytes, c.MaxEntryBytes = 1<<20, 1<<20+1 }, "cache.max_entry_bytes:"},
		{"negative ttl", func(c *cache.Config) { c.DefaultTTL = -time.Second }, "cache.default_ttl:"},
		{"1ns stale", func(c *cache.Config) { c.StaleIfError = 1 }, "cache.stale_if_error:"},
		{"vary on credentials", func(c *cache.Config) { c.Vary = []string{"cookie"} }, "cache.vary[0]:"},
		{"vary not a name", func(c *cache.Config) { c.Vary = []string{"a b"} }, "cache.vary[0]:"},
	} {
		c := cache.DefaultConfig()
		tc.edit(&c)
		if _, err := cache.Compile("cache", c); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error starting %q", tc.name, err, tc.want)
		}
	}
	if err := cache.CheckRoute("routes[0].cache", cache.Route{DefaultTTL: ttl(time.Millisecond)}); err == nil || !strings.HasPrefix(err.Error(), "routes[0].cache.default_ttl:") {
		t.Errorf("a route's 1ms default_ttl: %v", err)
	}
	for _, d := range []time.Duration{0, time.Second} {
		if err := cache.CheckRoute("routes[0].cache", cache.Route{DefaultTTL: ttl(d)}); err != nil {
			t.Errorf("a route's default_ttl %v: %v", d, err)
		}
	}
}

// TestUncachedKeyNotCoalesced: once a key's answer was not kept (the
// upstream does not ask the gateway to keep it), concurrent requests of
// the key go upstream at once, each, instead of waiting for one another's
// answer, which none of them could be served: the upstream sees all of
// them in flight together. The first answer that may be kept is kept,
// and the next request is a hit.
func TestUncachedKeyNotCoalesced(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, fr front) {
		const n = 8
		var inFlight atomic.Int64
		var waiting, cacheable atomic.Bool
		all := make(chan struct{})
		var once sync.Once
		u := newUpstream(t, nil)
		u.answer = func(w http.ResponseWriter, r *http.Request) {
			if inFlight.Add(1) == n {
				once.Do(func() { close(all) })
			}
			if waiting.Load() {
				select { // each of the n waits until all n are here
				case <-all:
				case <-time.After(testkit.Slack(10 * time.Second)):
				}
			}
			inFlight.Add(-1)
			if cacheable.Load() {
				redirect("CDN-Cache-Control", "max-age=60")(w, r)
				return
			}
			redirect()(w, r)
		}
		g := newGateway(t, fr, u, cache.DefaultConfig(), 0)
		g.get(t, "/hot") // not kept: the key is passed through from now on
		waiting.Store(true)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if res, _ := g.get(t, "/hot"); res.StatusCode != http.StatusFound {
					t.Errorf("a concurrent request: %d, want 302", res.StatusCode)
				}
			})
		}
		testkit.Await(t, wg.Wait, time.Minute, "the concurrent requests")
		select {
		case <-all:
		default:
			t.Errorf("the upstream never had the %d requests of an uncached key in flight at once: they waited for one another", n)
		}
		if got := u.Count("/hot"); got != n+1 {
			t.Errorf("upstream asked %d times, want %d", got, n+1)
		}
		waiting.Store(false)
		cacheable.Store(true)
		g.get(t, "/hot") // passed through, answered cacheable: kept
		if res, _ := g.get(t, "/hot"); res.StatusCode != http.StatusFound || u.Count("/hot") != n+2 {
			t.Errorf("after a cacheable answer: %d, upstream asked %d times, want a hit (%d)", res.StatusCode, u.Count("/hot"), n+2)
		}
	})
}
