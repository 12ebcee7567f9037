package gateway

import (
	"strconv"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/bound"
	"github.com/linkgate/linkgate/cache"
	"github.com/linkgate/linkgate/edge"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/proxy"
	"github.com/linkgate/linkgate/stats"
	"github.com/linkgate/linkgate/tracing"
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

// Bounds returns the ranges of every duration and size, as the compile
// steps of the sections check them.
func Bounds() []Bound {
	var out []Bound
	for _, sec := range [][]bound.Named{
		serverBounds.Ranges("server"), runtimeBounds.Ranges("runtime"), edge.Bounds(), proxy.Bounds("upstream"), proxy.Bounds("routes[].upstream"),
		limit.Bounds(), analytics.Bounds(), stats.Bounds(), cache.Bounds.Ranges("cache"), tracing.Bounds.Ranges("tracing"),
	} {
		for _, b := range sec {
			r := b.Range
			out = append(out, Bound{
				Field: b.Path, Min: r.Min, Max: r.Max, Duration: r.Unit == bound.Duration, Zero: r.Zero != "",
				MinS: r.Format(r.Min), MaxS: r.Format(r.Max),
			})
		}
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
