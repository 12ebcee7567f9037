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

// dimPendKey is one value of a dimension of a link on a day, on its way to
// a Batch.
type dimPendKey struct {
	key   string
	day   int32
	dim   visitor.Dim
	value string
}

// addDims adds the dimensions of a swap's snapshot to p: each link's, added
// to all links' too, and those of visits not tracked per link.
func (p *pending) addDims(s snapshot) {
	if p.dims == nil { // sized for every link's values and visits (DimLink)
		n := 0
		for _, links := range s.links {
			for _, e := range links {
				n++
				if e.dims != nil {
					for _, list := range e.dims {
						n += len(list)
					}
				}
			}
		}
		p.dims = make(map[dimPendKey]int64, n)
	}
	for _, links := range s.links {
		for key, e := range links {
			if e.dims == nil {
				continue
			}
			all := !isTenantAll(key) // a tenant's entry repeats its links' visits
			for d, list := range e.dims {
				for _, c := range list {
					p.addDim(dimPendKey{key, c.day, visitor.Dim(d), c.value}, c.n)
					if all {
						p.addDim(dimPendKey{AllLinks, c.day, visitor.Dim(d), c.value}, c.n)
					}
				}
			}
		}
	}
	for _, m := range s.allDims {
		for k, n := range m {
			p.addDim(dimPendKey{AllLinks, k.day, k.dim, k.value}, n)
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
					p.addDim(dimPendKey{AllLinks, int32(floorDiv(c.minute, 1440)), DimLink, key}, c.Human)
				}
			})
		}
	}
}

func (p *pending) addDim(k dimPendKey, n int64) {
	if p.dims == nil {
		p.dims = make(map[dimPendKey]int64)
	}
	p.dims[k] += n
}

// dimStateMaxBytes bounds the memory of a Flusher's dimState: 256 MiB as
// it counts it (an upper bound of its heap: TestDimStateMemory), at least
// 700,000 (link, day, dimension) groups of a value each: a day of 100,000
// links with six dimensions. Past it the state is forgotten whole and a
// new generation begins (the cap of values then starts again for the
// day): for such links once a day, a while after midnight. At 64 MiB, with
// a map of its own per group, it was forgotten at every flush from about
// 50,000 such links on.
const dimStateMaxBytes = 256 << 20

// dimDayKey is a link's dimension on a day.
type dimDayKey struct {
	key string
	day int32
	dim visitor.Dim
}

// dimValKey is a value of a link's dimension on a day.
type dimValKey struct {
	dimDayKey
	value string
}

// dimGroup is what a Flusher has written of one (link, day, dimension):
// the generation its values' cumulative counts are of, how many values it
// has (for the cap) and whether visitor.Other is one of them.
type dimGroup struct {
	gen   uint64
	n     int32
	other bool
}

// dimState is a Flusher's groups and their values' cumulative counts, two
// flat maps: most groups hold a value or two, and a map of its own for
// each (what it was) took three times their memory. Guarded by the
// Flusher's mu.
type dimState struct {
	groups map[dimDayKey]dimGroup
	vals   map[dimValKey]int64
	bytes  int64
	gen    uint64 // the generation new groups get
	oldest int32  // no group is of a day before it
}

// What a group and a value cost at most, beside their strings: their
// maps' slots just after the maps grew, when they are the emptiest
// (TestDimStateMemory: 374 bytes a group of a value at 120,000 groups,
// 212 at 600,000).
const (
	dimGroupOverhead = 150
	dimValueOverhead = 220
)

// batch returns p's dimensions as DimCounts for a batch made on the UTC
// day today, with values past maxValues per (link, day, dimension) as
// visitor.Other, sorted by link, dimension, day and value; it updates the
// cumulative counts.
func (st *dimState) batch(p map[dimPendKey]int64, maxValues int, today int32) []DimCount {
	if len(p) == 0 {
		return nil
	}
	st.age(today)
	items := sortedPend(p)
	// Sorted, the values of a (link, day, dimension) come together, each
	// once but Other (those past the cap, and Other itself): a DimCount
	// each, with the cumulative count its value has then.
	out := make([]DimCount, 0, len(items))
	var (
		gk           dimDayKey
		g            dimGroup
		group, other int // where the group's DimCounts begin in out; its Other's (-1: none yet)
	)
	done := func() {
		st.groups[gk] = g
		for i := group; i < len(out); i++ {
			out[i].Gen = g.gen
		}
		if other >= 0 { // Other sorts among the values, not where the cap put it
			slices.SortFunc(out[group:], func(a, b DimCount) int { return strings.Compare(a.Value, b.Value) })
		}
	}
	for i, it := range items {
		k := it.k
		if prev := items[max(i-1, 0)].k; i == 0 || k.key != prev.key || k.day != prev.day || k.dim != prev.dim {
			if i > 0 {
				done()
			}
			gk = dimDayKey{k.key, k.day, k.dim}
			var ok bool
			if g, ok = st.groups[gk]; !ok {
				g = dimGroup{gen: st.gen}
				st.bytes += int64(len(k.key)) + dimGroupOverhead
				st.oldest = min(st.oldest, k.day)
			}
			group, other = len(out), -1
		}
		vk := dimValKey{gk, k.value}
		cum, ok := st.vals[vk]
		if !ok && vk.value != visitor.Other && k.dim != DimLink && int(g.n)-b2i(g.other) >= maxValues {
			vk.value = visitor.Other
			cum, ok = st.vals[vk]
		}
		if !ok {
			st.bytes += int64(len(vk.value)) + dimValueOverhead
			g.n++
			g.other = g.other || vk.value == visitor.Other
		}
		cum += it.n
		st.vals[vk] = cum
		if vk.value == visitor.Other {
			if other >= 0 {
				out[other].N += it.n
				out[other].Cum = cum
				continue
			}
			other = len(out)
		}
		out = append(out, DimCount{Key: k.key, Day: time.Unix(int64(k.day)*86400, 0).UTC(), Dim: k.dim, Value: vk.value, N: it.n, Cum: cum})
	}
	done()
	return out
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
	if st.groups == nil {
		st.groups = make(map[dimDayKey]dimGroup)
		st.vals = make(map[dimValKey]int64)
	}
	if keep := today - 1; st.oldest < keep {
		forgot := false
		for k := range st.groups {
			if k.day < keep {
				st.bytes -= int64(len(k.key)) + dimGroupOverhead
				delete(st.groups, k)
				forgot = true
			}
		}
		for k := range st.vals {
			if k.day < keep {
				st.bytes -= int64(len(k.value)) + dimValueOverhead
				delete(st.vals, k)
			}
		}
		if forgot {
			st.gen++
		}
		st.oldest = keep
	}
	if st.bytes > dimStateMaxBytes {
		clear(st.groups)
		clear(st.vals)
		st.bytes = 0
		st.gen++
	}
}

// pend is a pending count of a batch's dimensions.
type pend struct {
	k dimPendKey
	n int64
}

// sortedPend returns p's counts sorted by link, dimension, day and value.
func sortedPend(p map[dimPendKey]int64) []pend {
	items := make([]pend, 0, len(p))
	for k, n := range p {
		items = append(items, pend{k, n})
	}
	// Each comparison stops at the first field that differs (cmp.Or
	// would compare the values of every pair of links too).
	slices.SortFunc(items, func(a, b pend) int {
		if c := strings.Compare(a.k.key, b.k.key); c != 0 {
			return c
		}
		if c := cmp.Compare(a.k.dim, b.k.dim); c != 0 {
			return c
		}
		if c := cmp.Compare(a.k.day, b.k.day); c != 0 {
			return c
		}
		return strings.Compare(a.k.value, b.k.value)
	})
	return items
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
