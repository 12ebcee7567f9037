package analytics_test

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/ja4"
	"github.com/linkgate/linkgate/ongoing"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitclass"
	"github.com/linkgate/linkgate/visitor"
)

// shortener answers like the demo shortener: a redirect for a known key,
// 404 otherwise; /ok writes a body without a status.
var shortener = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/abc", "/xyz":
		http.Redirect(w, r, "https://example.com/"+r.URL.Path[1:], http.StatusFound)
	case "/ok":
		w.Write([]byte("hello"))
	case "/moved":
		w.WriteHeader(http.StatusMovedPermanently)
	default:
		http.NotFound(w, r)
	}
})

const slackbot = "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)"

func TestMiddleware(t *testing.T) {
	type req struct{ method, path, ua string }
	tests := []struct {
		name string
		bots string
		reqs []req
		want map[string]analytics.Visits
	}{
		{"redirect counted", "separate", []req{{"GET", "/abc", ""}, {"GET", "/abc", "Mozilla/5.0"}},
			map[string]analytics.Visits{"abc": {Human: 2}, "/": {Human: 2}}},
		{"301 counted", "separate", []req{{"GET", "/moved", ""}},
			map[string]analytics.Visits{"moved": {Human: 1}}},
		{"HEAD counted", "separate", []req{{"HEAD", "/abc", ""}},
			map[string]analytics.Visits{"abc": {Human: 1}}},
		{"404 not a visit", "separate", []req{{"GET", "/nope", ""}},
			map[string]analytics.Visits{"nope": {}, "/": {}}},
		{"200 not a visit", "separate", []req{{"GET", "/ok", ""}},
			map[string]analytics.Visits{"ok": {}, "/": {}}},
		{"POST not matched", "separate", []req{{"POST", "/abc", ""}},
			map[string]analytics.Visits{"abc": {}}},
		{"two segments not matched", "separate", []req{{"GET", "/abc/def", ""}},
			map[string]analytics.Visits{"/": {}}},
		{"bot separate", "separate", []req{{"GET", "/abc", slackbot}, {"GET", "/abc", "Twitterbot/1.0"}, {"GET", "/xyz", ""}},
			// Slackbot is a link unfurler: a bot of class preview.
			map[string]analytics.Visits{"abc": {Bot: 2, Other: [rollup.NumOther]int64{2}}, "xyz": {Human: 1}, "/": {Human: 1, Bot: 2, Other: [rollup.NumOther]int64{2}}}},
		{"bot count", "count", []req{{"GET", "/abc", slackbot}, {"GET", "/abc", ""}},
			map[string]analytics.Visits{"abc": {Human: 2}, "/": {Human: 2}}},
		{"bot ignore", "ignore", []req{{"GET", "/abc", slackbot}, {"GET", "/abc", ""}},
			map[string]analytics.Visits{"abc": {Human: 1}, "/": {Human: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := analytics.DefaultConfig()
			cfg.Bots = tt.bots
			rec := analytics.NewRecorder(cfg.MaxKeys, nil)
			h := analytics.NewMiddleware(compile(t, cfg), rec)(shortener)
			for _, r := range tt.reqs {
				req := httptest.NewRequest(r.method, r.path, nil)
				req.Header.Set("User-Agent", r.ua)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code == 0 {
					t.Fatalf("%s %s: no answer", r.method, r.path)
				}
			}
			f := analytics.NewFlusher(rec, newMemStore(), analyticstest.DefaultPlan, analytics.FlusherOptions{}, nil, nil)
			// The memory merge sees the visits before any flush.
			for key, want := range tt.want {
				got, err := f.Reader(newMemStore()).Total(t.Context(), key)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Errorf("Total(%q) = %+v, want %+v", key, got, want)
				}
			}
		})
	}
}

// compile compiles an analytics section that must be valid.
func compile(t testing.TB, cfg analytics.Config) *analytics.Plan {
	t.Helper()
	p, err := analytics.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMiddlewarePassesThrough(t *testing.T) {
	rec := analytics.NewRecorder(10, nil)
	mw := analytics.NewMiddleware(compile(t, analytics.DefaultConfig()), rec)
	w := httptest.NewRecorder()
	mw(shortener).ServeHTTP(w, httptest.NewRequest("GET", "/abc", nil))
	if w.Code != http.StatusFound || w.Header().Get("Location") != "https://example.com/abc" {
		t.Errorf("answer %d %q, want the shortener's redirect", w.Code, w.Header().Get("Location"))
	}
	if rec.Keys() != 1 {
		t.Errorf("%d links recorded, want 1", rec.Keys())
	}
}

// TestMiddlewareReusesTheWrap: the visit counter passes on the
// ongoing.Recorder it is given (the gateway makes one per
// request) and counts by the status written through it: a handler that
// writes nothing answers 200.
func TestMiddlewareReusesTheWrap(t *testing.T) {
	cfg := analytics.DefaultConfig()
	cfg.CountStatus = []int{200}
	rec := analytics.NewRecorder(10, nil)
	var got http.ResponseWriter
	h := analytics.NewMiddleware(compile(t, cfg), rec)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = w
	}))
	ww := ongoing.StatusWriter(httptest.NewRecorder())
	h.ServeHTTP(ww, httptest.NewRequest("GET", "/abc", nil))
	if got != ww {
		t.Errorf("the handler got %T, a wrap of the counter's own, want the wrap it was given", got)
	}
	if rec.Keys() != 1 {
		t.Errorf("%d links recorded, want 1: a handler that writes nothing answers 200", rec.Keys())
	}
}

func TestCompileErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mod   func(*analytics.Config)
		field string
	}{
		{"bad bots", func(c *analytics.Config) { c.Bots = "drop" }, "analytics.bots:"},
		{"bad status", func(c *analytics.Config) { c.CountStatus = []int{302, 700} }, "analytics.count_status[1]:"},
		{"bad path", func(c *analytics.Config) { c.Match.Path = "nope" }, "analytics.match:"},
		{"no short_key", func(c *analytics.Config) { c.Match.Path = "/{id}" }, "analytics.match:"},
		{"short flush", func(c *analytics.Config) { c.FlushInterval = time.Millisecond }, "analytics.flush_interval:"},
		{"no keys", func(c *analytics.Config) { c.MaxKeys = 0 }, "analytics.max_keys:"},
		{"bad store", func(c *analytics.Config) { c.Store = "redis" }, "analytics.store:"},
		{"no path", func(c *analytics.Config) { c.Embedded.Path = " " }, "analytics.embedded.path:"},
		{"bad keyspace", func(c *analytics.Config) { c.Store = "cassandra"; c.Cassandra.Keyspace = "a-b" }, "analytics.cassandra.keyspace:"},
		{"bad consistency", func(c *analytics.Config) { c.Store = "cassandra"; c.Cassandra.Consistency = "MOST" }, "analytics.cassandra.consistency:"},
		{"no hosts", func(c *analytics.Config) { c.Store = "cassandra"; c.Cassandra.Hosts = nil }, "analytics.cassandra.hosts:"},
		{"bad retention", func(c *analytics.Config) { c.Retention = nil }, "analytics.retention:"},
		{"bad internal network", func(c *analytics.Config) { c.Classes.InternalNetworks = []string{"10.0.0.0/33"} }, "analytics.classes.internal_networks[0]:"},
		{"lists without a database", func(c *analytics.Config) { c.Classes.CloudNetworks = []string{"AS1"} }, "analytics.classes:"},
		{"long burst window", func(c *analytics.Config) { c.Classes.BurstWindow = 2 * time.Hour }, "analytics.classes.burst_window:"},
		{"missing asn database", func(c *analytics.Config) { c.ASN.Path = "/nonexistent.mmdb" }, "analytics.asn.path:"},
	} {
		cfg := analytics.DefaultConfig()
		tc.mod(&cfg)
		if _, err := analytics.Compile(cfg); err == nil || !strings.HasPrefix(err.Error(), tc.field) {
			t.Errorf("%s: Compile error %v, want one starting with %s", tc.name, err, tc.field)
		}
	}
}

func BenchmarkMiddleware(b *testing.B) {
	rec := analytics.NewRecorder(100, nil)
	mw := analytics.NewMiddleware(compile(b, analytics.DefaultConfig()), rec)
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusFound) }))
	req := httptest.NewRequest("GET", "/abc123", nil)
	req.Header.Set("User-Agent", "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36")
	req.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
	req.Header.Set("Accept-Language", "en-US,en;q=0.9")
	req.Header.Set("Sec-Fetch-Mode", "navigate")
	req.Header.Set("Sec-Fetch-Dest", "document")
	w := httptest.NewRecorder()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, req)
	}
}

// TestMiddlewareClasses checks that a visit's class decides how it counts:
// only people are human visits; prefetches, scanners and the operator's
// own networks count apart, and the TLS fingerprint counts only when the
// peer is the client.
func TestMiddlewareClasses(t *testing.T) {
	const chrome = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
	const goTLS = "t13d1312h2_f57a46bbacb6_ab7e3b40a677"
	nav := map[string]string{"User-Agent": chrome, "Accept": "text/html,*/*;q=0.8", "Accept-Language": "en",
		"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
	with := func(extra map[string]string) map[string]string {
		h := maps.Clone(nav)
		maps.Copy(h, extra)
		return h
	}
	trust, err := forwarded.Parse([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := analytics.DefaultConfig()
	cfg.Classes.InternalNetworks = []string{"192.0.2.0/24"}
	plan, err := analytics.CompileEnv(cfg, analytics.Env{Trust: trust})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		method  string
		peer    string
		xff     string
		ja4     string
		headers map[string]string
		class   string // and reason
	}{
		{"a browser's navigation", "GET", "203.0.113.1", "", "", nav, "human none"},
		{"a browser over a browser's TLS", "GET", "203.0.113.1", "", "t13d1516h2_8daaf6152771_02713d6af862", nav, "human none"},
		{"a library with a browser's headers", "GET", "203.0.113.1", "", goTLS, nav, "scanner tls-stack"},
		{"a library's TLS behind a trusted proxy is the proxy's", "GET", "10.1.1.1", "203.0.113.1", goTLS, nav, "human none"},
		{"a prefetch", "GET", "203.0.113.1", "", "", with(map[string]string{"Sec-Purpose": "prefetch"}), "prefetch prefetch-header"},
		{"HEAD with a browser's User-Agent", "HEAD", "203.0.113.1", "", "", nav, "scanner head"},
		{"a browser's User-Agent alone", "GET", "203.0.113.1", "", "", map[string]string{"User-Agent": chrome}, "scanner headers"},
		{"the operator's network", "GET", "192.0.2.7", "", "", nav, "internal internal-network"},
		{"the operator's network behind the proxy", "GET", "10.1.1.1", "192.0.2.7", "", nav, "internal internal-network"},
		{"a library's own User-Agent", "GET", "203.0.113.1", "", goTLS, map[string]string{"User-Agent": "Go-http-client/2.0"}, "human none"},
		{"an unfurler", "GET", "203.0.113.1", "", "", map[string]string{"User-Agent": slackbot}, "preview preview-ua"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := analytics.NewRecorder(cfg.MaxKeys, nil)
			rec.SetMaxValues(cfg.Dimensions.MaxValues)
			h := analytics.NewMiddleware(plan, rec)(shortener)
			req := httptest.NewRequest(tc.method, "/abc", nil)
			req.RemoteAddr = tc.peer + ":4321"
			if tc.xff != "" {
				req.Header.Set("X-Forwarded-For", tc.xff)
			}
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			if tc.ja4 != "" {
				req = req.WithContext(ja4.NewContext(req.Context(), tc.ja4))
			}
			h.ServeHTTP(httptest.NewRecorder(), req)
			f := analytics.NewFlusher(rec, newMemStore(), analyticstest.DefaultPlan, analytics.FlusherOptions{}, nil, nil)
			got, err := f.Reader(newMemStore()).Total(t.Context(), "abc")
			if err != nil {
				t.Fatal(err)
			}
			// One visit, counted in its class at every resolution.
			class, _ := visitclass.ParseClass(strings.Fields(tc.class)[0])
			if got.Human+got.Bot != 1 || analytics.ClassVisits(got, class) != 1 {
				t.Errorf("Total = %+v, want one visit of class %v", got, class)
			}
			// The class and the reason are dimensions of the visit.
			var gotClass []string
			day := time.Now().UTC().Truncate(24 * time.Hour)
			for _, d := range []visitor.Dim{visitor.Class, visitor.Reason} {
				vals, err := f.Reader(analyticstest.NewMemory(analyticstest.DefaultPlan)).Dims(t.Context(), "abc", d, day, day.Add(24*time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				for _, v := range vals {
					gotClass = append(gotClass, fmt.Sprintf("%s=%d", v.Value, v.Count))
				}
			}
			if w := strings.ReplaceAll(tc.class, " ", "=1 ") + "=1"; strings.Join(gotClass, " ") != w {
				t.Errorf("by class and reason: %v, want %s", gotClass, w)
			}
			// And where the link led: the upstream's Location.
			dest, err := f.Reader(analyticstest.NewMemory(analyticstest.DefaultPlan)).Dims(t.Context(), "abc", visitor.Destination, day, day.Add(24*time.Hour))
			if err != nil || len(dest) != 1 || dest[0] != (analytics.DimValue{Value: "https://example.com/abc", Count: 1}) {
				t.Errorf("by destination: %v (%v), want https://example.com/abc once", dest, err)
			}
		})
	}
}
