package limit

import (
	"math/rand/v2"
	"testing"
)

// TestRingAgainstMap drives a ring with random adds, advances, resets and
// growth, and compares every count, sum and first non-empty bucket with a
// plain map of bucket counts.
func TestRingAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for round := range 50 {
		r := &ring{head: 1000}
		r.grow(4)
		model := map[int64]uint32{}
		evicted := map[int64]uint32{}
		for step := range 400 {
			switch op := rng.IntN(10); {
			case op < 6: // add, usually at or near the head
				x := r.head - int64(rng.IntN(3))
				if rng.IntN(4) == 0 {
					x = r.head + int64(rng.IntN(12))
				}
				if x > r.head {
					r.advance(x, func(y int64, c uint32) { evicted[y] += c })
					for y := range model {
						if y <= x-int64(len(r.cum)) {
							if model[y] != evicted[y] {
								t.Fatalf("round %d step %d: evicted %d with %d, want %d", round, step, y, evicted[y], model[y])
							}
							delete(model, y)
						}
					}
				}
				if x <= r.head-int64(len(r.cum)) {
					continue
				}
				c := uint32(rng.IntN(5))
				r.add(x, c)
				model[x] += c
			case op < 8: // reset a bucket in the ring
				x := r.head - int64(rng.IntN(len(r.cum)))
				r.reset(x)
				delete(model, x)
			case op < 9 && len(r.cum) < 64: // grow
				r.grow(len(r.cum) * 2)
			}
			n := int64(len(r.cum))
			for x := r.head - n + 1; x <= r.head; x++ {
				if got := r.count(x); got != model[x] {
					t.Fatalf("round %d step %d: count(%d) = %d, want %d", round, step, x, got, model[x])
				}
			}
			lo := r.head - int64(rng.IntN(int(n)))
			hi := lo + int64(rng.IntN(int(r.head-lo+1)))
			var want uint32
			first := int64(-1)
			for x := lo; x <= hi; x++ {
				want += model[x]
				if first < 0 && model[x] > 0 {
					first = x
				}
			}
			if got := r.sum(lo, hi); got != want {
				t.Fatalf("round %d step %d: sum(%d, %d) = %d, want %d", round, step, lo, hi, got, want)
			}
			if want > 0 {
				if got := r.firstNonZero(lo, hi); got != first {
					t.Fatalf("round %d step %d: firstNonZero(%d, %d) = %d, want %d", round, step, lo, hi, got, first)
				}
			}
		}
	}
}
