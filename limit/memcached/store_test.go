package memcached_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/limit/limittest"
	"github.com/linkgate/linkgate/limit/memcached"
)

func newStore(t testing.TB, m *memcached.Metrics, servers ...string) *memcached.Store {
	t.Helper()
	// A generous timeout, stretched by the machine's pace: the tests run
	// with -race on busy machines, and none of them waits for a timeout
	// except TestTimeoutOpensBreaker.
	s := memcached.New(limit.Memcached{Servers: servers, Timeout: testkit.Slack(time.Second)}, m, nil)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	mc := testkit.StartMemcached(t)
	limittest.Run(t, func(t *testing.T) limittest.Harness {
		return limittest.Harness{Store: newStore(t, nil, mc.Addr), Peer: newStore(t, nil, mc.Addr)}
	})
}

func TestConformanceTwoServers(t *testing.T) {
	t.Parallel()
	a, b := testkit.StartMemcached(t), testkit.StartMemcached(t)
	limittest.Run(t, func(t *testing.T) limittest.Harness {
		return limittest.Harness{Store: newStore(t, memcached.NewMetrics(prometheus.NewRegistry()), a.Addr, b.Addr), Peer: newStore(t, nil, b.Addr, a.Addr)}
	})
}

// minute returns the minute bucket holding now.
func minute(now time.Time) limit.Bucket {
	return limit.Bucket{Level: limit.Minute, Start: now.Unix() / 60 * 60, TTL: 2 * time.Minute}
}

func loadOne(t *testing.T, s *memcached.Store, c limit.Counter, b limit.Bucket) int64 {
	t.Helper()
	counts := make([]int64, 1)
	if err := s.Load(context.Background(), c, []limit.Bucket{b}, counts); err != nil {
		t.Fatalf("Load: %v", err)
	}
	return counts[0]
}

// Two gateways sharing one memcached see each other's hits once flushed.
func TestTwoStoresShare(t *testing.T) {
	mc := testkit.StartMemcached(t)
	g1, g2 := newStore(t, nil, mc.Addr), newStore(t, nil, mc.Addr)
	ctx := context.Background()
	c := limit.Counter{Rule: "share", Value: "203.0.113.1"}
	b := minute(time.Now())
	for range 3 {
		if err := g1.Add(ctx, c, []limit.Bucket{b}, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := g2.Add(ctx, c, []limit.Bucket{b}, 2); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 2*time.Second, "both gateways see 5 hits", func() bool {
		return loadOne(t, g1, c, b) == 5 && loadOne(t, g2, c, b) == 5
	})
}

// dayPlan is the 144 buckets a check of 2/s, 5/m, 10/h, 100/d reads.
func dayPlan(now time.Time) []limit.Bucket {
	var bs []limit.Bucket
	for _, lv := range []struct {
		l limit.Level
		n int64
	}{{limit.Second, 60}, {limit.Minute, 60}, {limit.Hour, 24}} {
		size := int64(lv.l.Size() / time.Second)
		for i := lv.n - 1; i >= 0; i-- {
			bs = append(bs, limit.Bucket{Level: lv.l, Start: (now.Unix()/size - i) * size, TTL: 25 * time.Hour})
		}
	}
	return bs
}

// With two servers, a Load of 144 buckets is one get command in total.
func TestLoadIsOneRoundTrip(t *testing.T) {
	p1, p2 := startProxy(t, testkit.StartMemcached(t).Addr), startProxy(t, testkit.StartMemcached(t).Addr)
	s := newStore(t, nil, p1.Addr, p2.Addr)
	ctx := context.Background()
	bs := dayPlan(time.Now())
	counts := make([]int64, len(bs))
	used := map[string]int{}
	for i := range 20 {
		c := limit.Counter{Rule: "login_ip", Value: fmt.Sprintf("198.51.100.%d", i)}
		used[s.Server(c)]++
		if err := s.AddNow(ctx, c, []limit.Bucket{bs[59], bs[119], bs[143]}, int64(i+1)); err != nil {
			t.Fatal(err)
		}
		p1.Reset()
		p2.Reset()
		if err := s.Load(ctx, c, bs, counts); err != nil {
			t.Fatal(err)
		}
		if gets := p1.Count("get", "gets") + p2.Count("get", "gets"); gets != 1 {
			t.Fatalf("Load of %d buckets sent %d get commands (%v, %v), want 1", len(bs), gets, p1, p2)
		}
		if others := p1.Count("incr", "add", "set", "delete") + p2.Count("incr", "add", "set", "delete"); others != 0 {
			t.Errorf("Load sent %d other commands", others)
		}
		if keys := p1.getKeys.Load() + p2.getKeys.Load(); keys != int64(len(bs)) {
			t.Errorf("the get command named %d keys, want %d", keys, len(bs))
		}
		if counts[59] != int64(i+1) || counts[119] != int64(i+1) || counts[143] != int64(i+1) || counts[0] != 0 {
			t.Errorf("Load = %v, want %d at 59, 119 and 143", counts, i+1)
		}
	}
	if len(used) != 2 {
		t.Errorf("20 counters all placed on one server: %v", used)
	}
}

// TestFlushPipelined: a flush of a counter's increments in four buckets
// sends the four incr commands in one write; the adds of the missing
// keys in one more; a flush of buckets memcached has, one write of incr
// commands and no add. Each bucket counts its increments.
func TestFlushPipelined(t *testing.T) {
	p := startProxy(t, testkit.StartMemcached(t).Addr)
	s := newStore(t, nil, p.Addr)
	ctx := context.Background()
	plan := dayPlan(time.Now())
	bs := []limit.Bucket{plan[0], plan[59], plan[119], plan[143]}
	c := limit.Counter{Rule: "visit_ip", Value: "198.51.100.40"}
	for round, want := range []struct{ incrs, adds int }{{4, 4}, {4, 0}} {
		p.Reset()
		if err := s.Add(ctx, c, bs, 2); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the flush", func() bool {
			s.FlushNow()
			return p.Count("incr") >= want.incrs && p.Count("add") >= want.adds
		})
		if got := []int{p.Count("incr"), p.Count("add"), p.Writes("incr"), p.Writes("add")}; !slices.Equal(got, []int{want.incrs, want.adds, 1, min(want.adds, 1)}) {
			t.Errorf("flush %d: %d incr and %d add commands in %d and %d writes, want %d and %d in 1 and %d", round+1,
				got[0], got[1], got[2], got[3], want.incrs, want.adds, min(want.adds, 1))
		}
		s2 := newStore(t, nil, p.Addr) // a reader without this Store's pending increments
		counts := make([]int64, len(plan))
		if err := s2.Load(ctx, c, plan, counts); err != nil {
			t.Fatal(err)
		}
		for _, i := range []int{0, 59, 119, 143} {
			if counts[i] != int64(2*(round+1)) {
				t.Errorf("flush %d: bucket %d counts %d, want %d", round+1, i, counts[i], 2*(round+1))
			}
		}
	}
}

// TestFlushLosesTheAddRace: when another gateway adds a key between a
// flush's incr (the key missing) and its add, the add is refused and the
// flush increments the key again: both gateways' counts are kept.
func TestFlushLosesTheAddRace(t *testing.T) {
	mc := testkit.StartMemcached(t)
	p := startProxy(t, mc.Addr)
	s := newStore(t, nil, p.Addr)
	other := memcache.New(mc.Addr)
	ctx := context.Background()
	plan := dayPlan(time.Now())
	bs := []limit.Bucket{plan[59], plan[143]}
	c := limit.Counter{Rule: "visit_ip", Value: "198.51.100.41"}
	raced := memcached.Key(c, bs[1])
	var once sync.Once
	before := func(key string) {
		if key == raced {
			once.Do(func() {
				if err := other.Add(&memcache.Item{Key: key, Value: []byte("10"), Expiration: 60}); err != nil {
					t.Errorf("the other gateway's add: %v", err)
				}
			})
		}
	}
	p.beforeAdd.Store(&before)
	if err := s.Add(ctx, c, bs, 2); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the flush", func() bool { s.FlushNow(); return p.Count("incr") >= 3 })
	if got := []int{p.Count("incr"), p.Count("add"), p.Writes("incr"), p.Writes("add")}; !slices.Equal(got, []int{3, 2, 2, 1}) {
		t.Errorf("incr, add commands, incr, add writes: %v, want [3 2 2 1]", got)
	}
	wantValues(t, other, map[string]string{memcached.Key(c, bs[0]): "2", raced: "12"})
}

// wantValues checks what memcached (through client) holds at each key.
func wantValues(t *testing.T, client *memcache.Client, want map[string]string) {
	t.Helper()
	for key, w := range want {
		it, err := client.Get(key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if v := strings.TrimSpace(string(it.Value)); v != w {
			t.Errorf("%s holds %q, want %q", key, v, w)
		}
	}
}

// TestFlushOfANonCount: a bucket whose key holds something other than a
// count drops its increment (memcached refuses it for good: not retried,
// not a failure of the server), and the counter's other buckets count
// theirs.
func TestFlushOfANonCount(t *testing.T) {
	mc := testkit.StartMemcached(t)
	p := startProxy(t, mc.Addr)
	reg := prometheus.NewRegistry()
	s := newStore(t, memcached.NewMetrics(reg), p.Addr)
	other := memcache.New(mc.Addr)
	ctx := context.Background()
	plan := dayPlan(time.Now())
	bs := []limit.Bucket{plan[59], plan[143]}
	c := limit.Counter{Rule: "visit_ip", Value: "198.51.100.42"}
	if err := other.Set(&memcache.Item{Key: memcached.Key(c, bs[0]), Value: []byte("abc")}); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, c, bs, 2); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the flush", func() bool { s.FlushNow(); return p.Count("add") >= 1 })
	s.FlushNow() // nothing left to send
	if got := []int{p.Count("incr"), p.Count("add")}; !slices.Equal(got, []int{2, 1}) {
		t.Errorf("incr, add commands: %v, want [2 1]: the refused increment is not sent again", got)
	}
	wantValues(t, other, map[string]string{memcached.Key(c, bs[0]): "abc", memcached.Key(c, bs[1]): "2"})
	if n := testkit.Metric(t, reg, "linkgate_memcached_errors_total", "server", p.Addr, "op", "incr"); n != 0 {
		t.Errorf("%v incr errors counted, want 0", n)
	}
	if n := testkit.Metric(t, reg, "linkgate_memcached_pending_deltas"); n != 0 {
		t.Errorf("%v increments pending, want 0", n)
	}
}

// Many Adds to one bucket between flushes become a few memcached operations.
func TestAddsCoalesce(t *testing.T) {
	p := startProxy(t, testkit.StartMemcached(t).Addr)
	s := newStore(t, nil, p.Addr)
	ctx := context.Background()
	c := limit.Counter{Rule: "coalesce", Value: "u1"}
	bs := []limit.Bucket{{Level: limit.Second, Start: time.Now().Unix(), TTL: time.Minute}, minute(time.Now())}
	start := time.Now()
	for range 1000 {
		if err := s.Add(ctx, c, bs, 1); err != nil {
			t.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	reader := newStore(t, nil, p.Addr) // has nothing pending: reads what memcached holds
	testkit.Eventually(t, 2*time.Second, "1000 adds flushed", func() bool { return loadOne(t, reader, c, bs[1]) == 1000 })
	writes := p.Count("incr", "add", "set")
	// Per key and flush: incr (miss), add; a flush that lands after the
	// first adds one incr. 1000 Adds take well under a few flush intervals.
	t.Logf("1000 Adds of 2 buckets in %v became %d memcached writes (%v)", elapsed, writes, p)
	if maxWrites := 2 * (2 + int(elapsed/(5*time.Millisecond)) + 1); writes > maxWrites {
		t.Errorf("1000 Adds became %d writes, want at most %d", writes, maxWrites)
	}
	if got := loadOne(t, reader, c, bs[0]); got != 1000 {
		t.Errorf("second bucket = %d, want 1000", got)
	}
}

// When memcached dies the breaker opens and calls fail at once; when it
// comes back the breaker closes within a second and the pending hits arrive.
func TestBreaker(t *testing.T) {
	mc := testkit.StartMemcached(t)
	reg := prometheus.NewRegistry()
	s := newStore(t, memcached.NewMetrics(reg), mc.Addr)
	ctx := context.Background()
	c := limit.Counter{Rule: "breaker", Value: "203.0.113.9"}
	b := minute(time.Now())
	if err := s.AddNow(ctx, c, []limit.Bucket{b}, 1); err != nil {
		t.Fatal(err)
	}
	if got := testkit.Metric(t, reg, "linkgate_memcached_breaker_open", "server", mc.Addr); got != 0 {
		t.Fatalf("breaker gauge = %v before the outage, want 0", got)
	}

	// Fill the connection pool, so that stale connections would be reused
	// after the restart if the breaker did not drop them.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				if err := s.Load(ctx, c, []limit.Bucket{b}, make([]int64, 1)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	testkit.Await(t, wg.Wait, 5*time.Minute, "the concurrent adds")

	mc.Kill()
	counts := make([]int64, 1)
	testkit.Eventually(t, 2*time.Second, "the breaker open", func() bool {
		s.Load(ctx, c, []limit.Bucket{b}, counts)
		return s.BreakerOpen(mc.Addr)
	})
	if got := testkit.Metric(t, reg, "linkgate_memcached_breaker_open", "server", mc.Addr); got != 1 {
		t.Errorf("breaker gauge = %v while open, want 1", got)
	}
	if got := testkit.Metric(t, reg, "linkgate_memcached_errors_total", "server", mc.Addr); got < 3 {
		t.Errorf("errors counted = %v, want at least 3", got)
	}
	for _, call := range []struct {
		name string
		fn   func() error
	}{
		{"Load", func() error { return s.Load(ctx, c, []limit.Bucket{b}, counts) }},
		{"Add", func() error { return s.Add(ctx, c, []limit.Bucket{b}, 1) }},
		{"AddNow", func() error { return s.AddNow(ctx, c, []limit.Bucket{b}, 1) }},
	} {
		start := time.Now()
		err := call.fn()
		if d := time.Since(start); d > 50*time.Millisecond {
			t.Errorf("%s took %v with the breaker open, want at once", call.name, d)
		}
		if !errors.Is(err, memcached.ErrUnavailable) {
			t.Errorf("%s with the breaker open: %v, want ErrUnavailable", call.name, err)
		}
	}

	mc.Start() // empty: the hit added before the outage is gone
	restarted := time.Now()
	testkit.Eventually(t, 2*time.Second, "the breaker closed after memcached came back", func() bool { return !s.BreakerOpen(mc.Addr) })
	if d := time.Since(restarted); d > time.Second {
		t.Errorf("breaker closed %v after memcached returned, want within 1s", d)
	}
	if got := testkit.Metric(t, reg, "linkgate_memcached_breaker_open", "server", mc.Addr); got != 0 {
		t.Errorf("breaker gauge = %v after recovery, want 0", got)
	}
	for i := range 50 {
		if err := s.Load(ctx, c, []limit.Bucket{b}, counts); err != nil {
			t.Fatalf("Load %d after recovery: %v", i, err)
		}
	}
	if err := s.Add(ctx, c, []limit.Bucket{b}, 2); err != nil {
		t.Fatalf("Add after recovery: %v", err)
	}
	reader := newStore(t, nil, mc.Addr)
	testkit.Eventually(t, 2*time.Second, "hits after recovery reach memcached", func() bool { return loadOne(t, reader, c, b) == 2 })
}

// Increments pending when the breaker opens are kept and sent after recovery.
func TestPendingSurviveOutage(t *testing.T) {
	mc := testkit.StartMemcached(t)
	reg := prometheus.NewRegistry()
	s := newStore(t, memcached.NewMetrics(reg), mc.Addr)
	ctx := context.Background()
	c := limit.Counter{Rule: "outage", Value: "u7"}
	b := minute(time.Now())
	if err := s.Load(ctx, c, []limit.Bucket{b}, make([]int64, 1)); err != nil { // warm the connection
		t.Fatal(err)
	}
	mc.Kill()
	// Adds accepted before the flusher notices the outage stay pending.
	added := 0
	for !s.BreakerOpen(mc.Addr) {
		if s.Add(ctx, c, []limit.Bucket{b}, 1) == nil {
			added++
		}
		time.Sleep(time.Millisecond)
	}
	if added == 0 {
		t.Fatal("no Add accepted before the breaker opened")
	}
	if got := testkit.Metric(t, reg, "linkgate_memcached_pending_deltas"); got != 1 {
		t.Errorf("pending gauge = %v while down, want 1 (one bucket)", got)
	}
	mc.Start()
	reader := newStore(t, nil, mc.Addr)
	testkit.Eventually(t, 3*time.Second, fmt.Sprintf("the %d hits pending during the outage arrived", added), func() bool {
		return !s.BreakerOpen(mc.Addr) && loadOne(t, reader, c, b) == int64(added)
	})
	testkit.Eventually(t, time.Second, "pending gauge back to 0", func() bool {
		return testkit.Metric(t, reg, "linkgate_memcached_pending_deltas") == 0
	})
}

// TestOvershoot measures how far two gateways checking then counting
// asynchronously overshoot a limit of 100, at full speed (each checks
// again as soon as its last check answered: the worst case, a burst faster
// than the 5 ms flushes) and at 500 checks a second each, and checks that
// strict counting (count first, then check) never does.
func TestOvershoot(t *testing.T) {
	mc := testkit.StartMemcached(t)
	gws := []*memcached.Store{newStore(t, nil, mc.Addr), newStore(t, nil, mc.Addr)}
	ctx := context.Background()
	const limitN = 100
	b := minute(time.Now())
	for _, tt := range []struct {
		name   string
		strict bool
		every  time.Duration // between two checks of one gateway; 0: at once
	}{
		{"async at full speed", false, 0},
		{"async at 500/s per gateway", false, 2 * time.Millisecond},
		{"strict at full speed", true, 0},
	} {
		c := limit.Counter{Rule: "overshoot", Value: tt.name}
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for _, g := range gws {
			wg.Go(func() {
				bs := []limit.Bucket{b}
				counts := make([]int64, 1)
				var tick <-chan time.Time
				if tt.every > 0 {
					tk := time.NewTicker(tt.every)
					defer tk.Stop()
					tick = tk.C
				}
				for range 4 * limitN {
					if tick != nil {
						<-tick
					}
					if tt.strict {
						if err := g.AddNow(ctx, c, bs, 1); err != nil {
							t.Error(err)
							return
						}
						if err := g.Load(ctx, c, bs, counts); err != nil {
							t.Error(err)
							return
						}
						if counts[0] <= limitN {
							admitted.Add(1)
						}
						continue
					}
					if err := g.Load(ctx, c, bs, counts); err != nil {
						t.Error(err)
						return
					}
					if counts[0] < limitN {
						admitted.Add(1)
						if err := g.Add(ctx, c, bs, 1); err != nil {
							t.Error(err)
							return
						}
					}
				}
			})
		}
		testkit.Await(t, wg.Wait, 5*time.Minute, "the concurrent checks")
		got := admitted.Load()
		t.Logf("%s: 2 gateways admitted %d of limit %d: overshoot %d", tt.name, got, limitN, got-limitN)
		// Checking first never admits fewer than the limit. Counting first
		// never admits more, and may admit fewer by one per other gateway:
		// two hits at the limit both count before either checks.
		switch {
		case tt.strict && (got > limitN || got < limitN-int64(len(gws)-1)):
			t.Errorf("strict admitted %d, want %d to %d", got, limitN-len(gws)+1, limitN)
		case !tt.strict && got < limitN:
			t.Errorf("%s admitted %d, fewer than the limit %d", tt.name, got, limitN)
		}
	}
}

// BenchmarkDecision is a check of a 2/s, 5/m, 10/h, 100/d rule (Load of 144
// buckets) and a count (Add of 3) against a real local memcached. Besides
// ns/op (wall time: one round trip, so mostly loopback latency and the
// machine's load) it reports the CPU a decision costs this process
// (gw-cpu-µs, flusher and GC included) and memcached (mc-cpu-µs): 1e6 /
// gw-cpu-µs is the decisions per second one core of a gateway can make.
func BenchmarkDecision(b *testing.B) {
	mc := testkit.StartMemcached(b)
	s := newStore(b, nil, mc.Addr)
	// serial and parallel measure a decision that reads: a client checks
	// far less often than once a millisecond, so its read answers none of
	// its later checks (read.go); oneclient keeps the window.
	reads := newStore(b, nil, mc.Addr)
	reads.SetReuseWindow(0)
	ctx := context.Background()
	plan := dayPlan(time.Now())
	hit := []limit.Bucket{plan[59], plan[119], plan[143]}
	// start returns the function that reports, at the end of b, the CPU
	// since and the get commands memcached had since (its cmd_get counts
	// keys: a decision's get names len(plan)).
	start := func(b *testing.B) (report func()) {
		gw0, mc0, gets0 := processCPU(b, os.Getpid()), processCPU(b, mc.Pid()), mcStat(b, mc.Addr, "cmd_get")
		return func() {
			gw1, mc1, gets1 := processCPU(b, os.Getpid()), processCPU(b, mc.Pid()), mcStat(b, mc.Addr, "cmd_get")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			b.ReportMetric(float64((gw1-gw0).Microseconds())/float64(b.N), "gw-cpu-µs/op")
			b.ReportMetric(float64((mc1-mc0).Microseconds())/float64(b.N), "mc-cpu-µs/op")
			b.ReportMetric(float64(gets1-gets0)/float64(len(plan))/float64(b.N), "gets/op")
		}
	}
	// decide is a check of c's plan and its count in three buckets.
	decide := func(b *testing.B, s *memcached.Store, c limit.Counter, counts []int64) {
		if err := s.Load(ctx, c, plan, counts); err != nil {
			b.Fatal(err)
		}
		if err := s.Add(ctx, c, hit, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("serial", func(b *testing.B) {
		counts := make([]int64, len(plan))
		c := limit.Counter{Rule: "login_ip", Value: "198.51.100.1"}
		b.ReportAllocs()
		report := start(b)
		for b.Loop() {
			decide(b, reads, c, counts)
		}
		report()
	})
	// 64 checks at once, as behind 64 client connections: each of its
	// own client (parallel), or all of one (oneclient, what a load test
	// from one address makes).
	b.Run("parallel", func(b *testing.B) {
		var id atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(32)
		report := start(b)
		b.RunParallel(func(pb *testing.PB) {
			counts := make([]int64, len(plan))
			c := limit.Counter{Rule: "login_ip", Value: fmt.Sprintf("198.51.100.%d", id.Add(1))}
			for pb.Next() {
				decide(b, reads, c, counts)
			}
		})
		report()
	})
	oneClient := func(s *memcached.Store, value string) func(*testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(32)
			report := start(b)
			b.RunParallel(func(pb *testing.PB) {
				counts := make([]int64, len(plan))
				c := limit.Counter{Rule: "login_ip", Value: value}
				for pb.Next() {
					decide(b, s, c, counts)
				}
			})
			report()
		}
	}
	b.Run("oneclient", oneClient(s, "198.51.100.200"))
	// The same without the reuse window: every check waits for a read,
	// shared with the checks of the client around it.
	b.Run("oneclient-reads", oneClient(reads, "198.51.100.201"))
}

// processCPU returns the user+system CPU time process pid has used, from
// /proc/<pid>/stat (in clock ticks of 10 ms).
func processCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Skipf("no /proc: %v", err)
	}
	// Fields after the command name (which may hold spaces) start at state.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// BenchmarkFloor is gomemcache alone on the same memcached: a get of one
// key and a GetMulti of the 144 keys of a check, to compare Decision with.
func BenchmarkFloor(b *testing.B) {
	mc := testkit.StartMemcached(b)
	c := memcache.New(mc.Addr)
	c.MaxIdleConns = 8
	plan := dayPlan(time.Now())
	keys := make([]string, len(plan))
	for i, bk := range plan {
		keys[i] = memcached.Key(limit.Counter{Rule: "login_ip", Value: "198.51.100.1"}, bk)
	}
	report := func(b *testing.B, gw0, mc0 time.Duration) {
		gw1, mc1 := processCPU(b, os.Getpid()), processCPU(b, mc.Pid())
		b.ReportMetric(float64((gw1-gw0).Microseconds())/float64(b.N), "gw-cpu-µs/op")
		b.ReportMetric(float64((mc1-mc0).Microseconds())/float64(b.N), "mc-cpu-µs/op")
	}
	b.Run("get1", func(b *testing.B) {
		b.ReportAllocs()
		gw0, mc0 := processCPU(b, os.Getpid()), processCPU(b, mc.Pid())
		for b.Loop() {
			if _, err := c.Get(keys[0]); err != nil && err != memcache.ErrCacheMiss {
				b.Fatal(err)
			}
		}
		report(b, gw0, mc0)
	})
	b.Run("getmulti144", func(b *testing.B) {
		b.ReportAllocs()
		gw0, mc0 := processCPU(b, os.Getpid()), processCPU(b, mc.Pid())
		for b.Loop() {
			if _, err := c.GetMulti(keys); err != nil {
				b.Fatal(err)
			}
		}
		report(b, gw0, mc0)
	})
}

// A server that accepts connections but never answers costs each call the
// configured timeout until the breaker opens; then calls fail at once.
func TestTimeoutOpensBreaker(t *testing.T) {
	addr := testkit.ServeTCP(t, func(_ int, c net.Conn) { io.Copy(io.Discard, c); c.Close() }) // read, never answer
	const timeout = 50 * time.Millisecond
	s := memcached.New(limit.Memcached{Servers: []string{addr}, Timeout: timeout}, nil, nil)
	defer s.Close()
	ctx := context.Background()
	c := limit.Counter{Rule: "hung", Value: "x"}
	bs := []limit.Bucket{minute(time.Now())}
	counts := make([]int64, 1)
	for i := 0; !s.BreakerOpen(addr); i++ {
		if i == 10 {
			t.Fatal("breaker still closed after 10 timed-out loads")
		}
		start := time.Now()
		err := s.Load(ctx, c, bs, counts)
		if d := time.Since(start); err == nil || d < timeout || d > 20*timeout {
			t.Fatalf("Load against a silent server: %v after %v, want an error after about %v", err, d, timeout)
		}
	}
	start := time.Now()
	err := s.Load(ctx, c, bs, counts)
	if d := time.Since(start); !errors.Is(err, memcached.ErrUnavailable) || d > 50*time.Millisecond {
		t.Errorf("Load with the breaker open: %v after %v, want ErrUnavailable at once", err, d)
	}
}

// A client's own hits never vanish or double while they are flushed: one
// writer adding and reading back across many flushes sees exactly its count.
func TestLoadExactAcrossFlushes(t *testing.T) {
	s := newStore(t, nil, testkit.StartMemcached(t).Addr)
	ctx := context.Background()
	c := limit.Counter{Rule: "exact", Value: "203.0.113.50"}
	now := time.Now()
	bs := []limit.Bucket{{Level: limit.Second, Start: now.Unix(), TTL: time.Minute}, minute(now), {Level: limit.Hour, Start: now.Unix() / 3600 * 3600, TTL: 2 * time.Hour}}
	counts := make([]int64, len(bs))
	deadline := time.Now().Add(500 * time.Millisecond) // about 100 flushes
	n := int64(0)
	for time.Now().Before(deadline) {
		if err := s.Add(ctx, c, bs, 1); err != nil {
			t.Fatal(err)
		}
		n++
		if err := s.Load(ctx, c, bs, counts); err != nil {
			t.Fatal(err)
		}
		if counts[0] != n || counts[1] != n || counts[2] != n {
			t.Fatalf("after %d adds Load = %v, want %d each", n, counts, n)
		}
	}
	t.Logf("%d add+load pairs read back exactly", n)
}

// Reset drops the increments still pending, so they never reach memcached.
func TestResetDropsPending(t *testing.T) {
	mc := testkit.StartMemcached(t)
	s, reader := newStore(t, nil, mc.Addr), newStore(t, nil, mc.Addr)
	ctx := context.Background()
	c := limit.Counter{Rule: "reset_pending", Value: "eve@example.com"}
	b := minute(time.Now())
	if err := s.AddNow(ctx, c, []limit.Bucket{b}, 5); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if err := s.Add(ctx, c, []limit.Bucket{b}, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Reset(ctx, c, []limit.Bucket{b}); err != nil {
		t.Fatal(err)
	}
	if got := loadOne(t, s, c, b); got != 0 {
		t.Errorf("Load right after Reset = %d, want 0", got)
	}
	// Give the flusher ten intervals to send what Reset should have dropped.
	for deadline := time.Now().Add(50 * time.Millisecond); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if got := loadOne(t, reader, c, b); got != 0 {
			t.Fatalf("memcached holds %d after Reset, want 0", got)
		}
	}
}

// compile compiles the limiter's sections, trusting no proxy.
func compile(t testing.TB, rules []limit.Rule, id limit.Identity, cfg limit.Config) *limit.Plan {
	t.Helper()
	p, err := limit.Compile(rules, id, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
