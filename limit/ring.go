package limit

import (
	"math/bits"
	"sort"
)

// ring holds the buckets (head-len(cum), head] of one level of a counter as
// cumulative counts: cum[x&mask] is the number of hits in every bucket up to
// and including bucket x, modulo 2^32, and base the number in the buckets
// before the ring. A bucket's count is cum[x] - cum[x-1] and the sum of any
// run of buckets one subtraction, so that a check costs the same whatever
// its windows. Modular arithmetic is exact as long as a ring never holds
// 2^32 hits.
type ring struct {
	head int64 // index (Start / size) of the newest bucket
	ttl  int64 // longest TTL given, in seconds
	base uint32
	cum  []uint32
}

func (r *ring) mask() int64 { return int64(len(r.cum)) - 1 }

// low returns the oldest bucket index of level l the ring answers for at
// unix second now: the ring's oldest, or the oldest whose TTL has not
// passed (Start + ttl >= now) if that is newer. A ring capped below its TTL
// (seconds kept a day for exact precision) still answers for all it holds
// however long it has not advanced: its older buckets are in the spill map.
func (r *ring) low(l Level, now int64) int64 {
	return max(r.head-int64(len(r.cum))+1, levelIndex(l, now-r.ttl+sizeOf(l)-1))
}

// before returns the cumulative count before bucket x, which is in the ring.
func (r *ring) before(x int64) uint32 {
	if x == r.head-int64(len(r.cum))+1 {
		return r.base
	}
	return r.cum[(x-1)&r.mask()]
}

// count returns the count of bucket x, which is in the ring.
func (r *ring) count(x int64) uint32 { return r.cum[x&r.mask()] - r.before(x) }

// sum returns the hits of buckets lo..hi, which are in the ring (0 if lo > hi).
func (r *ring) sum(lo, hi int64) uint32 {
	if lo > hi {
		return 0
	}
	return r.cum[hi&r.mask()] - r.before(lo)
}

// firstNonZero returns the oldest bucket of lo..hi with hits; the run has
// some.
func (r *ring) firstNonZero(lo, hi int64) int64 {
	p := r.before(lo)
	mask := r.mask()
	i := sort.Search(int(hi-lo+1), func(i int) bool { return r.cum[(lo+int64(i))&mask]-p > 0 })
	return lo + int64(i)
}

// advance makes idx (> head) the newest bucket, passing each bucket that
// leaves the ring to evict with its count.
func (r *ring) advance(idx int64, evict func(x int64, c uint32)) {
	n, mask := int64(len(r.cum)), r.mask()
	top := r.cum[r.head&mask]
	if idx-r.head >= n {
		for x := r.head - n + 1; x <= r.head; x++ {
			if c := r.count(x); c != 0 {
				evict(x, c)
			}
		}
		r.base = top
		for i := range r.cum {
			r.cum[i] = top
		}
	} else {
		for x := r.head + 1; x <= idx; x++ {
			old := x - n // the ring's oldest bucket, whose slot x takes
			if c := r.cum[old&mask] - r.base; c != 0 {
				evict(old, c)
			}
			r.base = r.cum[old&mask]
			r.cum[x&mask] = top
		}
	}
	r.head = idx
}

// add adds c to bucket x, which is in the ring.
func (r *ring) add(x int64, c uint32) {
	mask := r.mask()
	for ; x <= r.head; x++ {
		r.cum[x&mask] += c
	}
}

// reset empties bucket x, which is in the ring.
func (r *ring) reset(x int64) {
	c := r.count(x)
	r.add(x, -c)
}

// grow resizes r to n slots (a power of two), keeping its buckets.
func (r *ring) grow(n int) {
	old := r.cum
	r.cum = make([]uint32, n)
	mask, oldN := int64(n-1), int64(len(old))
	for x := r.head - int64(n) + 1; x <= r.head; x++ {
		if x > r.head-oldN {
			r.cum[x&mask] = old[x&(oldN-1)]
		} else {
			r.cum[x&mask] = r.base
		}
	}
}

// ringLen is the ring length for a level whose buckets live ttl seconds.
func ringLen(l Level, ttl int64) int {
	n := ttl/sizeOf(l) + 2
	if n > int64(ringCap[l]) {
		return ringCap[l]
	}
	return 1 << bits.Len64(uint64(n-1))
}
