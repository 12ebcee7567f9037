package stats

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/linkgate/linkgate/rollup"
)

// graphiteFuncs are the functions render evaluates, with graphite-web's
// names, arguments and series names (functions.rst): those Grafana users
// reach for first with counts of visits.
var graphiteFuncs map[string]func(*gEval, *gNode) ([]*gSeries, error)

func init() {
	graphiteFuncs = map[string]func(*gEval, *gNode) ([]*gSeries, error){
		"sumSeries":      combine("sumSeries", "sum"),
		"sum":            combine("sumSeries", "sum"),
		"averageSeries":  combine("averageSeries", "average"),
		"avg":            combine("averageSeries", "average"),
		"maxSeries":      combine("maxSeries", "max"),
		"minSeries":      combine("minSeries", "min"),
		"highestMax":     pick("highestMax", func(s *gSeries) float64 { return stat(s, "max") }, true),
		"highestCurrent": pick("highestCurrent", current, true),
		"highestAverage": pick("highestAverage", func(s *gSeries) float64 { return stat(s, "average") }, true),
		"lowestAverage":  pick("lowestAverage", func(s *gSeries) float64 { return stat(s, "average") }, false),
		"sortByMaxima":   sortBy(func(s *gSeries) float64 { return stat(s, "max") }),
		"sortByTotal":    sortBy(func(s *gSeries) float64 { return stat(s, "sum") }),
		"sortByName":     fnSortByName,
		"limit":          fnLimit,
		"alias":          fnAlias,
		"aliasByNode":    fnAliasByNode,
		"aliasByMetric":  fnAliasByMetric,
		"scale":          fnScale,
		"integral":       fnIntegral,
		"summarize":      fnSummarize,
		"consolidateBy":  fnConsolidateBy,
		"groupByNode":    fnGroupByNode,
	}
}

func graphiteFuncNames() []string {
	names := make([]string, 0, len(graphiteFuncs))
	for n := range graphiteFuncs {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// seriesArgs evaluates every positional argument of call as series lists.
func (e *gEval) seriesArgs(call *gNode) ([]*gSeries, error) {
	var all []*gSeries
	for i := range call.args {
		ss, err := e.series(call, i)
		if err != nil {
			return nil, err
		}
		all = append(all, ss...)
	}
	return all, nil
}

// pathExprs is graphite-web's formatPathExpressions: the distinct path
// expressions of ss, joined by commas.
func pathExprs(ss []*gSeries) string {
	var seen []string
	for _, s := range ss {
		if !slices.Contains(seen, s.pathExpr) {
			seen = append(seen, s.pathExpr)
		}
	}
	return strings.Join(seen, ",")
}

// combine is a function that makes one series of all its arguments' point
// by point: sumSeries, averageSeries, maxSeries, minSeries.
func combine(name, fn string) func(*gEval, *gNode) ([]*gSeries, error) {
	return func(e *gEval, call *gNode) ([]*gSeries, error) {
		ss, err := e.seriesArgs(call)
		if err != nil {
			return nil, err
		}
		if len(ss) == 0 {
			return nil, nil
		}
		out := &gSeries{start: ss[0].start, step: ss[0].step, consol: ss[0].consol}
		renamed(out, name+"("+pathExprs(ss)+")")
		n := 0
		for _, s := range ss {
			n = max(n, len(s.values))
		}
		for i := range n {
			var vals []float64
			for _, s := range ss {
				if i < len(s.values) && !s.null[i] {
					vals = append(vals, s.values[i])
				}
			}
			v, null := aggregate(vals, fn)
			out.values = append(out.values, v)
			out.null = append(out.null, null)
		}
		return []*gSeries{out}, nil
	}
}

// stat returns fn (sum, average, max) of s's non-null values; -Inf for a
// series without any, so that it sorts last.
func stat(s *gSeries, fn string) float64 {
	var vals []float64
	for i, v := range s.values {
		if !s.null[i] {
			vals = append(vals, v)
		}
	}
	v, null := aggregate(vals, fn)
	if null {
		return math.Inf(-1)
	}
	return v
}

// current is the last non-null value of s.
func current(s *gSeries) float64 {
	for i := len(s.values) - 1; i >= 0; i-- {
		if !s.null[i] {
			return s.values[i]
		}
	}
	return math.Inf(-1)
}

// pick is highestMax and its kin: the n series with the highest (or
// lowest) key, in that order.
func pick(name string, key func(*gSeries) float64, highest bool) func(*gEval, *gNode) ([]*gSeries, error) {
	return func(e *gEval, call *gNode) ([]*gSeries, error) {
		ss, err := e.series(call, 0)
		if err != nil {
			return nil, err
		}
		n, err := intArg(call, 1, "n", 1)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, fmt.Errorf("%s(): n is negative", name)
		}
		sorted := slices.Clone(ss)
		sort.SliceStable(sorted, func(i, j int) bool {
			a, b := key(sorted[i]), key(sorted[j])
			if highest {
				return a > b
			}
			if math.IsInf(a, -1) != math.IsInf(b, -1) { // series without values last
				return !math.IsInf(a, -1)
			}
			return a < b
		})
		return sorted[:min(n, len(sorted))], nil
	}
}

func sortBy(key func(*gSeries) float64) func(*gEval, *gNode) ([]*gSeries, error) {
	return func(e *gEval, call *gNode) ([]*gSeries, error) {
		ss, err := e.series(call, 0)
		if err != nil {
			return nil, err
		}
		sorted := slices.Clone(ss)
		sort.SliceStable(sorted, func(i, j int) bool { return key(sorted[i]) > key(sorted[j]) })
		return sorted, nil
	}
}

func fnSortByName(e *gEval, call *gNode) ([]*gSeries, error) {
	ss, err := e.series(call, 0)
	if err != nil {
		return nil, err
	}
	sorted := slices.Clone(ss)
	slices.SortStableFunc(sorted, func(a, b *gSeries) int { return strings.Compare(a.name, b.name) })
	return sorted, nil
}

func fnLimit(e *gEval, call *gNode) ([]*gSeries, error) {
	ss, err := e.series(call, 0)
	if err != nil {
		return nil, err
	}
	n, err := intArg(call, 1, "n", -1)
	if err != nil || n < 0 {
		return nil, cmp.Or(err, fmt.Errorf("limit() needs n, a number of series"))
	}
	return ss[:min(n, len(ss))], nil
}

func fnAlias(e *gEval, call *gNode) ([]*gSeries, error) {
	ss, err := e.series(call, 0)
	if err != nil {
		return nil, err
	}
	name, err := strArg(call, 1, "newName", "")
	if err != nil || name == "" {
		return nil, cmp.Or(err, fmt.Errorf("alias() needs a new name"))
	}
	return cloned(ss, func(_, c *gSeries) { c.name = name }), nil
}

// cloned is a clone of each series of ss, changed by change (given the
// series and its clone): what the functions that map series one to one
// return.
func cloned(ss []*gSeries, change func(s, c *gSeries)) []*gSeries {
	out := make([]*gSeries, len(ss))
	for i, s := range ss {
		out[i] = s.clone()
		change(s, out[i])
	}
	return out
}

// renamed names c name, as its path expression too.
func renamed(c *gSeries, name string) {
	c.name = name
	c.pathExpr = name
}

// nodesOf returns the dotted nodes of a series name: of its path, inside
// the innermost function call (graphite-web's aliasByNode does the same).
func nodesOf(name string) []string {
	if i := strings.LastIndexByte(name, '('); i >= 0 {
		name = name[i+1:]
	}
	if i := strings.IndexAny(name, ",)"); i >= 0 {
		name = name[:i]
	}
	return strings.Split(name, ".")
}

func fnAliasByNode(e *gEval, call *gNode) ([]*gSeries, error) {
	ss, err := e.series(call, 0)
	if err != nil {
		return nil, err
	}
	if len(call.args) < 2 {
		return nil, fmt.Errorf("aliasByNode() needs node numbers")
	}
	out := make([]*gSeries, len(ss))
	for i, s := range ss {
		nodes := nodesOf(s.name)
		var parts []string
		for j := 1; j < len(call.args); j++ {
			n, err := intArg(call, j, "", 0)
			if err != nil {
				return nil, err
			}
			if n < 0 {
				n += len(nodes)
			}
			if n < 0 || n >= len(nodes) {
				return nil, fmt.Errorf("aliasByNode(): %s has no node %d", s.name, n)
			}
			parts = append(parts, nodes[n])
		}
		out[i] = s.clone()
		out[i].name = strings.Join(parts, ".")
	}
	return out, nil
}

func fnAliasByMetric(e *gEval, call *gNode) ([]*gSeries, error) {
	ss, err := e.series(call, 0)
	if err != nil {
		return nil, err
	}
	return cloned(ss, func(s, c *gSeries) {
		nodes := nodesOf(s.name)
		c.name = nodes[len(nodes)-1]
	}), nil
}

func fnScale(e *gEval, call *gNode) ([]*gSeries, error) {
	ss, err := e.series(call, 0)
	if err != nil {
		return nil, err
	}
	a := arg(call, 1, "factor")
	if a == nil || a.kind != gNumber {
		return nil, fmt.Errorf("scale() needs a number")
	}
	return cloned(ss, func(s, c *gSeries) {
		for j := range c.values {
			c.values[j] *= a.num
		}
		renamed(c, "scale("+s.name+","+a.str+")")
	}), nil
}

// fnIntegral is the running total of each series (nulls stay null and add
// nothing).
func fnIntegral(e *gEval, call *gNode) ([]*gSeries, error) {
	ss, err := e.series(call, 0)
	if err != nil {
		return nil, err
	}
	return cloned(ss, func(s, c *gSeries) {
		var run float64
		for j := range c.values {
			if !c.null[j] {
				run += c.values[j]
				c.values[j] = run
			}
		}
		renamed(c, "integral("+s.name+")")
	}), nil
}

// fnSummarize sums (or averages, max, min, last) each series into buckets
// of an interval ("1h", "1d", "1w"), aligned to the interval from the unix
// epoch, or to the range's start with alignToFrom=true.
func fnSummarize(e *gEval, call *gNode) ([]*gSeries, error) {
	ss, err := e.series(call, 0)
	if err != nil {
		return nil, err
	}
	iv, err := strArg(call, 1, "intervalString", "")
	if err != nil || iv == "" {
		return nil, cmp.Or(err, fmt.Errorf(`summarize() needs an interval like "1h" or "1d"`))
	}
	d, perr := parseGraphiteTime("-"+iv, e.now)
	if perr != nil {
		return nil, fmt.Errorf("summarize(): %q is not an interval like 1h, 1d or 1w", iv)
	}
	sec := int64(e.now.Sub(d).Seconds())
	fn, err := strArg(call, 2, "func", "sum")
	if err != nil {
		return nil, err
	}
	switch fn {
	case "sum", "average", "avg", "max", "min", "last":
	default:
		return nil, fmt.Errorf("summarize(): func %q is not sum, average, max, min or last", fn)
	}
	alignToFrom := false
	if a := arg(call, 3, "alignToFrom"); a != nil {
		if a.kind != gBool {
			return nil, fmt.Errorf("summarize(): alignToFrom is not true or false")
		}
		alignToFrom = a.b
	}
	out := make([]*gSeries, len(ss))
	for i, s := range ss {
		if sec < s.step || sec%s.step != 0 {
			return nil, fmt.Errorf("summarize(): %s is not a multiple of the series' step (%s)", iv, rollup.FormatDuration(time.Duration(s.step)*time.Second))
		}
		start := s.start - floorMod(s.start, sec)
		if alignToFrom {
			start = s.start
		}
		end := s.start + int64(len(s.values))*s.step
		c := &gSeries{start: start, step: sec, consol: s.consol}
		if alignToFrom {
			renamed(c, fmt.Sprintf("summarize(%s, %q, %q, true)", s.name, iv, fn))
		} else {
			renamed(c, fmt.Sprintf("summarize(%s, %q, %q)", s.name, iv, fn))
		}
		for b := start; b < end; b += sec {
			var vals []float64
			for j := range s.values {
				t := s.start + int64(j)*s.step
				if t >= b && t < b+sec && !s.null[j] {
					vals = append(vals, s.values[j])
				}
			}
			var v float64
			null := len(vals) == 0
			if fn == "last" && !null {
				v = vals[len(vals)-1]
			} else {
				v, null = aggregate(vals, fn)
			}
			c.values = append(c.values, v)
			c.null = append(c.null, null)
		}
		out[i] = c
	}
	return out, nil
}

func floorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

func fnConsolidateBy(e *gEval, call *gNode) ([]*gSeries, error) {
	ss, err := e.series(call, 0)
	if err != nil {
		return nil, err
	}
	fn, err := strArg(call, 1, "consolidationFunc", "")
	if err != nil {
		return nil, err
	}
	switch fn {
	case "sum", "average", "max", "min":
	default:
		return nil, fmt.Errorf("consolidateBy(): %q is not sum, average, max or min", fn)
	}
	return cloned(ss, func(s, c *gSeries) {
		c.consol = fn
		renamed(c, fmt.Sprintf("consolidateBy(%s,%q)", s.name, fn))
	}), nil
}

// fnGroupByNode sums (or averages, max, min) the series that share a node,
// each group named by that node: groupByNode(linkgate.links.*.*, 3) is
// all humans and all bots.
func fnGroupByNode(e *gEval, call *gNode) ([]*gSeries, error) {
	ss, err := e.series(call, 0)
	if err != nil {
		return nil, err
	}
	n, err := intArg(call, 1, "nodeNum", -1<<31)
	if err != nil || n == -1<<31 {
		return nil, cmp.Or(err, fmt.Errorf("groupByNode() needs a node number"))
	}
	fn, err := strArg(call, 2, "callback", "sum")
	if err != nil {
		return nil, err
	}
	switch fn {
	case "sum", "sumSeries":
		fn = "sum"
	case "average", "avg", "averageSeries":
		fn = "average"
	case "max", "maxSeries":
		fn = "max"
	case "min", "minSeries":
		fn = "min"
	default:
		return nil, fmt.Errorf("groupByNode(): callback %q is not sum, average, max or min", fn)
	}
	var order []string
	groups := map[string][]*gSeries{}
	for _, s := range ss {
		nodes := nodesOf(s.name)
		k := n
		if k < 0 {
			k += len(nodes)
		}
		if k < 0 || k >= len(nodes) {
			return nil, fmt.Errorf("groupByNode(): %s has no node %d", s.name, n)
		}
		if _, ok := groups[nodes[k]]; !ok {
			order = append(order, nodes[k])
		}
		groups[nodes[k]] = append(groups[nodes[k]], s)
	}
	var out []*gSeries
	for _, g := range order {
		members := groups[g]
		agg := &gSeries{name: g, pathExpr: g, start: members[0].start, step: members[0].step, consol: members[0].consol}
		for i := range members[0].values {
			var vals []float64
			for _, s := range members {
				if i < len(s.values) && !s.null[i] {
					vals = append(vals, s.values[i])
				}
			}
			v, null := aggregate(vals, fn)
			agg.values = append(agg.values, v)
			agg.null = append(agg.null, null)
		}
		out = append(out, agg)
	}
	return out, nil
}
