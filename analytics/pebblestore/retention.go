package pebblestore

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/linkgate/linkgate/rollup"
)

// Per-tenant retention
//
// A tenant may keep its counts for less time than the service's tiers do
// (SetTenantRetention). Expire then walks the tenant's rows of each kind
// (one span per key length, as erasure finds them: erase.go) and deletes
// those about time that ended the tenant's retention before now: buckets
// of every tier, the all-time one included, marks, breakdowns, sketches,
// top counts with their index entries. Its work grows with the rows the
// tenant keeps, not with the store's: a tenant's walk reads its own rows
// only. The time-major index entries of what it deletes are left to the
// tiers' own expiry, which takes them as empty.

// tenantRetention is the tenants' retentions: name → duration.
type tenantRetention = atomic.Pointer[map[string]time.Duration]

// SetTenantRetention sets how long each tenant's counts are kept, by
// name: at most the service's retention (the gateway's config checks it);
// a tenant not in m keeps the service's. Expire applies it.
func (s *Store) SetTenantRetention(m map[string]time.Duration) {
	c := maps.Clone(m)
	s.tenantKeep.Store(&c)
}

// expireTenants deletes the rows of each tenant with a retention that are
// about time ended that retention before now.
func (s *Store) expireTenants(now time.Time) (int, error) {
	m := s.tenantKeep.Load()
	if m == nil {
		return 0, nil
	}
	total := 0
	for _, name := range slices.Sorted(maps.Keys(*m)) {
		cut := now.Add(-(*m)[name]).Unix()
		for _, tag := range []byte{'p', 'd', 'v', 'u', 'n'} {
			n, err := s.expireTenantRows(tag, name+"/", cut)
			total += n
			if err != nil {
				return total, fmt.Errorf("tenant %s: %w", name, err)
			}
		}
	}
	return total, nil
}

// expireTenantRows deletes the rows of kind tag of the keys starting with
// prefix whose time ended at or before cut (unix seconds), in one commit
// under the commit lock, so that no Write of the same rows slips between
// the walk and the deletes.
func (s *Store) expireTenantRows(tag byte, prefix string, cut int64) (int, error) {
	s.commit.Lock()
	defer s.commit.Unlock()
	spans, err := s.linkSpans(tag, prefix, false)
	if err != nil {
		return 0, err
	}
	wb := s.db.NewBatch()
	defer wb.Close()
	n := 0
	for _, sp := range spans {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: sp[0], UpperBound: sp[1]})
		if err != nil {
			return 0, err
		}
		for ok := it.First(); ok; ok = it.Next() {
			k := it.Key()
			end, err := rowEnd(tag, k)
			if err != nil {
				it.Close()
				return 0, err
			}
			if end > cut {
				continue
			}
			if tag == 'n' {
				if err := s.deleteTopEntry(wb, k, it.Value()); err != nil {
					it.Close()
					return 0, err
				}
			}
			if err := wb.Delete(k, nil); err != nil {
				it.Close()
				return 0, err
			}
			n++
		}
		if err := it.Close(); err != nil {
			return 0, err
		}
	}
	if n == 0 {
		return 0, nil
	}
	return n, s.commitBatch(wb, pebble.NoSync)
}

// rowEnd returns when the time a row of kind tag is about ends, in unix
// seconds: its bucket's end ('p', 'd'), or its UTC day's ('v', 'u', 'n').
func rowEnd(tag byte, k []byte) (int64, error) {
	n, w := binary.Uvarint(k[1:])
	rest := k[min(len(k), 1+w+int(min(n, uint64(len(k))))):]
	at := func(off int) (int64, bool) {
		if w <= 0 || len(rest) < off+8 {
			return 0, false
		}
		return int64(binary.BigEndian.Uint64(rest[off:]) ^ 1<<63), true
	}
	var start int64
	var ok bool
	step := int64(rollup.Day / time.Second)
	switch tag {
	case 'p', 'd':
		if start, ok = at(4); ok {
			step = int64(binary.BigEndian.Uint32(rest))
		}
	case 'v':
		start, ok = at(1)
	default: // 'u', 'n'
		start, ok = at(0)
	}
	if !ok {
		return 0, fmt.Errorf("bad key %x", k)
	}
	return start + step, nil
}
