package limit

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"time"
)

// Memory is the in-process Store, the default when one gateway runs alone.
// It is safe for concurrent use; the zero value is not usable, call NewMemory.
//
// Counters are spread over memShards shards by a hash of the feature value,
// each a mutex and a map, so there is no store-wide lock and the cost of a
// call does not depend on how many clients are tracked. Each counter keeps,
// per level, a ring of cumulative counts just long enough for the longest TTL
// it was given (a power of two, at most ringCap buckets: about 600 bytes for
// a counter of 2/s, 5/m, 10/h, 100/d). A bucket pushed out of its ring before
// its TTL has passed moves to a small per-counter map: exact precision keeps
// second buckets for a day, up to one entry per second with hits.
//
// A counter's penalty box (PutBox) lives in its entry and is read under
// the same lock as its counts.
//
// Memory is reclaimed lazily, without a goroutine: a counter whose buckets
// and box have all expired is deleted when its shard has doubled in size
// since its last sweep (so memory stays within about twice what is live,
// plus 16 counters per shard), or by Sweep. Add and AddNow are synchronous.
type Memory struct {
	now    func() time.Time
	seed   maphash.Seed
	shards [memShards]memShard
}

const memShards = 128

type memShard struct {
	mu    sync.Mutex
	m     map[Counter]*memEntry
	swept int // len(m) after the last sweep
	_     [40]byte
}

// memEntry is one counter's buckets and penalty box.
type memEntry struct {
	expires int64 // unix seconds after which every bucket and the box have expired
	rings   [NumLevels]ring
	spill   map[Bucket]spilled // buckets pushed out of a ring before their TTL; Bucket.TTL is zero in keys
	box     Box                // the zero Box: none
	boxKeep int64              // unix second until which box is kept (PutBox)
}

// boxAt returns e's box as it is kept at unix second now.
func (e *memEntry) boxAt(now int64) Box {
	if e.boxKeep < now {
		return Box{}
	}
	return e.box
}

type spilled struct {
	n       int64
	expires int64
}

// ringCap bounds a ring's length per level: an hour of seconds, a day and a
// half of minutes, ten days of hours.
var ringCap = [NumLevels]int{4096, 2048, 256}

// NewMemory returns an empty in-process store on the system clock.
func NewMemory() *Memory { return NewMemoryAt(time.Now) }

// NewMemoryAt returns an empty in-process store that reads the time from now
// (tests pass a fake clock).
func NewMemoryAt(now func() time.Time) *Memory {
	m := &Memory{now: now, seed: maphash.MakeSeed()}
	for i := range m.shards {
		m.shards[i].m = make(map[Counter]*memEntry)
	}
	return m
}

var _ Store = (*Memory)(nil)

// shard picks c's shard by its value alone: one hash call, and a client's
// counters under several rules share a shard, which is harmless.
func (m *Memory) shard(c Counter) *memShard {
	return &m.shards[maphash.String(m.seed, c.Value)%memShards]
}

// levelIndex returns the index of the bucket starting at start in level l,
// with constant divisors so that the compiler avoids a division.
func levelIndex(l Level, start int64) int64 {
	switch l {
	case Second:
		return start
	case Minute:
		return floorDiv(start, 60)
	default:
		return floorDiv(start, 3600)
	}
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Load implements Store.
func (m *Memory) Load(ctx context.Context, c Counter, buckets []Bucket, counts []int64) error {
	_, err := m.loadAdd(ctx, c, buckets, counts, nil, nil)
	return err
}

var _ loadAdder = (*Memory)(nil)

// loadAdd implements loadAdder: the read and the add under c's lock, so no
// other check of c comes between them. A nil d adds nothing: Load.
func (m *Memory) loadAdd(ctx context.Context, c Counter, buckets []Bucket, counts []int64, add []Bucket, d decider) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("memory: load: %w", err)
	}
	if len(counts) < len(buckets) {
		return false, fmt.Errorf("memory: load: %d counts for %d buckets", len(counts), len(buckets))
	}
	now := m.now().Unix()
	s := m.shard(c)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[c].load(buckets, counts, now)
	if d == nil || !d.decide() || len(add) == 0 {
		return false, nil
	}
	s.entry(c, m.now).addLocked(add, 1)
	return true, nil
}

// load writes the counts of buckets at now into counts (zeros for an
// entry that is nil or expired); the caller holds e's shard lock.
func (e *memEntry) load(buckets []Bucket, counts []int64, now int64) {
	if e == nil || e.expires < now {
		clear(counts[:len(buckets)])
		return
	}
	for i := range buckets {
		b := &buckets[i]
		counts[i] = 0
		if b.Level == BoxLevel {
			counts[i] = e.boxAt(now).Pack()
			continue
		}
		if b.Level >= NumLevels {
			continue
		}
		idx := levelIndex(b.Level, b.Start)
		r := &e.rings[b.Level]
		if r.cum != nil && idx <= r.head && idx >= r.low(b.Level, now) {
			counts[i] = int64(r.count(idx))
			continue
		}
		if e.spill != nil && idx <= r.head {
			if sp, ok := e.spill[Bucket{Level: b.Level, Start: b.Start}]; ok && sp.expires >= now {
				counts[i] = sp.n
			}
		}
	}
}

// Add implements Store. It is synchronous: the counts are updated when it
// returns.
func (m *Memory) Add(ctx context.Context, c Counter, buckets []Bucket, n int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: add: %w", err)
	}
	m.add(c, buckets, n)
	return nil
}

// AddNow implements Store; it is Add.
func (m *Memory) AddNow(ctx context.Context, c Counter, buckets []Bucket, n int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: add: %w", err)
	}
	m.add(c, buckets, n)
	return nil
}

func (m *Memory) add(c Counter, buckets []Bucket, n int64) {
	if len(buckets) == 0 || n == 0 {
		return
	}
	s := m.shard(c)
	s.mu.Lock()
	s.entry(c, m.now).addLocked(buckets, n)
	s.mu.Unlock()
}

// entry returns c's entry, creating it (and sweeping the shard when it has
// doubled since its last sweep) if there is none; the caller holds s.mu.
func (s *memShard) entry(c Counter, now func() time.Time) *memEntry {
	e := s.m[c]
	if e == nil {
		e = &memEntry{}
		s.m[c] = e
		if len(s.m) >= 2*s.swept && len(s.m) >= 16 {
			s.sweep(now().Unix())
		}
	}
	return e
}

// addLocked adds n to buckets of e; the caller holds e's shard lock.
func (e *memEntry) addLocked(buckets []Bucket, n int64) {
	for i := range buckets {
		b := &buckets[i]
		if b.Level >= NumLevels {
			continue
		}
		ttl := int64((b.TTL + time.Second - 1) / time.Second)
		if exp := b.Start + ttl; exp > e.expires {
			e.expires = exp
		}
		r := &e.rings[b.Level]
		if ttl > r.ttl || r.cum == nil {
			r.ttl = max(r.ttl, ttl)
			if want := ringLen(b.Level, r.ttl); want > len(r.cum) {
				r.grow(want)
			}
		}
		idx := levelIndex(b.Level, b.Start)
		if idx > r.head {
			l, size := b.Level, sizeOf(b.Level)
			r.advance(idx, func(x int64, c uint32) { e.evict(l, r, x*size, c, idx*size) })
		} else if idx <= r.head-int64(len(r.cum)) {
			// Older than the ring: counted in the spill map.
			if e.spill == nil {
				e.spill = make(map[Bucket]spilled)
			}
			k := Bucket{Level: b.Level, Start: b.Start}
			sp := e.spill[k]
			sp.n += n
			sp.expires = max(sp.expires, b.Start+ttl)
			e.spill[k] = sp
			continue
		}
		r.add(idx, uint32(n))
	}
}

// evict keeps the count c of the bucket starting at start, which is leaving
// its ring as the bucket starting at head becomes the newest, in the spill
// map if its TTL has not passed by then.
func (e *memEntry) evict(l Level, r *ring, start int64, c uint32, head int64) {
	if exp := start + r.ttl; exp > head {
		if e.spill == nil {
			e.spill = make(map[Bucket]spilled)
		}
		e.spill[Bucket{Level: l, Start: start}] = spilled{n: int64(c), expires: exp}
	}
}

// Reset implements Store.
func (m *Memory) Reset(ctx context.Context, c Counter, buckets []Bucket) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: reset: %w", err)
	}
	s := m.shard(c)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[c]
	if e == nil {
		return nil
	}
	for _, b := range buckets {
		if b.Level == BoxLevel {
			e.box, e.boxKeep = Box{}, 0
			continue
		}
		if b.Level >= NumLevels {
			continue
		}
		r := &e.rings[b.Level]
		idx := levelIndex(b.Level, b.Start)
		if r.cum != nil && idx <= r.head && idx > r.head-int64(len(r.cum)) {
			r.reset(idx)
		}
		delete(e.spill, Bucket{Level: b.Level, Start: b.Start})
	}
	return nil
}

// PutBox implements Store. It is synchronous.
func (m *Memory) PutBox(ctx context.Context, c Counter, b Box, keep int64) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: put box: %w", err)
	}
	s := m.shard(c)
	s.mu.Lock()
	e := s.entry(c, m.now)
	e.box, e.boxKeep = b, keep
	e.expires = max(e.expires, keep)
	s.mu.Unlock()
	return nil
}

// Boxes implements Store: it looks through every counter held, one shard
// at a time, calling yield under the shard's lock.
func (m *Memory) Boxes(ctx context.Context, now int64, yield func(Boxed) bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: boxes: %w", err)
	}
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		for c, e := range s.m {
			if b := e.boxAt(now); b.In(now) && !yield(Boxed{c, b}) {
				s.mu.Unlock()
				return nil
			}
		}
		s.mu.Unlock()
	}
	return nil
}

// Sweep deletes every counter whose buckets have all expired, and expired
// spilled buckets. Memory sweeps by itself as it grows; Sweep is for a
// caller that wants memory back after traffic stopped.
func (m *Memory) Sweep() {
	now := m.now().Unix()
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		s.sweep(now)
		s.mu.Unlock()
	}
}

// Close drops every counter, giving their memory back. The store stays
// usable (empty); Close always returns nil.
func (m *Memory) Close() error {
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		s.m = make(map[Counter]*memEntry)
		s.swept = 0
		s.mu.Unlock()
	}
	return nil
}

// Len returns the number of counters held, expired or not.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		n += len(s.m)
		s.mu.Unlock()
	}
	return n
}

func (s *memShard) sweep(now int64) {
	for c, e := range s.m {
		if e.expires < now {
			delete(s.m, c)
			continue
		}
		for k, sp := range e.spill {
			if sp.expires < now {
				delete(e.spill, k)
			}
		}
	}
	s.swept = len(s.m)
}
