package limit_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/limit/limittest"
)

func TestMemoryConformance(t *testing.T) {
	limittest.Run(t, func(t *testing.T) limittest.Harness {
		clk := testkit.NewClock(time.Date(2026, 3, 28, 23, 30, 33, 0, time.UTC))
		return limittest.Harness{Store: limit.NewMemoryAt(clk.Now), Now: clk.Now, Advance: clk.Advance}
	})
}

func TestMemoryConformanceRealClock(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("waits a few seconds for a TTL on the real clock")
	}
	limittest.Run(t, func(t *testing.T) limittest.Harness {
		return limittest.Harness{Store: limit.NewMemory()}
	})
}

// TestMemoryReclaims checks that counters of clients that went away are
// deleted as new clients arrive, so memory does not grow without bound.
func TestMemoryReclaims(t *testing.T) {
	clk := testkit.NewClock(time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC))
	m := limit.NewMemoryAt(clk.Now)
	ctx := t.Context()
	peak := 0
	for round := range 20 {
		now := clk.Now().Unix()
		for i := range 1000 {
			c := limit.Counter{Rule: "r", Value: fmt.Sprint(round, "-", i)}
			if err := m.Add(ctx, c, []limit.Bucket{{Level: limit.Second, Start: now, TTL: 2 * time.Second}}, 1); err != nil {
				t.Fatal(err)
			}
		}
		peak = max(peak, m.Len())
		clk.Advance(10 * time.Second)
	}
	if peak > 4500 {
		t.Errorf("held %d counters at peak with 1000 live, want at most 2×live + 16 per shard", peak)
	}
	m.Sweep()
	if n := m.Len(); n != 0 {
		t.Errorf("Len after Sweep with everything expired = %d, want 0", n)
	}
	m.Add(ctx, limit.Counter{Rule: "r", Value: "x"}, []limit.Bucket{{Level: limit.Second, Start: clk.Now().Unix(), TTL: time.Hour}}, 1)
	if err := m.Close(); err != nil || m.Len() != 0 {
		t.Errorf("Close: %v, %d counters left", err, m.Len())
	}
}

// TestMemoryLongTTLSeconds checks second buckets kept for a day (exact
// precision) beyond the ring's length.
func TestMemoryLongTTLSeconds(t *testing.T) {
	clk := testkit.NewClock(time.Date(2026, 3, 28, 23, 30, 33, 0, time.UTC))
	m := limit.NewMemoryAt(clk.Now)
	ctx := t.Context()
	c := limit.Counter{Rule: "exact", Value: "v"}
	day := 24*time.Hour + time.Minute
	first := limit.Bucket{Level: limit.Second, Start: clk.Now().Unix(), TTL: day}
	if err := m.Add(ctx, c, []limit.Bucket{first}, 3); err != nil {
		t.Fatal(err)
	}
	// Hits every 10 minutes for 23 hours push the first bucket out of the ring.
	for range 23 * 6 {
		clk.Advance(10 * time.Minute)
		if err := m.Add(ctx, c, []limit.Bucket{{Level: limit.Second, Start: clk.Now().Unix(), TTL: day}}, 1); err != nil {
			t.Fatal(err)
		}
	}
	counts := make([]int64, 2)
	last := limit.Bucket{Level: limit.Second, Start: clk.Now().Unix()}
	if err := m.Load(ctx, c, []limit.Bucket{first, last}, counts); err != nil {
		t.Fatal(err)
	}
	if counts[0] != 3 || counts[1] != 1 {
		t.Errorf("Load 23h later = %v, want [3 1]", counts)
	}
	clk.Advance(2 * time.Hour)
	if err := m.Load(ctx, c, []limit.Bucket{first}, counts[:1]); err != nil {
		t.Fatal(err)
	}
	if counts[0] != 0 {
		t.Errorf("Load of a bucket past its TTL = %d, want 0", counts[0])
	}
	// Reset reaches spilled buckets too.
	clk.Advance(-2 * time.Hour)
	if err := m.Reset(ctx, c, []limit.Bucket{first}); err != nil {
		t.Fatal(err)
	}
	if err := m.Load(ctx, c, []limit.Bucket{first}, counts[:1]); err != nil {
		t.Fatal(err)
	}
	if counts[0] != 0 {
		t.Errorf("Load of a reset spilled bucket = %d, want 0", counts[0])
	}
}

// TestMemoryIdleRingKeepsLongTTL reads a second bucket with a day's TTL two
// hours after the counter's last hit: the ring of seconds (an hour long) has
// not advanced since, and must still answer for what it holds.
func TestMemoryIdleRingKeepsLongTTL(t *testing.T) {
	clk := testkit.NewClock(time.Date(2026, 3, 28, 10, 0, 40, 0, time.UTC))
	m := limit.NewMemoryAt(clk.Now)
	ctx := t.Context()
	c := limit.Counter{Rule: "exact", Value: "v"}
	b := limit.Bucket{Level: limit.Second, Start: clk.Now().Unix(), TTL: 24*time.Hour + 2*time.Second}
	if err := m.Add(ctx, c, []limit.Bucket{b}, 3); err != nil {
		t.Fatal(err)
	}
	counts := make([]int64, 1)
	for _, after := range []time.Duration{2 * time.Hour, 23*time.Hour + 59*time.Minute} {
		clk.Set(time.Unix(b.Start, 0).Add(after))
		if err := m.Load(ctx, c, []limit.Bucket{b}, counts); err != nil {
			t.Fatal(err)
		}
		if counts[0] != 3 {
			t.Errorf("Load %v after the only hit, TTL a day: %d, want 3", after, counts[0])
		}
	}
	clk.Set(time.Unix(b.Start, 0).Add(24*time.Hour + 3*time.Second))
	if err := m.Load(ctx, c, []limit.Bucket{b}, counts); err != nil {
		t.Fatal(err)
	}
	if counts[0] != 0 {
		t.Errorf("Load past the TTL: %d, want 0", counts[0])
	}
}
