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

// TestChecksBehindTheClockCountNewerHits: a check whose clock read is
// older than the second another check of the same process counted at (it
// was read before a wait: scheduling, a busy machine) still counts that
// hit. Before, it summed the window ending at its own second, without the
// newer hits, and five checks of a 5/m limit at second t+1 let a sixth
// at second t pass (six ask calls in 35 s with handshakes_per_client 5/m,
// under load).
func TestChecksBehindTheClockCountNewerHits(t *testing.T) {
	for name, prec := range map[string]Precision{"bucket": Bucketed, "exact": Exact} {
		t.Run(name, func(t *testing.T) {
			w := windows{name: "test/late", plan: newBucketPlan([]Limit{{N: 5, Window: time.Minute}}, prec)}
			var ck checker
			ck.init(NewMemory(), nil)
			ctx := context.Background()
			now := time.Now().Truncate(time.Second)
			for i := range 5 {
				if v := ck.check(ctx, &w, "client", now.Add(time.Second), true); v.out != allowed {
					t.Fatalf("check %d of 5 at t+1: %v, want allowed", i+1, v.out)
				}
			}
			if v := ck.check(ctx, &w, "client", now, true); v.out != limited {
				t.Errorf("a sixth check with the clock read at t: %v, want limited", v.out)
			}
			if v := ck.check(ctx, &w, "other", now, true); v.out != allowed {
				t.Errorf("another client's check at t: %v, want allowed", v.out)
			}
		})
	}
}
