package memcached_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/limit/memcached"
)

// TestPenaltyCheckIsOneGet: with a penalty on the rule 2/s, 5/m, 10/h,
// 100/d, a check is still one get command, naming the 144 buckets and
// the box: the box costs a key, not a round trip. A trip adds one set
// (the box); the requests in the box then cost no command until the
// limiter reads the store again, a second later.
func TestPenaltyCheckIsOneGet(t *testing.T) {
	p := startProxy(t, testkit.StartMemcached(t).Addr)
	reg := prometheus.NewRegistry()
	s := newStore(t, memcached.NewMetrics(reg), p.Addr)
	s.SetReuseWindow(0) // every check reads: what one client's checks cost apart
	// settled waits until the counts a request added are acknowledged: a
	// flush of the counter overlapping a read makes the read wait and
	// read again (store.go), which is not what is counted here.
	settled := func() {
		waitUntil(t, "the increments acknowledged", func() bool {
			return testkit.Metric(t, reg, "linkgate_memcached_pending_deltas") == 0
		})
		p.Reset()
	}
	rule := limit.Rule{Name: "login_ip", Match: limit.Match{Path: "/{key}"}, Key: limit.IP,
		Limits:  []limit.Limit{{N: 2, Window: time.Second}, {N: 5, Window: time.Minute}, {N: 10, Window: time.Hour}, {N: 100, Window: 24 * time.Hour}},
		Penalty: limit.Penalty{Duration: time.Minute}}
	lim := limit.New(compile(t, []limit.Rule{rule}, limit.DefaultIdentity(), limit.DefaultConfig()), s, limit.NewMetrics(prometheus.NewRegistry()), nil)
	h := lim.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	now := time.Now().Truncate(time.Second)
	lim.WithClock(func() time.Time { return now })
	do := func(addr string) int {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/k", nil)
		r.RemoteAddr = addr + ":1234"
		h.ServeHTTP(w, r)
		return w.Code
	}
	for i, want := range []int{200, 200} {
		settled()
		if code := do("198.51.100.30"); code != want {
			t.Fatalf("request %d: %d, want %d", i+1, code, want)
		}
		if gets, keys, others := p.Count("get", "gets"), p.getKeys.Load(), p.Count("set", "delete"); gets != 1 || keys != 145 || others != 0 {
			t.Errorf("a check sent %d gets of %d keys and %d other commands, want one get of 145 keys (144 buckets and the box)", gets, keys, others)
		}
	}
	settled()
	if code := do("198.51.100.30"); code != 429 {
		t.Fatalf("the trip: %d, want 429", code)
	}
	if gets, sets := p.Count("get", "gets"), p.Count("set"); gets != 1 || sets != 1 {
		t.Errorf("the trip sent %d gets and %d sets, want one of each", gets, sets)
	}
	p.Reset()
	for range 20 {
		if code := do("198.51.100.30"); code != 429 {
			t.Fatalf("in the box: %d", code)
		}
	}
	if n := p.Count("get", "gets", "set", "incr", "add", "delete"); n != 0 {
		t.Errorf("20 requests in the box within its second sent %d commands, want 0", n)
	}
	now = now.Add(time.Second)
	p.Reset()
	if code := do("198.51.100.30"); code != 429 {
		t.Fatalf("in the box a second later: %d", code)
	}
	if gets := p.Count("get", "gets"); gets != 1 {
		t.Errorf("in the box a second later: %d gets, want 1 (the store read again)", gets)
	}
}

// TestBoxesListedPerGateway: a Store lists the boxes it put and those its
// reads met, as memcached has them when listed, and not a box put by
// another Store that it never read.
func TestBoxesListedPerGateway(t *testing.T) {
	mc := testkit.StartMemcached(t)
	a, b := newStore(t, nil, mc.Addr), newStore(t, nil, mc.Addr)
	ctx := t.Context()
	now := time.Now()
	box := limit.Box{Start: now.Unix(), Until: now.Unix() + 600, Trips: 1}
	met := limit.Counter{Rule: "r", Value: "met"}
	unseen := limit.Counter{Rule: "r", Value: "unseen"}
	for _, c := range []limit.Counter{met, unseen} {
		if err := a.PutBox(ctx, c, box, box.Until); err != nil {
			t.Fatal(err)
		}
	}
	counts := make([]int64, 1)
	if err := b.Load(ctx, met, []limit.Bucket{limit.BoxBucket}, counts); err != nil {
		t.Fatal(err)
	}
	list := func(s *memcached.Store) []string {
		var out []string
		if err := s.Boxes(ctx, now.Unix(), func(x limit.Boxed) bool { out = append(out, x.Value); return true }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := list(a); len(got) != 2 {
		t.Errorf("the Store that put both lists %v", got)
	}
	if got := list(b); len(got) != 1 || got[0] != "met" {
		t.Errorf("the Store that read one lists %v, want [met]", got)
	}
	if err := b.Reset(ctx, met, []limit.Bucket{limit.BoxBucket}); err != nil {
		t.Fatal(err)
	}
	if got := list(b); len(got) != 0 {
		t.Errorf("after its Reset, the Store lists %v", got)
	}
}

// BenchmarkDecisionPenalty is BenchmarkDecision/serial with and without
// a penalty on the rule: the check reads the box too, one more key in its
// get.
func BenchmarkDecisionPenalty(b *testing.B) {
	mc := testkit.StartMemcached(b)
	s := newStore(b, nil, mc.Addr)
	s.SetReuseWindow(0)
	ctx := b.Context()
	plan := dayPlan(time.Now())
	hit := []limit.Bucket{plan[59], plan[119], plan[143]}
	c := limit.Counter{Rule: "login_ip", Value: "198.51.100.1"}
	for _, pen := range []bool{false, true} {
		bs := plan
		if pen {
			bs = append(plan[:len(plan):len(plan)], limit.BoxBucket)
		}
		b.Run(fmt.Sprintf("penalty=%v", pen), func(b *testing.B) {
			counts := make([]int64, len(bs))
			b.ReportAllocs()
			gw0, mc0 := processCPU(b, os.Getpid()), processCPU(b, mc.Pid())
			for b.Loop() {
				if err := s.Load(ctx, c, bs, counts); err != nil {
					b.Fatal(err)
				}
				if err := s.Add(ctx, c, hit, 1); err != nil {
					b.Fatal(err)
				}
			}
			gw1, mc1 := processCPU(b, os.Getpid()), processCPU(b, mc.Pid())
			b.ReportMetric(float64((gw1-gw0).Microseconds())/float64(b.N), "gw-cpu-µs/op")
			b.ReportMetric(float64((mc1-mc0).Microseconds())/float64(b.N), "mc-cpu-µs/op")
		})
	}
}
