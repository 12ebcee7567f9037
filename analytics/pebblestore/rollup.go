package pebblestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// Active implements rollup.Store: the keys of (step, period) in byte order.
func (s *Store) Active(ctx context.Context, step time.Duration, period time.Time, after string, limit int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pebble: active: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	prefix := appendActiveKey(nil, step, period.Unix(), "")
	lo := appendActiveKey(nil, step, period.Unix(), after)
	if after != "" {
		lo = append(lo, 0) // the first key after it
	}
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("pebble: active: %w", err)
	}
	var keys []string
	for ok := it.First(); ok && len(keys) < limit; ok = it.Next() {
		keys = append(keys, string(it.Key()[len(prefix):]))
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("pebble: active: %w", err)
	}
	return keys, nil
}

// Marks implements rollup.Store and analytics.Source: one iterator range.
func (s *Store) Marks(ctx context.Context, key string) ([]rollup.Mark, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pebble: marks: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	prefix := appendMarkKey(nil, key, 0, 0, 0)
	prefix = prefix[:len(prefix)-20]
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("pebble: marks: %w", err)
	}
	var ms []rollup.Mark
	for ok := it.First(); ok; ok = it.Next() {
		m, err := parseMark(it.Key(), it.Value())
		if err != nil {
			it.Close()
			return nil, fmt.Errorf("pebble: marks of %q: %w", key, err)
		}
		ms = append(ms, m)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("pebble: marks: %w", err)
	}
	return ms, nil
}

// reroll returns the visits of r's bucket as the tier below r's holds
// them now. Call it holding mu and the commit lock.
func (s *Store) reroll(ctx context.Context, r rollup.Row) (analytics.Visits, error) {
	i, _ := s.plan.Level(r.Step)
	pts, err := s.scan(ctx, r.Key, s.plan.Tiers()[i-1].Step, r.Start.Unix(), r.Start.Add(r.Step).Unix())
	var v analytics.Visits
	for _, p := range pts {
		v = v.Add(p.Visits)
	}
	return v, err
}

// Apply implements rollup.Store in one atomic batch. A row replaces the
// rolled value of its bucket unless that has more visits; the values are
// read under the commit lock, so nothing commits in between.
func (s *Store) Apply(ctx context.Context, u rollup.Update) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pebble: apply: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return err
	}
	wb := s.db.NewBatch()
	defer wb.Close()
	if err := s.addRollup(wb, u.Active, u.Marks); err != nil {
		return fmt.Errorf("pebble: apply: %w", err)
	}
	for _, m := range u.Done {
		if err := wb.Delete(appendMarkKey(nil, m.Key, m.Step, m.Start.Unix(), m.ID), nil); err != nil {
			return fmt.Errorf("pebble: apply: %w", err)
		}
	}
	for _, r := range u.Rows {
		if err := s.checkBucket(r.Key, r.Step, r.Start); err != nil {
			return fmt.Errorf("pebble: apply: %w", err)
		}
		if i, _ := s.plan.Level(r.Step); i == 0 {
			return fmt.Errorf("pebble: apply: %q: the finest tier is not rolled", r.Key)
		}
	}
	if err := s.checkSpace(len(wb.Repr()) + 64*len(u.Rows)); err != nil {
		return err
	}
	s.commit.Lock()
	defer s.commit.Unlock()
	var k, v []byte
	for _, r := range u.Rows {
		if s.erasedBucket(r.Key, r.Start, r.Step) {
			continue // rolled from data erased since it was read
		}
		if s.erasedHolds(r.Key, r.Start, r.Step) {
			// The worker may have read the finer tier before the
			// erasure: the bucket is rolled again from what it holds
			// now, under the commit lock.
			v, err := s.reroll(ctx, r)
			if err != nil {
				return fmt.Errorf("pebble: apply: %w", err)
			}
			r.Visits = v
		}
		k = append(appendPointKey(k[:0], r.Key, r.Step, r.Start.Unix()), 'r')
		old, c, err := s.db.Get(k)
		switch {
		case errors.Is(err, pebble.ErrNotFound):
		case err != nil:
			return fmt.Errorf("pebble: apply: %w", err)
		default:
			was, err := decodeVisits(old)
			c.Close()
			if err != nil {
				return fmt.Errorf("pebble: apply: %q: %w", r.Key, err)
			}
			if was.Human+was.Bot > r.Human+r.Bot {
				continue // computed from fresher data than r
			}
		}
		v = appendVisits(v[:0], r.Visits)
		if err := wb.Set(k, v, nil); err != nil {
			return fmt.Errorf("pebble: apply: %w", err)
		}
		if err := wb.Set(appendIndexKey(k[:0], r.Step, r.Start.Unix(), r.Key), nil, nil); err != nil {
			return fmt.Errorf("pebble: apply: %w", err)
		}
	}
	// Not synced: the worker's Advance, synced, comes after it in the log
	// and makes it durable with itself; a crash before that redoes it.
	if err := s.commitBatch(wb, pebble.NoSync); err != nil {
		return fmt.Errorf("pebble: apply: commit: %w", err)
	}
	return nil
}

// Progress implements rollup.Store and analytics.Source.
func (s *Store) Progress(ctx context.Context) (rollup.Progress, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pebble: progress: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: []byte{'w'}, UpperBound: []byte{'w' + 1}})
	if err != nil {
		return nil, fmt.Errorf("pebble: progress: %w", err)
	}
	p := rollup.Progress{}
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != 5 || len(v) != 8 {
			it.Close()
			return nil, fmt.Errorf("pebble: progress: bad entry %x = %x", k, v)
		}
		step := time.Duration(binary.BigEndian.Uint32(k[1:])) * time.Second
		p[step] = time.Unix(int64(binary.BigEndian.Uint64(v)^1<<63), 0).UTC()
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("pebble: progress: %w", err)
	}
	return p, nil
}

// Advance implements rollup.Store, synced to disk (see Apply).
func (s *Store) Advance(ctx context.Context, step time.Duration, done time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pebble: advance: %w", err)
	}
	if err := s.checkQueue(step); err != nil {
		return fmt.Errorf("pebble: advance: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return err
	}
	k := binary.BigEndian.AppendUint32([]byte{'w'}, uint32(step/time.Second))
	s.commit.Lock()
	defer s.commit.Unlock()
	old, c, err := s.db.Get(k)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return fmt.Errorf("pebble: advance: %w", err)
	default:
		was := int64(binary.BigEndian.Uint64(old) ^ 1<<63)
		c.Close()
		if was >= done.Unix() {
			return nil
		}
	}
	wb := s.db.NewBatch()
	defer wb.Close()
	if err := wb.Set(k, binary.BigEndian.AppendUint64(nil, timeBits(done.Unix())), nil); err != nil {
		return fmt.Errorf("pebble: advance: %w", err)
	}
	if err := s.commitBatch(wb, pebble.Sync); err != nil {
		return fmt.Errorf("pebble: advance: commit: %w", err)
	}
	return nil
}
