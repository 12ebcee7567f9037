package pebblestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/rollup"
)

// Unique visitors:
//
//	'u' uvarint(len(key)) key day -> sketch   the union of the day's sketches (hll.Sketch.AppendBinary)
//
// Write merges each sketch of a batch into the stored one (read, merge,
// set, under the commit lock, in the batch's atomic commit): a merge is
// idempotent, so a resent batch changes nothing even without its
// identity. They expire with the breakdowns, through the same 'x' index.

func appendUniqPrefix(b []byte, key string) []byte {
	return appendLinkKey(b, 'u', key)
}

func appendUniqKey(b []byte, key string, day int64) []byte {
	return binary.BigEndian.AppendUint64(appendUniqPrefix(b, key), timeBits(day))
}

// addUniques adds to wb each sketch of us merged with the stored one. Call
// it holding the commit lock.
func (s *Store) addUniques(wb *pebble.Batch, us []analytics.UniqueSketch) error {
	var k []byte
	for _, u := range us {
		if !rollup.Align(u.Day, rollup.Day).Equal(u.Day) {
			return fmt.Errorf("%q: %v is not the start of a UTC day", u.Key, u.Day)
		}
		var sk hll.Sketch
		if err := sk.MergeBinary(u.Sketch); err != nil {
			return fmt.Errorf("%q: %w", u.Key, err)
		}
		k = appendUniqKey(k[:0], u.Key, u.Day.Unix())
		v, c, err := s.db.Get(k)
		switch {
		case errors.Is(err, pebble.ErrNotFound):
		case err != nil:
			return err
		default:
			err = sk.MergeBinary(v)
			c.Close()
			if err != nil {
				return fmt.Errorf("stored sketch of %q: %w", u.Key, err)
			}
		}
		if err := wb.Set(k, sk.AppendBinary(nil), nil); err != nil {
			return err
		}
		if err := wb.Set(appendDimIndexKey(nil, u.Day.Unix(), u.Key), nil, nil); err != nil {
			return err
		}
	}
	return nil
}

// Uniques implements analytics.UniqueSource: one iterator range.
func (s *Store) Uniques(ctx context.Context, key string, from, to time.Time) (*hll.Sketch, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pebble: uniques: %w", err)
	}
	sk := new(hll.Sketch)
	lo, hi := rollup.AlignUp(from, rollup.Day).Unix(), rollup.AlignUp(to, rollup.Day).Unix()
	if lo >= hi {
		return sk, nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	prefix := appendUniqPrefix(nil, key)
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{
		LowerBound: binary.BigEndian.AppendUint64(slices.Clip(prefix), timeBits(lo)),
		UpperBound: binary.BigEndian.AppendUint64(slices.Clip(prefix), timeBits(hi)),
	})
	if err != nil {
		return nil, fmt.Errorf("pebble: uniques: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		if err := sk.MergeBinary(it.Value()); err != nil {
			it.Close()
			return nil, fmt.Errorf("pebble: uniques of %q: %w", key, err)
		}
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("pebble: uniques: %w", err)
	}
	return sk, nil
}
