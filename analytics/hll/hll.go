// Package hll is a HyperLogLog sketch (Flajolet, Fusy, Gandouet and
// Meunier, 2007) of 4,096 registers: it estimates how many distinct 64-bit
// hashes were added with a standard error of 1.04/√4096 = 1.6%, in at most
// 4 KB, and sketches merge by taking each register's maximum, so that a
// merge is commutative and idempotent: adding the same sketch twice, or in
// any order, changes nothing. Small sketches are kept sparse: a sorted list
// of their non-zero registers.
//
// Estimates below 2.5 × 4,096 use linear counting on the empty registers
// (the original paper's small-range correction), which is exact to within
// a few for a few hundred hashes.
package hll

import (
	"encoding/binary"
	"errors"
	"math"
	"math/bits"
	"slices"
)

// P is the number of index bits: 2^P registers.
const P = 12

// M is the number of registers.
const M = 1 << P

// StdError is the relative standard error of Estimate: 1.04/√M.
var StdError = 1.04 / math.Sqrt(M)

// Sketch is a HyperLogLog sketch. The zero Sketch is empty and ready to
// use. A Sketch is not safe for concurrent use.
type Sketch struct {
	sparse []uint32 // idx<<8 | rho, sorted by idx; nil once dense
	dense  *[M]uint8
}

// sparseMax is how many registers a sparse sketch holds before it turns
// dense: past it, the 4 bytes a register takes sparse outweigh the dense
// byte a register.
const sparseMax = M / 8

// Reg returns the register and value a hash sets: its top P bits index the
// register, which takes the position of the first 1 among the other bits
// (1 to 65-P).
func Reg(h uint64) (idx uint16, rho uint8) {
	idx = uint16(h >> (64 - P))
	w := h<<P | 1<<(P-1) // the sentinel bounds rho at 64-P+1
	return idx, uint8(bits.LeadingZeros64(w) + 1)
}

// Add adds a hash.
func (s *Sketch) Add(h uint64) { s.Set(Reg(h)) }

// Set raises register idx to rho if it is lower.
func (s *Sketch) Set(idx uint16, rho uint8) {
	if rho == 0 {
		return
	}
	if s.dense != nil {
		if s.dense[idx] < rho {
			s.dense[idx] = rho
		}
		return
	}
	i, found := slices.BinarySearchFunc(s.sparse, idx, func(r uint32, idx uint16) int { return int(r>>8) - int(idx) })
	if found {
		if uint8(s.sparse[i]) < rho {
			s.sparse[i] = uint32(idx)<<8 | uint32(rho)
		}
		return
	}
	if len(s.sparse) >= sparseMax {
		s.toDense()
		s.dense[idx] = rho
		return
	}
	s.sparse = slices.Insert(s.sparse, i, uint32(idx)<<8|uint32(rho))
}

func (s *Sketch) toDense() {
	d := new([M]uint8)
	for _, r := range s.sparse {
		d[r>>8] = uint8(r)
	}
	s.dense, s.sparse = d, nil
}

// Merge raises every register of s to the value it has in o.
func (s *Sketch) Merge(o *Sketch) {
	o.Each(func(idx uint16, rho uint8) { s.Set(idx, rho) })
}

// Each calls fn for every non-zero register, in index order.
func (s *Sketch) Each(fn func(idx uint16, rho uint8)) {
	if s.dense != nil {
		for i, r := range s.dense {
			if r != 0 {
				fn(uint16(i), r)
			}
		}
		return
	}
	for _, r := range s.sparse {
		fn(uint16(r>>8), uint8(r))
	}
}

// Len returns how many registers are not zero.
func (s *Sketch) Len() int {
	if s.dense == nil {
		return len(s.sparse)
	}
	n := 0
	for _, r := range s.dense {
		if r != 0 {
			n++
		}
	}
	return n
}

// Bytes returns about how much memory s's registers take: 4 a register
// while sparse, M once dense.
func (s *Sketch) Bytes() int {
	if s.dense != nil {
		return M
	}
	return 4 * cap(s.sparse)
}

// Empty reports whether nothing was added.
func (s *Sketch) Empty() bool { return s.dense == nil && len(s.sparse) == 0 }

// Estimate returns the estimated number of distinct hashes added.
func (s *Sketch) Estimate() int64 {
	if s.Empty() {
		return 0
	}
	sum, zeros := 0.0, M
	s.Each(func(_ uint16, rho uint8) {
		sum += math.Ldexp(1, -int(rho))
		zeros--
	})
	sum += float64(zeros) // registers at 0 add 2^0 each
	alpha := 0.7213 / (1 + 1.079/M)
	e := alpha * M * M / sum
	if e <= 2.5*M && zeros > 0 {
		e = M * math.Log(float64(M)/float64(zeros)) // linear counting
	}
	return int64(math.Round(e))
}

// AppendBinary appends s encoded: 's', then each non-zero register as
// uint16 index and byte value (sparse); or 'd' then M bytes (dense),
// whichever is shorter.
func (s *Sketch) AppendBinary(b []byte) []byte {
	n := s.Len()
	if 1+3*n < 1+M {
		b = append(b, 's')
		s.Each(func(idx uint16, rho uint8) {
			b = binary.BigEndian.AppendUint16(b, idx)
			b = append(b, rho)
		})
		return b
	}
	b = append(b, 'd')
	if s.dense == nil {
		s.toDense()
	}
	return append(b, s.dense[:]...)
}

// ErrBadSketch is returned for bytes that are not a sketch.
var ErrBadSketch = errors.New("hll: not a sketch")

// MergeBinary merges a sketch encoded by AppendBinary into s.
func (s *Sketch) MergeBinary(b []byte) error {
	if len(b) == 0 {
		return ErrBadSketch
	}
	switch b[0] {
	case 's':
		b = b[1:]
		if len(b)%3 != 0 {
			return ErrBadSketch
		}
		for ; len(b) > 0; b = b[3:] {
			idx := binary.BigEndian.Uint16(b)
			if idx >= M || b[2] > 65-P {
				return ErrBadSketch
			}
			s.Set(idx, b[2])
		}
	case 'd':
		if len(b) != 1+M {
			return ErrBadSketch
		}
		for i, r := range b[1:] {
			if r > 65-P {
				return ErrBadSketch
			}
			if r != 0 {
				s.Set(uint16(i), r)
			}
		}
	default:
		return ErrBadSketch
	}
	return nil
}
