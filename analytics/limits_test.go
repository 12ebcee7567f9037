package analytics_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// TestMaxKeyBytes: over real HTTP, a short key of max_key_bytes is counted,
// a longer one is proxied as usual but not counted, and shows in
// linkgate_analytics_keys_too_long_total.
func TestMaxKeyBytes(t *testing.T) {
	redirectAll := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://example.com/", http.StatusFound)
	})
	for _, max := range []int{analytics.DefaultMaxKeyBytes, 16} {
		t.Run(fmt.Sprint("max_key_bytes=", max), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m := analytics.NewMetrics(reg)
			cfg := analytics.DefaultConfig()
			cfg.MaxKeyBytes = max
			rec := analytics.NewRecorder(cfg.MaxKeys, m)
			mw := analytics.NewMiddleware(compile(t, cfg), rec)
			srv := httptest.NewServer(mw(redirectAll))
			defer srv.Close()
			client := srv.Client()
			client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			get := func(key string) int {
				resp, err := client.Get(srv.URL + "/" + key)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			atMax, over := strings.Repeat("k", max), strings.Repeat("k", max+1)
			// é is two bytes: max/2 of them is at the cap, one more is over.
			wideAtMax, wideOver := strings.Repeat("é", max/2), strings.Repeat("é", max/2+1)
			for _, k := range []string{atMax, over, over + "x", wideAtMax, wideOver} {
				if s := get(k); s != http.StatusFound {
					t.Errorf("key of %d bytes: status %d, want the upstream's 302", len(k), s)
				}
			}
			f := analytics.NewFlusher(rec, newMemStore(), analyticstest.DefaultPlan, analytics.FlusherOptions{}, nil, nil)
			rd := f.Reader(newMemStore())
			for k, want := range map[string]int64{atMax: 1, wideAtMax: 1, over: 0, wideOver: 0, analytics.AllLinks: 2} {
				got, err := rd.Total(t.Context(), k)
				if err != nil {
					t.Fatal(err)
				}
				if got.Human != want {
					t.Errorf("visits to a key of %d bytes = %d, want %d", len(k), got.Human, want)
				}
			}
			if got := testkit.Metric(t, reg, "linkgate_analytics_keys_too_long_total"); got != 3 {
				t.Errorf("keys_too_long = %v, want 3", got)
			}
		})
	}
}

// TestMaxBufferBytes: the links tracked between two flushes take at most
// max_buffer_bytes (key + 128 bytes each); visits to further links count in
// the all-links total and the overflow metric; a flush frees the room.
func TestMaxBufferBytes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := analytics.NewMetrics(reg)
	rec := analytics.NewRecorder(1000, m)
	const keyLen, fit = 256, 10
	rec.SetMaxBytes(fit * (keyLen + 128))
	key := func(i int) string { return fmt.Sprintf("%0*d", keyLen, i) }
	for i := range 2 * fit {
		rec.Record(key(i), monday, false)
		rec.Record(key(i), monday, false) // a tracked link costs nothing more
	}
	// A link recorded on two cores has an entry on each (often so under
	// -race, which moves goroutines between cores): up to fit links.
	if rec.Keys() > fit || rec.Bytes() > fit*(keyLen+128) || rec.Bytes() <= (fit-1)*(keyLen+128) {
		t.Errorf("%d links in %d bytes tracked, want the cap of %d bytes filled with at most %d", rec.Keys(), rec.Bytes(), fit*(keyLen+128), fit)
	}
	st := newMemStore()
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{}, m, nil)
	rd := f.Reader(st)
	var perLink int64
	for i := range 2 * fit {
		v, err := rd.Total(t.Context(), key(i))
		if err != nil {
			t.Fatal(err)
		}
		perLink += v.Human
	}
	overflow := testkit.Metric(t, reg, "linkgate_analytics_overflow_total")
	if perLink+int64(overflow) != 4*fit || overflow < 2*fit {
		t.Errorf("%d visits counted per link and %v overflowed, want %d in all, at least %d overflowed", perLink, overflow, 4*fit, 2*fit)
	}
	all, err := rd.Total(t.Context(), analytics.AllLinks)
	if err != nil || all.Human != 4*fit {
		t.Errorf("all links = %+v (%v), want %d visits: overflow still counts there", all, err, 4*fit)
	}
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if rec.Bytes() != 0 || rec.Keys() != 0 {
		t.Errorf("after a flush %d links in %d bytes, want none", rec.Keys(), rec.Bytes())
	}
	rec.Record(key(3*fit), monday, false)
	if rec.Keys() != 1 {
		t.Error("after a flush a new link is not tracked")
	}
}

// TestMaxBufferBytesConcurrent: recorders on every core share one cap.
func TestMaxBufferBytesConcurrent(t *testing.T) {
	rec := analytics.NewRecorder(1_000_000, nil)
	const capBytes = 64 << 10
	rec.SetMaxBytes(capBytes)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				rec.Record(fmt.Sprintf("g%d-%d", g, i%500), monday, false)
			}
		})
	}
	wg.Wait()
	if b := rec.Bytes(); b > capBytes || b < capBytes-200 {
		t.Errorf("%d bytes tracked, want the cap (%d) filled and not passed", b, capBytes)
	}
}

// TestBufferBytesBoundMemory: the bytes the recorder counts bound the heap
// it takes, for keys at max_key_bytes: a cap of 8 MiB keeps the recorder
// near 8 MiB however many distinct keys are visited.
func TestBufferBytesBoundMemory(t *testing.T) {
	const keyLen, n, capBytes = analytics.DefaultMaxKeyBytes, 60_000, 8 << 20
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%0*d", keyLen, i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rec := analytics.NewRecorder(n, nil)
	rec.SetMaxBytes(capBytes)
	rec.SetLiveLinks(0) // the live view has a cap of its own (TestLiveMemory)
	for _, k := range keys {
		rec.Record(k, monday, false)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d distinct keys of %d bytes: %d tracked, %d bytes counted, heap grew %d bytes (%.0f per link)",
		n, keyLen, rec.Keys(), rec.Bytes(), heap, float64(heap)/float64(rec.Keys()))
	if rec.Bytes() > capBytes || rec.Keys() >= n {
		t.Fatalf("%d links, %d bytes: the cap did not hold", rec.Keys(), rec.Bytes())
	}
	if heap > capBytes*5/4 {
		t.Errorf("heap grew %d bytes under a cap of %d: the per-link cost is underestimated", heap, capBytes)
	}
	runtime.KeepAlive(rec)
	runtime.KeepAlive(keys)
}
