package cache_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/cache"
	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/h1serve"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/ongoing"
	"github.com/linkgate/linkgate/proxy"
)

// TestOwnFieldsOfARelayedHead: served as the gateway serves it (the
// HTTP/1 loop, a Recorder, the proxy's own client, which relays the
// upstream's head as a list of fields), a request the cache lets through
// (Authorization) still loses the gateway's own fields, and the
// upstream's Linkgate-Purge still purges.
func TestOwnFieldsOfARelayedHead(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/c" {
			w.Header().Set("Linkgate-Purge", "/b")
		}
		redirect("CDN-Cache-Control", "max-age=300", "Linkgate-Cache-Control", "max-age=300")(w, r)
	})
	cfg := cache.DefaultConfig()
	p, err := cache.Compile("cache", cfg)
	if err != nil {
		t.Fatal(err)
	}
	st := cache.NewStore(cfg.MaxBytes, nil, testkit.NewClock(time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)).Now)
	pcfg := proxy.DefaultConfig()
	pcfg.Targets = []string{u.srv.URL}
	pcfg.HealthCheck.Interval = time.Hour
	plan, err := proxy.Compile(pcfg, &forwarded.Trust{}, forwarded.NewPolicy(nil, false))
	if err != nil {
		t.Fatal(err)
	}
	px := proxy.New(plan, nil, nil)
	t.Cleanup(px.Close)
	h := st.Handler(p, 0, px)
	s := h1serve.New(&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(ongoing.StatusWriter(w), r)
	})})
	base := "http://" + testkit.Serve(t, s.Serve, s.Close)
	get := func(path string, fields ...string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		for i := 0; i+1 < len(fields); i += 2 {
			req.Header.Set(fields[i], fields[i+1])
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	get("/b") // kept
	res := get("/c", "Authorization", "Bearer x")
	if res.StatusCode != http.StatusFound || res.Header.Get("Location") == "" {
		t.Fatalf("GET /c: %d, Location %q; want a redirect", res.StatusCode, res.Header.Get("Location"))
	}
	for _, f := range []string{"Linkgate-Cache-Control", "Linkgate-Purge"} {
		if v := res.Header.Get(f); v != "" {
			t.Errorf("the client got %s: %s", f, v)
		}
	}
	if v := res.Header.Get("Cdn-Cache-Control"); !strings.Contains(v, "max-age=300") {
		t.Errorf("Cdn-Cache-Control %q, want the upstream's", v)
	}
	get("/b")
	if n := u.Count("/b"); n != 2 {
		t.Errorf("after the upstream's purge, /b asked %d times in all, want 2", n)
	}
}
