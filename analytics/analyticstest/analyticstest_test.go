package analyticstest_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/rollup"
)

// data is a brute-force store: a map under a lock. The suite runs against
// it to show that a correct store passes.
type data struct {
	mu     sync.Mutex
	tiers  []rollup.Tier
	points map[bucket]analytics.Visits
	totals map[string]analytics.Visits
}

type bucket struct {
	key   string
	step  time.Duration
	start int64
}

// store is one handle on data; closed handles fail.
type store struct {
	d      *data
	closed bool
}

func (s *store) Write(ctx context.Context, b analytics.Batch) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("mem: write: %w", err)
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	if s.closed {
		return fmt.Errorf("mem: write: closed")
	}
	for _, c := range b.Counts {
		k := bucket{c.Key, c.Step, c.Start.Unix()}
		v := s.d.points[k]
		v.Human += c.Human
		v.Bot += c.Bot
		s.d.points[k] = v
	}
	for _, t := range b.Totals {
		v := s.d.totals[t.Key]
		v.Human += t.Human
		v.Bot += t.Bot
		s.d.totals[t.Key] = v
	}
	return nil
}

func (s *store) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]analytics.Point, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("mem: points: %w", err)
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	var ps []analytics.Point
	for k, v := range s.d.points {
		t := time.Unix(k.start, 0).UTC()
		if k.key == key && k.step == step && !t.Before(from) && t.Before(to) {
			ps = append(ps, analytics.Point{Start: t, Visits: v})
		}
	}
	slices.SortFunc(ps, func(a, b analytics.Point) int { return a.Start.Compare(b.Start) })
	return ps, nil
}

func (s *store) Total(ctx context.Context, key string) (analytics.Visits, error) {
	if err := ctx.Err(); err != nil {
		return analytics.Visits{}, fmt.Errorf("mem: total: %w", err)
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.totals[key], nil
}

func (d *data) expire(now time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k := range d.points {
		for _, t := range d.tiers {
			if t.Step == k.step && time.Unix(k.start, 0).Add(t.Step).Before(now.Add(-t.Retention)) {
				delete(d.points, k)
			}
		}
	}
	return nil
}

func TestRun(t *testing.T) {
	analyticstest.Run(t, func(t *testing.T, tiers []rollup.Tier) analyticstest.Harness {
		d := &data{tiers: tiers, points: map[bucket]analytics.Visits{}, totals: map[string]analytics.Visits{}}
		cur := &store{d: d}
		return analyticstest.Harness{
			Store: cur,
			Reopen: func() analyticstest.Store {
				d.mu.Lock()
				cur.closed = true
				d.mu.Unlock()
				cur = &store{d: d}
				return cur
			},
			Another: func() analyticstest.Store { return &store{d: d} },
			Expire:  d.expire,
		}
	})
}
