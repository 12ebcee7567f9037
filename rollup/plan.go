package rollup

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// DefaultGrace is how long after a period ends the worker waits before it
// rolls the period: the time a flush of the period's last visits may take
// to land, with room for the gateways' clocks to differ (see Plan.Late).
const DefaultGrace = 5 * time.Minute

// totalSteps are the steps TotalTier chooses from, longest first: whole
// weeks beyond a day and divisors of a day below it, so that each one is a
// valid tier step.
var totalSteps = []time.Duration{
	52 * Week, 26 * Week, 13 * Week, 4 * Week, 2 * Week, Week,
	Day, 12 * time.Hour, 6 * time.Hour, 2 * time.Hour, time.Hour,
	30 * time.Minute, 10 * time.Minute, 5 * time.Minute, 2 * time.Minute,
}

// TotalTier returns the all-time tier of tiers: buckets that never expire,
// rolled from the coarsest tier, so that a link's all-time total is the sum
// of a few of them (one per 52 weeks with the default tiers) plus the finer
// data not rolled into them yet. Its step is the longest of 52 weeks, 26,
// 13, 4, 2 and 1 weeks, a day, … that is a multiple of the coarsest step,
// longer than it, and at most half its retention (so that every bucket is
// rolled long before the coarsest tier drops its data). tiers must pass
// ValidateTiers. It depends on nothing but tiers, so that every store and
// gateway given the same retention agrees on it.
func TotalTier(tiers []Tier) (Tier, error) {
	if len(tiers) == 0 {
		return Tier{}, errors.New("rollup: no tiers")
	}
	last := tiers[len(tiers)-1]
	for _, s := range totalSteps {
		if s > last.Step && s%last.Step == 0 && s <= last.Retention/2 {
			return Tier{Step: s, Retention: Forever}, nil
		}
	}
	return Tier{}, fmt.Errorf("rollup: the coarsest tier %v keeps its buckets too briefly to roll them into all-time totals: "+
		"its retention must be at least twice a step like 1d, 1w or 52w that is a multiple of %s", last, FormatDuration(last.Step))
}

// Plan is how visits move through the tiers: the flush writes the finest
// tier, and a Worker rolls each coarser tier from the next finer one, batch
// period by batch period, up to the all-time tier (TotalTier). A Plan is
// immutable and safe for concurrent use; build it with NewPlan.
//
// Tier i (i ≥ 1) is rolled a batch period at a time: for every key with
// data in the period (an Active entry), the worker reads tier i-1 over the
// period once and writes the period's tier-i buckets. The batch period of
// tier i is the step of tier i+1 when that is at most a week and at most
// half the retention of tier i-1, else the step of tier i itself: 1h for
// 5m buckets, 1d for hours, 1w for days and weeks, 52w for the all-time
// tier with the default tiers. A period is rolled once it ended Grace ago,
// so a tier lags its source by up to a batch period plus the grace; readers
// answer the part not rolled yet from the finer tiers.
type Plan struct {
	tiers []Tier          // the given tiers, then the all-time tier
	batch []time.Duration // batch[i], i ≥ 1: the batch period of tier i
	grace time.Duration
}

// NewPlan returns the plan for tiers (the retention setting) with the given
// grace (the rollup_grace setting). It fails, naming the tier, when a
// tier's source would expire before its batch periods are rolled.
func NewPlan(tiers []Tier, grace time.Duration) (*Plan, error) {
	if err := ValidateTiers(tiers); err != nil {
		return nil, err
	}
	if grace < 0 {
		return nil, fmt.Errorf("rollup: grace %v is negative", grace)
	}
	total, err := TotalTier(tiers)
	if err != nil {
		return nil, err
	}
	p := &Plan{tiers: append(slices.Clone(tiers), total), grace: grace}
	p.batch = make([]time.Duration, len(p.tiers))
	for i := 1; i < len(p.tiers); i++ {
		src := p.tiers[i-1]
		b := p.tiers[i].Step
		if i+1 < len(p.tiers) && p.tiers[i+1].Step <= Week && p.tiers[i+1].Step <= src.Retention/2 {
			b = p.tiers[i+1].Step
		}
		if b+grace > src.Retention {
			return nil, fmt.Errorf("rollup: tier %v: %v buckets are kept %s, less than rolling them into %s buckets takes (%s batches plus the grace %s)",
				p.tiers[i], FormatDuration(src.Step), FormatDuration(src.Retention), FormatDuration(p.tiers[i].Step), FormatDuration(b), FormatDuration(grace))
		}
		p.batch[i] = b
	}
	return p, nil
}

// Tiers returns the plan's tiers, finest first, the all-time tier last. The
// caller must not modify them.
func (p *Plan) Tiers() []Tier { return p.tiers }

// Retention returns the tiers the plan was made for (the retention
// setting), finest first, without the all-time tier. The caller must not
// modify them.
func (p *Plan) Retention() []Tier { return p.tiers[: len(p.tiers)-1 : len(p.tiers)-1] }

// Total returns the all-time tier.
func (p *Plan) Total() Tier { return p.tiers[len(p.tiers)-1] }

// Grace returns how long after a period ends it is rolled.
func (p *Plan) Grace() time.Duration { return p.grace }

// Level returns the index in Tiers of the tier whose step is step.
func (p *Plan) Level(step time.Duration) (int, bool) {
	for i, t := range p.tiers {
		if t.Step == step {
			return i, true
		}
	}
	return 0, false
}

// Batch returns the batch period of tier i (1 ≤ i < len(Tiers)): the span of
// time whose buckets are rolled together, and the span of the Active
// entries that announce work for tier i.
func (p *Plan) Batch(i int) time.Duration { return p.batch[i] }

// MarkPeriod is the span of the Active entries that announce marks: the
// finest batch period, so that a late count reaches the coarser tiers
// within about that, plus the grace.
func (p *Plan) MarkPeriod() time.Duration { return p.batch[1] }

// Period returns the start of tier i's batch period that holds t.
func (p *Plan) Period(i int, t time.Time) time.Time { return Align(t, p.batch[i]) }

// Late reports whether data of tier i (below the all-time tier) in the
// bucket at start, written at at, may miss the roll of its batch period
// into tier i+1: when at is half the grace or more past that period's end.
// Such data needs a Mark on its tier-(i+1) bucket instead of an Active
// entry. The worker rolls a period once the grace has passed, so a write
// stamped before half the grace is seen by the roll as long as it lands
// within the other half, clock differences between gateways included.
func (p *Plan) Late(i int, start, at time.Time) bool {
	if i+1 >= len(p.tiers) {
		return false
	}
	end := p.Period(i+1, start).Add(p.batch[i+1])
	return !at.Before(end.Add(p.grace / 2))
}

// Announce returns the Active entry that the rollup needs to find a count
// of key in the tier-i bucket at start written at at: the period of tier
// i+1 that rolls it, or, when the count is Late (it then needs a Mark
// too), the marks period of at. ok is false for a count of the all-time
// tier, which is rolled into nothing.
func (p *Plan) Announce(key string, i int, start, at time.Time) (a Active, ok bool) {
	if i < 0 || i+1 >= len(p.tiers) {
		return Active{}, false
	}
	if p.Late(i, start, at) {
		return Active{Step: MarksQueue, Period: Align(at, p.MarkPeriod()), Key: key}, true
	}
	return Active{Step: p.tiers[i+1].Step, Period: p.Period(i+1, start), Key: key}, true
}

// Place returns the tier that a flush at at writes a count of the bucket at
// start to, when the count was taken in tier from (the finest tier, for
// visits counted in memory): tier from itself, unless that tier would drop
// the bucket before it is rolled into the next (a count that arrives days
// late, after an outage), then the first coarser tier that keeps it long
// enough. The all-time tier keeps everything.
func (p *Plan) Place(from int, start, at time.Time) int {
	last := len(p.tiers) - 1
	for j := from; j < last; j++ {
		t := p.tiers[j]
		expires := Align(start, t.Step).Add(t.Step + t.Retention)
		// The latest the bucket is rolled into tier j+1: with its batch
		// period, or, when late, with the marks period after at (one more
		// period of slack for a worker a little behind).
		roll := p.Period(j+1, start).Add(p.batch[j+1])
		if m := Align(at, p.MarkPeriod()).Add(2 * p.MarkPeriod()); m.After(roll) {
			roll = m
		}
		if !roll.Add(p.grace).After(expires) {
			return j
		}
	}
	return last
}
