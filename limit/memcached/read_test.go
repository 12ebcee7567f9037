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
// while a read of it is on its way, nothing of the counter sent or
// written since that read was sent, take its answer: 21 checks cost one
// get command, each check gets the counts, and a check of another
// counter is not held back by them.
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
	release := p.HoldGetAnswers()
	defer release()
	var cs checks
	cs.Go(s, c, bs, 3, 3)
	waitUntil(t, "the first read's answer to be on its way", func() bool { return p.Held() == 1 })
	for range 20 {
		cs.Go(s, c, bs, 3, 3)
	}
	waitUntil(t, "20 checks to join the read on its way", func() bool { return s.Joined() == 20 })
	// Another counter's check is on its own: it goes at once (its answer
	// held like every get's, but sent).
	cs.Go(s, limit.Counter{Rule: "visit_ip", Value: "198.51.100.8"}, bs, 0, 0)
	waitUntil(t, "the other counter's read to be sent", func() bool { return p.Count("get", "gets") == 2 })
	release()
	cs.Wait(t)
	if gets := p.Count("get", "gets"); gets != 2 {
		t.Errorf("22 checks of two counters sent %d get commands (%v), want 2: one for the 21 of the first counter, one for the other", gets, p)
	}
	if keys := p.getKeys.Load(); keys != 2*int64(len(bs)) {
		t.Errorf("the gets named %d keys, want %d", keys, 2*len(bs))
	}
}

// checks are Loads run at once, each checking its counts (checkCounts).
type checks struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs []error
}

// Go starts a Load of c's buckets bs on s that wants a count within
// [lo, hi] at 59 and 143, 0 at 0.
func (cs *checks) Go(s *memcached.Store, c limit.Counter, bs []limit.Bucket, lo, hi int64) {
	cs.wg.Go(func() {
		if err := checkCounts(s, c, bs, lo, hi); err != nil {
			cs.mu.Lock()
			cs.errs = append(cs.errs, err)
			cs.mu.Unlock()
		}
	})
}

// Wait waits for the Loads and reports what they found wrong.
func (cs *checks) Wait(t *testing.T) {
	t.Helper()
	testkit.Await(t, cs.wg.Wait, 5*time.Minute, "the checks returning")
	for _, err := range cs.errs {
		t.Error(err)
	}
}

// checkCounts loads c's buckets bs and wants a count within [lo, hi] at
// 59 and 143, 0 at 0.
func checkCounts(s *memcached.Store, c limit.Counter, bs []limit.Bucket, lo, hi int64) error {
	counts := make([]int64, len(bs))
	if err := s.Load(context.Background(), c, bs, counts); err != nil {
		return err
	}
	for _, i := range []int{59, 143} {
		if counts[i] < lo || counts[i] > hi {
			return fmt.Errorf("%v: count at %d = %d, want %d to %d", c, i, counts[i], lo, hi)
		}
	}
	if counts[0] != 0 {
		return fmt.Errorf("%v: count at 0 = %d, want 0", c, counts[0])
	}
	return nil
}

// TestChecksAfterAWriteGatherForTheNextRead: a check that arrives after
// a send of its counter's increments or an AddNow through this Store
// ended, while a read sent before it is on its way, does not take that
// read's answer, which may lack the write: the checks gather for the
// next read, sent when that one returns, and each counts the write. (A
// check that took the answer would count 3 instead of 5.)
func TestChecksAfterAWriteGatherForTheNextRead(t *testing.T) {
	p := startProxy(t, testkit.StartMemcached(t).Addr)
	s := newStore(t, nil, p.Addr)
	ctx := context.Background()
	bs := dayPlan(time.Now())
	hit := []limit.Bucket{bs[59], bs[143]}
	for i, write := range []struct {
		name string
		do   func(c limit.Counter) error
	}{
		{"a flush", func(c limit.Counter) error {
			if err := s.Add(ctx, c, hit, 2); err != nil {
				return err
			}
			s.FlushNow() // the flusher's, or this one: the checks wait for it
			return nil
		}},
		{"an AddNow", func(c limit.Counter) error { return s.AddNow(ctx, c, hit, 2) }},
	} {
		t.Run(write.name, func(t *testing.T) {
			c := limit.Counter{Rule: "visit_ip", Value: fmt.Sprintf("198.51.100.%d", 10+i)}
			if err := s.AddNow(ctx, c, hit, 3); err != nil {
				t.Fatal(err)
			}
			release := p.HoldGetAnswers()
			defer release()
			var cs checks
			// The first check began before the write: it may count it or not.
			cs.Go(s, c, bs, 3, 5)
			waitUntil(t, "the first read's answer to be on its way", func() bool { return p.Held() == 1 })
			if err := write.do(c); err != nil {
				t.Fatal(err)
			}
			for range 20 {
				cs.Go(s, c, bs, 5, 5)
			}
			waitUntil(t, "20 checks to wait for a read", func() bool { return s.Gathered()+s.Joined() == 20 })
			if n := s.Joined(); n != 0 {
				t.Errorf("%d checks joined the read sent before %s, want all 20 to gather for the next", n, write.name)
			}
			release()
			cs.Wait(t)
		})
	}
}

// TestSharedReadTimeout: a check waiting behind a read that does not
// come back gives up at the configured timeout, as its own read would.
func TestSharedReadTimeout(t *testing.T) {
	p := startProxy(t, testkit.StartMemcached(t).Addr)
	const timeout = 200 * time.Millisecond
	ctx := context.Background()
	bs := dayPlan(time.Now())
	c := limit.Counter{Rule: "visit_ip", Value: "198.51.100.9"}
	release := p.HoldGets()
	defer release()
	var wg sync.WaitGroup
	// A check that joins the read on its way, and one that gathers for
	// the next read (an AddNow ended since the first was sent). A Store
	// each: the failed reads of one would open its breaker.
	for _, write := range []bool{false, true} {
		s := memcached.New(limit.Memcached{Servers: []string{p.Addr}, Timeout: timeout}, nil, nil)
		defer s.Close()
		p.Reset()
		wg.Go(func() { s.Load(ctx, c, bs, make([]int64, len(bs))) })
		waitUntil(t, "a read to be on its way", func() bool { return p.Count("get", "gets") >= 1 })
		if write {
			if err := s.AddNow(ctx, c, bs[143:], 1); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		err := s.Load(ctx, c, bs, make([]int64, len(bs)))
		took := time.Since(start)
		if err == nil {
			t.Fatalf("a check behind a read that never returned succeeded (after a write: %v)", write)
		}
		if took > 5*timeout {
			t.Errorf("after a write %v: it gave up after %v, want about the timeout %v", write, took, timeout)
		}
		t.Logf("after a write %v: gave up after %v: %v", write, took, err)
	}
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
