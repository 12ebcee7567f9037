package memcached_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/limit/memcached"
)

// TestConcurrentChecksShareReads: the checks of one counter that arrive
// while a read of it is on its way gather into one read, sent when that
// one returns: 21 checks cost two get commands, each check gets the
// counts, and a check of another counter is not held back by them.
func TestConcurrentChecksShareReads(t *testing.T) {
	p := startProxy(t, testkit.StartMemcached(t).Addr)
	s := newStore(t, nil, p.Addr)
	ctx := context.Background()
	bs := dayPlan(time.Now())
	c := limit.Counter{Rule: "visit_ip", Value: "198.51.100.7"}
	if err := s.AddNow(ctx, c, []limit.Bucket{bs[59], bs[143]}, 3); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	release := p.HoldGets()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	load := func(c limit.Counter, want int64) {
		counts := make([]int64, len(bs))
		if err := s.Load(ctx, c, bs, counts); err != nil {
			errs <- err
			return
		}
		if counts[59] != want || counts[143] != want || counts[0] != 0 {
			errs <- fmt.Errorf("%v: counts at 59, 143, 0 = %d %d %d, want %d %d 0", c, counts[59], counts[143], counts[0], want, want)
		}
	}
	wg.Go(func() { load(c, 3) })
	waitUntil(t, "the first read to be on its way", func() bool { return p.Count("get", "gets") == 1 })
	for range 20 {
		wg.Go(func() { load(c, 3) })
	}
	waitUntil(t, "20 checks to gather for the next read", func() bool { return s.Gathered() == 20 })
	// Another counter's check is on its own: it goes at once (held like
	// every get by the proxy, but sent).
	other := limit.Counter{Rule: "visit_ip", Value: "198.51.100.8"}
	wg.Go(func() { load(other, 0) })
	waitUntil(t, "the other counter's read to be sent", func() bool { return p.Count("get", "gets") == 2 })
	release()
	testkit.Await(t, wg.Wait, 5*time.Minute, "the held reads returning")
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if gets := p.Count("get", "gets"); gets != 3 {
		t.Errorf("22 checks of two counters sent %d get commands (%v), want 3: one, the 20 that waited for it together, the other counter", gets, p)
	}
	if keys := p.getKeys.Load(); keys != 3*int64(len(bs)) {
		t.Errorf("the gets named %d keys, want %d", keys, 3*len(bs))
	}
}

// TestSharedReadTimeout: a check waiting behind a read that does not
// come back gives up at the configured timeout, as its own read would.
func TestSharedReadTimeout(t *testing.T) {
	p := startProxy(t, testkit.StartMemcached(t).Addr)
	const timeout = 200 * time.Millisecond
	s := memcached.New(limit.Memcached{Servers: []string{p.Addr}, Timeout: timeout}, nil, nil)
	defer s.Close()
	ctx := context.Background()
	bs := dayPlan(time.Now())
	c := limit.Counter{Rule: "visit_ip", Value: "198.51.100.9"}
	release := p.HoldGets()
	defer release()
	var wg sync.WaitGroup
	wg.Go(func() { s.Load(ctx, c, bs, make([]int64, len(bs))) })
	waitUntil(t, "the first read to be on its way", func() bool { return p.Count("get", "gets") == 1 })
	start := time.Now()
	err := s.Load(ctx, c, bs, make([]int64, len(bs)))
	took := time.Since(start)
	if err == nil {
		t.Fatal("a check behind a read that never returned succeeded")
	}
	if took > 5*timeout {
		t.Errorf("it gave up after %v, want about the timeout %v", took, timeout)
	}
	t.Logf("gave up after %v: %v", took, err)
	release()
	testkit.Await(t, wg.Wait, 5*time.Minute, "the held reads returning")
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, what, cond)
}

// TestBlockedClientCostsNoRoundTrip: once a client is over its limit, its
// requests are answered 429 from the limiter's local cache until its
// bucket ends, without a command to memcached.
func TestBlockedClientCostsNoRoundTrip(t *testing.T) {
	p := startProxy(t, testkit.StartMemcached(t).Addr)
	s := newStore(t, nil, p.Addr)
	l, err := limit.ParseLimit("2/m")
	if err != nil {
		t.Fatal(err)
	}
	rule := limit.Rule{Name: "blocked_ip", Match: limit.Match{Path: "/{key}"}, Key: limit.IP, Limits: []limit.Limit{l}}
	lim := limit.New(compile(t, []limit.Rule{rule}, limit.DefaultIdentity(), limit.DefaultConfig()), s, limit.NewMetrics(prometheus.NewRegistry()), nil)
	h := lim.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	do := func() int {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/k", nil)
		r.RemoteAddr = "198.51.100.20:1234"
		h.ServeHTTP(w, r)
		return w.Code
	}
	var codes []int
	for range 3 {
		codes = append(codes, do())
	}
	if codes[0] != 200 || codes[1] != 200 || codes[2] != 429 {
		t.Fatalf("first three answers %v, want 200 200 429", codes)
	}
	p.Reset()
	for range 20 {
		if code := do(); code != 429 {
			t.Fatalf("a blocked client got %d", code)
		}
	}
	if gets := p.Count("get", "gets"); gets != 0 {
		t.Errorf("20 requests of a blocked client sent %d get commands, want 0", gets)
	}
}
