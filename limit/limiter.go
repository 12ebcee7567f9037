package limit

import (
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/linkgate/linkgate/ongoing"
	"github.com/linkgate/linkgate/route"
)

// Limiter is a compiled set of rules over a Store: the immutable snapshot a
// config implies. Build a new one on reload (with the same Store and
// Metrics) and swap it in; counters of unchanged rules survive because keys
// hold the rule's name, never its limits. A Limiter is safe for concurrent
// use once built; WithClock and WithUserSource must be called before use.
type Limiter struct {
	checker  // the store, the memory of blocked clients and the log, shared by the rules
	rules    []*rule
	byName   map[string]*rule
	id       *identifier
	failOpen bool
	now      func() time.Time
	clockSet bool // now is WithClock's
}

// rule is a compiled Rule: what requests it matches and how it answers
// them, and its windows, what a check counts.
type rule struct {
	Rule
	windows
	match      *route.Matcher
	hosts      *route.Hosts[struct{}] // nil: every host
	isPair     bool                   // Key is a pair: pair holds its features
	pair       [2]Feature
	keyName    string // the key in words: "email", "email and ip"
	allowNets  []netip.Prefix
	allowVals  map[string]bool
	policy     string   // RateLimit-Policy items of every limit
	names      []string // policy item name of each limit: "login_ip-1m"
	quoted     []string // the same as a structured-field string: "\"login_ip-1m\""
	limitNames []string // each limit as configured: "5/m"
}

// New returns the Limiter of plan over store: plan's rules, counted in
// store. New cannot fail: Compile made every check. Build one per config
// snapshot, with the same Store and Metrics as the last while the store's
// settings do not change (Plan.SameStore), so counters survive a reload. m
// may be nil (no metrics) and log nil (no logs).
func New(plan *Plan, store Store, m *Metrics, log *slog.Logger) *Limiter {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	id := plan.id // a copy: WithUserSource changes this Limiter's only
	l := &Limiter{
		byName:   make(map[string]*rule, len(plan.rules)),
		id:       &id,
		failOpen: plan.failOpen,
		now:      time.Now,
	}
	l.checker.init(store, log)
	for _, pr := range plan.rules {
		r := *pr
		r.metrics = m.forRule(r.Name, r.pen != nil)
		l.byName[r.Name] = &r
		l.rules = append(l.rules, &r)
	}
	return l
}

// windowName writes a window as a policy name suffix: 1s, 1m, 15m, 1d.
func windowName(w time.Duration) string {
	for _, u := range []struct {
		d time.Duration
		s string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if w%u.d == 0 {
			return strconv.FormatInt(int64(w/u.d), 10) + u.s
		}
	}
	return strconv.FormatInt(int64(w/time.Second), 10) + "s"
}

// WithClock makes l read the time from now (tests). Call before use.
func (l *Limiter) WithClock(now func() time.Time) *Limiter {
	l.now, l.clockSet = now, true
	return l
}

// requestTime is the time l decides r at: when r began, as its server
// read the clock (ongoing.Start), unless l has a clock of its own.
func (l *Limiter) requestTime(r *http.Request) time.Time {
	if l.clockSet {
		return l.now()
	}
	return ongoing.Start(r.Context())
}

// WithUserSource makes user rules read the user from src instead of the
// identity.user_header (a verified token, say). Call before use.
func (l *Limiter) WithUserSource(src UserSource) *Limiter {
	l.id.user = src
	return l
}

// WithTenants makes tenant rules read a request's tenant from tenantOf,
// given the request's host (Request.Host); "" is no tenant, and the rule
// skips the request. Without it tenant rules skip every request. Call
// before use.
func (l *Limiter) WithTenants(tenantOf func(host string) string) *Limiter {
	l.id.tenant = tenantOf
	return l
}

// verdict is a rule's decision for one request.
type verdict struct {
	out       outcome
	limit     int   // limited: the binding limit; allowed: the one with least room
	remaining int64 // allowed: hits left under limit (this one counted)
	reset     int64 // seconds: allowed, until limit's count drops; limited or boxed, until a request passes
	box       Box   // the client's box, when the request put it there or found it there
	err       error // storeError: why; allowed: the count that failed (recorded)
}

// check decides the windows w (a rule's) for the feature value at now,
// counting the hit when count is true and the request is allowed (strict
// windows count first, whatever count says). A check of a client already
// known to be over its limit does no store operation. The hit is not
// counted when the request is limited: a rejected request costs a client
// nothing (except when strict, where it was counted before the check).
// Windows with a penalty read the client's box with their counts: a
// client in the box is refused (boxed), and one over a limit trips
// (penalty.go).
func (ck *checker) check(ctx context.Context, w *windows, value string, now time.Time, count bool) verdict {
	now = ck.clock(now)
	c := Counter{Rule: w.name, Value: value}
	sec := now.Unix()
	if !w.shadow {
		if e, ok := ck.blocked.get(c, sec); ok {
			return e.verdict(sec)
		}
	}
	rs := ck.pool.Get().(*readSet)
	defer ck.pool.Put(rs)
	w.plan.reads(sec, rs)
	writes := rs.writes[:rs.nw]
	var cost int64 = 1
	if w.strict {
		if err := ck.store.AddNow(ctx, c, writes, 1); err != nil {
			return verdict{out: storeError, err: err}
		}
		cost, count = 0, false
	}
	if ss, ok := ck.store.(spanStore); ok && !w.plan.exact {
		if v, ok := ck.checkSpans(ctx, ss, w, c, now, rs, writes, cost, count); ok {
			return v
		}
	}
	j := &rs.judge
	*j = judgement{w: w, rs: rs, sec: sec, cost: cost, count: count}
	var t0 time.Time
	if ck.timed {
		t0 = time.Now()
	}
	var counted bool // by loadAdd, with the read
	var err error
	if la, ok := ck.store.(loadAdder); ok && count {
		counted, err = la.loadAdd(ctx, c, rs.buckets, rs.counts, writes, j)
	} else if err = ck.store.Load(ctx, c, rs.buckets, rs.counts); err == nil {
		j.decide()
	}
	if ck.timed {
		w.metrics.observe(time.Since(t0))
	}
	if err != nil {
		return verdict{out: storeError, err: err}
	}
	box, inBox, v := j.box, j.inBox, j.v
	if inBox && !w.shadow {
		return ck.boxedVerdict(c, box, sec)
	}
	switch {
	case v.out == limited && w.shadow:
		// Shadow mode boxes too, so that the boxes and trips show what
		// the penalty would do; it refuses nothing.
		if w.pen != nil && !inBox {
			ck.trip(ctx, w, c, now, box, sec+1)
		}
		v.out = shadowLimited
	case v.out == limited:
		return ck.over(ctx, w, c, now, rs, v, box)
	case inBox:
		v.out, v.limit, v.box = shadowLimited, 0, box
	case w.headers && v.limit >= 0:
		v.reset = w.plan.nextFree(rs, v.limit, sec) - sec
	}
	if count && !counted {
		if err := ck.store.Add(ctx, c, writes, 1); err != nil {
			ck.countFailed(w, now, err)
			v.err = err
		}
	}
	return v
}

// loadAdder is a store that can read a check's counts and count its hit
// as one step (Memory): a check of a counter then never reads the counts
// another check of it has read and is about to add to, so concurrent
// checks let through no more than the limit.
type loadAdder interface {
	// loadAdd is Load, then Add of 1 to add when d.decide() (which reads
	// the counts loaded and does not use the store) says so; it reports
	// whether it added.
	loadAdd(ctx context.Context, c Counter, buckets []Bucket, counts []int64, add []Bucket, d decider) (bool, error)
}

type decider interface{ decide() bool }

// judgement is a check's decision from the counts it read (rs.counts),
// made apart from the store so that a loadAdder can make it between its
// read and its add.
type judgement struct {
	w         *windows
	rs        *readSet
	sec, cost int64
	count     bool
	v         verdict // allowed or limited, with the limit with least room or the first exceeded
	box       Box     // the client's box as read
	inBox     bool
}

// decide fills j's verdict and box from the counts and reports whether
// the hit is to be counted: when count was asked and the request is
// neither boxed nor limited (shadow mode counts both).
func (j *judgement) decide() bool {
	w, rs := j.w, j.rs
	j.box = w.plan.boxIn(rs)
	j.inBox = j.box.In(j.sec)
	j.v = verdict{out: allowed, limit: -1, remaining: -1}
	if j.inBox && !w.shadow {
		return false
	}
	v := &j.v
	for i, lim := range w.plan.limits {
		n := w.plan.sum(rs, i)
		if n+j.cost > lim.N {
			if v.out != limited {
				v.out, v.limit = limited, i
			}
			continue
		}
		if v.out == allowed && w.headers {
			if rem := lim.N - n - j.cost; v.limit < 0 || rem < v.remaining {
				v.limit, v.remaining = i, rem
			}
		}
	}
	return j.count && (v.out != limited || w.shadow)
}

// over is the verdict v of a request over a limit of w at now, rs holding
// the counts of its check and box the client's box as read: until when it
// is refused, remembered with the blocked clients, and, when w has a
// penalty, its trip.
func (ck *checker) over(ctx context.Context, w *windows, c Counter, now time.Time, rs *readSet, v verdict, box Box) verdict {
	sec := now.Unix()
	// The next request passes once every limit counts at most N-1: not
	// only the limits exceeded now, since a strict rule's next request
	// counts itself before the check (a limit at exactly N passes this
	// one and stops the next). The binding limit is the one that frees
	// last.
	free := sec + 1
	for i, lim := range w.plan.limits {
		if f := ck.freeAt(ctx, w, c, rs, i, lim.N-1); f > free {
			free, v.limit = f, i
		}
	}
	if w.pen != nil {
		if b, ok := ck.trip(ctx, w, c, now, box, free); ok {
			v.box, v.reset = b, b.Until-sec
			ck.blocked.put(c, blockedEntry{until: min(b.Until, sec+boxRecheck), limit: v.limit, box: b}, sec)
			return v
		}
	}
	v.reset = free - sec
	ck.blocked.put(c, blockedEntry{until: free, limit: v.limit}, sec)
	return v
}

// freeAt returns the unix second from which limit i of w counts at most
// target hits of c, no more hits being counted, or 0 if it already does; rs
// holds the counts of a check. In bucket precision the plan's answer is
// exact. In exact precision the plan only knows that a minute or hour
// bucket's hits have all left the window when its last second has, which
// can be an hour late; every hit was also written to the finer levels, so
// freeAt reads the bucket's 60 finer buckets (and those of the minute
// found, for an hour) to find the second at which the last hit that must
// leave does. That is one or two more store operations, only when a client
// is found over a limit, which is then remembered until that second. If
// they fail or disagree with the coarse count (expired, reset, another
// gateway's hits in flight), the plan's upper bound stands.
func (ck *checker) freeAt(ctx context.Context, w *windows, c Counter, rs *readSet, i int, target int64) int64 {
	j, d := w.plan.binding(rs, i, target)
	if j < 0 {
		return 0
	}
	b := rs.buckets[j]
	if w.plan.exact && b.Level > Second {
		if s, ok := ck.nthHit(ctx, c, b, d); ok {
			return s + w.plan.lim[i].window
		}
	}
	return b.Start + sizeOf(b.Level) + w.plan.lim[i].lag
}

// nthHit returns the second of the d-th oldest hit counted in bucket b of c,
// read from the finer levels.
func (ck *checker) nthHit(ctx context.Context, c Counter, b Bucket, d int64) (int64, bool) {
	var sub [60]Bucket // a minute of seconds, an hour of minutes
	var counts [60]int64
	for b.Level > Second {
		lv := b.Level - 1
		size := sizeOf(lv)
		for k := range sub {
			sub[k] = Bucket{Level: lv, Start: b.Start + int64(k)*size}
		}
		if err := ck.store.Load(ctx, c, sub[:], counts[:]); err != nil {
			return 0, false
		}
		k := 0
		for ; k < len(sub) && counts[k] < d; k++ {
			d -= counts[k]
		}
		if k == len(sub) {
			return 0, false
		}
		b = sub[k]
	}
	return b.Start, true
}

// count counts one hit of value under r at now (a rule whose hits are
// counted after the upstream answered).
func (l *Limiter) count(ctx context.Context, r *rule, value string, now time.Time) {
	rs := l.pool.Get().(*readSet)
	defer l.pool.Put(rs)
	rs.plan = nil // rs.writes no longer matches the cached read set
	writes := r.plan.writes(now.Unix(), rs.writes[:0])
	if err := l.store.Add(ctx, Counter{Rule: r.Name, Value: value}, writes, 1); err != nil {
		l.countFailed(&r.windows, now, err)
	}
}

// countFailed records a hit the store refused: in the metrics every time,
// in the log at most once a second per rule (a store outage fails every
// request).
func (ck *checker) countFailed(w *windows, now time.Time, err error) {
	w.metrics.inc(storeError)
	if n, ok := ck.logs.allow(logKey{w.name, "count_failed"}, now); ok {
		ck.log.Warn("limit: count failed", "rule", w.name, "err", err, "suppressed", n)
	}
}

func (r *rule) counts(status int) bool {
	return len(r.CountStatus) == 0 || slices.Contains(r.CountStatus, status)
}

// appendRateLimitItem appends the RateLimit field item of limit i.
func (r *rule) appendRateLimitItem(b []byte, i int, remaining, reset int64) []byte {
	b = append(b, r.quoted[i]...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, max(remaining, 0), 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, max(reset, 0), 10)
}
