package memcached

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/limit"
)

// trim drops the pending increments of the oldest buckets first.
func TestTrimDropsOldest(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	sv := &server{m: m, log: slog.New(slog.DiscardHandler)}
	for i := range sv.shards {
		sv.shards[i].m = map[limit.Counter]*entry{}
	}
	// 10 counters × 10 buckets: starts 0..9 (seconds).
	for i := range 10 {
		c := limit.Counter{Rule: "trim", Value: string(rune('a' + i))}
		sh := &sv.shards[i%numShards]
		for start := range int64(10) {
			n := sh.add(c, []limit.Bucket{{Level: limit.Second, Start: start, TTL: time.Minute}}, 1)
			sv.npending.Add(int64(n))
		}
	}
	sv.trim(35)
	if got := sv.npending.Load(); got != 35 {
		t.Errorf("%d pending after trim(35), want 35", got)
	}
	left := 0
	for i := range sv.shards {
		for _, e := range sv.shards[i].m {
			for _, d := range e.pending {
				left++
				if d.start < 6 {
					t.Errorf("bucket %d kept, but newer ones were dropped", d.start)
				}
			}
		}
	}
	if left != 35 {
		t.Errorf("%d pending increments left, want 35", left)
	}
}
