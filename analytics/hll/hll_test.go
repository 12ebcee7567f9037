package hll_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/linkgate/linkgate/analytics/hll"
)

// TestErrorBound adds n random hashes for n from 1 to a million and checks
// each estimate against n: within 3 standard errors (4.9%) for every n,
// within 2 for nearly all, and exact to ±2 up to 100 (linear counting).
func TestErrorBound(t *testing.T) {
	rnd := rand.New(rand.NewPCG(7, 8))
	var within2, trials int
	for _, n := range []int{1, 2, 10, 100, 500, 1000, 3000, 10_000, 30_000, 100_000, 300_000, 1_000_000} {
		for trial := range 3 {
			var s hll.Sketch
			for range n {
				s.Add(rnd.Uint64())
			}
			est := s.Estimate()
			rel := math.Abs(float64(est)-float64(n)) / float64(n)
			t.Logf("n=%d trial %d: estimate %d (%.2f%%)", n, trial, est, 100*rel)
			if n <= 100 && math.Abs(float64(est-int64(n))) > 2 {
				t.Errorf("n=%d: estimate %d, want within 2", n, est)
			}
			if rel > 3*hll.StdError {
				t.Errorf("n=%d: estimate %d is %.2f%% off, more than 3 standard errors (%.2f%%)", n, est, 100*rel, 300*hll.StdError)
			}
			trials++
			if rel <= 2*hll.StdError {
				within2++
			}
		}
	}
	if within2 < trials*9/10 {
		t.Errorf("%d of %d estimates within 2 standard errors, want at least 90%%", within2, trials)
	}
}

// TestMergeIdempotent: a union estimates the distinct hashes of both
// sketches, whatever the order, and merging again (or a sketch into
// itself) changes nothing; the encoding round-trips, sparse and dense.
func TestMergeIdempotent(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 1))
	hashes := make([]uint64, 20_000)
	for i := range hashes {
		hashes[i] = rnd.Uint64()
	}
	var a, b, all hll.Sketch
	for i, h := range hashes {
		all.Add(h)
		if i < 12_000 {
			a.Add(h)
		}
		if i >= 8_000 {
			b.Add(h)
		}
	}
	var ab, ba hll.Sketch
	ab.Merge(&a)
	ab.Merge(&b)
	ba.Merge(&b)
	ba.Merge(&a)
	ba.Merge(&a)
	ba.Merge(&ba)
	if ab.Estimate() != all.Estimate() || ba.Estimate() != all.Estimate() {
		t.Errorf("unions %d and %d, want %d as the sketch of all", ab.Estimate(), ba.Estimate(), all.Estimate())
	}
	for _, s := range []*hll.Sketch{&all, sketchOf(5), sketchOf(0)} {
		var back hll.Sketch
		enc := s.AppendBinary(nil)
		if err := back.MergeBinary(enc); err != nil && !s.Empty() {
			t.Fatal(err)
		}
		if back.Estimate() != s.Estimate() || back.Len() != s.Len() {
			t.Errorf("round trip of %d registers (%d bytes): %d, want %d", s.Len(), len(enc), back.Estimate(), s.Estimate())
		}
	}
	var bad hll.Sketch
	for _, b := range [][]byte{nil, {'x'}, {'s', 0}, {'s', 0xff, 0xff, 1}, {'d', 1}} {
		if bad.MergeBinary(b) == nil {
			t.Errorf("MergeBinary(%x) accepted it", b)
		}
	}
}

func sketchOf(n int) *hll.Sketch {
	var s hll.Sketch
	for i := range n {
		s.Add(uint64(i) * 0x9E3779B97F4A7C15)
	}
	return &s
}
