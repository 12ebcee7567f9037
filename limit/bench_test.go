package limit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// benchLimiter is a limiter of the rule 2/s, 5/m, 10/h, 100/d on the
// Memory store; raised, its limits are raised out of reach.
func benchLimiter(b *testing.B, raised bool) (*Limiter, *rule) {
	b.Helper()
	rules := []Rule{{Name: "login_ip", Match: Match{Methods: []string{"POST"}, Path: "/login"}, Key: IP, Limits: mustLimits(b, "2/s", "5/m", "10/h", "100/d")}}
	l := New(compileT(b, rules, DefaultConfig()), NewMemory(), NewMetrics(nil), nil)
	r := l.rules[0]
	if raised {
		for i := range r.plan.limits {
			r.plan.limits[i].N = 1 << 40
		}
	}
	return l, r
}

// benchOverLimit is benchLimiter's with the client 203.0.113.9 over its
// limit at now.
func benchOverLimit(b *testing.B) (l *Limiter, r *rule, ctx context.Context, now time.Time) {
	l, r = benchLimiter(b, false)
	ctx = context.Background()
	now = time.Now().Truncate(time.Second)
	for range 3 {
		l.check(ctx, &r.windows, "203.0.113.9", now, true)
	}
	return l, r, ctx, now
}

// BenchmarkCheckCount is a check and a count of a known client under the
// rule 2/s, 5/m, 10/h, 100/d on the Memory store. The limits are raised so
// that the client stays under them.
func BenchmarkCheckCount(b *testing.B) {
	l, r := benchLimiter(b, true)
	ctx := context.Background()
	now := time.Now()
	l.check(ctx, &r.windows, "203.0.113.7", now, true)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if v := l.check(ctx, &r.windows, "203.0.113.7", now.Add(time.Duration(i)*time.Millisecond), true); v.out != allowed {
			b.Fatal(v.out)
		}
	}
}

// BenchmarkCheckCountParallel is BenchmarkCheckCount from GOMAXPROCS
// goroutines, each its own client.
func BenchmarkCheckCountParallel(b *testing.B) {
	l, r := benchLimiter(b, true)
	ctx := context.Background()
	now := time.Now()
	var id atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		client := "198.51.100." + strconv.FormatInt(id.Add(1), 10)
		i := 0
		for pb.Next() {
			i++
			l.check(ctx, &r.windows, client, now.Add(time.Duration(i)*time.Millisecond), true)
		}
	})
}

// BenchmarkOverLimit is a client over its limit: answered from the blocked
// cache, no store operation.
func BenchmarkOverLimit(b *testing.B) {
	l, r, ctx, now := benchOverLimit(b)
	if v := l.check(ctx, &r.windows, "203.0.113.9", now, true); v.out != limited {
		b.Fatal("client not limited")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if v := l.check(ctx, &r.windows, "203.0.113.9", now, true); v.out != limited {
			b.Fatal(v.out)
		}
	}
}

func BenchmarkOverLimitParallel(b *testing.B) {
	l, r, ctx, now := benchOverLimit(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.check(ctx, &r.windows, "203.0.113.9", now, true)
		}
	})
}

// BenchmarkMiddleware is the whole middleware in front of an empty handler
// for a known client under the limits of 2/s, 5/m, 10/h, 100/d (raised),
// headers included: for comparison with the decision alone.
func BenchmarkMiddleware(b *testing.B) {
	l, _ := benchLimiter(b, true)
	h := l.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest("POST", "/login", nil)
	req.RemoteAddr = "203.0.113.7:5555"
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, req)
	}
}

// BenchmarkMiddlewareMiss is the middleware for a redirect that no rule
// matches (GET of a short key with upper-case letters) under three POST
// rules: what every visit to a link pays.
func BenchmarkMiddlewareMiss(b *testing.B) {
	var rules []Rule
	for _, p := range []string{"/login", "/api/login", "/shorten"} {
		rules = append(rules, Rule{Name: "r" + strconv.Itoa(len(rules)), Match: Match{Methods: []string{"POST"}, Path: p}, Key: IP, Limits: mustLimits(b, "5/m")})
	}
	l := New(compileT(b, rules, DefaultConfig()), NewMemory(), NewMetrics(nil), nil)
	h := l.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest("GET", "/aB3xY9", nil)
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(w, req)
	}
}

type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkCheckCountExact is BenchmarkCheckCount in precision exact, a new
// second on every check (no reuse of the read set): the general Load path
// with a day decomposed into seconds, minutes and hours.
func BenchmarkCheckCountExact(b *testing.B) {
	rules := []Rule{{Name: "login_ip", Match: Match{Path: "/login"}, Key: IP, Limits: mustLimits(b, "2/s", "5/m", "10/h", "100/d")}}
	cfg := DefaultConfig()
	cfg.Precision = "exact"
	l := New(compileT(b, rules, cfg), NewMemory(), nil, nil)
	r := l.rules[0]
	for i := range r.plan.limits {
		r.plan.limits[i].N = 1 << 40
	}
	ctx := context.Background()
	now := time.Now()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		l.check(ctx, &r.windows, "203.0.113.7", now.Add(time.Duration(i)*time.Second), true)
	}
}

// benchPenaltyLimiter is benchLimiter's rule with a penalty box, on store
// (nil: Memory).
func benchPenaltyLimiter(b *testing.B, store Store, pen bool) (*Limiter, *rule) {
	b.Helper()
	rule := Rule{Name: "login_ip", Match: Match{Methods: []string{"POST"}, Path: "/login"}, Key: IP, Limits: mustLimits(b, "2/s", "5/m", "10/h", "100/d")}
	if pen {
		rule.Penalty = Penalty{Duration: 15 * time.Minute, Factor: 2, Max: 24 * time.Hour}
	}
	if store == nil {
		store = NewMemory()
	}
	l := New(compileT(b, []Rule{rule}, DefaultConfig()), store, NewMetrics(nil), nil)
	return l, l.rules[0]
}

// BenchmarkCheckCountPenalty is BenchmarkCheckCount with and without a
// penalty on the rule, on the Memory store's fast path and on its
// general path (Load and Add, as memcached and exact precision take):
// the box is read under the same lock, or in the same Load, as the
// counts.
func BenchmarkCheckCountPenalty(b *testing.B) {
	for _, path := range []string{"spans", "load"} {
		for _, pen := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/penalty=%v", path, pen), func(b *testing.B) {
				var store Store
				if path == "load" {
					store = plainStore{NewMemory()}
				}
				l, r := benchPenaltyLimiter(b, store, pen)
				for i := range r.plan.limits {
					r.plan.limits[i].N = 1 << 40
				}
				ctx := context.Background()
				now := time.Now()
				l.check(ctx, &r.windows, "203.0.113.7", now, true)
				b.ReportAllocs()
				cpu0 := processCPU(b)
				for i := 0; b.Loop(); i++ {
					if v := l.check(ctx, &r.windows, "203.0.113.7", now.Add(time.Duration(i)*time.Millisecond), true); v.out != allowed {
						b.Fatal(v.out)
					}
				}
				// CPU time, steadier than ns/op on a machine others load.
				b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// BenchmarkBoxed is a client in the penalty box: answered from the
// limiter's memory, with a read of the store once a second.
func BenchmarkBoxed(b *testing.B) {
	l, r := benchPenaltyLimiter(b, nil, true)
	ctx := context.Background()
	now := time.Now().Truncate(time.Second)
	for range 3 {
		l.check(ctx, &r.windows, "203.0.113.9", now, true)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if v := l.check(ctx, &r.windows, "203.0.113.9", now.Add(time.Duration(i)*time.Microsecond), true); v.out != boxed {
			b.Fatal(v.out)
		}
	}
}

// processCPU returns the CPU time the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Skipf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
