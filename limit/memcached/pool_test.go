package memcached_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/limit/memcached"
)

// mcStat reads one statistic of a memcached ("curr_connections").
func mcStat(t testing.TB, addr, name string) int64 {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprint(c, "stats\r\n")
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("stats: %v", err)
		}
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "STAT" && f[1] == name {
			n, _ := strconv.ParseInt(f[2], 10, 64)
			return n
		}
		if strings.HasPrefix(line, "END") {
			t.Fatalf("stats: no %s", name)
		}
	}
}

// burst sends rounds requests from each of n clients, each on its own
// connection, released at once, through the limiter on s over real HTTP:
// n client connections hitting a limited route together, every request a
// Load of the rule's buckets and an Add. It returns the store errors the
// limiter counted.
func burst(t *testing.T, s *memcached.Store, n, rounds int) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	limits := func(specs ...string) []limit.Limit {
		var ls []limit.Limit
		for _, sp := range specs {
			l, err := limit.ParseLimit(sp)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, l)
		}
		return ls
	}
	rule := limit.Rule{Name: "burst", Match: limit.Match{Path: "/{key}"}, Key: limit.IP, Limits: limits("1000000/s", "1000000/d")}
	l := limit.New(compile(t, []limit.Rule{rule}, limit.DefaultIdentity(), limit.DefaultConfig()), s, limit.NewMetrics(reg), nil)
	srv := httptest.NewServer(l.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			<-start
			for range rounds {
				resp, err := client.Get(fmt.Sprintf("%s/k%d", srv.URL, i))
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
	}
	close(start)
	testkit.Await(t, wg.Wait, 5*time.Minute, "the concurrent checks")
	return testkit.Metric(t, reg, "linkgate_limit_decisions_total", "outcome", limit.OutcomeStoreError)
}

// TestWarmPoolAbsorbsBurst: the store dials its connections before the
// first check, so that 64 client connections arriving at once through the
// limiter (the start of a load) dial nothing: dozens of dials at once on a loaded machine are what
// missed the 100 ms timeout. With gomemcache's default pool (2 idle
// connections) or a cap below the checks in flight, this burst dials most
// of its connections, and keeps dialing under steady load.
func TestWarmPoolAbsorbsBurst(t *testing.T) {
	mc := testkit.StartMemcached(t)
	reg := prometheus.NewRegistry()
	const pool, clients = 80, 64 // 64 checks + the flusher's 4 connections fit in 80
	s := memcached.New(limit.Memcached{Servers: []string{mc.Addr}, Timeout: testkit.Slack(time.Second), MaxIdleConns: pool}, memcached.NewMetrics(reg), nil)
	defer s.Close()
	dials := func() float64 { return testkit.Metric(t, reg, "linkgate_memcached_dials_total", "server", mc.Addr) }
	testkit.Eventually(t, 5*time.Second, "the pool dialed", func() bool { return dials() >= pool })
	if got := mcStat(t, mc.Addr, "curr_connections"); got < pool {
		t.Fatalf("memcached has %d connections open after the warm-up, want at least %d", got, pool)
	}
	before, totalBefore := dials(), mcStat(t, mc.Addr, "total_connections")
	storeErrors := burst(t, s, clients, 20)
	if d := dials() - before; d != 0 || storeErrors != 0 {
		t.Errorf("%v connections dialed and %v store errors during a burst of %d clients with %d connections warmed, want none (memcached errors: %v)",
			d, storeErrors, clients, pool, testkit.Metric(t, reg, "linkgate_memcached_errors_total", "server", mc.Addr))
	}
	t.Logf("memcached total_connections grew by %d during the burst (our stats connection included)", mcStat(t, mc.Addr, "total_connections")-totalBefore)
}

// TestDefaultPool: without max_idle_conns the store keeps the default.
func TestDefaultPool(t *testing.T) {
	mc := testkit.StartMemcached(t)
	reg := prometheus.NewRegistry()
	s := memcached.New(limit.Memcached{Servers: []string{mc.Addr}}, memcached.NewMetrics(reg), nil)
	defer s.Close()
	testkit.Eventually(t, 5*time.Second, "the default pool dialed", func() bool {
		return testkit.Metric(t, reg, "linkgate_memcached_dials_total", "server", mc.Addr) >= limit.DefaultMaxIdleConns
	})
	if got := testkit.Metric(t, reg, "linkgate_memcached_dials_total", "server", mc.Addr); got != limit.DefaultMaxIdleConns {
		t.Errorf("%v dials, want %d", got, limit.DefaultMaxIdleConns)
	}
}

// TestRecoveryBurstFindsConnections: when memcached comes back, the
// connections are dialed before the breaker closes, so that the requests
// waiting for it do not all dial at once.
func TestRecoveryBurstFindsConnections(t *testing.T) {
	mc := testkit.StartMemcached(t)
	reg := prometheus.NewRegistry()
	const pool = 80
	s := memcached.New(limit.Memcached{Servers: []string{mc.Addr}, Timeout: testkit.Slack(time.Second), MaxIdleConns: pool}, memcached.NewMetrics(reg), nil)
	defer s.Close()
	dials := func() float64 { return testkit.Metric(t, reg, "linkgate_memcached_dials_total", "server", mc.Addr) }
	testkit.Eventually(t, 5*time.Second, "the pool dialed", func() bool { return dials() >= pool })

	mc.Kill()
	ctx := context.Background()
	c := limit.Counter{Rule: "recovery", Value: "x"}
	testkit.Eventually(t, 5*time.Second, "the breaker open", func() bool {
		s.Load(ctx, c, []limit.Bucket{minute(time.Now())}, make([]int64, 1))
		return s.BreakerOpen(mc.Addr)
	})
	mc.Start()
	testkit.Eventually(t, 5*time.Second, "the breaker closed", func() bool { return !s.BreakerOpen(mc.Addr) })
	// The probe's connection and the warm-up's, all before the breaker closed.
	after := dials()
	if errs := burst(t, s, 64, 5); errs != 0 || dials() != after {
		t.Errorf("%v connections dialed and %v store errors in the first burst after recovery, want none", dials()-after, errs)
	}
}
