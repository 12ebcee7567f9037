package limit

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/linkgate/linkgate/bound"
)

// This file is the penalty box: the math of a box's length (time passed
// in, nothing read from a clock) and what a check does with a box.
//
// A request over one of a rule's limits is a trip. A rule with a penalty
// puts its key in the box at each trip (Limiter.trip): the box is written
// to the store (PutBox: in memcached, where every gateway reads it with the
// rule's counts, in the same get), and every request the rule matches is
// answered 429 until it ends. Requests refused in the box are not counted,
// as no refused request is, so the windows shorter than the box are empty
// when it ends. A box ends no sooner than the request that tripped it could
// have passed (a day limit still binds after a shorter box).

// boxRecheck is how long a gateway answers a client in the box from its
// memory of blocked clients before it reads the store again: so that an
// operator's release (DELETE /admin/boxed), made on one gateway, reaches
// every other within a second and a read.
const boxRecheck = 1

// penalty is a rule's compiled Penalty, in whole seconds.
type penalty struct {
	first, max, forget int64
	factor             float64
}

// penaltyBounds are the ranges of a penalty's durations, which
// compilePenalty checks first.
var penaltyBounds = bound.Section[Penalty]{
	bound.At("duration", bound.Durations(time.Second, DefaultPenaltyMax).OrZero("no penalty"), func(p Penalty) time.Duration { return p.Duration }),
	bound.At("max", bound.Durations(time.Second, DefaultPenaltyMax).OrZero("168h"), func(p Penalty) time.Duration { return p.Max }),
	bound.At("forget_after", bound.Durations(time.Second, MaxForgetAfter).OrZero("24h"), func(p Penalty) time.Duration { return p.ForgetAfter }),
}

// compilePenalty checks a rule's penalty: nil when it has none. Errors
// start with the field's name within the rule ("penalty.max: ...").
func compilePenalty(p Penalty) (*penalty, error) {
	if err := penaltyBounds.Check("penalty", p); err != nil {
		return nil, err
	}
	if p == (Penalty{}) {
		return nil, nil
	}
	if p.Duration == 0 {
		return nil, fmt.Errorf("penalty.duration: missing: the penalty of a first trip (factor, max and forget_after say how it grows from there)")
	}
	if p.Max != 0 && p.Max < p.Duration {
		return nil, fmt.Errorf("penalty.max: %v is shorter than penalty.duration (%v), the box of a first trip", p.Max, p.Duration)
	}
	if f := p.Factor; f != 0 && !(f >= 1 && f <= MaxPenaltyFactor) { // NaN fails both
		return nil, fmt.Errorf("penalty.factor: %v is not between 1 and %d (each trip multiplies the box by it)", f, MaxPenaltyFactor)
	}
	cp := &penalty{
		first:  seconds(p.Duration),
		max:    seconds(cmpOr(p.Max, DefaultPenaltyMax)),
		forget: seconds(cmpOr(p.ForgetAfter, DefaultForgetAfter)),
		factor: max(p.Factor, 1),
	}
	return cp, nil
}

// cmpOr is cmp.Or for durations: d, or def when d is zero.
func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// seconds returns d in whole seconds, rounded up.
func seconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

// length returns the box of the trips-th trip, in seconds: first ×
// factor^(trips-1), rounded up, never past max.
func (p *penalty) length(trips int) int64 {
	d := float64(p.first)
	for i := 1; i < trips && p.factor > 1 && d < float64(p.max); i++ {
		d *= p.factor
	}
	return min(int64(math.Ceil(d)), p.max)
}

// next returns the box of a trip at now, old being the counter's box as
// read (possibly ended, its trips still kept), free the unix second from
// which the rule's limits let a request through, and the unix second
// until which the box must be kept: its end, or forget_after past the
// trip if later, so that a trip until then escalates.
func (p *penalty) next(old Box, now time.Time, free int64) (Box, int64) {
	sec := now.Unix()
	trips := 1
	if old.Trips > 0 && sec-old.Start <= p.forget {
		trips = min(old.Trips+1, packTrips)
	}
	end := now.Add(time.Duration(p.length(trips)) * time.Second)
	until := end.Unix()
	if end.Nanosecond() > 0 {
		until++ // a box lasts its length at least
	}
	b := Box{Start: sec, Until: max(until, free), Trips: trips}
	return b, max(b.Until, sec+p.forget)
}

// trip puts c in w's box after a request over w's limits at now (free:
// the second from which a request would pass), old being c's box as read.
// It returns the box; if the store failed to keep it, the failure is
// logged and counted and ok is false: the request is refused as over the
// limit, and the next one over it trips again.
func (ck *checker) trip(ctx context.Context, w *windows, c Counter, now time.Time, old Box, free int64) (b Box, ok bool) {
	b, keep := w.pen.next(old, now, free)
	if err := ck.store.PutBox(ctx, c, b, keep); err != nil {
		w.metrics.inc(storeError)
		if n, ok := ck.logs.allow(logKey{w.name, "box_failed"}, now); ok {
			ck.log.Warn("limit: penalty box not kept: the store failed", "rule", w.name, "err", err, "suppressed", n)
		}
		return Box{}, false
	}
	w.metrics.trip(b.Trips > 1)
	if n, ok := ck.logs.allow(logKey{w.name, "boxed"}, now); ok {
		ck.log.Info("limit: penalty box", "rule", w.name, "key", string(w.key), "value", c.Value,
			"trips", b.Trips, "until", time.Unix(b.Until, 0).UTC(), "suppressed", n)
	}
	return b, true
}

// boxedVerdict is the verdict for c, found in its box b at sec: 429 until
// the box ends, remembered (with the blocked clients) for at most
// boxRecheck seconds, after which the store is read again.
func (ck *checker) boxedVerdict(c Counter, b Box, sec int64) verdict {
	ck.blocked.put(c, blockedEntry{until: min(b.Until, sec+boxRecheck), box: b}, sec)
	return verdict{out: boxed, limit: 0, reset: b.Until - sec, box: b}
}

// EdgeBoxed reports whether the client address value (as IPValue writes
// it) is in the box of a rule marked edge now: the TLS edge then asks for
// no certificate and finishes no handshake for a name it has no answer
// for. A client remembered in a box costs no store operation; otherwise
// each edge rule's box is read (one bucket). A store that fails follows
// on_store_error: allow lets the client through, deny keeps it out.
func (l *Limiter) EdgeBoxed(ctx context.Context, value string) bool {
	now := l.now()
	sec := now.Unix()
	var counts [1]int64
	for _, r := range l.rules {
		if !r.Edge {
			continue
		}
		c := Counter{Rule: r.Name, Value: value}
		if e, ok := l.blocked.get(c, sec); ok && e.box.In(sec) {
			return true
		}
		if err := l.store.Load(ctx, c, boxOnly, counts[:]); err != nil {
			r.metrics.inc(storeError)
			if n, ok := l.logs.allow(logKey{r.Name, "edge_store_error"}, now); ok {
				l.log.Warn("limit: store failed reading a penalty box for the TLS edge", "rule", r.Name, "err", err, "policy", l.storePolicy(), "suppressed", n)
			}
			if !l.failOpen {
				return true
			}
			continue
		}
		if b := UnpackBox(counts[0]); b.In(sec) {
			return true
		}
	}
	return false
}

// boxOnly is the read of a box alone. Stores never modify the buckets
// they are given.
var boxOnly = []Bucket{BoxBucket}
