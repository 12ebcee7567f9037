package cassandra

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/linkgate/linkgate/edge"
	"github.com/linkgate/linkgate/edge/cassandra/cqlmodel"
	"github.com/linkgate/linkgate/edge/storagetest"
)

func config(hosts ...string) edge.Cassandra {
	c := edge.DefaultConfig().Storage.Cassandra
	c.Hosts = hosts
	return c
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
		s, err := Open(context.Background(), config(m.Addr()), nil, Options{PollInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	})
}

// TestConformanceOnCluster runs the suite on a real cluster, in a keyspace
// of its own, when CASSANDRA_HOSTS is set.
func TestConformanceOnCluster(t *testing.T) {
	hosts := os.Getenv("CASSANDRA_HOSTS")
	if hosts == "" {
		t.Skip("*** SKIPPED: CASSANDRA_HOSTS is not set: the certificate storage was NOT tested on a real Cassandra (docker compose up -d cassandra; CASSANDRA_HOSTS=127.0.0.1:9042 ./test.sh) ***")
	}
	ks := fmt.Sprintf("linkgate_certs_test_%d", time.Now().UnixNano()%1e9)
	storagetest.Run(t, func(t *testing.T) certmagic.Storage {
		c := config(strings.Split(hosts, ",")...)
		c.Keyspace = ks + "_" + strings.NewReplacer("/", "_", "-", "_").Replace(strings.ToLower(t.Name()))[len("testconformanceoncluster_"):]
		c.Consistency = "QUORUM"
		s, err := Open(context.Background(), c, nil, Options{PollInterval: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
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
		s, err := Open(ctx, config(m.Addr()), nil, Options{PollInterval: 50 * time.Millisecond, LockTTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return s
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
