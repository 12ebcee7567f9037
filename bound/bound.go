// Package bound is the range a number of the config file may take (a
// duration, a size in bytes, a count) and the one error that says a value
// is outside it. Each section's compile step (proxy.Compile, limit.Compile,
// edge.Compile, analytics.Compile, stats.Compile, the gateway's own for
// the server section) lists the numbers of its section with their ranges,
// a Section, and checks them before anything else, so that check-config,
// start-up and every reload refuse a value out of range in the same words:
// the field, its value, and the range.
//
// The ranges are what a gateway can run with: a health check every
// nanosecond (16,000 checks a second per target), a two-terabyte header
// limit or a timeout of one nanosecond are typos, refused with the range
// rather than run.
package bound

import (
	"fmt"
	"strconv"
	"time"
)

// Unit is what a bounded number counts, which says how it is written.
type Unit uint8

const (
	Duration Unit = iota // nanoseconds, written as a Go duration: "100ms", "24h"
	Bytes                // a size, written as a number; a round binary unit is named too: "(1 MiB)"
	Count                // a number of things
)

// Range is the values a field may take: Min to Max, both included, and 0
// too when Zero says what 0 means ("none"). Build one with Durations,
// Sizes or Counts.
type Range struct {
	Min, Max int64 // nanoseconds for a Duration
	Unit     Unit
	Zero     string // what 0 means when it is allowed outside Min to Max; "": it is not
}

// Durations is the range of a duration from min to max.
func Durations(min, max time.Duration) Range {
	return Range{Min: int64(min), Max: int64(max), Unit: Duration}
}

// Sizes is the range of a size in bytes from min to max.
func Sizes(min, max int64) Range { return Range{Min: min, Max: max, Unit: Bytes} }

// Counts is the range of a count from min to max.
func Counts(min, max int64) Range { return Range{Min: min, Max: max, Unit: Count} }

// OrZero is r with 0 allowed too, meaning what meaning says ("none").
func (r Range) OrZero(meaning string) Range {
	r.Zero = meaning
	return r
}

// Contains reports whether v is in r.
func (r Range) Contains(v int64) bool {
	return v == 0 && r.Zero != "" || v >= r.Min && v <= r.Max
}

// Check returns nil when v is in r, else the error naming field, v and r:
// `server.read_timeout: 1ns is less than 100ms; it can be 100ms to 24h, or
// 0s for none`.
func (r Range) Check(field string, v int64) error {
	if r.Contains(v) {
		return nil
	}
	rel, limit := "less", r.Min
	if v > r.Max {
		rel, limit = "more", r.Max
	}
	return fmt.Errorf("%s: %s is %s than %s; it can be %s", field, r.Format(v), rel, r.Format(limit), r)
}

// Format writes v as the file would: a Go duration in its largest whole
// unit ("10m", where time.Duration.String writes "10m0s"), or a number.
func (r Range) Format(v int64) string {
	if r.Unit != Duration {
		return strconv.FormatInt(v, 10)
	}
	return formatDuration(time.Duration(v))
}

// String says r in words: "100ms to 24h, or 0s for none", "1024 to
// 1048576 (1 KiB to 1 MiB)".
func (r Range) String() string {
	s := r.Format(r.Min) + " to " + r.Format(r.Max)
	switch mn, mx := r.sizeName(r.Min), r.sizeName(r.Max); {
	case mn != "" && mx != "":
		s += " (" + mn + " to " + mx + ")"
	case mx != "":
		s += " (at most " + mx + ")"
	}
	if r.Zero != "" {
		s += ", or " + r.Format(0) + " for " + r.Zero
	}
	return s
}

// sizeName is "1 MiB" for a size that is a round binary unit, else "".
func (r Range) sizeName(v int64) string {
	if r.Unit != Bytes {
		return ""
	}
	for _, u := range []struct {
		n    int64
		name string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if v >= u.n && v%u.n == 0 {
			return fmt.Sprintf("%d %s", v/u.n, u.name)
		}
	}
	return ""
}

// formatDuration writes d in the largest unit that divides it: "100ms",
// "10m", "24h".
func formatDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "µs"}} {
		if d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	return d.String()
}

// Field is one bounded number of a section of type S: its path under the
// section ("read_timeout", "on_demand.ask_timeout"), its range, and how to
// read it. Build one with At.
type Field[S any] struct {
	Path  string
	Range Range
	Get   func(S) int64
}

// At is the Field at path under a section of type S, in r, whose value get
// reads: At("dial_timeout", Durations(10*time.Millisecond, time.Minute),
// func(c Config) time.Duration { return c.DialTimeout }).
func At[S any, N ~int | ~int64](path string, r Range, get func(S) N) Field[S] {
	return Field[S]{Path: path, Range: r, Get: func(s S) int64 { return int64(get(s)) }}
}

// Section lists the bounded numbers of a section of type S, every one of
// them: a test of the gateway walks the config to keep the lists complete.
type Section[S any] []Field[S]

// Check returns the error of the first field of s outside its range,
// named by its path in the file: at, the section's own path ("server",
// "routes[2].upstream"), then the field's.
func (sec Section[S]) Check(at string, s S) error {
	for _, f := range sec {
		if err := f.Range.Check(at+"."+f.Path, f.Get(s)); err != nil {
			return err
		}
	}
	return nil
}

// Named is a bounded field by its path in the file, with its range.
type Named struct {
	Path  string
	Range Range
}

// Ranges lists the fields of sec by their paths in the file, under at, the
// section's path: the ranges the configuration reference gives.
func (sec Section[S]) Ranges(at string) []Named {
	out := make([]Named, len(sec))
	for i, f := range sec {
		out[i] = Named{Path: at + "." + f.Path, Range: f.Range}
	}
	return out
}

// Fraction checks a share of things, such as the requests a trace is
// kept for: a number from 0 to 1, both included. It returns nil when v is
// one, else the error naming field, v and the range, in Check's words:
// `tracing.sample: 1.5 is more than 1; it can be 0 to 1`. NaN is outside.
func Fraction(field string, v float64) error {
	switch {
	case v >= 0 && v <= 1:
		return nil
	case v > 1:
		return fmt.Errorf("%s: %s is more than 1; it can be 0 to 1", field, strconv.FormatFloat(v, 'g', -1, 64))
	case v < 0:
		return fmt.Errorf("%s: %s is less than 0; it can be 0 to 1", field, strconv.FormatFloat(v, 'g', -1, 64))
	}
	return fmt.Errorf("%s: %s is not a number; it can be 0 to 1", field, strconv.FormatFloat(v, 'g', -1, 64))
}
