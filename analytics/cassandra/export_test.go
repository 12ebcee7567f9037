package cassandra

import (
	"context"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// SetClock has s read the time from now (read ranges, the TTLs of rolled
// rows) rather than from the wall clock. Call it before s is used.
func SetClock(s *Store, now func() time.Time) { s.now = now }

// OpenConnected opens a store with cfg and plan and waits until it is
// connected (the schema created), failing the test after a minute.
func OpenConnected(t *testing.T, cfg analytics.Cassandra, plan *rollup.Plan) *Store {
	t.Helper()
	s, err := Open(context.Background(), nil, cfg, plan, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for s.Ready() != nil {
		if time.Now().After(deadline) {
			s.Close()
			t.Fatalf("not connected after a minute: %v", s.Ready())
		}
		time.Sleep(100 * time.Millisecond) // waiting for an external node's schema
	}
	return s
}
