package limit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// TestConcurrentChecksNeverOvershoot: 32 checks of one client at once,
// against a limit of 5 in the in-process store, let exactly 5 through, in
// both precisions (bucket precision takes Memory's span path, exact its
// read-and-add) and for a client seen for the first time as for one
// already counted. A check that reads the counts and adds its hit in two
// steps lets through every check that read before the others added (seen:
// 6 of 16 handshakes passing a 5/m edge limit).
func TestConcurrentChecksNeverOvershoot(t *testing.T) {
	for name, prec := range map[string]Precision{"bucket": Bucketed, "exact": Exact} {
		for _, seen := range []int64{0, 2} {
			t.Run(fmt.Sprintf("%s/%d seen", name, seen), func(t *testing.T) {
				const limit, checks, rounds = 5, 32, 200
				w := windows{name: "test/burst", plan: newBucketPlan([]Limit{{N: limit, Window: time.Minute}}, prec)}
				var ck checker
				ck.init(NewMemory(), nil)
				ctx := context.Background()
				for round := range rounds {
					value := fmt.Sprint("client-", round)
					now := time.Now()
					for range seen {
						ck.check(ctx, &w, value, now, true)
					}
					var passed atomic.Int64
					var wg sync.WaitGroup
					start := make(chan struct{})
					for range checks {
						wg.Go(func() {
							<-start
							if v := ck.check(ctx, &w, value, now, true); v.out == allowed {
								passed.Add(1)
							}
						})
					}
					close(start)
					testkit.Await(t, wg.Wait, 10*time.Second, "the checks")
					if got := passed.Load(); got != limit-seen {
						t.Fatalf("round %d: %d of %d checks passed after %d counted; want %d", round, got, checks, seen, limit-seen)
					}
				}
			})
		}
	}
}
