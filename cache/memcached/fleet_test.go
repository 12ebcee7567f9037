package memcached_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/linkgate/linkgate/cache"
	"github.com/linkgate/linkgate/cache/memcached"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/limit"
	limitmc "github.com/linkgate/linkgate/limit/memcached"
)

// keep fills st with the answer of key.
func keep(t *testing.T, st *cache.Store, path string) {
	t.Helper()
	p, err := cache.Compile("cache", cache.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	h := st.Handler(p, 0, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("CDN-Cache-Control", "max-age=3600")
		w.Header().Set("Location", "https://example.com/")
		w.WriteHeader(http.StatusFound)
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "http://sho.rt"+path, nil))
}

// TestFleet: a purge applied on one gateway's store reaches another's
// through a real memcached, a purge by key, by prefix and of all; the
// purges a gateway sends are not applied to it twice.
func TestFleet(t *testing.T) {
	mc := testkit.StartMemcached(t)
	cfg := limit.Memcached{Servers: []string{mc.Addr}, Timeout: time.Second}
	m := cache.NewMetrics(nil)
	a, b := cache.NewStore(1<<20, m, nil), cache.NewStore(1<<20, nil, nil)
	// Two gateways: each its limiter's store, whose client the fleet uses.
	la, lb := limitmc.New(cfg, nil, nil), limitmc.New(cfg, nil, nil)
	defer la.Close()
	defer lb.Close()
	fa, fb := memcached.New(la.Client(memcached.Name), a, m, nil), memcached.New(lb.Client(memcached.Name), b, nil, nil)
	defer fa.Close()
	defer fb.Close()
	a.SetPublisher(fa)
	b.SetPublisher(fb)
	for _, st := range []*cache.Store{a, b} {
		for _, p := range []string{"/x", "/y1", "/y2", "/z"} {
			keep(t, st, p)
		}
	}
	for _, tc := range []struct {
		purge         cache.Purge
		removed, left int
	}{
		{cache.Purge{Key: "sho.rt/x"}, 1, 3},
		{cache.Purge{Prefix: "sho.rt/y"}, 2, 1},
		{cache.Purge{All: true}, 1, 0},
	} {
		if n := a.Apply(tc.purge, "admin"); n != tc.removed {
			t.Errorf("%+v: removed %d here, want %d", tc.purge, n, tc.removed)
		}
		testkit.Eventually(t, 10*time.Second, "the purge applied by the other gateway", func() bool { return b.Len() == tc.left })
	}
}
