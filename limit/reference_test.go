package limit

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// refClient is the brute-force reference of one client under one rule: the
// time of every hit that was counted, and nothing else.
type refClient struct {
	hits         []int64 // unix seconds, in order
	blockedUntil int64   // after a rejection: the second it can pass again
}

// count returns the hits limit pl counts at unix second now: in Bucketed
// those of the last k buckets of its level, in Exact those of the last
// window seconds (the package documentation's definitions).
func (c *refClient) count(exact bool, pl planLimit, now int64) int64 {
	var from int64 // first second counted
	if exact {
		from = now - pl.window + 1
	} else {
		size := sizeOf(pl.level)
		from = (floorDiv(now, size) - pl.k + 1) * size
	}
	var n int64
	for _, h := range c.hits {
		if h >= from && h <= now {
			n++
		}
	}
	return n
}

// leaves returns the second at which hit h stops being counted by pl.
func leaves(exact bool, pl planLimit, h int64) int64 {
	if exact {
		return h + pl.window
	}
	size := sizeOf(pl.level)
	return (floorDiv(h, size) + pl.k) * size
}

// within reports whether every limit holds at now with extra more hits.
func (c *refClient) within(p *bucketPlan, now, extra int64) bool {
	for i, pl := range p.lim {
		if c.count(p.exact, pl, now)+extra > p.limits[i].N {
			return false
		}
	}
	return true
}

// freeAt returns the first second after now at which one more hit passes
// every limit, no other hit being counted meanwhile.
func (c *refClient) freeAt(p *bucketPlan, now int64) int64 {
	var cands []int64
	for _, pl := range p.lim {
		for _, h := range c.hits {
			if l := leaves(p.exact, pl, h); l > now {
				cands = append(cands, l)
			}
		}
	}
	slices.Sort(cands)
	for _, f := range cands {
		if c.within(p, f, 1) {
			return f
		}
	}
	return -1
}

// TestLimiterAgainstReference replays random traffic of three clients through
// a Limiter on the Memory store under a fake clock, in both precisions, plain
// and strict, on the span fast path and on Load and Add, and requires every
// decision to be the brute-force reference's: allowed exactly when each limit
// holds with this hit, Retry-After exactly the second from which a request
// passes again, and RateLimit's remaining exact. Rejected requests are not
// counted (strict ones are, before the check).
func TestLimiterAgainstReference(t *testing.T) {
	t.Parallel()
	for _, specs := range planSpecs {
		for _, prec := range []string{"bucket", "exact"} {
			for _, strict := range []bool{false, true} {
				for _, plain := range []bool{false, true} {
					name := prec
					if strict {
						name += "/strict"
					}
					if plain {
						name += "/load"
					}
					t.Run(name+"/"+specs[0], func(t *testing.T) {
						t.Parallel() // CPU-bound under -race: both cores
						replayReference(t, specs, prec, strict, plain, uint64(len(specs)))
					})
				}
			}
		}
	}
}

func replayReference(t *testing.T, specs []string, prec string, strict, plain bool, seed uint64) {
	now := time.Date(2026, 3, 28, 23, 58, 57, 0, time.UTC)
	clock := func() time.Time { return now }
	var store Store = NewMemoryAt(clock)
	if plain {
		store = plainStore{NewMemoryAt(clock)}
	}
	cfg := DefaultConfig()
	cfg.Precision = prec
	rule := Rule{Name: "r", Match: Match{Path: "/"}, Key: IP, Limits: mustLimits(t, specs...), Strict: strict}
	l := New(compileT(t, []Rule{rule}, cfg), store, nil, nil)
	r := l.rules[0]
	p := r.plan
	ref := map[string]*refClient{}
	rng := rand.New(rand.NewPCG(seed, 11))
	// Gaps from a millisecond to several hours, some landing on a second.
	scales := []time.Duration{time.Millisecond, 300 * time.Millisecond, 2 * time.Second, 13 * time.Second, 61 * time.Second, 17 * time.Minute, 3 * time.Hour}
	ctx := context.Background()
	var allowedN, limitedN int
	for i := range 2500 {
		gap := time.Duration(rng.Int64N(int64(scales[rng.IntN(len(scales))])))
		if rng.IntN(4) == 0 {
			gap = gap.Truncate(time.Second)
		}
		now = now.Add(gap)
		sec := now.Unix()
		client := []string{"a", "b", "c"}[rng.IntN(3)]
		rc := ref[client]
		if rc == nil {
			rc = &refClient{}
			ref[client] = rc
		}
		v := l.check(ctx, &r.windows, client, now, true)
		if sec < rc.blockedUntil {
			// Remembered as over the limit: rejected without a store
			// operation, so not counted even by a strict rule.
			if v.out != limited || v.reset != rc.blockedUntil-sec {
				t.Fatalf("request %d at %v by %s, blocked until %d: %v Retry-After %d, want limited and %d", i, now, client, rc.blockedUntil, v.out, v.reset, rc.blockedUntil-sec)
			}
			continue
		}
		extra := int64(1)
		if strict {
			rc.hits = append(rc.hits, sec) // counted first, then checked
			extra = 0
		}
		want := rc.within(p, sec, extra)
		if want && !strict {
			rc.hits = append(rc.hits, sec)
		}
		if got := v.out == allowed; got != want {
			t.Fatalf("request %d at %v by %s: %v, want allowed=%v (%d hits counted)", i, now, client, v.out, want, len(rc.hits))
		}
		if !want {
			limitedN++
			rc.blockedUntil = rc.freeAt(p, sec)
			if v.reset != rc.blockedUntil-sec {
				t.Fatalf("request %d at %v by %s: Retry-After %d s, want %d", i, now, client, v.reset, rc.blockedUntil-sec)
			}
			continue
		}
		// RateLimit: the limit with the least room left (the first of
		// equals), this hit counted, and when its count next drops: when
		// its oldest earlier hit leaves (exact precision: no sooner), or a
		// whole window if it had none.
		rem, lim := int64(-1), -1
		for j, pl := range p.lim {
			if n := p.limits[j].N - rc.count(p.exact, pl, sec); lim < 0 || n < rem {
				rem, lim = n, j
			}
		}
		if v.remaining != rem || v.limit != lim {
			t.Fatalf("request %d at %v by %s: remaining %d of limit %d, want %d of %d", i, now, client, v.remaining, v.limit, rem, lim)
		}
		pl := p.lim[lim]
		next := pl.window
		earlier := rc.hits[:len(rc.hits)-1] // without this hit
		for _, h := range earlier {
			if leaves(p.exact, pl, h) > sec {
				next = leaves(p.exact, pl, h) - sec
				break
			}
		}
		if v.reset != next && (!p.exact || v.reset < next) {
			t.Fatalf("request %d at %v by %s: t=%d, want %d", i, now, client, v.reset, next)
		}
		allowedN++
	}
	if allowedN == 0 || limitedN == 0 {
		t.Errorf("%d allowed and %d limited: the replay does not exercise both", allowedN, limitedN)
	}
}
