package pebblestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// Top links
//
// A flush's analytics.DimLink counts (each link's human visits per UTC
// day) keep, per day, each link's count and an index of the day's links by
// count:
//
//	'n' uvarint(len(key)) key day -> count   the link's human visits of the day
//	'o' day ^count key            -> empty   the day's links, most visited first
//	'O' day uvarint(len(tenant)) tenant ^count key -> empty   the same, of one tenant's links
//
// day is unix seconds as start is; ^count is the count's bits inverted
// (big-endian), so that an iterator over a day's 'o' range meets its links
// from the most visited down, and a link's counts of a range of days are
// one iterator range. A tenant's link (analytics.TenantKey) is in the
// day's 'o' range with every link, and in its tenant's 'O' range too, so
// that a tenant's top list reads its own links only. Write reads the 'n'
// entries it changes and moves their 'o' (and 'O') entries, under the
// commit lock, in the batch's atomic commit: a link's entries cost two
// keys per day (three for a tenant's link; and the (day, link) index entry
// the breakdowns share, for expiry), and a flush reads one key per (link,
// day) it changes.
//
// Top answers with the threshold algorithm (Fagin, Lotem and Naor): it
// reads the days' indexes in parallel, most visited first, sums each link
// met over every day of the range ('n' reads), and stops once the n-th
// best sum is at least the sum of the counts at the days' current depths,
// which bounds every link not met yet. Its answer is exact; how deep it
// reads depends on how skewed the traffic is, not on how many links there
// are (BenchmarkTopMonth).

func appendTopCountPrefix(b []byte, key string) []byte {
	return appendLinkKey(b, 'n', key)
}

func appendTopCountKey(b []byte, day int64, key string) []byte {
	return binary.BigEndian.AppendUint64(appendTopCountPrefix(b, key), timeBits(day))
}

func appendTopIndexKey(b []byte, day int64, count int64, key string) []byte {
	b = append(b, 'o')
	b = binary.BigEndian.AppendUint64(b, timeBits(day))
	b = binary.BigEndian.AppendUint64(b, ^uint64(count))
	return append(b, key...)
}

// appendTopDayPrefix appends the start of a day's index keys: every link's
// ('o'), or one tenant's links' ('O', tenant not "").
func appendTopDayPrefix(b []byte, day int64, tenant string) []byte {
	if tenant == "" {
		return binary.BigEndian.AppendUint64(append(b, 'o'), timeBits(day))
	}
	b = binary.BigEndian.AppendUint64(append(b, 'O'), timeBits(day))
	b = binary.AppendUvarint(b, uint64(len(tenant)))
	return append(b, tenant...)
}

// appendTenantTopIndexKey appends the key of a tenant's link in its
// tenant's index of a day.
func appendTenantTopIndexKey(b []byte, day int64, tenant string, count int64, key string) []byte {
	b = appendTopDayPrefix(b, day, tenant)
	b = binary.BigEndian.AppendUint64(b, ^uint64(count))
	return append(b, key...)
}

// setTopIndex moves key's entries in the indexes of day from old (0: none)
// to count: the day's, and its tenant's for a tenant's link.
func setTopIndex(wb *pebble.Batch, day int64, key string, old, count int64) error {
	tenant, _ := analytics.SplitKey(key)
	if old > 0 {
		if err := wb.Delete(appendTopIndexKey(nil, day, old, key), nil); err != nil {
			return err
		}
		if tenant != "" {
			if err := wb.Delete(appendTenantTopIndexKey(nil, day, tenant, old, key), nil); err != nil {
				return err
			}
		}
	}
	if err := wb.Set(appendTopIndexKey(nil, day, count, key), nil, nil); err != nil {
		return err
	}
	if tenant != "" {
		return wb.Set(appendTenantTopIndexKey(nil, day, tenant, count, key), nil, nil)
	}
	return nil
}

type topKey struct {
	day int64
	key string
}

// topDeltas collects a batch's DimLink counts by (day, link).
func topDeltas(ds []analytics.DimCount) map[topKey]int64 {
	var m map[topKey]int64
	for _, d := range ds {
		if d.Dim != analytics.DimLink || d.N == 0 {
			continue
		}
		if m == nil {
			m = make(map[topKey]int64)
		}
		m[topKey{d.Day.Unix(), d.Value}] += d.N
	}
	return m
}

// addTop adds to wb the new counts of deltas and moves their index
// entries. Call it holding the commit lock, after the watermark check.
func (s *Store) addTop(wb *pebble.Batch, deltas map[topKey]int64) error {
	var k []byte
	for tk, n := range deltas {
		k = appendTopCountKey(k[:0], tk.day, tk.key)
		old, err := s.topCount(k)
		if err != nil {
			return err
		}
		if err := wb.Set(k, binary.AppendVarint(nil, old+n), nil); err != nil {
			return err
		}
		if err := setTopIndex(wb, tk.day, tk.key, old, old+n); err != nil {
			return err
		}
		if old == 0 {
			if err := wb.Set(appendDimIndexKey(nil, tk.day, tk.key), nil, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// topCount reads a link's count of a day, 0 when none.
func (s *Store) topCount(k []byte) (int64, error) {
	v, c, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer c.Close()
	n, w := binary.Varint(v)
	if w <= 0 {
		return 0, fmt.Errorf("bad top count %x = %x", k, v)
	}
	return n, nil
}

// topPage is how many index entries Top reads of a day at a time.
const topPage = 32

// dayCursor reads one day's index, most visited first.
type dayCursor struct {
	day  int64
	it   *pebble.Iterator
	ok   bool
	last int64 // the count at the cursor's depth: a bound on every link not met yet on this day
}

// Top implements analytics.TopSource (see above).
func (s *Store) Top(ctx context.Context, from, to time.Time, n int) ([]analytics.TopLink, error) {
	return s.top(ctx, "", from, to, n)
}

// TenantTop implements analytics.TopSource: Top over the tenant's index.
func (s *Store) TenantTop(ctx context.Context, tenant string, from, to time.Time, n int) ([]analytics.TopLink, error) {
	if tenant == "" {
		return nil, fmt.Errorf("pebble: top: no tenant")
	}
	return s.top(ctx, tenant, from, to, n)
}

// top is Top over the indexes of tenant's links ("": every link). It is
// one function over 80 lines because the cursors of every day, the
// iterator of counts and the bound they give share one snapshot and one
// loop: the loop stops as soon as the n best cannot be overtaken, which a
// split would have to hand the whole state across to decide.
func (s *Store) top(ctx context.Context, tenant string, from, to time.Time, n int) ([]analytics.TopLink, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pebble: top: %w", err)
	}
	lo, hi := rollup.AlignUp(from, rollup.Day).Unix(), rollup.AlignUp(to, rollup.Day).Unix()
	if lo >= hi || n <= 0 {
		return nil, nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	snap := s.db.NewSnapshot() // one consistent view of every day
	defer snap.Close()
	var days []*dayCursor
	defer func() {
		for _, c := range days {
			c.it.Close()
		}
	}()
	at := len(appendTopDayPrefix(nil, lo, tenant)) // where an index key's count starts
	for day := lo; day < hi; day += 86400 {
		p := appendTopDayPrefix(nil, day, tenant)
		it, err := snap.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: prefixEnd(p)})
		if err != nil {
			return nil, fmt.Errorf("pebble: top: %w", err)
		}
		c := &dayCursor{day: day, it: it}
		c.ok = it.First()
		days = append(days, c)
	}
	// Each link met is summed over the range with one seek of this
	// iterator over its counts.
	counts, err := snap.NewIter(&pebble.IterOptions{LowerBound: []byte{'n'}, UpperBound: []byte{'o'}})
	if err != nil {
		return nil, fmt.Errorf("pebble: top: %w", err)
	}
	defer counts.Close()
	sums := map[string]int64{}
	var best []analytics.TopLink // the n best so far, most visited first
	var k []byte
	for {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("pebble: top: %w", err)
		}
		var bound int64
		more := false
		for _, c := range days {
			for i := 0; i < topPage && c.ok; i++ {
				ik := c.it.Key()
				c.last = int64(^binary.BigEndian.Uint64(ik[at : at+8]))
				key := string(ik[at+8:])
				if _, seen := sums[key]; !seen {
					k = appendTopCountPrefix(k[:0], key)
					plen := len(k)
					var total int64
					for ok := counts.SeekGE(binary.BigEndian.AppendUint64(k, timeBits(lo))); ok; ok = counts.Next() {
						ck := counts.Key()
						if len(ck) != plen+8 || string(ck[:plen]) != string(k[:plen]) || int64(binary.BigEndian.Uint64(ck[plen:])^1<<63) >= hi {
							break
						}
						x, w := binary.Varint(counts.Value())
						if w <= 0 {
							return nil, fmt.Errorf("pebble: top: bad count of %q", key)
						}
						total += x
					}
					sums[key] = total
					best = insertTop(best, analytics.TopLink{Key: key, Visits: total}, n)
				}
				c.ok = c.it.Next()
			}
			if c.ok {
				bound += c.last
				more = true
			}
		}
		if !more || len(best) == n && best[n-1].Visits >= bound {
			return best, nil
		}
	}
}

// TopCounts implements analytics.TopSource: one seek per key.
func (s *Store) TopCounts(ctx context.Context, keys []string, from, to time.Time) (map[string]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pebble: top counts: %w", err)
	}
	lo, hi := rollup.AlignUp(from, rollup.Day).Unix(), rollup.AlignUp(to, rollup.Day).Unix()
	out := make(map[string]int64, len(keys))
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'n'}, UpperBound: []byte{'o'}})
	if err != nil {
		return nil, fmt.Errorf("pebble: top counts: %w", err)
	}
	defer it.Close()
	var k []byte
	for _, key := range keys {
		k = appendTopCountPrefix(k[:0], key)
		plen := len(k)
		var total int64
		for ok := lo < hi && it.SeekGE(binary.BigEndian.AppendUint64(k, timeBits(lo))); ok; ok = it.Next() {
			ck := it.Key()
			if len(ck) != plen+8 || string(ck[:plen]) != string(k[:plen]) || int64(binary.BigEndian.Uint64(ck[plen:])^1<<63) >= hi {
				break
			}
			x, w := binary.Varint(it.Value())
			if w <= 0 {
				return nil, fmt.Errorf("pebble: top counts: bad count of %q", key)
			}
			total += x
		}
		out[key] = total
	}
	return out, nil
}

// insertTop inserts l into best, kept sorted (most visits first, then by
// key) and at most n long.
func insertTop(best []analytics.TopLink, l analytics.TopLink, n int) []analytics.TopLink {
	i, _ := slices.BinarySearchFunc(best, l, func(a, b analytics.TopLink) int {
		if a.Visits != b.Visits {
			if a.Visits > b.Visits {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	if i >= n {
		return best
	}
	best = slices.Insert(best, i, l)
	if len(best) > n {
		best = best[:n]
	}
	return best
}

// expireTop deletes the index entries of the days that ended at least the
// breakdowns' retention before now: one range delete. Their counts go with
// the breakdowns, through the (day, link) index (expireDims).
func (s *Store) expireTop(now time.Time) error {
	keep := time.Duration(s.dimRetention.Load())
	cut := now.Add(-keep-rollup.Day).Unix() + 1 // days starting before it
	s.commit.Lock()
	defer s.commit.Unlock()
	wb := s.db.NewBatch()
	defer wb.Close()
	for _, p := range []byte{'o', 'O'} {
		lo := append([]byte{p}, binary.BigEndian.AppendUint64(nil, timeBits(-1<<62))...)
		hi := append([]byte{p}, binary.BigEndian.AppendUint64(nil, timeBits(cut))...)
		if err := wb.DeleteRange(lo, hi, nil); err != nil {
			return err
		}
	}
	return s.commitBatch(wb, pebble.NoSync)
}
