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

// write adds b's counts, Active entries and marks in one atomic batch and
// returns once it is synced to disk. When it fails nothing of b was
// applied; a batch whose identity was applied already is skipped (see the
// package documentation), so a resend counts everything once. A count whose
// step is not one of the store's tiers, or whose start is not a bucket
// start, fails the whole batch, as does an Active entry or mark of an
// unknown tier.
//
// A disk with less than the reserve free refuses the batch (ErrDiskFull),
// so a filling disk stops the writes cleanly. A commit that fails in the
// engine anyway marks the store failed (ErrFailed): from then on every
// method returns that error, reads included, since the failed batch may or
// may not have been applied. After a restart the batch is counted if its log
// record reached the disk whole.
//
// write is Write of a batch filtered by the erasures of generation gen:
// it returns errErasedMeanwhile when an erasure committed since.
func (s *Store) write(ctx context.Context, b analytics.Batch, gen uint64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pebble: write: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return err
	}
	wb := s.db.NewBatchWithSize(len(b.Counts)*64 + len(b.Active)*32 + len(b.Marks)*48 + len(b.Dims)*48)
	defer wb.Close()
	var k, v []byte
	for _, c := range b.Counts {
		if err := s.checkBucket(c.Key, c.Step, c.Start); err != nil {
			return fmt.Errorf("pebble: write: %w", err)
		}
		if c.Visits == (analytics.Visits{}) {
			continue
		}
		v = appendVisits(v[:0], c.Visits)
		k = appendPointKey(k[:0], c.Key, c.Step, c.Start.Unix())
		if err := wb.Merge(k, v, nil); err != nil {
			return fmt.Errorf("pebble: write: %w", err)
		}
		k = appendIndexKey(k[:0], c.Step, c.Start.Unix(), c.Key)
		if err := wb.Set(k, nil, nil); err != nil {
			return fmt.Errorf("pebble: write: %w", err)
		}
	}
	if err := addDims(wb, b.Dims); err != nil {
		return fmt.Errorf("pebble: write: %w", err)
	}
	if err := s.addRollup(wb, b.Active, b.Marks); err != nil {
		return fmt.Errorf("pebble: write: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pebble: write: %w", err)
	}
	if err := s.checkSpace(len(wb.Repr())); err != nil {
		return err
	}
	s.commit.Lock()
	defer s.commit.Unlock()
	if s.erasedSince(gen) {
		return errErasedMeanwhile
	}
	if b.Writer != "" {
		// Read and raised under the commit lock: no other Write of the
		// writer can slip in between.
		k = appendWriterKey(k[:0], b.Writer)
		applied, err := s.watermark(k)
		if err != nil {
			return fmt.Errorf("pebble: write: %w", err)
		}
		if b.FirstSeq() <= applied {
			return nil // applied already: a retry or a replay
		}
		if err := wb.Set(k, binary.BigEndian.AppendUint64(nil, b.Seq), nil); err != nil {
			return fmt.Errorf("pebble: write: %w", err)
		}
	}
	if err := s.addUniques(wb, b.Uniques); err != nil {
		return fmt.Errorf("pebble: write: uniques: %w", err)
	}
	if deltas := topDeltas(b.Dims); deltas != nil {
		if err := s.addTop(wb, deltas); err != nil {
			return fmt.Errorf("pebble: write: top: %w", err)
		}
	}
	if err := s.commitBatch(wb, pebble.Sync); err != nil {
		return fmt.Errorf("pebble: write: commit: %w", err)
	}
	return nil
}

// watermark returns the last Seq applied of the writer whose key is k, 0
// when none was.
func (s *Store) watermark(k []byte) (uint64, error) {
	v, c, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("bad watermark %x = %x", k, v)
	}
	return binary.BigEndian.Uint64(v), nil
}

// checkBucket checks that step names a tier and start is one of its
// bucket starts.
func (s *Store) checkBucket(key string, step time.Duration, start time.Time) error {
	if _, ok := s.tiers[step]; !ok {
		return fmt.Errorf("step %v of %q is not a tier", step, key)
	}
	if !rollup.Align(start, step).Equal(start) {
		return fmt.Errorf("%v is not the start of a %v bucket", start, step)
	}
	return nil
}

// checkQueue checks that step names a rollup queue: a tier above the
// finest, or the marks queue.
func (s *Store) checkQueue(step time.Duration) error {
	if step == rollup.MarksQueue {
		return nil
	}
	if i, ok := s.plan.Level(step); !ok || i == 0 {
		return fmt.Errorf("step %v is not a tier the rollup writes", step)
	}
	return nil
}

// addRollup adds Active entries and marks to wb.
func (s *Store) addRollup(wb *pebble.Batch, as []rollup.Active, ms []rollup.Mark) error {
	var k, v []byte
	for _, a := range as {
		if err := s.checkQueue(a.Step); err != nil {
			return err
		}
		if err := wb.Set(appendActiveKey(k[:0], a.Step, a.Period.Unix(), a.Key), nil, nil); err != nil {
			return err
		}
	}
	for _, m := range ms {
		if err := s.checkQueue(m.Step); err != nil || m.Step == rollup.MarksQueue {
			return fmt.Errorf("mark of %q: step %v is not a tier the rollup writes", m.Key, m.Step)
		}
		k = appendMarkKey(k[:0], m.Key, m.Step, m.Start.Unix(), m.ID)
		v = binary.BigEndian.AppendUint64(v[:0], uint64(m.At.UnixNano()))
		if err := wb.Set(k, v, nil); err != nil {
			return err
		}
	}
	return nil
}
