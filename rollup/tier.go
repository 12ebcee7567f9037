// Package rollup holds the time arithmetic of link analytics and the worker
// that derives coarse data from fine: the tiers of resolution that visits
// are stored in (Graphite-style "precision:retention", e.g. "1m:2d"),
// bucket alignment, the choice and stitching of tiers for a query, the Plan
// of how visits move up the tiers, the Worker that moves them, and the
// Reader that reads every tier exactly whatever the Worker has done. Both
// halves of the rule "a coarse bucket is complete once the worker has got
// past its period and no mark says it is stale" live here: the Worker makes
// it true (worker.go), the Reader relies on it (reader.go).
//
// As the seeds put it, event data is aggregated into the finest required
// granularity, and each coarser level is generated from the next finer one:
// flushes write the finest tier only, and a Worker rolls each closed batch
// period of every coarser tier from the tier below, up to an all-time tier
// that never expires (TotalTier). The Worker and the Reader talk to stores
// through the small interfaces of store.go and reader.go, which the embedded and Cassandra stores
// implement; everything else here is a pure function of its arguments, time
// is always passed in, and all bucket times are UTC.
//
// # How the work is shared and why reruns are harmless
//
// A rolled value is a deterministic function of the finer tier, and a store
// keeps the larger of two values offered for one bucket (counts only grow,
// so the larger was computed from fresher data). So a run repeated, cut
// short and resumed, or done by several gateways at once, leaves the same
// values. Gateways sharing a store (Cassandra) share the work by a lease
// (Leaser): the one holding it rolls, the others stand by; the lease only
// saves duplicated work, correctness never depends on it.
//
// # Late counts
//
// A flush stamped half the grace or more past the end of its count's batch
// period may miss that period's roll (Plan.Late): it stores a Mark on the
// coarser bucket instead, and the worker rolls that bucket again within the
// next marks period (an hour by default) plus the grace, marking the
// bucket above it in turn, up to the all-time tier. Readers answer a marked
// bucket from the finer tiers meanwhile.
package rollup

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Common durations beyond those time.ParseDuration knows.
const (
	Day  = 24 * time.Hour
	Week = 7 * Day
	Year = 365 * Day
)

// Tier is one resolution of stored visit counts: buckets Step long, kept for
// Retention (Forever for the all-time tier, see TotalTier). The zero Tier is
// invalid.
type Tier struct {
	Step      time.Duration
	Retention time.Duration
}

// Forever is the Retention of a tier whose buckets never expire: the
// all-time tier. Code that does arithmetic with a retention checks Expires
// first.
const Forever = time.Duration(math.MaxInt64)

// Expires reports whether t's buckets expire, that is whether its
// Retention is not Forever.
func (t Tier) Expires() bool { return t.Retention != Forever }

// DefaultTiers is the default retention: today per minute, yesterday per
// 5 minutes, last month per hour, last year per day and the last years per week.
func DefaultTiers() []Tier {
	return []Tier{
		{time.Minute, 2 * Day},
		{5 * time.Minute, 8 * Day},
		{time.Hour, 40 * Day},
		{Day, 400 * Day},
		{Week, 5 * Year},
	}
}

// ParseTier parses "precision:retention", for example "5m:8d".
func ParseTier(s string) (Tier, error) {
	step, keep, ok := strings.Cut(s, ":")
	if !ok {
		return Tier{}, fmt.Errorf("rollup: tier %q: want precision:retention, like 1m:2d", s)
	}
	var t Tier
	var err error
	if t.Step, err = ParseDuration(step); err != nil {
		return Tier{}, fmt.Errorf("rollup: tier %q: precision: %w", s, err)
	}
	if t.Retention, err = ParseDuration(keep); err != nil {
		return Tier{}, fmt.Errorf("rollup: tier %q: retention: %w", s, err)
	}
	if err := t.validate(); err != nil {
		return Tier{}, fmt.Errorf("rollup: tier %q: %w", s, err)
	}
	return t, nil
}

func (t Tier) validate() error {
	switch {
	case t.Step < time.Minute || t.Step%time.Minute != 0:
		return fmt.Errorf("precision %v: must be a whole number of minutes", t.Step)
	case t.Step <= Day && Day%t.Step != 0:
		return fmt.Errorf("precision %v: must divide a day evenly", t.Step)
	case t.Step > Day && t.Step%Week != 0:
		return fmt.Errorf("precision %v: beyond a day it must be whole weeks", t.Step)
	case t.Retention < t.Step:
		return fmt.Errorf("retention %v is shorter than the precision %v", t.Retention, t.Step)
	}
	return nil
}

// String formats t as ParseTier reads it; the all-time tier's retention is
// "forever", which ParseTier does not read (no config names that tier).
func (t Tier) String() string {
	if !t.Expires() {
		return FormatDuration(t.Step) + ":forever"
	}
	return FormatDuration(t.Step) + ":" + FormatDuration(t.Retention)
}

// MarshalText implements encoding.TextMarshaler.
func (t Tier) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *Tier) UnmarshalText(b []byte) error {
	v, err := ParseTier(string(b))
	if err != nil {
		return err
	}
	*t = v
	return nil
}

// UnmarshalYAML reads a tier from its node's text as UnmarshalText does,
// so that a mapping is refused rather than decoded into Step and
// Retention. A bad tier is a *yaml.TypeError, as yaml reports a value of
// the wrong type, so that decoding goes on and a file's other errors are
// reported with it; the config package finds its line.
func (t *Tier) UnmarshalYAML(n *yaml.Node) error {
	if err := t.UnmarshalText([]byte(n.Value)); err != nil {
		return &yaml.TypeError{Errors: []string{err.Error()}}
	}
	return nil
}

// ValidateTiers checks that tiers go from fine to coarse, each step a multiple
// of the one before (so that every coarse bucket is a whole number of finer
// ones) and each retention at least as long as the one before.
func ValidateTiers(tiers []Tier) error {
	if len(tiers) == 0 {
		return fmt.Errorf("rollup: no tiers")
	}
	for i, t := range tiers {
		if err := t.validate(); err != nil {
			return fmt.Errorf("rollup: tier %d (%v): %w", i, t, err)
		}
		if i == 0 {
			continue
		}
		p := tiers[i-1]
		if t.Step <= p.Step || t.Step%p.Step != 0 {
			return fmt.Errorf("rollup: tier %d (%v): precision must be a multiple of the previous tier's %v", i, t, FormatDuration(p.Step))
		}
		if t.Retention < p.Retention {
			return fmt.Errorf("rollup: tier %d (%v): retention is shorter than the previous tier's %v", i, t, FormatDuration(p.Retention))
		}
	}
	return nil
}

// ParseDuration parses a Go duration ("90s", "1h30m") or a whole number of
// days, weeks or years ("2d", "8w", "5y"; a year is 365 days).
func ParseDuration(s string) (time.Duration, error) {
	units := map[byte]time.Duration{'d': Day, 'w': Week, 'y': Year}
	if n := len(s); n > 1 {
		if u, ok := units[s[n-1]]; ok {
			v, err := strconv.ParseUint(s[:n-1], 10, 32)
			if err != nil || v == 0 {
				return 0, fmt.Errorf("bad duration %q", s)
			}
			if v > uint64(math.MaxInt64/u) {
				// time.Duration ends at about 292 years: a longer one
				// would wrap around to a negative or short duration.
				return 0, fmt.Errorf("bad duration %q: longer than %d%c", s, math.MaxInt64/u, s[n-1])
			}
			return time.Duration(v) * u, nil
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("bad duration %q", s)
	}
	return d, nil
}

// FormatDuration formats d in the largest of y, w, d, h, m, s that divides it.
func FormatDuration(d time.Duration) string {
	for _, u := range []struct {
		d time.Duration
		s string
	}{{Year, "y"}, {Week, "w"}, {Day, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d >= u.d && d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.s
		}
	}
	return d.String()
}

// Align returns the start of the bucket of the given step that holds t, in
// UTC. time.Truncate counts from January 1 of year 1, a Monday, so week
// buckets start on Monday 00:00 UTC and day buckets at midnight UTC.
func Align(t time.Time, step time.Duration) time.Time { return t.UTC().Truncate(step) }
