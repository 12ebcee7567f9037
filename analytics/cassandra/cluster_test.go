package cassandra_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/cassandra"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/rollup"
)

// The tests in this file need a real cluster: CASSANDRA_HOSTS lists its
// contact points ("127.0.0.1:9042"; ../shared/cassandra/start DIR, or
// docker compose up -d cassandra). They write into the keyspace
// linkgate_test, under keys of their own, except the conformance suite,
// which gives each subtest a keyspace of its own (the rollup's progress
// and lease are per keyspace), emptied when an earlier run left it.

const testKeyspace = "linkgate_test"

func hosts(t *testing.T) []string { return testkit.CassandraHosts(t) }

func config(hosts []string) analytics.Cassandra {
	return analytics.Cassandra{Hosts: hosts, Keyspace: testKeyspace, Consistency: "LOCAL_QUORUM", ReplicationFactor: 1}
}

// TestConformanceOnNode runs the analytics store conformance suite on the
// node: two stores writing at once stand for two gateway processes, and
// reopening is a restart (a new writer id, the rows of the old one kept).
// The subtests that read beyond their own keys get a keyspace each; the
// others share one (a keyspace's tables take seconds to create on a
// loaded node). Expiry and DimsExpiry run on the node's own clock: the
// rows meant to expire are written with a batch time (At) that puts the
// end of their retention 15 s after the write, so their TTL is 15 s, as
// it is for rows written 15 s before the end of their retention.
func TestConformanceOnNode(t *testing.T) {
	hs := hosts(t)
	shared := "" // the keyspace of the subtests that read their own keys only
	analyticstest.Run(t, func(t *testing.T, plan *rollup.Plan) analyticstest.Harness {
		cfg := config(hs)
		switch name := t.Name()[strings.LastIndexByte(t.Name(), '/')+1:]; {
		case analyticstest.NeedsOwnStore(name):
			cfg.Keyspace = testkit.CassandraKeyspace(t, hs, "linkgate_conf_"+name)
		case shared == "":
			shared = testkit.CassandraKeyspace(t, hs, "linkgate_conf_shared") // emptied once a run
			fallthrough
		default:
			cfg.Keyspace = shared
		}
		open := func(*testing.T, []string) *cassandra.Store { return cassandra.OpenConnected(t, cfg, plan) }
		var mu sync.Mutex
		var stores []*cassandra.Store
		var clock func() time.Time // the subtest's, when it gave one
		track := func(s *cassandra.Store) *cassandra.Store {
			mu.Lock()
			stores = append(stores, s)
			if clock != nil {
				cassandra.SetClock(s, clock)
			}
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
			TTL:     15 * time.Second,
			Clock: func(now func() time.Time) {
				mu.Lock()
				defer mu.Unlock()
				clock = now
				for _, s := range stores {
					cassandra.SetClock(s, now)
				}
			},
		}
	})
}

// TestTwoWritersAndRestartOnNode writes through two stores, closes one and
// crashes the other in effect (its rows stay), then reads through a third:
// everything adds up. Its keyspace is its own, emptied first: the rollup's
// progress of another test (or run) would make the hour it writes look
// rolled up.
func TestTwoWritersAndRestartOnNode(t *testing.T) {
	hs := hosts(t)
	cfg := config(hs)
	cfg.Keyspace = testkit.CassandraKeyspace(t, hs, "linkgate_two_writers")
	open := func(*testing.T, []string) *cassandra.Store {
		return cassandra.OpenConnected(t, cfg, analyticstest.DefaultPlan)
	}
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
	s, err := cassandra.Open(context.Background(), nil, config([]string{addr}), analyticstest.DefaultPlan, nil)
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
