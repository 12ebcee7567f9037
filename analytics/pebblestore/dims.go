package pebblestore

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
)

// Breakdowns are kept beside the buckets:
//
//	'v' uvarint(len(key)) key dim day value -> count   (merged by adding, as visits)
//	'x' day key                             -> empty   the (link, day)'s index entry, for expiry
//
// dim is one byte, day the day's start in unix seconds (as start), value
// the rest of the key. A link's breakdown of one dimension over a range of
// days is one iterator range. A count is stored as visits (human = count)
// so that the database's one merge operator adds it.

func appendDimPrefix(b []byte, key string, dim visitor.Dim) []byte {
	b = appendLinkKey(b, 'v', key)
	return append(b, byte(dim))
}

func appendDimKey(b []byte, key string, dim visitor.Dim, day int64, value string) []byte {
	b = appendDimPrefix(b, key, dim)
	b = binary.BigEndian.AppendUint64(b, timeBits(day))
	return append(b, value...)
}

func appendDimIndexKey(b []byte, day int64, key string) []byte {
	b = append(b, 'x')
	b = binary.BigEndian.AppendUint64(b, timeBits(day))
	return append(b, key...)
}

// DefaultDimRetention is how long a Store keeps breakdowns unless told
// otherwise (SetDimRetention).
const DefaultDimRetention = analytics.DefaultDimRetentionDays * rollup.Day

// SetDimRetention sets how long Expire keeps the breakdowns of a day
// after its end (analytics.dimensions.retention_days).
func (s *Store) SetDimRetention(d time.Duration) {
	if d > 0 {
		s.dimRetention.Store(int64(d))
	}
}

// addDims adds b's dimension counts to wb.
func addDims(wb *pebble.Batch, ds []analytics.DimCount) error {
	var k, v, x []byte
	var lastKey string
	var lastDay int64 = -1 << 63
	for _, d := range ds {
		day := d.Day.Unix()
		switch {
		case !analytics.ValidDim(d.Dim):
			return fmt.Errorf("%q: no dimension %d", d.Key, d.Dim)
		case !rollup.Align(d.Day, rollup.Day).Equal(d.Day):
			return fmt.Errorf("%q: %v is not the start of a UTC day", d.Key, d.Day)
		case d.Value == "":
			return fmt.Errorf("%q: an empty value of %v", d.Key, d.Dim)
		}
		if d.N == 0 || d.Dim == analytics.DimLink { // DimLink: see addTop
			continue
		}
		k = appendDimKey(k[:0], d.Key, d.Dim, day, d.Value)
		v = appendVisits(v[:0], analytics.Visits{Human: d.N})
		if err := wb.Merge(k, v, nil); err != nil {
			return err
		}
		if d.Key != lastKey || day != lastDay {
			x = appendDimIndexKey(x[:0], day, d.Key)
			if err := wb.Set(x, nil, nil); err != nil {
				return err
			}
			lastKey, lastDay = d.Key, day
		}
	}
	return nil
}

// Dims implements analytics.DimSource: one iterator range.
func (s *Store) Dims(ctx context.Context, key string, dim visitor.Dim, from, to time.Time) ([]analytics.DimValue, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pebble: dims: %w", err)
	}
	lo, hi := rollup.AlignUp(from, rollup.Day).Unix(), rollup.AlignUp(to, rollup.Day).Unix()
	if lo >= hi {
		return nil, nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	prefix := appendDimPrefix(nil, key, dim)
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{
		LowerBound: binary.BigEndian.AppendUint64(slices.Clip(prefix), timeBits(lo)),
		UpperBound: binary.BigEndian.AppendUint64(slices.Clip(prefix), timeBits(hi)),
	})
	if err != nil {
		return nil, fmt.Errorf("pebble: dims: %w", err)
	}
	sums := map[string]int64{}
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				it.Close()
				return nil, fmt.Errorf("pebble: dims: %w", err)
			}
		}
		k := it.Key()
		vis, err := decodeVisits(it.Value())
		if err != nil {
			it.Close()
			return nil, fmt.Errorf("pebble: dims: %q: %w", key, err)
		}
		sums[string(k[len(prefix)+8:])] += vis.Human
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("pebble: dims: %w", err)
	}
	out := make([]analytics.DimValue, 0, len(sums))
	for v, c := range sums {
		if c != 0 {
			out = append(out, analytics.DimValue{Value: v, Count: c})
		}
	}
	return out, nil
}

// expireDims deletes the breakdowns of the days that ended at least the
// retention before now, a chunk of (link, day)s per batch: one range
// delete per dimension of each.
func (s *Store) expireDims(now time.Time) (int, error) {
	keep := time.Duration(s.dimRetention.Load())
	cut := now.Add(-keep - rollup.Day).Unix() // a day starting at or before it has ended keep ago
	lo := appendDimIndexKey(nil, -1<<63, "")
	hi := appendDimIndexKey(nil, cut+1, "")
	return s.expireIndex(lo, hi, expireChunk/8, deleteDims)
}

// deleteDims deletes the breakdowns, the visitors' sketch and the top-list
// count of the (day, link) that the breakdowns index entry index names:
// one range delete per dimension.
func deleteDims(wb *pebble.Batch, index []byte) error {
	if len(index) < 9 {
		return fmt.Errorf("bad dims index key %q", index)
	}
	day := int64(binary.BigEndian.Uint64(index[1:9]) ^ 1<<63)
	key := string(index[9:])
	var a, b []byte
	for d := range visitor.NumDims {
		a = appendDimKey(a[:0], key, d, day, "")
		b = appendDimKey(b[:0], key, d, day+1, "")
		if err := wb.DeleteRange(a, b, nil); err != nil {
			return err
		}
	}
	if err := wb.Delete(appendUniqKey(nil, key, day), nil); err != nil {
		return err
	}
	return wb.Delete(appendTopCountKey(nil, day, key), nil)
}
