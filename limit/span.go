package limit

import (
	"context"
	"time"
)

// spanStore is the in-process store's fast path for Bucketed rules: instead
// of copying every bucket's count (144 for 2/s, 5/m, 10/h, 100/d), it sums
// each limit's run of consecutive buckets in place and counts the hit under
// the same lock. Only Memory implements it; other stores go through Load
// and Add.
type spanStore interface {
	// loadSpans writes into out[i] the sum of the q[i].k buckets of level
	// q[i].level ending with bucket index q[i].cur, and the start of the
	// oldest non-empty one. Then, if add is not empty and force is set or
	// every sum+1 is at most its q[i].n, it adds 1 to the buckets of add
	// and reports true. now is the unix second of the check. The oldest
	// non-empty bucket is found only for the query with the least room
	// (q[i].n - sum, the first of equals), and only when oldest is set.
	// When box is not nil, the counter's penalty box is read into it, and
	// a counter in its box at now does not pass: its hit is added only if
	// force is set.
	loadSpans(c Counter, now int64, q []spanQuery, out []spanResult, add []Bucket, force, oldest bool, box *Box) (bool, error)
}

type spanQuery struct {
	level Level
	cur   int64 // index of the newest bucket (Start / size)
	k     int64
	n     int64 // the limit
}

type spanResult struct {
	sum    int64
	oldest int64 // Start of the oldest non-empty bucket, for the tightest limit only
	lo, hi int64 // the ring indexes summed
}

var _ spanStore = (*Memory)(nil)

func (m *Memory) loadSpans(c Counter, now int64, q []spanQuery, out []spanResult, add []Bucket, force, oldest bool, box *Box) (bool, error) {
	s := m.shard(c)
	s.mu.Lock()
	e := s.m[c]
	pass := true
	if box != nil {
		*box = Box{}
		if e != nil {
			*box = e.boxAt(now)
			pass = !box.In(now)
		}
	}
	if e == nil || e.expires < now {
		for i := range q {
			out[i] = spanResult{}
			pass = pass && q[i].n >= 1
		}
	} else {
		tight := -1
		for i := range q {
			out[i] = e.span(&q[i], now)
			pass = pass && out[i].sum+1 <= q[i].n
			if tight < 0 || q[i].n-out[i].sum < q[tight].n-out[tight].sum {
				tight = i
			}
		}
		if oldest && out[tight].sum > 0 {
			out[tight].oldest = e.oldest(&q[tight], &out[tight], now)
		}
	}
	added := false
	if len(add) > 0 && (force || pass) {
		if e == nil {
			e = s.entry(c, m.now) // a new counter, made under the same lock
		}
		e.addLocked(add, 1)
		added = true
	}
	s.mu.Unlock()
	return added, nil
}

// span sums one query from the ring, with the spill map for buckets pushed
// out of a capped ring.
func (e *memEntry) span(q *spanQuery, now int64) spanResult {
	r := &e.rings[q.level]
	first := q.cur - q.k + 1
	res := spanResult{lo: first, hi: -1 << 62}
	if r.cum != nil {
		res.lo, res.hi = max(first, r.low(q.level, now)), min(q.cur, r.head)
		res.sum = int64(r.sum(res.lo, res.hi))
	}
	if e.spill != nil && first < res.lo {
		size := sizeOf(q.level)
		for x := min(res.lo-1, q.cur); x >= first; x-- {
			if sp, ok := e.spill[Bucket{Level: q.level, Start: x * size}]; ok && sp.expires >= now {
				res.sum += sp.n
			}
		}
	}
	return res
}

// oldest returns the Start of the oldest non-empty bucket of a summed span.
func (e *memEntry) oldest(q *spanQuery, res *spanResult, now int64) int64 {
	size := sizeOf(q.level)
	if e.spill != nil {
		for x := q.cur - q.k + 1; x < res.lo && x <= q.cur; x++ {
			if sp, ok := e.spill[Bucket{Level: q.level, Start: x * size}]; ok && sp.expires >= now && sp.n > 0 {
				return x * size
			}
		}
	}
	return e.rings[q.level].firstNonZero(res.lo, res.hi) * size
}

// checkSpans is check's fast path for Bucketed rules on a spanStore. ok is
// false when a limit is exceeded and the caller must take the general path
// (which computes when the client is free again, and trips its penalty).
func (ck *checker) checkSpans(ctx context.Context, ss spanStore, w *windows, c Counter, now time.Time, rs *readSet, writes []Bucket, cost int64, count bool) (verdict, bool) {
	sec := now.Unix()
	nl := len(w.plan.lim)
	if cap(rs.q) < nl {
		rs.q, rs.res = make([]spanQuery, nl), make([]spanResult, nl)
	}
	q, res := rs.q[:nl], rs.res[:nl]
	if rs.qplan != w.plan || rs.qsec != sec {
		rs.qplan, rs.qsec = w.plan, sec
		for i := range w.plan.lim {
			pl := &w.plan.lim[i]
			q[i] = spanQuery{level: pl.level, cur: levelIndex(pl.level, sec), k: pl.k, n: w.plan.limits[i].N + 1 - cost}
		}
	}
	var add []Bucket
	if count {
		add = writes
	}
	var boxp *Box // in rs: a local's address would escape through the interface
	if w.pen != nil {
		boxp = &rs.box
	}
	_, err := ss.loadSpans(c, sec, q, res, add, w.shadow, w.headers, boxp)
	if err != nil {
		return verdict{out: storeError, err: err}, true
	}
	var box Box
	if boxp != nil {
		box = *boxp
	}
	inBox := box.In(sec)
	if inBox && !w.shadow {
		return ck.boxedVerdict(c, box, sec), true
	}
	v := verdict{out: allowed, limit: -1, remaining: -1}
	for i, lim := range w.plan.limits {
		n := res[i].sum
		if n+cost > lim.N {
			if !w.shadow {
				return verdict{}, false
			}
			v.out = shadowLimited
			continue
		}
		if v.out == allowed && w.headers {
			if rem := lim.N - n - cost; v.limit < 0 || rem < v.remaining {
				v.limit, v.remaining = i, rem
				if n > 0 {
					v.reset = res[i].oldest + sizeOf(w.plan.lim[i].level) + w.plan.lim[i].lag - sec
				} else {
					v.reset = w.plan.lim[i].window
				}
			}
		}
	}
	if v.out == shadowLimited {
		v.limit = -1
		for i, lim := range w.plan.limits {
			if res[i].sum+cost > lim.N {
				v.limit = i
				break
			}
		}
		if w.pen != nil && !inBox {
			ck.trip(ctx, w, c, now, box, sec+1) // shadow mode boxes too (check)
		}
	}
	if inBox {
		v.out, v.limit, v.box = shadowLimited, max(v.limit, 0), box
	}
	return v, true
}
