package cassandra

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/linkgate/linkgate/edge"
	"github.com/linkgate/linkgate/edge/cassandra/cqlmodel"
	"github.com/linkgate/linkgate/edge/storagetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

func config(hosts ...string) edge.Cassandra {
	c := edge.DefaultConfig().Storage.Cassandra
	c.Hosts = hosts
	return c
}

// open opens a Store and waits until it is connected: on a real node, until
// its keyspace and tables are created, which takes seconds to a minute on
// a loaded machine.
func open(t testing.TB, c edge.Cassandra, o Options) *Store {
	t.Helper()
	s, err := Open(context.Background(), c, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Connected():
	case <-time.After(testkit.Slack(2 * time.Minute)):
		err := s.Ready()
		s.Close()
		t.Fatalf("not connected within 2 minutes: %v", err)
	}
	return s
}

// TestConformanceOnModel runs the storage suite on the CQL protocol model:
// every client of one test talks to the same model, as a fleet's gateways
// talk to one cluster.
func TestConformanceOnModel(t *testing.T) {
	models := map[string]*cqlmodel.Model{}
	storagetest.Run(t, func(t *testing.T) certmagic.Storage {
		m := models[t.Name()]
		if m == nil {
			m = cqlmodel.New(t)
			models[t.Name()] = m
		}
		s := open(t, config(m.Addr()), Options{PollInterval: 50 * time.Millisecond})
		t.Cleanup(s.Close)
		return s
	})
}

// TestConformanceOnNode runs the suite on a real cluster, a keyspace
// per test, when CASSANDRA_HOSTS is set.
func TestConformanceOnNode(t *testing.T) {
	hosts := testkit.CassandraHosts(t)
	keyspaces := map[string]string{} // by test: its clients share one
	storagetest.Run(t, func(t *testing.T) certmagic.Storage {
		c := config(hosts...)
		if keyspaces[t.Name()] == "" {
			keyspaces[t.Name()] = testkit.CassandraKeyspace(t, hosts, "linkgate_certs_"+t.Name()[len("TestConformanceOnNode/"):])
		}
		c.Keyspace = keyspaces[t.Name()]
		c.Consistency = "QUORUM"
		s := open(t, c, Options{PollInterval: 200 * time.Millisecond})
		t.Cleanup(s.Close)
		return s
	})
}

// TestDeadHolderLockExpires: a gateway that dies holding a lock stops
// refreshing it, and the lock frees itself after its TTL; a holder that
// lives keeps it past the TTL by refreshing it with lightweight
// transactions.
func TestDeadHolderLockExpires(t *testing.T) {
	m := cqlmodel.New(t)
	ctx := context.Background()
	open := func() *Store {
		return open(t, config(m.Addr()), Options{PollInterval: 50 * time.Millisecond, LockTTL: time.Second})
	}
	alive, other := open(), open()
	defer alive.Close()
	defer other.Close()
	if err := alive.Lock(ctx, "kept"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // more than twice the TTL
	if ok, err := other.TryLock(ctx, "kept"); ok || err != nil {
		t.Errorf("a lock whose holder lives and refreshes it was taken after its TTL (%v)", err)
	}
	alive.Unlock(ctx, "kept")

	dead := open()
	if err := dead.Lock(ctx, "orphan"); err != nil {
		t.Fatal(err)
	}
	dead.abandon()
	t0 := time.Now()
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := other.Lock(lctx, "orphan"); err != nil {
		t.Fatalf("the lock of a dead holder did not free itself: %v", err)
	}
	if waited := time.Since(t0); waited < 500*time.Millisecond || waited > 3*time.Second {
		t.Errorf("waited %v for a dead holder's lock, want about its TTL (1s)", waited)
	}
	other.Unlock(ctx, "orphan")
	if ddl := m.DDL(); m.LWT() == 0 || len(ddl) == 0 || !strings.HasPrefix(ddl[0], "CREATE KEYSPACE IF NOT EXISTS linkgate ") {
		t.Errorf("lightweight transactions %d, DDL %q", m.LWT(), ddl)
	}
}

// TestConnectsInTheBackground: Open returns at once while nothing answers
// at the configured address; every operation fails fast with
// ErrNotConnected meanwhile; when the cluster (the CQL model) comes up
// later the Store connects by itself, creates its tables and works.
func TestConnectsInTheBackground(t *testing.T) {
	addr := testkit.FreeAddr(t)
	t0 := time.Now()
	s, err := Open(context.Background(), config(addr), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if took := time.Since(t0); took > 100*time.Millisecond {
		t.Errorf("Open took %v with nothing listening: it waited for the network", took)
	}
	ctx := context.Background()
	t0 = time.Now()
	if err := s.Ready(); !errors.Is(err, ErrNotConnected) {
		t.Errorf("Ready = %v, want ErrNotConnected", err)
	}
	if _, err := s.Load(ctx, "certificates/x/x.crt"); !errors.Is(err, ErrNotConnected) {
		t.Errorf("Load = %v, want ErrNotConnected (not fs.ErrNotExist: the certificate may well be stored)", err)
	}
	if err := s.Store(ctx, "k", []byte("v")); !errors.Is(err, ErrNotConnected) {
		t.Errorf("Store = %v, want ErrNotConnected", err)
	}
	if ok, err := s.TryLock(ctx, "issue_cert_x"); ok || !errors.Is(err, ErrNotConnected) {
		t.Errorf("TryLock = %v, %v; want false, ErrNotConnected", ok, err)
	}
	if _, err := s.List(ctx, "certificates", true); !errors.Is(err, ErrNotConnected) {
		t.Errorf("List = %v, want ErrNotConnected", err)
	}
	if s.Exists(ctx, "k") {
		t.Error("Exists while not connected")
	}
	if took := time.Since(t0); took > 100*time.Millisecond {
		t.Errorf("operations took %v while not connected, want them to fail fast", took)
	}
	select {
	case <-s.Connected():
		t.Fatal("connected with nothing listening")
	default:
	}

	m := cqlmodel.NewAt(t, addr)
	select {
	case <-s.Connected():
	case <-time.After(testkit.Slack(10 * time.Second)):
		t.Fatalf("not connected 10s after the cluster came up: %v", s.Ready())
	}
	if err := s.Store(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Load(ctx, "k"); err != nil || string(v) != "v" {
		t.Errorf("Load = %q, %v", v, err)
	}
	if ddl := m.DDL(); len(ddl) == 0 {
		t.Error("the tables were not created once connected")
	}
}

// TestCloseWhileConnecting: Close stops the attempts to connect at once.
func TestCloseWhileConnecting(t *testing.T) {
	s, err := Open(context.Background(), config(testkit.DeadAddr(t)), nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(testkit.Slack(10 * time.Second)):
		t.Fatal("Close waited for the next attempt to connect")
	}
	if err := s.Ready(); !errors.Is(err, ErrClosed) {
		t.Errorf("Ready after Close = %v, want ErrClosed", err)
	}
}
