package gateway

import (
	"strconv"
	"time"
)

// Bound is a bound of the compile step, for tests: the field, its range
// (MinS, MaxS as docs/configuration.md writes them), and whether 0 is accepted too.
type Bound struct {
	Field      string
	Min, Max   int64 // nanoseconds for a duration
	Duration   bool  // else a size or a count
	Zero       bool  // 0 is accepted (it means none)
	MinS, MaxS string
}

// Bounds returns the compile step's bounds of every duration and size.
func Bounds() []Bound {
	var out []Bound
	for _, b := range bounds {
		out = append(out, Bound{
			Field: b.field, Min: b.min, Max: b.max, Duration: !b.bytes && !b.count, Zero: b.zero != "",
			MinS: b.format(b.min), MaxS: b.format(b.max),
		})
	}
	return out
}

// YAML writes v as a file sets the bound's field to it.
func (b Bound) YAML(v int64) string {
	if b.Duration {
		return time.Duration(v).String()
	}
	return strconv.FormatInt(v, 10)
}
