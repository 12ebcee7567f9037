package bound_test

import (
	"math"
	"testing"
	"time"

	"github.com/linkgate/linkgate/bound"
)

// TestCheck: the one error of a value out of range names the field, the
// value as the file writes it, the end it passed and the whole range; a
// value at either end, or 0 where 0 means something, passes.
func TestCheck(t *testing.T) {
	timeout := bound.Durations(100*time.Millisecond, 24*time.Hour).OrZero("none")
	header := bound.Sizes(1<<10, 1<<20)
	buffer := bound.Sizes(1<<20, 64<<30)
	body := bound.Sizes(1, 16<<20)
	streams := bound.Counts(1, 10_000).OrZero("no live stream")
	for _, c := range []struct {
		r    bound.Range
		v    int64
		want string // "": accepted
	}{
		{timeout, 1, "f: 1ns is less than 100ms; it can be 100ms to 24h, or 0s for none"},
		{timeout, int64(25 * time.Hour), "f: 25h is more than 24h; it can be 100ms to 24h, or 0s for none"},
		{timeout, int64(90 * time.Minute), ""},
		{timeout, 0, ""},
		{timeout, int64(100 * time.Millisecond), ""},
		{timeout, int64(24 * time.Hour), ""},
		{timeout, int64(1500 * time.Microsecond), "f: 1500µs is less than 100ms; it can be 100ms to 24h, or 0s for none"},
		{header, 2_000_000_000_000, "f: 2000000000000 is more than 1048576; it can be 1024 to 1048576 (1 KiB to 1 MiB)"},
		{header, 0, "f: 0 is less than 1024; it can be 1024 to 1048576 (1 KiB to 1 MiB)"},
		{buffer, 1, "f: 1 is less than 1048576; it can be 1048576 to 68719476736 (1 MiB to 64 GiB)"},
		{body, -1, "f: -1 is less than 1; it can be 1 to 16777216 (at most 16 MiB)"},
		{streams, 10_001, "f: 10001 is more than 10000; it can be 1 to 10000, or 0 for no live stream"},
		{streams, 0, ""},
		{streams, -1, "f: -1 is less than 1; it can be 1 to 10000, or 0 for no live stream"},
	} {
		err := c.r.Check("f", c.v)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%v: Check(%d): %q, want %q", c.r, c.v, got, c.want)
		}
	}
}

type section struct {
	Timeout time.Duration
	Max     int
}

// TestSection: a section names its fields under the path it is checked
// at, and reports the first field out of range.
func TestSection(t *testing.T) {
	sec := bound.Section[section]{
		bound.At("timeout", bound.Durations(time.Second, time.Minute), func(s section) time.Duration { return s.Timeout }),
		bound.At("limits.max", bound.Counts(1, 10), func(s section) int { return s.Max }),
	}
	if err := sec.Check("routes[2].upstream", section{Timeout: time.Second, Max: 10}); err != nil {
		t.Errorf("a section in range: %v", err)
	}
	err := sec.Check("routes[2].upstream", section{Timeout: time.Second, Max: 11})
	if want := "routes[2].upstream.limits.max: 11 is more than 10; it can be 1 to 10"; err == nil || err.Error() != want {
		t.Errorf("a count out of range: %v, want %q", err, want)
	}
	err = sec.Check("upstream", section{Timeout: 0, Max: 0})
	if want := "upstream.timeout: 0s is less than 1s; it can be 1s to 1m"; err == nil || err.Error() != want {
		t.Errorf("two fields out of range: %v, want the first: %q", err, want)
	}
	got := sec.Ranges("routes[].upstream")
	if len(got) != 2 || got[0].Path != "routes[].upstream.timeout" || got[1].Path != "routes[].upstream.limits.max" || got[1].Range.Max != 10 {
		t.Errorf("Ranges: %+v", got)
	}
}

// TestFraction: a share is 0 to 1, both included; above, below and NaN
// are refused in the words of Check.
func TestFraction(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{
		{0, ""}, {1, ""}, {0.01, ""},
		{1.5, "f: 1.5 is more than 1; it can be 0 to 1"},
		{-0.1, "f: -0.1 is less than 0; it can be 0 to 1"},
		{math.NaN(), "f: NaN is not a number; it can be 0 to 1"},
		{math.Inf(1), "f: +Inf is more than 1; it can be 0 to 1"},
	} {
		err := bound.Fraction("f", c.v)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("Fraction(%v) = %q, want %q", c.v, got, c.want)
		}
	}
}
