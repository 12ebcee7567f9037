package analytics

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/visitor"
)

// Dimensions
//
// A visit's features (package visitor) are counted per link, UTC day,
// dimension and value, in memory by the Recorder (at most max_values
// values of a dimension per link entry and interval, the others as
// visitor.Other) and flushed with the visits, as Batch.Dims. The flusher
// keeps, per (link, day, dimension), the values this process has written
// today and yesterday and their cumulative counts (dimState): the cap of
// max_values values per (link, day, dimension) is applied there, for the
// whole day, and each DimCount carries the cumulative count that a store
// keeping one row per writer overwrites (see DimCount).

// dimInput is the dimensions of a swap's snapshot on their way to a
// Batch: each link's entries (one per shard that counted it), whose
// values the Recorder keeps once per dimension and day, and all links'
// values added up.
type dimInput struct {
	links []linkDims          // sorted by key; a key once per shard
	all   map[allDimKey]int64 // AllLinks's
}

// linkDims is a link's values of the interval.
type linkDims struct {
	key  string
	dims *entryDims
}

func (in *dimInput) empty() bool { return len(in.links) == 0 && len(in.all) == 0 }

// addDims takes the dimensions of a swap's snapshot: each link's, added to
// all links' too, and those of visits not tracked per link.
func (p *pending) addDims(s snapshot) {
	in := &p.dims
	for _, links := range s.links {
		for key, e := range links {
			if e.dims != nil {
				in.links = append(in.links, linkDims{key, e.dims})
			}
		}
	}
	slices.SortFunc(in.links, func(a, b linkDims) int { return strings.Compare(a.key, b.key) })
	in.all = make(map[allDimKey]int64)
	for _, l := range in.links {
		if isTenantAll(l.key) { // a tenant's entry repeats its links' visits
			continue
		}
		for d, list := range l.dims {
			for _, c := range list {
				in.all[allDimKey{c.day, visitor.Dim(d), c.value}] += c.n
			}
		}
	}
	for _, m := range s.allDims {
		for k, n := range m {
			in.all[k] += n
		}
	}
	// Every link's human visits per day, as DimLink of all links (a
	// tenant's link under its stored key: the stores keep the tenant's
	// top list from them too).
	for _, links := range s.links {
		for key, e := range links {
			if isTenantAll(key) {
				continue
			}
			e.each(func(c minuteCount) {
				if c.Human != 0 {
					in.all[allDimKey{int32(floorDiv(c.minute, 1440)), DimLink, key}] += c.Human
				}
			})
		}
	}
}

// dimStateMaxBytes bounds the memory of a Flusher's dimState: 256 MiB as
// it counts it (an upper bound of its heap: TestDimStateMemory), which
// holds a day of 100,000 links with a value of each of six dimensions
// several times over. Past it the state is forgotten whole and a new
// generation begins (the cap of values then starts again for the day). At
// 64 MiB, with a map of its own per (link, day, dimension), it was
// forgotten at every flush from about 50,000 such links on.
const dimStateMaxBytes = 256 << 20

// dimState is what a Flusher has written of the dimensions of each link
// today and yesterday, per link: a flush looks each link up once, and its
// few groups and values in short lists. Guarded by the Flusher's mu.
type dimState struct {
	links  map[string]*dimLinkState
	bytes  int64
	gen    uint64 // the generation new groups get
	oldest int32  // no group is of a day before it
}

// dimLinkState is a link's groups: a (day, dimension) each.
type dimLinkState struct {
	groups []dimGroup
}

// dimGroup is what a Flusher has written of one (link, day, dimension):
// the generation its values' cumulative counts are of, and the values,
// visitor.Other among them once the cap was reached.
type dimGroup struct {
	day   int32
	dim   visitor.Dim
	other bool // visitor.Other is one of vals
	gen   uint64
	vals  []dimVal
	index map[string]int // position in vals by value, once vals is longer than dimScan
}

// dimVal is a value's cumulative count.
type dimVal struct {
	value string
	cum   int64
}

// dimScan is how many values a group scans for one before it indexes
// them.
const dimScan = 8

// What a link, a group and a value cost at most, beside their strings'
// bytes: their slots in the map and the slices that hold them just after
// these grew, when they are the emptiest, and the rounding of a string's
// allocation; and a value's slot in its group's index (TestDimStateMemory:
// 114 bytes of heap a group of a value, with six groups a link).
const (
	dimLinkOverhead  = 100
	dimGroupOverhead = 90
	dimValueOverhead = 48
	dimIndexOverhead = 60
)

// find returns the position of value in g.vals.
func (g *dimGroup) find(value string) (int, bool) {
	if g.index != nil {
		i, ok := g.index[value]
		return i, ok
	}
	for i := range g.vals {
		if g.vals[i].value == value {
			return i, true
		}
	}
	return 0, false
}

// add appends value to g.vals and returns its position and what g grew by.
func (g *dimGroup) add(value string) (int, int64) {
	g.vals = append(g.vals, dimVal{value: value})
	g.other = g.other || value == visitor.Other
	i := len(g.vals) - 1
	grew := int64(len(value)) + dimValueOverhead
	switch {
	case g.index != nil:
		g.index[value] = i
		grew += dimIndexOverhead
	case len(g.vals) > dimScan:
		g.index = make(map[string]int, 2*len(g.vals))
		for j, v := range g.vals {
			g.index[v.value] = j
		}
		grew += int64(len(g.vals)) * dimIndexOverhead
	}
	return i, grew
}

// bytes is what g counts for.
func (g *dimGroup) bytes() int64 {
	n := int64(dimGroupOverhead)
	for _, v := range g.vals {
		n += int64(len(v.value)) + dimValueOverhead
	}
	if g.index != nil {
		n += int64(len(g.vals)) * dimIndexOverhead
	}
	return n
}

// dimItem is a count of a link's value on its way to a DimCount.
type dimItem struct {
	day   int32
	dim   visitor.Dim
	value string
	n     int64
}

// compareItems orders a link's items by dimension, day and value.
func compareItems(a, b dimItem) int {
	if c := cmp.Compare(a.dim, b.dim); c != 0 {
		return c
	}
	if c := cmp.Compare(a.day, b.day); c != 0 {
		return c
	}
	return strings.Compare(a.value, b.value)
}

// batch returns in's dimensions as DimCounts for a batch made on the UTC
// day today, with values past maxValues per (link, day, dimension) as
// visitor.Other, sorted by link, dimension, day and value; it updates the
// cumulative counts.
func (st *dimState) batch(in dimInput, maxValues int, today int32) []DimCount {
	if in.empty() {
		return nil
	}
	if st.links == nil {
		st.links = make(map[string]*dimLinkState, len(in.links))
	}
	st.age(today)
	n := len(in.all)
	for _, l := range in.links {
		for _, list := range l.dims {
			n += len(list)
		}
	}
	out := make([]DimCount, 0, n)
	all := make([]dimItem, 0, len(in.all))
	for k, n := range in.all {
		all = append(all, dimItem{k.day, k.dim, k.value, n})
	}
	slices.SortFunc(all, compareItems)
	var items []dimItem
	allDone := len(all) == 0
	for i := 0; i < len(in.links); {
		key := in.links[i].key
		if !allDone && key > AllLinks {
			out = st.link(out, AllLinks, all, maxValues)
			allDone = true
		}
		// A link visited on several Ps has an entry in each of their
		// shards: its values are added up here.
		items = items[:0]
		j := i
		for ; j < len(in.links) && in.links[j].key == key; j++ {
			for d, list := range in.links[j].dims {
				for _, c := range list {
					items = append(items, dimItem{c.day, visitor.Dim(d), c.value, c.n})
				}
			}
		}
		slices.SortFunc(items, compareItems)
		if j-i > 1 {
			items = mergeItems(items)
		}
		out = st.link(out, key, items, maxValues)
		i = j
	}
	if !allDone {
		out = st.link(out, AllLinks, all, maxValues)
	}
	return out
}

// mergeItems adds up the sorted items of the same day, dimension and
// value, in place.
func mergeItems(items []dimItem) []dimItem {
	out := items[:0]
	for _, it := range items {
		if n := len(out); n > 0 && compareItems(out[n-1], it) == 0 {
			out[n-1].n += it.n
			continue
		}
		out = append(out, it)
	}
	return out
}

// link appends to out the DimCounts of key's items, sorted by dimension,
// day and value, and updates its cumulative counts.
func (st *dimState) link(out []DimCount, key string, items []dimItem, maxValues int) []DimCount {
	ls := st.links[key]
	if ls == nil {
		ls = new(dimLinkState)
		st.links[key] = ls
		st.bytes += int64(len(key)) + dimLinkOverhead
	}
	var (
		g            *dimGroup
		day          time.Time
		group, other int // where the group's DimCounts begin in out; its Other's (-1: none yet)
	)
	done := func() {
		if other >= 0 { // Other sorts among the values, not where the cap put it
			slices.SortFunc(out[group:], func(a, b DimCount) int { return strings.Compare(a.Value, b.Value) })
		}
	}
	if ls.groups == nil {
		ls.groups = make([]dimGroup, 0, groupsOf(items))
	}
	var free []dimVal // room for the values of the link's new groups: one array for them all
	for i, it := range items {
		if i == 0 || it.day != g.day || it.dim != g.dim {
			if i > 0 {
				done()
			}
			g = ls.group(st, it.day, it.dim)
			if g.vals == nil {
				n := 1
				for i+n < len(items) && items[i+n].day == it.day && items[i+n].dim == it.dim {
					n++
				}
				if cap(free)-len(free) < n {
					free = make([]dimVal, 0, len(items)-i)
				}
				g.vals = free[len(free) : len(free) : len(free)+n]
				free = free[:len(free)+n]
			}
			day = time.Unix(int64(it.day)*86400, 0).UTC()
			group, other = len(out), -1
		}
		value := it.value
		j, ok := g.find(value)
		if !ok && value != visitor.Other && it.dim != DimLink && len(g.vals)-b2i(g.other) >= maxValues {
			value = visitor.Other
			j, ok = g.find(value)
		}
		if !ok {
			var grew int64
			j, grew = g.add(value)
			st.bytes += grew
		}
		g.vals[j].cum += it.n
		cum := g.vals[j].cum
		if value == visitor.Other {
			if other >= 0 {
				out[other].N += it.n
				out[other].Cum = cum
				continue
			}
			other = len(out)
		}
		out = append(out, DimCount{Key: key, Day: day, Dim: it.dim, Value: value, N: it.n, Cum: cum, Gen: g.gen})
	}
	if len(items) > 0 {
		done()
	}
	return out
}

// groupsOf returns how many (day, dimension) groups sorted items are of.
func groupsOf(items []dimItem) int {
	n := 0
	for i, it := range items {
		if i == 0 || it.day != items[i-1].day || it.dim != items[i-1].dim {
			n++
		}
	}
	return n
}

// group returns ls's group of (day, dim), new if it has none.
func (ls *dimLinkState) group(st *dimState, day int32, dim visitor.Dim) *dimGroup {
	for i := range ls.groups {
		if g := &ls.groups[i]; g.day == day && g.dim == dim {
			return g
		}
	}
	ls.groups = append(ls.groups, dimGroup{day: day, dim: dim, gen: st.gen})
	st.bytes += dimGroupOverhead
	st.oldest = min(st.oldest, day)
	return &ls.groups[len(ls.groups)-1]
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// age readies st for a batch made on the UTC day today: days before
// yesterday are forgotten (a later count for them starts a new generation
// of their rows), and everything once st holds over dimStateMaxBytes.
func (st *dimState) age(today int32) {
	if keep := today - 1; st.oldest < keep {
		forgot := false
		for key, ls := range st.links {
			kept := ls.groups[:0]
			for i := range ls.groups {
				if g := &ls.groups[i]; g.day < keep {
					st.bytes -= g.bytes()
					forgot = true
				} else {
					kept = append(kept, *g)
				}
			}
			clear(ls.groups[len(kept):])
			ls.groups = kept
			if len(kept) == 0 {
				st.bytes -= int64(len(key)) + dimLinkOverhead
				delete(st.links, key)
			}
		}
		if forgot {
			st.gen++
		}
		st.oldest = keep
	}
	if st.bytes > dimStateMaxBytes {
		clear(st.links)
		st.bytes = 0
		st.gen++
	}
}

// compareDims orders DimCounts by link, dimension, day and value.
func compareDims(a, b DimCount) int {
	return cmp.Or(strings.Compare(a.Key, b.Key), cmp.Compare(a.Dim, b.Dim), a.Day.Compare(b.Day), strings.Compare(a.Value, b.Value))
}

// unixDay returns t's UTC day as Unix seconds / 86400.
func unixDay(t time.Time) int32 { return int32(floorDiv(t.Unix(), 86400)) }

// sumDims adds up values: the DimValues of vs with the same value, sorted
// by count, largest first, then by value.
func sumDims(vs []DimValue) []DimValue {
	m := make(map[string]int64, len(vs))
	for _, v := range vs {
		m[v.Value] += v.Count
	}
	out := make([]DimValue, 0, len(m))
	for v, n := range m {
		if n != 0 {
			out = append(out, DimValue{v, n})
		}
	}
	SortDims(out)
	return out
}

// SortDims sorts values by count, largest first, then by value.
func SortDims(vs []DimValue) {
	slices.SortFunc(vs, func(a, b DimValue) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Value, b.Value))
	})
}

// uniqKey is a link's day, for its sketch of unique visitors.
type uniqKey struct {
	key string
	day int32
}

// addUniques merges the visitor sketches of a swap's snapshot into p.
func (p *pending) addUniques(s snapshot) {
	for _, links := range s.links {
		for key, e := range links {
			for i := range e.uniq {
				p.uniq(key, e.uniq[i].day).Merge(&e.uniq[i].sk)
				if !isTenantAll(key) {
					p.uniq(AllLinks, e.uniq[i].day).Merge(&e.uniq[i].sk)
				}
			}
		}
	}
	for i := range s.allUniq {
		p.uniq(AllLinks, s.allUniq[i].day).Merge(&s.allUniq[i].sk)
	}
}

func (p *pending) uniq(key string, day int32) *hll.Sketch {
	if p.uniqs == nil {
		p.uniqs = make(map[uniqKey]*hll.Sketch)
	}
	k := uniqKey{key, day}
	sk := p.uniqs[k]
	if sk == nil {
		sk = new(hll.Sketch)
		p.uniqs[k] = sk
	}
	return sk
}

// uniqueSketches returns p's sketches, encoded, sorted by link and day.
func (p *pending) uniqueSketches() []UniqueSketch {
	if len(p.uniqs) == 0 {
		return nil
	}
	out := make([]UniqueSketch, 0, len(p.uniqs))
	for k, sk := range p.uniqs {
		out = append(out, UniqueSketch{Key: k.key, Day: time.Unix(int64(k.day)*86400, 0).UTC(), Sketch: sk.AppendBinary(nil)})
	}
	slices.SortFunc(out, func(a, b UniqueSketch) int { return cmp.Or(strings.Compare(a.Key, b.Key), a.Day.Compare(b.Day)) })
	return out
}
