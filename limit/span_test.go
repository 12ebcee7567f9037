package limit

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// plainStore hides Memory's span fast path, so that the Limiter takes the
// general Load/Add path.
type plainStore struct{ m *Memory }

func (s plainStore) Load(ctx context.Context, c Counter, b []Bucket, n []int64) error {
	return s.m.Load(ctx, c, b, n)
}
func (s plainStore) Add(ctx context.Context, c Counter, b []Bucket, n int64) error {
	return s.m.Add(ctx, c, b, n)
}
func (s plainStore) AddNow(ctx context.Context, c Counter, b []Bucket, n int64) error {
	return s.m.AddNow(ctx, c, b, n)
}
func (s plainStore) Reset(ctx context.Context, c Counter, b []Bucket) error {
	return s.m.Reset(ctx, c, b)
}
func (s plainStore) PutBox(ctx context.Context, c Counter, b Box, keep int64) error {
	return s.m.PutBox(ctx, c, b, keep)
}
func (s plainStore) Boxes(ctx context.Context, now int64, yield func(Boxed) bool) error {
	return s.m.Boxes(ctx, now, yield)
}

// TestSpanPathMatchesLoadPath replays random traffic through two limiters,
// one on the span fast path and one on Load and Add, and requires the same
// verdict for every request.
func TestSpanPathMatchesLoadPath(t *testing.T) {
	for _, variant := range []struct {
		name           string
		specs          []string
		shadow, strict bool
	}{
		{"four windows", []string{"2/s", "5/m", "10/h", "100/d"}, false, false},
		{"odd windows", []string{"3/15s", "7/90s", "20/15m", "30/2h"}, false, false},
		{"shadow", []string{"2/s", "6/m"}, true, false},
		{"strict", []string{"2/s", "6/m", "20/h"}, false, true},
	} {
		t.Run(variant.name, func(t *testing.T) {
			var now time.Time
			clock := func() time.Time { return now }
			rule := Rule{Name: "r", Match: Match{Path: "/"}, Key: IP, Limits: mustLimits(t, variant.specs...), Shadow: variant.shadow, Strict: variant.strict}
			fast := New(compileT(t, []Rule{rule}, DefaultConfig()), NewMemoryAt(clock), nil, nil)
			slow := New(compileT(t, []Rule{rule}, DefaultConfig()), plainStore{NewMemoryAt(clock)}, nil, nil)
			rng := rand.New(rand.NewPCG(5, 6))
			now = time.Date(2026, 3, 28, 23, 59, 58, 0, time.UTC)
			ctx := context.Background()
			scales := []time.Duration{time.Millisecond, 300 * time.Millisecond, 2 * time.Second, 40 * time.Second, 20 * time.Minute}
			for i := range 3000 {
				now = now.Add(time.Duration(rng.Int64N(int64(scales[rng.IntN(len(scales))]))))
				client := []string{"a", "b", "c"}[rng.IntN(3)]
				vf := fast.check(ctx, &fast.rules[0].windows, client, now, true)
				vs := slow.check(ctx, &slow.rules[0].windows, client, now, true)
				if vf.out == shadowLimited {
					vf.limit, vs.limit, vf.reset, vs.reset, vf.remaining, vs.remaining = 0, 0, 0, 0, 0, 0
				}
				if vf != vs {
					t.Fatalf("request %d at %v by %s: span path %+v, load path %+v", i, now, client, vf, vs)
				}
			}
		})
	}
}

// TestCountAfterResponseKeepsBuckets counts a hit with the time its request
// started (a slow upstream) between two checks of a later second: each hit
// must land in its own second's bucket.
func TestCountAfterResponseKeepsBuckets(t *testing.T) {
	m := NewMemory()
	rule := Rule{Name: "r", Match: Match{Path: "/"}, Key: IP, Limits: mustLimits(t, "100/m")}
	l := New(compileT(t, []Rule{rule}, DefaultConfig()), m, nil, nil)
	ctx := context.Background()
	t100 := time.Unix(1_800_000_100, 0)
	l.check(ctx, &l.rules[0].windows, "a", t100, false)
	l.count(ctx, l.rules[0], "a", t100.Add(-time.Second))
	l.check(ctx, &l.rules[0].windows, "a", t100, true)
	counts := make([]int64, 2)
	if err := m.Load(ctx, Counter{Rule: "r", Value: "a"}, []Bucket{{Level: Second, Start: t100.Unix() - 1}, {Level: Second, Start: t100.Unix()}}, counts); err != nil {
		t.Fatal(err)
	}
	if counts[0] != 1 || counts[1] != 1 {
		t.Errorf("buckets of seconds 99 and 100 = %v, want [1 1]", counts)
	}
}
