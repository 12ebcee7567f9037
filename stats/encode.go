package stats

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitclass"
)

// appendJSON appends c as the stats API's JSON object (documented on
// New), written by hand: a year of minutes is half a million numbers,
// and encoding/json would allocate for each point. Each part of the
// object has a function of its own, in the order the object lists them.
func (c *curve) appendJSON(b []byte) []byte {
	b = c.appendHead(b)
	b = c.appendUniques(b)
	if c.hasTop || c.uniques != nil {
		if len(c.breakdown) == 0 {
			b = appendField(b, "breakdown_from", c.dimFrom.Unix())
			b = appendField(b, "breakdown_to", c.dimTo.Unix())
		}
	}
	if c.hasTop {
		b = c.appendTop(b)
	}
	b = c.appendBreakdown(b)
	b = c.appendDaily(b)
	if c.compare != nil {
		b = append(b, `,"compare":`...)
		b = c.compare.appendJSON(b)
		b = b[:len(b)-1] // its newline
		b = append(b[:len(b)-1], `,"kind":"`...)
		b = append(b, c.compareKind...)
		b = append(b, `"}`...)
	}
	b = c.appendClasses(b)
	b = append(b, `,"points":`...)
	b = c.appendPoints(b, c.points)
	return append(b, "}\n"...)
}

// appendHead appends the object's opening: the link, whether it is known
// and the answer complete, the totals, the range, step and zone.
func (c *curve) appendHead(b []byte) []byte {
	key, _ := json.Marshal(c.shortKey) // a string always marshals
	b = append(b, `{"short_key":`...)
	b = append(b, key...)
	if c.tenant != "" {
		b = append(b, `,"tenant":"`+c.tenant+`"`...) // a tenant's name needs no escaping
	}
	b = append(b, `,"known":`...)
	switch k := c.known(); k {
	case "unknown":
		b = append(b, "null"...)
	default:
		b = append(b, k...)
	}
	if c.partial() {
		b = append(b, `,"partial":true,"partial_reason":"`+partialReason+`"`...)
	} else {
		b = append(b, `,"partial":false`...)
	}
	b = appendField(b, "total", c.total.Human)
	b = appendField(b, "bot_total", c.total.Bot)
	b = appendField(b, "range_total", c.rangeTotal.Human)
	b = appendField(b, "bot_range_total", c.rangeTotal.Bot)
	b = appendField(b, "from", c.from.Unix())
	b = appendField(b, "to", c.to.Unix())
	b = appendField(b, "step", int64(c.step.Seconds()))
	if !c.expiredBefore.IsZero() {
		b = appendField(b, "expired_before", c.expiredBefore.Unix())
	}
	if c.tz != "" {
		tz, _ := json.Marshal(c.tz)
		b = append(b, `,"tz":`...)
		b = append(b, tz...)
		if c.tzAsked != "" {
			asked, _ := json.Marshal(c.tzAsked)
			b = append(b, `,"tz_asked":`...)
			b = append(b, asked...)
		}
	}
	return b
}

// appendUniques appends the unique visitors' estimate, when counted.
func (c *curve) appendUniques(b []byte) []byte {
	u := c.uniques
	if u == nil {
		return b
	}
	kind := "one_day"
	if u.days > 1 {
		kind = "sum_of_days"
	}
	b = append(b, `,"uniques":{"count":`...)
	b = strconv.AppendInt(b, u.count, 10)
	b = append(b, `,"kind":"`...)
	b = append(b, kind...)
	b = append(b, `","days":`...)
	b = strconv.AppendInt(b, int64(u.days), 10)
	b = append(b, `,"error":`...)
	b = strconv.AppendFloat(b, math.Round(hll.StdError*1000)/1000, 'f', -1, 64)
	return append(b, '}')
}

// appendTop appends the most visited links, each with its curve.
func (c *curve) appendTop(b []byte) []byte {
	b = append(b, `,"top":[`...)
	for i, l := range c.top {
		if i > 0 {
			b = append(b, ',')
		}
		key, _ := json.Marshal(l.key)
		b = append(b, `{"short_key":`...)
		b = append(b, key...)
		if l.tenant != "" {
			b = append(b, `,"tenant":"`+l.tenant+`"`...)
		}
		b = appendField(b, "total", l.visits)
		b = appendField(b, "range_total", l.rangeTotal)
		if l.compareTotal != nil {
			b = appendField(b, "compare_range_total", *l.compareTotal)
		}
		b = append(b, `,"points":`...)
		b = c.appendPoints(b, l.points)
		b = append(b, '}')
	}
	return append(b, ']')
}

// appendBreakdown appends the breakdowns asked (by=), when any.
func (c *curve) appendBreakdown(b []byte) []byte {
	if len(c.breakdown) == 0 {
		return b
	}
	b = appendField(b, "breakdown_from", c.dimFrom.Unix())
	b = appendField(b, "breakdown_to", c.dimTo.Unix())
	b = append(b, `,"breakdown":{`...)
	for i, d := range c.breakdown {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, d.dim.String()...)
		b = append(b, `":[`...)
		for j, v := range d.values {
			if j > 0 {
				b = append(b, ',')
			}
			val, _ := json.Marshal(v.Value)
			b = append(b, `{"value":`...)
			b = append(b, val...)
			b = append(b, `,"count":`...)
			b = strconv.AppendInt(b, v.Count, 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendDaily appends one breakdown value's visits per day (daily=).
func (c *curve) appendDaily(b []byte) []byte {
	d := c.daily
	if d == nil {
		return b
	}
	val, _ := json.Marshal(d.value)
	b = append(b, `,"daily":{"dimension":"`...)
	b = append(b, d.dim.String()...)
	b = append(b, `","value":`...)
	b = append(b, val...)
	b = append(b, `,"points":[`...)
	for i, n := range d.counts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendInt(b, d.from.Add(time.Duration(i)*24*time.Hour).Unix(), 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, n, 10)
		b = append(b, ']')
	}
	return append(b, "]}"...)
}

// botClasses are the classes bot_total sums, in the order the API lists
// them.
var botClasses = [...]visitclass.Class{visitclass.Bot, visitclass.Preview, visitclass.Scanner, visitclass.Prefetch, visitclass.Internal}

// appendClasses appends each non-human class's totals ("classes": all
// time and over the range, always every class), and the curve of each
// class that has visits in the range ("class_points": see
// appendClassPoints). Counts stored before classes were counted are
// declared bots'.
func (c *curve) appendClasses(b []byte) []byte {
	b = appendClassTotals(b, &c.total, c.rangeTotal)
	return appendClassPoints(b, c.rangeTotal, len(c.points), func(i int) (rollup.Visits, bool) {
		return c.points[i].Visits, c.points[i].null
	})
}

// appendClassTotals appends "classes": each non-human class's
// "range_total" from rangeTotal, preceded by its all-time "total" from
// total when total is not nil (the live stream has none).
func appendClassTotals(b []byte, total *rollup.Visits, rangeTotal rollup.Visits) []byte {
	b = append(b, `,"classes":{`...)
	for i, cl := range botClasses {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, cl.String()...)
		b = append(b, `":{`...)
		if total != nil {
			b = append(b, `"total":`...)
			b = strconv.AppendInt(b, analytics.ClassVisits(*total, cl), 10)
			b = append(b, ',')
		}
		b = append(b, `"range_total":`...)
		b = strconv.AppendInt(b, analytics.ClassVisits(rangeTotal, cl), 10)
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendClassPoints appends "class_points": the curve of each non-human
// class that has visits in rangeTotal, a count for each of the n points
// (point returns the i-th's visits and whether it is null: null then), so
// that a class without visits costs nothing.
func appendClassPoints(b []byte, rangeTotal rollup.Visits, n int, point func(int) (rollup.Visits, bool)) []byte {
	b = append(b, `,"class_points":{`...)
	first := true
	for _, cl := range botClasses {
		if analytics.ClassVisits(rangeTotal, cl) == 0 {
			continue
		}
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, cl.String()...)
		b = append(b, `":[`...)
		for i := range n {
			if i > 0 {
				b = append(b, ',')
			}
			if v, null := point(i); null {
				b = append(b, "null"...)
			} else {
				b = strconv.AppendInt(b, analytics.ClassVisits(v, cl), 10)
			}
		}
		b = append(b, ']')
	}
	return append(b, '}')
}

// appendPoints appends points as a JSON array of [start, humans, bots]
// (and step, when stitched).
func (c *curve) appendPoints(b []byte, points []curvePoint) []byte {
	b = append(b, '[')
	for i, p := range points {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = p.append(b, ",null,null")
		if c.stitched {
			b = append(b, ',')
			b = strconv.AppendInt(b, p.step, 10)
		}
		b = append(b, ']')
	}
	return append(b, ']')
}

// append appends p's start, humans and bots, comma-separated; null in
// place of the counts when p's are unknown.
func (p curvePoint) append(b []byte, null string) []byte {
	b = strconv.AppendInt(b, p.start, 10)
	if p.null {
		return append(b, null...)
	}
	b = append(b, ',')
	b = strconv.AppendInt(b, p.Human, 10)
	b = append(b, ',')
	return strconv.AppendInt(b, p.Bot, 10)
}

func appendField(b []byte, name string, v int64) []byte {
	b = append(b, ",\""...)
	b = append(b, name...)
	b = append(b, "\":"...)
	return strconv.AppendInt(b, v, 10)
}

// appendCSV appends c's points as CSV with a header line, the counts of a
// null point left empty. Lines end in \n rather than RFC 4180's \r\n:
// analysts feed it to cut and awk too.
func (c *curve) appendCSV(b []byte) []byte {
	b = append(b, "unix_seconds,count,bot_count"...)
	if c.stitched {
		b = append(b, ",step"...)
	}
	if c.compare != nil {
		b = append(b, ",compare_unix_seconds,compare_count,compare_bot_count"...)
	}
	for _, cl := range botClasses {
		b = append(b, ",class_"...)
		b = append(b, cl.String()...)
	}
	b = append(b, '\n')
	for i, p := range c.points {
		b = p.append(b, ",,")
		if c.stitched {
			b = append(b, ',')
			b = strconv.AppendInt(b, p.step, 10)
		}
		if c.compare != nil {
			// Point for point: the earlier range at the same step (a
			// year back may have a bucket more or less).
			if i < len(c.compare.points) {
				b = append(b, ',')
				b = c.compare.points[i].append(b, ",,")
			} else {
				b = append(b, ",,,"...)
			}
		}
		for _, cl := range botClasses {
			b = append(b, ',')
			if !p.null {
				b = strconv.AppendInt(b, analytics.ClassVisits(p.Visits, cl), 10)
			}
		}
		b = append(b, '\n')
	}
	return b
}

// appendBreakdownCSV appends c's breakdowns as CSV: a header line
// "dimension,value,count" and one row per value, breakdown after
// breakdown in the order asked. Values never hold commas, quotes or line
// breaks (package visitor removes them).
func (c *curve) appendBreakdownCSV(b []byte) []byte {
	b = append(b, "dimension,value,count\n"...)
	for _, d := range c.breakdown {
		for _, v := range d.values {
			b = append(b, d.dim.String()...)
			b = append(b, ',')
			b = append(b, v.Value...)
			b = append(b, ',')
			b = strconv.AppendInt(b, v.Count, 10)
			b = append(b, '\n')
		}
	}
	return b
}

// appendTopCSV appends c's top list as CSV: "short_key,total" and a row per
// link, most visited first; a key holding a comma or a quote is quoted
// (RFC 4180). A link of another tenant than the answer's (the default
// tenant's list holds every tenant's links) is written "<tenant>/<key>".
func (c *curve) appendTopCSV(b []byte) []byte {
	b = append(b, "short_key,total\n"...)
	for _, l := range c.top {
		k := l.key
		if l.tenant != "" {
			k = l.tenant + "/" + k
		}
		if strings.ContainsAny(k, ",\"\r\n") {
			b = append(b, '"')
			b = append(b, strings.ReplaceAll(k, `"`, `""`)...)
			b = append(b, '"')
		} else {
			b = append(b, k...)
		}
		b = append(b, ',')
		b = strconv.AppendInt(b, l.visits, 10)
		b = append(b, '\n')
	}
	return b
}
