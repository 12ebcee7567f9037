package cassandra

import (
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/rollup"
)

// TestConformanceOnModel runs the conformance suite on the Store's own
// logic over the model of the cluster (fakeDB), without faults: it checks
// the Store, not Cassandra. TestConformanceOnNode runs it on a real node.
// The model's clock follows the wall clock, and Expire moves it (and the
// stores' clock, which clamps read ranges) forward, so the Expiry subtest
// checks the TTLs the Store sets, and a lease expires as on a cluster.
func TestConformanceOnModel(t *testing.T) {
	analyticstest.Run(t, func(t *testing.T, plan *rollup.Plan) analyticstest.Harness {
		var mu sync.Mutex
		var ahead time.Duration    // how far Expire moved the clock past the wall clock
		var clock func() time.Time // the subtest's, when it gave one
		now := func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			if clock != nil {
				return clock()
			}
			return time.Now().Add(ahead)
		}
		db := newFakeDB(time.Now())
		db.follow = now
		open := func() *Store {
			s := newStore(plan, nil)
			s.be = db
			s.now = now
			t.Cleanup(func() { s.Close() })
			return s
		}
		last := open()
		return analyticstest.Harness{
			Store: last,
			Reopen: func() analyticstest.Store {
				last.Close()
				last = open()
				return last
			},
			Another: func() analyticstest.Store { return open() },
			Expire: func(at time.Time) error {
				mu.Lock()
				ahead = max(ahead, time.Until(at))
				mu.Unlock()
				return nil
			},
			Clock: func(f func() time.Time) {
				mu.Lock()
				clock = f
				mu.Unlock()
			},
		}
	})
}
