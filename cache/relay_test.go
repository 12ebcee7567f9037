package cache_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/linkgate/linkgate/cache"
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
	g := newGateway(t, relayed, u, cache.DefaultConfig(), 0)
	get := func(path string, fields ...string) *http.Response {
		res, _ := g.get(t, path, fields...)
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
