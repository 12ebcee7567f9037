package pebblestore

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/linkgate/linkgate/analytics"
)

// Points returns key's buckets of the tier of the given step whose start
// lies in [from, to), in time order, leaving out buckets without visits:
// each the sum of its flushed counts and its rolled value. It reads one
// iterator range holding only the returned rows. A step that is not one
// of the store's tiers is an error.
func (s *Store) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]analytics.Point, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pebble: points: %w", err)
	}
	if _, ok := s.tiers[step]; !ok {
		return nil, fmt.Errorf("pebble: points: step %v is not a tier", step)
	}
	// Buckets start on whole seconds: the first at or after from, the
	// first at or after to.
	lo, hi := ceilUnix(from), ceilUnix(to)
	if lo >= hi {
		return nil, nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	return s.scan(ctx, key, step, lo, hi)
}

// scan reads key's buckets of the tier of step with starts in [lo, hi)
// unix seconds, in time order, adding a bucket's rolled value to its
// flushed counts. Call it holding mu.
func (s *Store) scan(ctx context.Context, key string, step time.Duration, lo, hi int64) ([]analytics.Point, error) {
	prefix := appendPointKey(nil, key, step, 0)
	prefix = prefix[:len(prefix)-8]
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{
		LowerBound: binary.BigEndian.AppendUint64(slices.Clip(prefix), timeBits(lo)),
		UpperBound: binary.BigEndian.AppendUint64(slices.Clip(prefix), timeBits(hi)),
	})
	if err != nil {
		return nil, fmt.Errorf("pebble: points: %w", err)
	}
	// Room for every bucket of the range, up to a few hundred: a year of
	// days fits, longer curves grow it.
	ps := make([]analytics.Point, 0, min((hi-lo)/int64(step/time.Second)+1, 512))
	for ok := it.First(); ok; ok = it.Next() {
		if len(ps)%1024 == 1023 {
			if err := ctx.Err(); err != nil {
				it.Close()
				return nil, fmt.Errorf("pebble: points: %w", err)
			}
		}
		k := it.Key()
		if k[len(k)-1] == 'r' && len(k) == len(prefix)+9 {
			k = k[:len(k)-1] // the rolled value
		}
		start := int64(binary.BigEndian.Uint64(k[len(k)-8:]) ^ 1<<63)
		vis, err := decodeVisits(it.Value())
		if err != nil {
			it.Close()
			return nil, fmt.Errorf("pebble: points: %q at %d: %w", key, start, err)
		}
		t := time.Unix(start, 0).UTC()
		if n := len(ps); n > 0 && ps[n-1].Start.Equal(t) {
			ps[n-1].Visits = ps[n-1].Visits.Add(vis)
			continue
		}
		ps = append(ps, analytics.Point{Start: t, Visits: vis})
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("pebble: points: %w", err)
	}
	return ps, nil
}
