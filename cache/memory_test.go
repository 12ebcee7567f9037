package cache_test

import (
	"flag"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/linkgate/linkgate/cache"
)

// floodKeys is the flood's size: a million takes minutes on a loaded
// machine, and the bound holds from the first eviction on.
var floodKeys = flag.Int("cache.flood", 200_000, "distinct keys of TestMemoryBound's flood")

// TestMemoryBound: a flood of a million distinct keys keeps the cache
// within max_bytes, as counted and as the heap measures it, and the hot
// keys, asked for all along, stay kept.
func TestMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("a million requests")
	}
	const maxBytes = 16 << 20
	flood := *floodKeys
	if raceEnabled {
		flood /= 4 // the race detector makes each request several times slower
	}
	cfg := cache.DefaultConfig()
	cfg.MaxBytes = maxBytes
	p, err := cache.Compile("cache", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var upstream atomic.Int64
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		upstream.Add(1)
		h := w.Header()
		h.Set("CDN-Cache-Control", "max-age=3600")
		h.Set("Cache-Control", "no-store")
		h.Set("Location", "https://example.com/a/long/enough/destination/of/a/short/link"+r.URL.Path)
		h.Set("Content-Length", "0")
		w.WriteHeader(http.StatusFound)
	})
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	st := cache.NewStore(maxBytes, nil, nil)
	h := st.Handler(p, 0, next)
	get := func(path string) {
		r := httptest.NewRequest(http.MethodGet, "http://sho.rt"+path, nil)
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	const hot = 200
	for i := range flood {
		get("/flood" + strconv.Itoa(i))
		if i%50 == 0 {
			get("/hot" + strconv.Itoa((i/50)%hot))
		}
	}
	if b := st.Bytes(); b > maxBytes {
		t.Errorf("the cache counts %d bytes, over its bound of %d", b, maxBytes)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d keys: %d entries, %d bytes counted, heap grown by %d bytes (%.2f of the bound)",
		flood, st.Len(), st.Bytes(), grown, float64(grown)/maxBytes)
	if grown > maxBytes*5/4 {
		t.Errorf("the heap grew by %d bytes for a cache bounded at %d", grown, maxBytes)
	}
	before2 := upstream.Load()
	for i := range hot {
		get("/hot" + strconv.Itoa(i))
	}
	lost := upstream.Load() - before2
	t.Logf("hot keys kept through the flood: %d of %d", hot-lost, hot)
	if lost > hot/10 {
		t.Errorf("%d of the %d hot keys were evicted by the flood", lost, hot)
	}
	runtime.KeepAlive(st)
}
