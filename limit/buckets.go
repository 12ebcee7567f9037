package limit

import (
	"time"
)

// This file is the bucket math: which buckets a check reads and a counted
// hit writes, how a limit's count is summed from them and when a client over
// a limit can pass again. Time is passed in, in unix seconds; nothing here
// reads a clock or a store.

// Precision is how a rule's windows are counted (the "precision" setting).
type Precision uint8

const (
	// Bucketed sums the buckets of the level that fits the window: error
	// at most one bucket (package doc).
	Bucketed Precision = iota
	// Exact writes every hit into all three levels and covers the window
	// with the coarsest aligned buckets that fit (decompose): error below
	// a second.
	Exact
)

// levelFor returns the level whose buckets count a window: seconds up to a
// minute, minutes up to an hour, hours beyond.
func levelFor(w time.Duration) Level {
	switch {
	case w <= time.Minute:
		return Second
	case w <= time.Hour:
		return Minute
	}
	return Hour
}

// sizeOf is Level.Size in seconds.
func sizeOf(l Level) int64 { return [...]int64{1, 60, 3600}[l] }

// bucketPlan is a rule's precomputed read and write plan. It is immutable once
// built and shared by all checks of the rule.
type bucketPlan struct {
	exact  bool
	box    bool // the rule has a penalty: a check reads the box too, last (BoxBucket)
	limits []Limit
	lim    []planLimit
	ttl    [NumLevels]time.Duration // TTL of the buckets written, per level; 0: level not written
	// Bucketed only: the read list is, per level in order, the last
	// lv[l].n buckets up to the current one (oldest first), starting at
	// lv[l].off in the list; limit i sums members[lim[i].from:lim[i].to].
	lv      [NumLevels]struct{ n, off int }
	nreads  int
	members []int32
}

type planLimit struct {
	level    Level
	k        int64 // Bucketed: buckets summed
	lag      int64 // seconds from a bucket's end until its hits leave the window
	window   int64 // seconds
	from, to int   // Bucketed: span of members
}

// newBucketPlan builds the plan of a rule's limits (without its box: a
// rule with a penalty sets box).
func newBucketPlan(limits []Limit, prec Precision) *bucketPlan {
	p := &bucketPlan{exact: prec == Exact, limits: limits, lim: make([]planLimit, len(limits))}
	var maxWindow int64
	for i, l := range limits {
		w := max(int64(l.Window/time.Second), 1)
		maxWindow = max(maxWindow, w)
		lv := levelFor(l.Window)
		size := sizeOf(lv)
		k := (w + size - 1) / size
		p.lim[i] = planLimit{level: lv, k: k, window: w}
		if p.exact {
			p.lim[i].lag = w - 1
		} else {
			p.lim[i].lag = (k - 1) * size
			p.lv[lv].n = max(p.lv[lv].n, int(k))
		}
	}
	if p.exact {
		// Every level is written and read back as far as the longest
		// window (yesterday's seconds for a day).
		for l := range NumLevels {
			p.ttl[l] = time.Duration(maxWindow+2*sizeOf(l)) * time.Second
		}
		return p
	}
	for l := range NumLevels {
		p.lv[l].off = p.nreads
		p.nreads += p.lv[l].n
		if n := p.lv[l].n; n > 0 {
			p.ttl[l] = time.Duration(int64(n+1)*sizeOf(l)) * time.Second
		}
	}
	for i := range p.lim {
		pl := &p.lim[i]
		lv := p.lv[pl.level]
		pl.from = len(p.members)
		for j := lv.n - int(pl.k); j < lv.n; j++ {
			p.members = append(p.members, int32(lv.off+j))
		}
		pl.to = len(p.members)
	}
	return p
}

// readSet is the per-check scratch: the buckets a check reads, their counts,
// and (Exact) which of them each limit sums. It is reused through a pool so
// that a check allocates nothing.
type readSet struct {
	plan    *bucketPlan // the plan and second the buckets were filled for
	sec     int64
	writes  [NumLevels]Bucket // what a hit at sec writes: writes[:nw]
	nw      int
	qplan   *bucketPlan // the plan and second q was built for
	qsec    int64
	q       []spanQuery // the span fast path's queries and results
	res     []spanResult
	box     Box // the span fast path's box
	buckets []Bucket
	counts  []int64
	members []int32 // Exact: limit i sums counts[members[from[i]:to[i]]]
	from    []int
	to      []int
	seen    *bucketSet // Exact: dedupes the buckets the limits share
	judge   judgement  // the general path's decision
}

// bucketSet maps buckets to their index in a read set: open addressing with
// a generation per use, so that starting afresh costs nothing.
type bucketSet struct {
	gen   uint32
	slots [bucketSetSize]struct {
		gen   uint32
		idx   int32
		level Level
		start int64
	}
}

const bucketSetSize = 1 << 12 // > 2× the buckets of four week-long exact limits

// index returns b's index, adding it as next if it is new.
func (s *bucketSet) index(b Bucket, next int32) (int32, bool) {
	h := (uint64(b.Start)*0x9E3779B97F4A7C15 + uint64(b.Level)) >> (64 - 12)
	for {
		sl := &s.slots[h]
		if sl.gen != s.gen {
			sl.gen, sl.idx, sl.level, sl.start = s.gen, next, b.Level, b.Start
			return next, false
		}
		if sl.level == b.Level && sl.start == b.Start {
			return sl.idx, true
		}
		h = (h + 1) & (bucketSetSize - 1)
	}
}

// reads fills rs with the buckets a check at unix second now reads.
func (p *bucketPlan) reads(now int64, rs *readSet) {
	if rs.plan == p && rs.sec == now {
		return // the same buckets as the last check through this scratch
	}
	rs.plan, rs.sec = p, now
	rs.nw = len(p.writes(now, rs.writes[:0]))
	if !p.exact {
		rs.buckets = rs.buckets[:0]
		for l := range NumLevels {
			size := sizeOf(l)
			start := floorDiv(now, size)*size - int64(p.lv[l].n-1)*size
			for range p.lv[l].n {
				rs.buckets = append(rs.buckets, Bucket{Level: l, Start: start})
				start += size
			}
		}
		if p.box {
			rs.buckets = append(rs.buckets, BoxBucket)
		}
		rs.counts = grow(rs.counts, len(rs.buckets))
		return
	}
	rs.buckets, rs.members, rs.from, rs.to = rs.buckets[:0], rs.members[:0], rs.from[:0], rs.to[:0]
	if rs.seen == nil {
		rs.seen = new(bucketSet)
	}
	rs.seen.gen++
	if rs.seen.gen == 0 { // wrapped: old generations could match
		*rs.seen = bucketSet{gen: 1}
	}
	for _, pl := range p.lim {
		rs.from = append(rs.from, len(rs.members))
		decompose(now-pl.window+1, now+1, func(b Bucket) {
			j, seen := rs.seen.index(b, int32(len(rs.buckets)))
			if !seen {
				rs.buckets = append(rs.buckets, b)
			}
			rs.members = append(rs.members, j)
		})
		rs.to = append(rs.to, len(rs.members))
	}
	if p.box {
		rs.buckets = append(rs.buckets, BoxBucket)
	}
	rs.counts = grow(rs.counts, len(rs.buckets))
}

// boxIn returns the box the counts of rs hold (the zero Box when the
// plan reads none).
func (p *bucketPlan) boxIn(rs *readSet) Box {
	if !p.box {
		return Box{}
	}
	return UnpackBox(rs.counts[len(rs.buckets)-1])
}

func grow(s []int64, n int) []int64 {
	if cap(s) < n {
		return make([]int64, n)
	}
	return s[:n]
}

// decompose covers the seconds [a, e) with the coarsest aligned buckets,
// oldest first: seconds up to a minute boundary, minutes up to an hour
// boundary, hours, then minutes and seconds up to e. A window of a day is
// so at most 59 + 59 + 23 + 59 + 59 buckets, never 86,400 seconds; each
// second of it is counted once, so the count is exact to the second.
func decompose(a, e int64, emit func(Bucket)) {
	for x := a; x < e; {
		// Constant divisors: this runs for every bucket of an exact check.
		switch {
		case x%3600 == 0 && x+3600 <= e:
			emit(Bucket{Level: Hour, Start: x})
			x += 3600
		case x%60 == 0 && x+60 <= e:
			emit(Bucket{Level: Minute, Start: x})
			x += 60
		default:
			emit(Bucket{Level: Second, Start: x})
			x++
		}
	}
}

// span returns the members of limit i in rs, oldest first.
func (p *bucketPlan) span(rs *readSet, i int) []int32 {
	if p.exact {
		return rs.members[rs.from[i]:rs.to[i]]
	}
	return p.members[p.lim[i].from:p.lim[i].to]
}

// sum returns limit i's count from the loaded counts.
func (p *bucketPlan) sum(rs *readSet, i int) int64 {
	var n int64
	for _, j := range p.span(rs, i) {
		n += rs.counts[j]
	}
	return n
}

// freeAt returns the unix second from which limit i's count is at most
// target, assuming no more hits are counted: the oldest buckets leave the
// window first, a bucket's hits leaving lag seconds after its end (for a
// coarse bucket in Exact, when its last second does: an upper bound, which
// Limiter.freeAt refines). It returns 0 if the count is already at most
// target.
func (p *bucketPlan) freeAt(rs *readSet, i int, target int64) int64 {
	j, _ := p.binding(rs, i, target)
	if j < 0 {
		return 0
	}
	b := rs.buckets[j]
	return b.Start + sizeOf(b.Level) + p.lim[i].lag
}

// binding returns the index in rs of the bucket whose hits, leaving limit
// i's window oldest first, bring its count down to target, and how many of
// its hits must leave for that; -1 if the count is already at most target.
func (p *bucketPlan) binding(rs *readSet, i int, target int64) (int32, int64) {
	n := p.sum(rs, i)
	if n <= target {
		return -1, 0
	}
	for _, j := range p.span(rs, i) {
		c := rs.counts[j]
		if c == 0 {
			continue
		}
		if n-c <= target {
			return j, n - target
		}
		n -= c
	}
	return -1, 0 // unreachable: target >= 0
}

// nextFree returns the unix second at which limit i's count next drops (its
// oldest non-empty bucket leaves the window), or now+window if it is empty.
func (p *bucketPlan) nextFree(rs *readSet, i int, now int64) int64 {
	for _, j := range p.span(rs, i) {
		if rs.counts[j] != 0 {
			b := rs.buckets[j]
			return b.Start + sizeOf(b.Level) + p.lim[i].lag
		}
	}
	return now + p.lim[i].window
}

// writes appends to dst the buckets a hit at unix second now increments, one
// per level written, with their TTLs.
func (p *bucketPlan) writes(now int64, dst []Bucket) []Bucket {
	for l := range NumLevels {
		if p.ttl[l] > 0 {
			size := sizeOf(l)
			dst = append(dst, Bucket{Level: l, Start: floorDiv(now, size) * size, TTL: p.ttl[l]})
		}
	}
	return dst
}

// resetBuckets returns the buckets a reset at now clears: every bucket a
// check reads from now on, the box included. For Exact that is every
// minute and hour of the longest window but only the last two minutes of
// seconds: a later check may still count old seconds in the tail of its
// oldest minute (at most one minute's worth of hits from the far edge of
// the window; package doc).
func (p *bucketPlan) resetBuckets(now int64) []Bucket {
	var bs []Bucket
	var maxWindow int64
	for _, pl := range p.lim {
		maxWindow = max(maxWindow, pl.window)
	}
	for l := range NumLevels {
		if p.ttl[l] == 0 {
			continue
		}
		size := sizeOf(l)
		cur := floorDiv(now, size)
		n := int64(p.lv[l].n)
		if p.exact {
			n = maxWindow/size + 2
			if l == Second {
				n = 120
			}
		}
		for j := n - 1; j >= 0; j-- {
			bs = append(bs, Bucket{Level: l, Start: (cur - j) * size, TTL: p.ttl[l]})
		}
	}
	if p.box {
		bs = append(bs, BoxBucket)
	}
	return bs
}
