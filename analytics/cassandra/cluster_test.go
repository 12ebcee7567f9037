package cassandra_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/cassandra"
	"github.com/linkgate/linkgate/rollup"
)

// The tests in this file need a real cluster: CASSANDRA_HOSTS lists its
// contact points ("127.0.0.1:9042"; docker compose up -d cassandra). They
// write into the keyspace linkgate_test, under keys of their own, except
// the conformance suite, which gives each subtest a keyspace of its own
// (the rollup's progress and lease are per keyspace) and drops it after.

const testKeyspace = "linkgate_test"

var skipOnce sync.Once

func hosts(t *testing.T) []string {
	t.Helper()
	v := os.Getenv("CASSANDRA_HOSTS")
	if v == "" {
		skipOnce.Do(func() {
			// Loud on purpose: a skipped backend must not pass unnoticed.
			os.Stderr.WriteString("\n*** CASSANDRA_HOSTS not set: Cassandra integration tests SKIPPED ***\n\n")
		})
		t.Skip("CASSANDRA_HOSTS not set: Cassandra integration tests SKIPPED")
	}
	return strings.Split(v, ",")
}

func config(hosts []string) analytics.Cassandra {
	return analytics.Cassandra{Hosts: hosts, Keyspace: testKeyspace, Consistency: "LOCAL_QUORUM", ReplicationFactor: 1}
}

// open opens a store on the cluster and waits until it is connected (the
// schema created), failing the test after a minute.
func open(t *testing.T, hosts []string) *cassandra.Store {
	return openIn(t, config(hosts), analyticstest.DefaultPlan)
}

// openIn opens a store with cfg and plan and waits until it is connected.
func openIn(t *testing.T, cfg analytics.Cassandra, plan *rollup.Plan) *cassandra.Store {
	t.Helper()
	s, err := cassandra.Open(context.Background(), cfg, plan, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for s.Ready() != nil {
		if time.Now().After(deadline) {
			s.Close()
			t.Fatalf("not connected after a minute: %v", s.Ready())
		}
		time.Sleep(100 * time.Millisecond) // waiting for an external cluster, not for a flush
	}
	return s
}

// TestConformance runs the analytics store conformance suite against the
// cluster: two stores writing at once stand for two gateway processes, and
// reopening is a restart (a new writer id, the rows of the old one kept).
func TestConformance(t *testing.T) {
	hs := hosts(t)
	run := time.Now().UnixNano()
	n := 0
	analyticstest.Run(t, func(t *testing.T, plan *rollup.Plan) analyticstest.Harness {
		n++
		cfg := config(hs)
		cfg.Keyspace = fmt.Sprintf("linkgate_test_%x_%d", run%(1<<32), n)
		t.Cleanup(func() { dropKeyspace(t, hs, cfg.Keyspace) })
		open := func(*testing.T, []string) *cassandra.Store { return openIn(t, cfg, plan) }
		var mu sync.Mutex
		var stores []*cassandra.Store
		track := func(s *cassandra.Store) *cassandra.Store {
			mu.Lock()
			stores = append(stores, s)
			mu.Unlock()
			return s
		}
		t.Cleanup(func() {
			for _, s := range stores {
				s.Close()
			}
		})
		last := track(open(t, hs))
		return analyticstest.Harness{
			Store: last,
			Reopen: func() analyticstest.Store {
				last.Close()
				last = track(open(t, hs))
				return last
			},
			Another: func() analyticstest.Store { return track(open(t, hs)) },
		}
	})
}

// dropKeyspace drops a keyspace a test created.
func dropKeyspace(t *testing.T, hosts []string, ks string) {
	c := gocql.NewCluster(hosts...)
	c.Timeout = 30 * time.Second
	sess, err := c.CreateSession()
	if err != nil {
		t.Logf("drop keyspace %s: %v", ks, err)
		return
	}
	defer sess.Close()
	if err := sess.Query("DROP KEYSPACE IF EXISTS " + ks).Exec(); err != nil {
		t.Logf("drop keyspace %s: %v", ks, err)
	}
}

// TestTwoWritersAndRestart writes through two stores, closes one and
// crashes the other in effect (its rows stay), then reads through a third:
// everything adds up.
func TestTwoWritersAndRestart(t *testing.T) {
	hs := hosts(t)
	a, b := open(t, hs), open(t, hs)
	defer b.Close()
	key := "two-writers-" + time.Now().UTC().Format("20060102T150405.000000000")
	hour := rollup.Align(time.Now().Add(-time.Hour), time.Hour)
	at := time.Now().UTC()
	for i := range 10 {
		for j, s := range []*cassandra.Store{a, b} {
			err := s.Write(context.Background(), analytics.Batch{
				At:     at.Add(time.Duration(2*i+j) * time.Millisecond),
				Counts: []analytics.Count{{Key: key, Step: time.Minute, Start: hour, Visits: analytics.Visits{Human: 1, Bot: int64(j)}}},
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	a.Close()
	c := open(t, hs)
	defer c.Close()
	ps, err := c.Points(context.Background(), key, time.Minute, hour, hour.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if want := (analytics.Visits{Human: 20, Bot: 10}); len(ps) != 1 || ps[0].Visits != want {
		t.Errorf("Points = %v, want one point of %+v", ps, want)
	}
	if v, err := rollup.NewReader(c, analyticstest.DefaultPlan).Total(context.Background(), key); err != nil || v != (analytics.Visits{Human: 20, Bot: 10}) {
		t.Errorf("Total = %+v, %v; want {20 10}", v, err)
	}
}

// TestNotConnected opens a store on a port where nothing listens: Open
// returns at once, every call fails with ErrNotConnected until Close, and
// Close returns promptly. This runs real gocql, with no cluster.
func TestNotConnected(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now: connections are refused

	start := time.Now()
	s, err := cassandra.Open(context.Background(), config([]string{addr}), analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Open took %v without a cluster", d)
	}
	ctx := context.Background()
	if err := s.Write(ctx, analytics.Batch{At: time.Now(), Counts: []analytics.Count{{Key: "k", Step: time.Minute, Start: rollup.Align(time.Now(), time.Minute), Visits: analytics.Visits{Human: 1}}}}); !errors.Is(err, cassandra.ErrNotConnected) {
		t.Errorf("Write = %v, want ErrNotConnected", err)
	}
	if _, err := s.Points(ctx, "k", time.Hour, time.Now().Add(-time.Hour), time.Now()); !errors.Is(err, cassandra.ErrNotConnected) {
		t.Errorf("Points = %v, want ErrNotConnected", err)
	}
	if _, err := s.Marks(ctx, "k"); !errors.Is(err, cassandra.ErrNotConnected) {
		t.Errorf("Marks = %v, want ErrNotConnected", err)
	}
	if _, err := s.Lease(ctx, time.Minute); !errors.Is(err, cassandra.ErrNotConnected) {
		t.Errorf("Lease = %v, want ErrNotConnected", err)
	}
	if err := s.Ready(); !errors.Is(err, cassandra.ErrNotConnected) {
		t.Errorf("Ready = %v, want ErrNotConnected", err)
	}
	start = time.Now()
	s.Close()
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := s.Write(ctx, analytics.Batch{At: time.Now()}); !errors.Is(err, cassandra.ErrClosed) {
		t.Errorf("Write after Close = %v, want ErrClosed", err)
	}
}
