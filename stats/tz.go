package stats

import (
	"context"
	"errors"
	"fmt"
	"time"
	_ "time/tzdata" // tz= works on a machine without a zone database (a scratch container)

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// Time zones
//
// With tz=Area/City, a curve of day or week buckets has them start at the
// zone's midnights (weeks on its Mondays), DST included: a day of the
// change is 23 or 25 hours long. Such buckets are summed from a finer tier
// whose buckets their boundaries fall on (the hourly one for zones a whole
// number of hours from UTC, the 5-minute one for the others), as long as
// that tier keeps the range; past its retention the stored days and weeks
// cannot be split, and the answer keeps UTC buckets, saying so: "tz" names
// the zone its buckets use, "tz_asked" the one asked for.

// localBuckets returns the starts of the buckets of step (a day or a week)
// in loc that hold some of [from, to), and the end of the last.
func localBuckets(from, to time.Time, step time.Duration, loc *time.Location) (starts []time.Time, end time.Time) {
	l := from.In(loc)
	t := time.Date(l.Year(), l.Month(), l.Day(), 0, 0, 0, 0, loc)
	days := 1
	if step >= rollup.Week {
		days = 7
		for t.Weekday() != time.Monday {
			t = time.Date(t.Year(), t.Month(), t.Day()-1, 0, 0, 0, 0, loc)
		}
	}
	for t.Before(to) {
		starts = append(starts, t.UTC())
		t = time.Date(t.Year(), t.Month(), t.Day()+days, 0, 0, 0, 0, loc)
	}
	return starts, t.UTC()
}

// localSource returns the finest tier kept at now for a range starting at
// from whose buckets every boundary of starts and end falls on, when one
// finer than a day does.
func (s *API) localSource(starts []time.Time, end, now time.Time) (rollup.Tier, bool) {
	for _, t := range s.tiers {
		if t.Step >= rollup.Day || t.Expires() && starts[0].Before(now.Add(-t.Retention)) {
			continue
		}
		ok := rollup.Align(end, t.Step).Equal(end)
		for _, b := range starts {
			ok = ok && rollup.Align(b, t.Step).Equal(b)
		}
		if ok {
			return t, true
		}
	}
	return rollup.Tier{}, false
}

// localCurve answers q's curve of day or week buckets in q.tz, summed from
// a finer tier; false when no tier can (the caller answers in UTC).
func (s *API) localCurve(ctx context.Context, key string, q query, step time.Duration, now time.Time) (*curve, bool, error) {
	starts, end := localBuckets(q.from, q.to, step, q.tz)
	if len(starts) == 0 {
		return nil, false, nil
	}
	if len(starts) > maxPoints {
		return nil, false, badParam("tz", "the range has %d points, more than %d", len(starts), maxPoints)
	}
	src, ok := s.localSource(starts, end, now)
	if !ok {
		return nil, false, nil
	}
	c := &curve{from: starts[0], to: q.to, step: step, points: make([]curvePoint, len(starts)), tz: q.tz.String()}
	for i, b := range starts {
		next := end
		if i+1 < len(starts) {
			next = starts[i+1]
		}
		c.points[i] = curvePoint{start: b.Unix(), step: int64(next.Sub(b) / time.Second)}
	}
	pts, err := s.r.Points(ctx, key, src.Step, starts[0], end)
	if err != nil {
		c.readErr = fmt.Errorf("stats: points of %q at %v: %w", key, src.Step, err)
		if !errors.Is(err, analytics.ErrUnsavedOnly) {
			pts = nil
		}
		for i := range c.points {
			c.points[i].null = true
		}
	}
	j := 0
	for _, p := range pts {
		for j+1 < len(starts) && !p.Start.Before(starts[j+1]) {
			j++
		}
		if p.Start.Before(starts[0]) || !p.Start.Before(end) {
			continue
		}
		c.points[j].null = false
		c.points[j].Visits = c.points[j].Visits.Add(p.Visits)
		c.rangeTotal = c.rangeTotal.Add(p.Visits)
	}
	return c, true, nil
}
