package pebblestore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/linkgate/linkgate/analytics"
)

// Erasures (analytics.Eraser)
//
//	'e' uvarint(len(tenant)) tenant key -> at   an erasure: of the link key of tenant, or of the whole tenant (key "")
//
// at is the erasure's time in unix nanoseconds. Erase deletes, in one
// commit with the erasure's own row, every row of the keys it covers: the
// buckets of every tier ('p'), the marks ('d'), the breakdowns ('v'), the
// sketches ('u') and the top lists' counts ('n') with their index entries
// ('o', 'O', read from the counts). The time-major index entries ('t',
// 'x', 'a') of those keys are left to expiry: they name rows that are
// gone, which expiry and the rollup take as empty.
//
// A link's rows lie together ('p' uvarint(len(key)) key ...), and so do
// those of all the keys of one length that start with a tenant's prefix:
// a tenant's rows are one span per key length in use, found by seeking
// from one length's keys to the next.

// eraseState is the store's erasures, read once from the database and
// kept up to date by Erase.
type eraseState struct {
	mu     sync.Mutex
	loaded bool
	list   []analytics.Erasure
	set    analytics.Erased // list, indexed
	// gen counts erasures made by this process: a Write that filtered its
	// batch under an older gen filters it again (see Write).
	gen uint64
}

func appendEraseKey(b []byte, e analytics.Erasure) []byte {
	b = append(b, 'e')
	b = binary.AppendUvarint(b, uint64(len(e.Tenant)))
	b = append(b, e.Tenant...)
	return append(b, e.Key...)
}

func parseErasure(k, v []byte) (analytics.Erasure, error) {
	n, w := binary.Uvarint(k[1:])
	if w <= 0 || uint64(len(k)-1-w) < n || len(v) != 8 {
		return analytics.Erasure{}, fmt.Errorf("bad erasure %x = %x", k, v)
	}
	rest := k[1+w:]
	return analytics.Erasure{
		Tenant: string(rest[:n]),
		Key:    string(rest[n:]),
		At:     time.Unix(0, int64(binary.BigEndian.Uint64(v))).UTC(),
	}, nil
}

// erasures returns the store's erasures and their generation. Call it
// with s.mu held to read and the store usable.
func (s *Store) erasures() (analytics.Erased, uint64, error) {
	st := &s.erased
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.loaded {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'e'}, UpperBound: []byte{'e' + 1}})
		if err != nil {
			return analytics.Erased{}, 0, err
		}
		var list []analytics.Erasure
		for ok := it.First(); ok; ok = it.Next() {
			e, err := parseErasure(it.Key(), it.Value())
			if err != nil {
				it.Close()
				return analytics.Erased{}, 0, err
			}
			list = append(list, e)
		}
		if err := it.Close(); err != nil {
			return analytics.Erased{}, 0, err
		}
		st.list, st.set, st.loaded = list, analytics.NewErased(list), true
	}
	return st.set, st.gen, nil
}

// erasedSince reports whether an erasure was made since generation gen.
func (s *Store) erasedSince(gen uint64) bool {
	s.erased.mu.Lock()
	defer s.erased.mu.Unlock()
	return s.erased.gen != gen
}

// erasedBucket reports whether a rolled row of key's bucket is erased for
// good (analytics.Erasure.Bucket). Call it holding the commit lock.
func (s *Store) erasedBucket(key string, start time.Time, step time.Duration) bool {
	s.erased.mu.Lock()
	defer s.erased.mu.Unlock()
	return s.erased.set.Bucket(key, start, step)
}

// erasedHolds reports whether the bucket of key holds the time of its
// latest erasure (analytics.Erased.Holds). Call it holding the commit
// lock.
func (s *Store) erasedHolds(key string, start time.Time, step time.Duration) bool {
	s.erased.mu.Lock()
	defer s.erased.mu.Unlock()
	return s.erased.set.Holds(key, start, step)
}

// errErasedMeanwhile is returned by write when an erasure was committed
// after it filtered its batch: Write filters the batch again.
var errErasedMeanwhile = errors.New("pebble: erased while writing")

// Write implements analytics.Writer: the batch without what the store's
// erasures cover (analytics.Unerased), filtered again when an erasure
// commits before it does.
func (s *Store) Write(ctx context.Context, b analytics.Batch) error {
	for {
		err := s.writeUnerased(ctx, b)
		if !errors.Is(err, errErasedMeanwhile) {
			return err
		}
	}
}

func (s *Store) writeUnerased(ctx context.Context, b analytics.Batch) error {
	s.mu.RLock()
	if err := s.usable(); err != nil {
		s.mu.RUnlock()
		return err
	}
	es, gen, err := s.erasures()
	s.mu.RUnlock()
	if err != nil {
		return fmt.Errorf("pebble: write: erasures: %w", err)
	}
	return s.write(ctx, analytics.Unerased(b, es), gen)
}

// Erase implements analytics.Eraser.
func (s *Store) Erase(ctx context.Context, e analytics.Erasure) error {
	if err := e.Check(); err != nil {
		return fmt.Errorf("pebble: erase: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pebble: erase: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return err
	}
	if _, _, err := s.erasures(); err != nil {
		return fmt.Errorf("pebble: erase: %w", err)
	}
	s.commit.Lock()
	defer s.commit.Unlock()
	wb := s.db.NewBatch()
	defer wb.Close()
	prefix, exact := e.Prefix()
	for _, tag := range []byte{'p', 'd', 'v', 'u', 'n'} {
		spans, err := s.linkSpans(tag, prefix, exact)
		if err != nil {
			return fmt.Errorf("pebble: erase: %w", err)
		}
		for _, sp := range spans {
			if tag == 'n' {
				if err := s.deleteTopEntries(wb, sp); err != nil {
					return fmt.Errorf("pebble: erase: top: %w", err)
				}
			}
			if err := wb.DeleteRange(sp[0], sp[1], nil); err != nil {
				return fmt.Errorf("pebble: erase: %w", err)
			}
		}
	}
	if err := wb.Set(appendEraseKey(nil, e), binary.BigEndian.AppendUint64(nil, uint64(e.At.UnixNano())), nil); err != nil {
		return fmt.Errorf("pebble: erase: %w", err)
	}
	if err := s.commitBatch(wb, pebble.Sync); err != nil {
		return fmt.Errorf("pebble: erase: commit: %w", err)
	}
	st := &s.erased
	st.mu.Lock()
	st.list = append(slices.DeleteFunc(slices.Clone(st.list), func(o analytics.Erasure) bool {
		return o.Tenant == e.Tenant && o.Key == e.Key
	}), e)
	st.set = analytics.NewErased(st.list)
	st.gen++
	st.mu.Unlock()
	return nil
}

// linkSpans returns the spans of the rows of kind tag of the key prefix
// (exact) or of every key starting with prefix.
func (s *Store) linkSpans(tag byte, prefix string, exact bool) ([][2][]byte, error) {
	if exact {
		lo := appendLinkKey(nil, tag, prefix)
		return [][2][]byte{{lo, prefixEnd(lo)}}, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{tag}, UpperBound: []byte{tag + 1}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var spans [][2][]byte
	for ok := it.First(); ok; {
		k := it.Key()
		n, w := binary.Uvarint(k[1:])
		if w <= 0 {
			return nil, fmt.Errorf("bad key %x", k)
		}
		head := slices.Clone(k[:1+w]) // the kind and the length: every key of this length starts so
		if n >= uint64(len(prefix)) {
			lo := append(slices.Clone(head), prefix...)
			if ok = it.SeekGE(lo); ok && bytes.HasPrefix(it.Key(), lo) {
				spans = append(spans, [2][]byte{lo, prefixEnd(lo)})
			}
		}
		ok = it.SeekGE(prefixEnd(head))
	}
	return spans, it.Error()
}

// deleteTopEntries deletes from wb the top lists' index entries of the
// counts in the span sp of 'n' rows.
func (s *Store) deleteTopEntries(wb *pebble.Batch, sp [2][]byte) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: sp[0], UpperBound: sp[1]})
	if err != nil {
		return err
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if err := s.deleteTopEntry(wb, it.Key(), it.Value()); err != nil {
			return err
		}
	}
	return it.Error()
}

// deleteTopEntry deletes from wb the top lists' index entries of the top
// count k = v.
func (s *Store) deleteTopEntry(wb *pebble.Batch, k, v []byte) error {
	n, w := binary.Uvarint(k[1:])
	if w <= 0 || uint64(len(k)) != 1+uint64(w)+n+8 {
		return fmt.Errorf("bad top count %x", k)
	}
	key := string(k[1+w : 1+uint64(w)+n])
	day := int64(binary.BigEndian.Uint64(k[len(k)-8:]) ^ 1<<63)
	count, w := binary.Varint(v)
	if w <= 0 {
		return fmt.Errorf("bad top count %x = %x", k, v)
	}
	if err := wb.Delete(appendTopIndexKey(nil, day, count, key), nil); err != nil {
		return err
	}
	if tenant, _ := analytics.SplitKey(key); tenant != "" {
		return wb.Delete(appendTenantTopIndexKey(nil, day, tenant, count, key), nil)
	}
	return nil
}
