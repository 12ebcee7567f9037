package limit

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
	loadSpans(c Counter, now int64, q []spanQuery, out []spanResult, add []Bucket, force, oldest bool) (bool, error)
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

// sumU32 adds up s, four at a time.
func sumU32(s []uint32) uint64 {
	var a, b, c, d uint64
	for len(s) >= 4 {
		a += uint64(s[0])
		b += uint64(s[1])
		c += uint64(s[2])
		d += uint64(s[3])
		s = s[4:]
	}
	for _, v := range s {
		a += uint64(v)
	}
	return a + b + c + d
}

var _ spanStore = (*Memory)(nil)

func (m *Memory) loadSpans(c Counter, now int64, q []spanQuery, out []spanResult, add []Bucket, force, oldest bool) (bool, error) {
	s := m.shard(c)
	s.mu.Lock()
	e := s.m[c]
	pass := true
	if e == nil || e.expires < now {
		for i := range q {
			out[i] = spanResult{}
			pass = pass && q[i].n >= 1
		}
	} else {
		var nowIdx [NumLevels]int64
		nowIdx[Second] = now
		nowIdx[Minute] = floorDiv(now, 60)
		nowIdx[Hour] = floorDiv(now, 3600)
		tight := -1
		for i := range q {
			out[i] = e.span(&q[i], nowIdx[q[i].level], now)
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
			s.mu.Unlock()
			m.add(c, add, 1) // a new counter: the general path
			return true, nil
		}
		e.addLocked(add, 1)
		added = true
	}
	s.mu.Unlock()
	return added, nil
}

// span sums one query from the ring, with the spill map for buckets pushed
// out of a capped ring.
func (e *memEntry) span(q *spanQuery, nowIdx, now int64) spanResult {
	r := &e.rings[q.level]
	n := int64(len(r.counts))
	first := q.cur - q.k + 1
	lo := max(first, r.head-n+1, nowIdx-n+1) // oldest index the ring holds
	hi := min(q.cur, r.head)
	size := sizeOf(q.level)
	res := spanResult{lo: lo, hi: hi}
	if n > 0 && lo <= hi {
		// The span is at most two runs of the ring's array.
		mask := n - 1
		a, b := lo&mask, hi&mask
		first, second := r.counts[a:], r.counts[:0]
		if a <= b {
			first = r.counts[a : b+1]
		} else {
			second = r.counts[:b+1]
		}
		res.sum = int64(sumU32(first) + sumU32(second))
	}
	if e.spill != nil && first < lo {
		for x := min(lo-1, q.cur); x >= first; x-- {
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
	first := q.cur - q.k + 1
	if e.spill != nil {
		for x := first; x < res.lo && x <= q.cur; x++ {
			if sp, ok := e.spill[Bucket{Level: q.level, Start: x * size}]; ok && sp.expires >= now && sp.n > 0 {
				return x * size
			}
		}
	}
	r := &e.rings[q.level]
	mask := int64(len(r.counts)) - 1
	x := res.lo
	for x < res.hi && r.counts[x&mask] == 0 {
		x++
	}
	return x * size
}

// checkSpans is check's fast path for Bucketed rules on a spanStore. ok is
// false when a limit is exceeded and the caller must take the general path
// (which computes when the client is free again).
func (l *Limiter) checkSpans(ss spanStore, r *rule, c Counter, sec int64, rs *readSet, writes []Bucket, cost int64, count bool) (verdict, bool) {
	nl := len(r.plan.lim)
	if cap(rs.q) < nl {
		rs.q, rs.res = make([]spanQuery, nl), make([]spanResult, nl)
	}
	q, res := rs.q[:nl], rs.res[:nl]
	for i, pl := range r.plan.lim {
		q[i] = spanQuery{level: pl.level, cur: levelIndex(pl.level, sec), k: pl.k, n: r.plan.limits[i].N + 1 - cost}
	}
	var add []Bucket
	if count {
		add = writes
	}
	added, err := ss.loadSpans(c, sec, q, res, add, r.Shadow, r.headers)
	if err != nil {
		return verdict{out: storeError, err: err}, true
	}
	v := verdict{out: allowed, limit: -1, remaining: -1}
	for i, lim := range r.plan.limits {
		n := res[i].sum
		if n+cost > lim.N {
			if !r.Shadow {
				return verdict{}, false
			}
			v.out = shadowLimited
			continue
		}
		if v.out == allowed && r.headers {
			if rem := lim.N - n - cost; v.limit < 0 || rem < v.remaining {
				v.limit, v.remaining = i, rem
				if n > 0 {
					v.reset = res[i].oldest + sizeOf(r.plan.lim[i].level) + r.plan.lim[i].lag - sec
				} else {
					v.reset = r.plan.lim[i].window
				}
			}
		}
	}
	if v.out == shadowLimited {
		v.limit = -1
		for i, lim := range r.plan.limits {
			if res[i].sum+cost > lim.N {
				v.limit = i
				break
			}
		}
	}
	_ = added
	return v, true
}
