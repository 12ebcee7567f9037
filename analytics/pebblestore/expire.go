package pebblestore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/linkgate/linkgate/rollup"
)

// expireChunk is how many buckets Expire deletes per committed batch: small
// enough that Write waits at most a few milliseconds for it.
const expireChunk = 10_000

// Expire deletes, in every tier but the all-time one, the buckets that
// ended at least the tier's retention before now, and the Active entries
// and marks about data that expired. It is safe to call while writing and
// reading; its work grows with the number of buckets it deletes (and the
// marks pending, which are few). The gateway calls it periodically (see
// Run).
func (s *Store) Expire(now time.Time) error {
	s.expiring.Lock()
	defer s.expiring.Unlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return err
	}
	total := 0
	for _, t := range s.tiers {
		if !t.Expires() {
			continue
		}
		// A bucket [start, start+step) has ended by now-retention when
		// start <= now-retention-step.
		cut := now.Add(-t.Retention - t.Step).Unix()
		lo := appendIndexKey(nil, t.Step, -1<<63, "")
		hi := appendIndexKey(nil, t.Step, cut+1, "")
		n, err := s.expireIndex(lo, hi, expireChunk, deleteBucket)
		total += n
		if err != nil {
			return fmt.Errorf("pebble: expire %v: %w", t, err)
		}
	}
	if err := s.expireRollup(now); err != nil {
		return fmt.Errorf("pebble: expire: %w", err)
	}
	if err := s.expireTop(now); err != nil {
		return fmt.Errorf("pebble: expire top: %w", err)
	}
	if n, err := s.expireDims(now); err != nil {
		return fmt.Errorf("pebble: expire breakdowns: %w", err)
	} else {
		total += n
	}
	if n, err := s.expireTenants(now); err != nil {
		return fmt.Errorf("pebble: expire: %w", err)
	} else {
		total += n
	}
	s.log.Debug("expired buckets", "now", now, "buckets", total)
	return nil
}

// source returns the tier that the queue of step rolls from: the finest
// for marks.
func (s *Store) source(step time.Duration) (rollup.Tier, time.Duration) {
	tiers := s.plan.Tiers()
	if i, ok := s.plan.Level(step); ok && step != rollup.MarksQueue {
		return tiers[i-1], s.plan.Batch(i)
	}
	return tiers[0], s.plan.MarkPeriod()
}

// expireRollup deletes the Active entries of periods whose source data
// has expired (one range delete per queue) and the marks of buckets whose
// source has (a full walk of the marks, which are few: each is deleted
// once processed).
func (s *Store) expireRollup(now time.Time) error {
	s.commit.Lock()
	defer s.commit.Unlock()
	wb := s.db.NewBatch()
	defer wb.Close()
	queues := []time.Duration{rollup.MarksQueue}
	for _, t := range s.plan.Tiers()[1:] {
		queues = append(queues, t.Step)
	}
	for _, q := range queues {
		src, span := s.source(q)
		cut := now.Add(-src.Retention - span).Unix()
		if err := wb.DeleteRange(appendActiveKey(nil, q, -1<<63, ""), appendActiveKey(nil, q, cut, ""), nil); err != nil {
			return err
		}
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'d'}, UpperBound: []byte{'d' + 1}})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		m, err := parseMark(it.Key(), it.Value())
		if err != nil {
			it.Close()
			return err
		}
		t := s.tiers[m.Step]
		if src, _ := s.source(m.Step); !m.Start.Add(t.Step + src.Retention).After(now) {
			if err := wb.Delete(it.Key(), nil); err != nil {
				it.Close()
				return err
			}
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	return s.commitBatch(wb, pebble.NoSync)
}

// expireIndex deletes, for each index entry in [lo, hi), what del
// deletes of it, and the index entries, chunk entries per committed batch
// so that Write waits for one chunk at most. It returns how many entries
// it walked.
func (s *Store) expireIndex(lo, hi []byte, chunk int, del func(wb *pebble.Batch, index []byte) error) (int, error) {
	total := 0
	for {
		if s.closing.Load() {
			return total, ErrClosed
		}
		n, next, err := s.expireIndexChunk(lo, hi, chunk, del)
		total += n
		if err != nil || next == nil {
			return total, err
		}
		lo = next
	}
}

// expireIndexChunk is one batch of expireIndex: up to chunk entries from
// lo. It returns where to go on, nil when it reached hi.
func (s *Store) expireIndexChunk(lo, hi []byte, chunk int, del func(wb *pebble.Batch, index []byte) error) (int, []byte, error) {
	s.commit.Lock()
	defer s.commit.Unlock()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, nil, err
	}
	wb := s.db.NewBatch()
	defer wb.Close()
	n := 0
	var next []byte
	for ok := it.First(); ok; ok = it.Next() {
		if n == chunk {
			next = slices.Clone(it.Key())
			break
		}
		if err := del(wb, it.Key()); err != nil {
			it.Close()
			return 0, nil, err
		}
		n++
	}
	if err := it.Close(); err != nil {
		return 0, nil, err
	}
	if n == 0 {
		return 0, nil, nil
	}
	end := hi
	if next != nil {
		end = next
	}
	if err := wb.DeleteRange(lo, end, nil); err != nil {
		return 0, nil, err
	}
	// Expiry lost to a crash is done again by the next call: no fsync.
	if err := s.commitBatch(wb, pebble.NoSync); err != nil {
		return 0, nil, err
	}
	return n, next, nil
}

// deleteBucket deletes the bucket, and its rolled-up mark, that the
// bucket index entry index names.
func deleteBucket(wb *pebble.Batch, index []byte) error {
	step, start, key, err := parseIndexKey(index)
	if err != nil {
		return err
	}
	pk := appendPointKey(nil, key, step, start)
	if err := wb.Delete(pk, nil); err != nil {
		return err
	}
	return wb.Delete(append(pk, 'r'), nil)
}

// run calls Expire with now at once and then at every tick until ctx is
// done or the store is closed, logging failures.
func (s *Store) run(ctx context.Context, now func() time.Time, tick <-chan time.Time) {
	for {
		if err := s.Expire(now()); err != nil {
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrFailed) {
				return
			}
			s.log.Error("expire", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
	}
}
