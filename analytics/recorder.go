package analytics

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/visitclass"
	"github.com/linkgate/linkgate/visitor"
)

// numShards is the number of independently locked parts of a Recorder. A
// power of two well above the core count, so that every core has one.
const numShards = 64

var shardSeed = maphash.MakeSeed()

// Recorder counts visits in memory per (short_key, minute) until a Flusher
// takes them. It is safe for concurrent use and has no global lock.
//
// Record counts a visit in the shard of the core it runs on, not in one
// chosen by the link: two cores recording visits to the same popular links
// then never write the same memory, so recording scales with the cores
// instead of moving the links' cache lines from core to core. A link visited
// on several cores has an entry in each of their shards; a flush and a read
// add them up. Which links are tracked at all (max_keys) is decided once per
// link and interval in a directory sharded by the link's hash, which Record
// consults only when a link is new to its shard.
//
// A Recorder lives as long as the process: it is not rebuilt on a config
// reload, so counts in memory survive one (SetMaxKeys applies a new
// max_keys). Use NewRecorder; the zero Recorder is not usable.
type Recorder struct {
	maxKeys atomic.Int64 // distinct links tracked at most between two swaps
	// maxValues caps the values of one dimension a link's entry holds
	// between two swaps (SetMaxValues); 0: dimensions are not counted.
	maxValues atomic.Int64
	keys      atomic.Int64 // distinct links in the directory now
	m         *Metrics
	// maxBytes caps the bytes of the shards' link entries between two
	// swaps; bytes is what they take now (key length + linkOverhead each).
	maxBytes atomic.Int64
	bytes    atomic.Int64
	// cores hands each core (each P of the Go scheduler) the index of its
	// shard: a sync.Pool's fast path is per P. The pool may drop an index
	// (at a GC); the core then gets the next one, which changes only where
	// its visits are kept.
	cores sync.Pool
	next  atomic.Uint32
	// liveMax caps the live view's link rings (SetLiveLinks), liveRings
	// counts them; liveRefused is the live bucket of the last visit that
	// could not be followed (see Live).
	liveMax     atomic.Int64
	liveRings   atomic.Int64
	liveRefused atomic.Uint32
	liveSweep   atomic.Uint32     // the live bucket of the last sweepLive
	since       time.Time         // when the Recorder began counting: see Since
	index       [numShards]uint32 // what cores hands out points here: no allocation
	shards      [numShards]shard
	dir         [numShards]dirShard
}

// shard is one part of a Recorder. Everything in it is guarded by mu.
type shard struct {
	mu       sync.Mutex
	links    map[string]*entry
	sized    int                  // the size links was made for: see fresh
	all      entry                // every visit recorded in this shard, overflow included
	allDims  map[allDimKey]int64  // the features of visits not tracked per link (max_keys), per day, dimension and value
	allVals  [visitor.NumDims]int // values per dimension in allDims
	allUniq  []dayUniq            // the visitor sketches of visits not tracked per link
	overflow int64                // visits not tracked per link because max_keys or max_buffer_bytes was reached
	human    int64                // visits recorded since the last swap, for the metric
	bot      int64
	bytes    int64 // key length + linkOverhead of each entry in links
	// live is the live view's rings of the links recorded here, kept
	// across swaps; allLive that of all links together; liveSwept the
	// live bucket this shard was last swept in because the cap was
	// reached (see live.go).
	live      map[string]*liveRing
	allLive   liveRing
	liveSwept uint32
	// scratch spells a tenant's link key ("<tenant>/<short_key>") for the
	// lookups of RecordTenantVisit, so that a visit to a link tracked
	// already allocates nothing.
	scratch []byte
	_       [8]byte // keep neighbouring shards' locks off one cache line
}

// dirShard is one part of the directory of links tracked since the last
// swap, chosen by the link's hash. Guarded by mu.
type dirShard struct {
	mu    sync.Mutex
	links map[string]struct{}
	sized int // the size links was made for: see fresh
	_     [40]byte
}

// fresh returns a new empty map for the next interval, sized for the n
// entries the last one took, so that an interval like the last one does
// not grow it step by step. A map never gives back its memory, so an
// interval that took none gets a small map when the current one was made
// large: after a burst of links the next quiet intervals hold no memory
// for it. keep says whether the current map stays (it is empty and
// small); sized is the size the current map was made for, updated.
func fresh[V any](n int, sized *int) (m map[string]V, keep bool) {
	if n == 0 && *sized <= minSized {
		return nil, true
	}
	*sized = n
	return make(map[string]V, n), false
}

// minSized is the size below which an empty map is kept rather than made
// anew: its memory is small.
const minSized = 64

// minuteCount is the visits of one minute; minute is Unix seconds / 60.
type minuteCount struct {
	minute int64
	Visits
}

// entry is the visits of one link since the last swap, per minute. Between
// two flushes a link usually sees one or two minutes: the current one is held
// inline, older ones (and out-of-order times) in more.
type entry struct {
	last minuteCount
	more []minuteCount
	dims *entryDims // nil until a visit with features
	uniq []dayUniq  // the sketches of its visitors, per UTC day
	live *liveRing  // the link's live ring in this shard, once looked up
	// liveRefused is the live bucket in which the link was refused a
	// ring (the cap reached): not tried again within it.
	liveRefused uint32
}

// dayUniq is the sketch of a link's visitors on one UTC day.
type dayUniq struct {
	day int32
	sk  hll.Sketch
}

// addUniq adds a visitor hash to the sketch of day in us, and returns by
// how many bytes the sketches grew.
func addUniq(us []dayUniq, day int32, h uint64) ([]dayUniq, int64) {
	i := 0
	for i < len(us) && us[i].day != day {
		i++
	}
	if i == len(us) {
		us = append(us, dayUniq{day: day})
	}
	before := us[i].sk.Bytes()
	us[i].sk.Add(h)
	return us, int64(us[i].sk.Bytes() - before)
}

// dimCount is the visits of one value of a dimension on one UTC day; day
// is Unix seconds / 86400.
type dimCount struct {
	day   int32
	value string
	n     int64
}

// entryDims is a link's visits per dimension, day and value since the last
// swap: a short list per dimension (a link sees a few referrers and
// browsers in an interval), scanned.
type entryDims [visitor.NumDims][]dimCount

// allDimKey is a value of a dimension on a day, for all links together.
type allDimKey struct {
	day   int32
	dim   visitor.Dim
	value string
}

// dimOverhead is what a value costs in memory besides its bytes.
const dimOverhead = 48

// addDim counts a visit of value v of dimension d on day in e, and returns
// the bytes the entry grew by. Past maxValues values of d, v counts as
// visitor.Other. Values of the referrer and the source may point into the
// request: they are copied when new.
func (e *entry) addDim(d visitor.Dim, day int32, v string, maxValues int) int64 {
	list := e.dims[d]
	for i := range list {
		if c := &list[i]; c.day == day && c.value == v {
			c.n++
			return 0
		}
	}
	if len(list) >= maxValues && v != visitor.Other {
		return e.addDim(d, day, visitor.Other, maxValues+1)
	}
	if d.FromRequest() {
		v = strings.Clone(v)
	}
	e.dims[d] = append(list, dimCount{day: day, value: v, n: 1})
	return int64(len(v)) + dimOverhead
}

func (e *entry) add(minute int64, class visitclass.Class) {
	c := &e.last
	if c.minute != minute {
		c = nil
		for i := range e.more {
			if e.more[i].minute == minute {
				c = &e.more[i]
				break
			}
		}
		if c == nil {
			if e.last.Human|e.last.Bot == 0 { // the inline slot is unused
				e.last.minute = minute
				c = &e.last
			} else {
				if minute > e.last.minute { // time moved on: keep last as the newest
					e.more = append(e.more, e.last)
					e.last = minuteCount{minute: minute}
					c = &e.last
				} else {
					e.more = append(e.more, minuteCount{minute: minute})
					c = &e.more[len(e.more)-1]
				}
			}
		}
	}
	countClass(&c.Visits, class)
}

// countClass counts one visit of class c in v.
func countClass(v *Visits, c visitclass.Class) {
	if c == visitclass.Human {
		v.Human++
		return
	}
	v.Bot++
	if o := int(c) - int(visitclass.Preview); o >= 0 && o < len(v.Other) {
		v.Other[o]++
	}
}

// ClassVisits returns the visits of class c in v: Human, Bot less the other
// classes for declared bots (visitclass.Bot), or one of Other.
func ClassVisits(v Visits, c visitclass.Class) int64 {
	switch c {
	case visitclass.Human:
		return v.Human
	case visitclass.Bot:
		return v.Declared()
	}
	if o := int(c) - int(visitclass.Preview); o >= 0 && o < len(v.Other) {
		return v.Other[o]
	}
	return 0
}

// each calls fn for every minute of e that has visits.
func (e *entry) each(fn func(minuteCount)) {
	if e.last.Human|e.last.Bot != 0 {
		fn(e.last)
	}
	for _, c := range e.more {
		fn(c)
	}
}

// NewRecorder returns a Recorder that tracks at most maxKeys distinct links
// between two flushes (see SetMaxKeys), in at most DefaultMaxBufferBytes
// (see SetMaxBytes), and follows no link live until SetLiveLinks (all links
// together always). m may be nil.
func NewRecorder(maxKeys int, m *Metrics) *Recorder {
	r := &Recorder{m: m, since: time.Now()}
	r.SetMaxKeys(maxKeys)
	r.SetMaxBytes(DefaultMaxBufferBytes)
	for i := range r.shards {
		r.index[i] = uint32(i)
		r.shards[i].links = make(map[string]*entry)
		r.shards[i].allDims = make(map[allDimKey]int64)
		r.dir[i].links = make(map[string]struct{})
	}
	r.cores.New = func() any { return &r.index[r.next.Add(1)%numShards] }
	return r
}

// SetMaxKeys sets how many distinct links are tracked at most between two
// flushes; n < 1 means 1. Visits to further links are counted in the
// all-links total only, and in the overflow metric. It takes effect at once;
// links already tracked stay tracked until the next flush.
func (r *Recorder) SetMaxKeys(n int) {
	r.maxKeys.Store(int64(max(n, 1)))
}

// SetMaxValues sets how many values of one dimension a link's entry holds
// at most between two flushes (analytics.dimensions.max_values); further
// values count as visitor.Other. 0 turns dimensions off: RecordVisit then
// counts the visits alone. It takes effect at once.
func (r *Recorder) SetMaxValues(n int) {
	r.maxValues.Store(int64(max(n, 0)))
}

// SetMaxBytes sets how many bytes the links tracked between two flushes
// may take at most, counted as the key's length plus linkOverhead per entry
// (a link recorded on several cores has an entry on each); n < 1 means 1.
// Beyond it visits to links not yet tracked count in the all-links total
// only, and in the overflow metric. It takes effect at once.
func (r *Recorder) SetMaxBytes(n int64) {
	r.maxBytes.Store(max(n, 1))
}

// linkOverhead is what an entry costs beyond its key: the entry, its slot
// in its shard's map and in the directory (TestMemoryPerLink measures about
// 120 bytes for the whole).
const linkOverhead = 128

// Bytes returns the bytes the tracked links take now, as SetMaxBytes counts
// them.
func (r *Recorder) Bytes() int64 { return r.bytes.Load() }

// Keys returns the number of distinct links tracked now.
func (r *Recorder) Keys() int { return int(r.keys.Load()) }

// unixMinute returns the minute of t as Unix seconds / 60, rounding down.
func unixMinute(t time.Time) int64 {
	s := t.Unix()
	m := s / 60
	if s%60 < 0 {
		m--
	}
	return m
}

// Record counts one visit to the link key at time t, as a bot visit if bot.
// Visits are kept per minute of t (UTC, from the Unix epoch). Recording a
// visit to a link this core has seen since the last flush does not allocate;
// key is copied when it is new, so it may point into a request.
func (r *Recorder) Record(key string, t time.Time, bot bool) {
	r.RecordVisit(key, t, bot, nil, 0)
}

// RecordVisit is Record with the visit's features (f may be nil: none),
// counted per UTC day of t and dimension, for the link and for all links
// together, while dimensions are on (SetMaxValues), and the visitor's hash
// (visitor.Uniques; 0: none), added to the sketch of the link's unique
// visitors of the day when the visit is human. A visit to a link this
// core has seen since the last flush, with values seen too, does not
// allocate (a sketch allocates as it grows).
func (r *Recorder) RecordVisit(key string, t time.Time, bot bool, f *visitor.Features, uniq uint64) {
	r.record("", key, t, classOf(bot), f, uniq)
}

// classOf returns the class Record counts a visit in: a declared bot's
// when bot.
func classOf(bot bool) visitclass.Class {
	if bot {
		return visitclass.Bot
	}
	return visitclass.Human
}

// RecordTenantVisit is RecordVisit of the link short of tenant (see
// TenantKey; "" is the default tenant, whose visit RecordVisit counts), also
// counted in the tenant's all-links entry (TenantAll), which is tracked
// whatever max_keys and max_buffer_bytes say (there are as many as
// tenants visited in an interval) and followed live whatever
// live.max_links says, in its class (RecordVisit's bot is visitclass.Bot).
// A visit to a link tracked already does not allocate.
func (r *Recorder) RecordTenantVisit(tenant, short string, t time.Time, class visitclass.Class, f *visitor.Features, uniq uint64) {
	r.record(tenant, short, t, class, f, uniq)
}

// record counts a visit to the link key of tenant: see RecordVisit and
// RecordTenantVisit.
func (r *Recorder) record(tenant, key string, t time.Time, class visitclass.Class, f *visitor.Features, uniq uint64) {
	bot := class != visitclass.Human
	minute := unixMinute(t)
	maxValues := int(r.maxValues.Load())
	if maxValues == 0 {
		f = nil
	}
	i := r.cores.Get().(*uint32)
	s := &r.shards[*i]
	s.mu.Lock()
	if bot {
		s.bot++
	} else {
		s.human++
	}
	s.all.add(minute, class)
	day := int32(floorDiv(minute, 1440))
	var e *entry
	if tenant == "" {
		e = s.links[key]
	} else {
		s.scratch = append(append(append(s.scratch[:0], tenant...), '/'), key...)
		// The link's key over the scratch: valid while s.mu is held, and,
		// like a key pointing into a request, copied wherever it is kept.
		key = unsafe.String(unsafe.SliceData(s.scratch), len(s.scratch))
		e = s.links[key]
		r.recordTenantAll(s, key[:len(tenant)+1], minute, day, liveTick(t), class, f, uniq, maxValues)
	}
	owned := false
	if e == nil {
		k, ok := r.admit(key)
		if !ok {
			// Not tracked per link: its features and visitor count for
			// all links together still (those of tracked links are added
			// to all links' at the swap, off the request's path).
			if f != nil {
				s.addAllDims(day, f, maxValues)
			}
			if uniq != 0 && !bot {
				var grew int64
				s.allUniq, grew = addUniq(s.allUniq, day, uniq)
				s.bytes += grew
				r.bytes.Add(grew)
			}
			s.overflow++
			r.recordLive(s, nil, key, false, liveTick(t), class)
			s.mu.Unlock()
			r.cores.Put(i)
			r.m.overflowed()
			return
		}
		e = &entry{last: minuteCount{minute: minute}}
		s.links[k] = e
		s.bytes += int64(len(k)) + linkOverhead
		key, owned = k, true // the entry's copy: a new live ring shares it
	}
	e.add(minute, class)
	r.recordLive(s, e, key, owned, liveTick(t), class)
	r.addFeatures(s, e, day, !bot, f, uniq, maxValues)
	s.mu.Unlock()
	r.cores.Put(i)
}

// addFeatures counts a visit's features (f, nil for none) and its visitor
// (uniq, 0 for none) in e, an entry of s. Called with s.mu held.
func (r *Recorder) addFeatures(s *shard, e *entry, day int32, human bool, f *visitor.Features, uniq uint64, maxValues int) {
	if f != nil {
		if e.dims == nil {
			e.dims = new(entryDims)
		}
		var grew int64
		for d, v := range f {
			if v != "" {
				grew += e.addDim(visitor.Dim(d), day, v, maxValues)
			}
		}
		if grew > 0 {
			s.bytes += grew
			r.bytes.Add(grew)
		}
	}
	// A sketch grows to 4 KB: within max_buffer_bytes only (past it, the
	// visit's visitor is not counted; its visit is).
	if uniq != 0 && human && r.bytes.Load() < r.maxBytes.Load() {
		var grew int64
		e.uniq, grew = addUniq(e.uniq, day, uniq)
		if grew != 0 {
			s.bytes += grew
			r.bytes.Add(grew)
		}
	}
}

// addAllDims counts a visit's features for all links together, at most
// maxValues values per dimension in the shard, the others as visitor.Other.
// Called with s.mu held.
func (s *shard) addAllDims(day int32, f *visitor.Features, maxValues int) {
	for d, v := range f {
		if v == "" {
			continue
		}
		k := allDimKey{day, visitor.Dim(d), v}
		if _, ok := s.allDims[k]; !ok {
			if s.allVals[d] >= maxValues {
				k.value = visitor.Other
			} else if visitor.Dim(d).FromRequest() {
				k.value = strings.Clone(v)
			}
			if _, ok := s.allDims[k]; !ok {
				s.allVals[d]++
			}
		}
		s.allDims[k]++
	}
}

// floorDiv returns a / b rounded down (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

// admit reports whether key gets an entry in a shard in this interval: it
// does when the entries' bytes stay within max_buffer_bytes, and the link
// is tracked already or fewer than max_keys links are. It returns a copy of
// key to keep, shared with the directory when it was added there. The
// caller adds the entry's cost to its shard's bytes.
func (r *Recorder) admit(key string) (string, bool) {
	cost := int64(len(key)) + linkOverhead
	// A plain read first: in a flood of new keys past the cap, rejecting
	// writes nothing to the counter every core shares.
	if r.bytes.Load()+cost > r.maxBytes.Load() {
		return "", false
	}
	if r.bytes.Add(cost) > r.maxBytes.Load() {
		r.bytes.Add(-cost)
		return "", false
	}
	d := &r.dir[maphash.String(shardSeed, key)&(numShards-1)]
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.links[key]; ok {
		return strings.Clone(key), true
	}
	if r.keys.Add(1) > r.maxKeys.Load() {
		r.keys.Add(-1)
		r.bytes.Add(-cost)
		return "", false
	}
	key = strings.Clone(key)
	d.links[key] = struct{}{}
	return key, true
}

// snapshot is what a swap takes out of a Recorder.
type snapshot struct {
	links      []map[string]*entry   // per link, one map per shard that had any
	all        []minuteCount         // all links together, overflow included
	allDims    []map[allDimKey]int64 // all links' dimensions, one map per shard that had any
	allUniq    []dayUniq             // all links' visitor sketches, of every shard
	overflow   int64
	human, bot int64
}

// swap takes everything recorded so far, leaving every shard empty. Each
// shard is locked only to exchange its map for a fresh one; merging the
// shards' maps happens outside the locks.
func (r *Recorder) swap() snapshot {
	// The directory first: a link admitted between this and the swap of its
	// shard stays in the new directory though its visits go with this swap,
	// so the directory may hold a few links too many, never too few.
	for i := range r.dir {
		d := &r.dir[i]
		d.mu.Lock()
		n := len(d.links)
		if m, keep := fresh[struct{}](n, &d.sized); !keep {
			d.links = m
		}
		d.mu.Unlock()
		r.keys.Add(-int64(n))
	}
	var all entry
	snap := snapshot{}
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		taken := s.links
		if m, keep := fresh[*entry](len(taken), &s.sized); !keep {
			s.links = m
		}
		if len(taken) > 0 {
			snap.links = append(snap.links, taken)
		}
		sAll := s.all
		s.all = entry{}
		snap.allUniq = append(snap.allUniq, s.allUniq...)
		s.allUniq = nil
		if len(s.allDims) > 0 {
			snap.allDims = append(snap.allDims, s.allDims)
			s.allDims = make(map[allDimKey]int64, len(s.allDims))
			s.allVals = [visitor.NumDims]int{}
		}
		snap.overflow += s.overflow
		snap.human += s.human
		snap.bot += s.bot
		s.overflow, s.human, s.bot = 0, 0, 0
		r.bytes.Add(-s.bytes)
		s.bytes = 0
		s.mu.Unlock()
		sAll.each(func(c minuteCount) { all.addVisits(c) })
	}
	all.each(func(c minuteCount) { snap.all = append(snap.all, c) })
	r.m.recorded(snap.human, snap.bot)
	r.m.tenantsRecorded(snap.links)
	return snap
}

// addVisits adds c to e's minute c.minute.
func (e *entry) addVisits(c minuteCount) {
	if e.last.Human|e.last.Bot == 0 && len(e.more) == 0 {
		e.last = c
		return
	}
	if e.last.minute == c.minute {
		e.last.Visits = e.last.Add(c.Visits)
		return
	}
	for i := range e.more {
		if e.more[i].minute == c.minute {
			e.more[i].Visits = e.more[i].Add(c.Visits)
			return
		}
	}
	e.more = append(e.more, c)
}

// visits calls fn for every minute of key recorded since the last swap;
// key AllLinks gives the minutes of all links together.
func (r *Recorder) visits(key string, fn func(minuteCount)) {
	if key == AllLinks {
		for i := range r.shards {
			s := &r.shards[i]
			s.mu.Lock()
			s.all.each(fn)
			s.mu.Unlock()
		}
		return
	}
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		if e := s.links[key]; e != nil {
			e.each(fn)
		}
		s.mu.Unlock()
	}
}

// dimsOf calls fn for every value of dim recorded for key since the last
// swap (AllLinks: all links together, which walks every link tracked, a
// shard at a time), per shard and link: the same value may come more than
// once.
func (r *Recorder) dimsOf(key string, dim visitor.Dim, fn func(day int32, value string, n int64)) {
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		if key == AllLinks && dim == DimLink {
			// Every link's human visits per day, as the swap makes them.
			for k, e := range s.links {
				if isTenantAll(k) {
					continue
				}
				e.each(func(c minuteCount) {
					if c.Human != 0 {
						fn(int32(floorDiv(c.minute, 1440)), k, c.Human)
					}
				})
			}
		} else if key == AllLinks {
			for k, n := range s.allDims {
				if k.dim == dim {
					fn(k.day, k.value, n)
				}
			}
			for k, e := range s.links {
				if e.dims != nil && !isTenantAll(k) {
					for _, c := range e.dims[dim] {
						fn(c.day, c.value, c.n)
					}
				}
			}
		} else if e := s.links[key]; e != nil && e.dims != nil {
			for _, c := range e.dims[dim] {
				fn(c.day, c.value, c.n)
			}
		}
		s.mu.Unlock()
	}
}

// uniqOf calls fn with every sketch recorded for key since the last swap
// (AllLinks: all links together).
func (r *Recorder) uniqOf(key string, fn func(day int32, sk *hll.Sketch)) {
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		if key == AllLinks {
			for j := range s.allUniq {
				fn(s.allUniq[j].day, &s.allUniq[j].sk)
			}
			for k, e := range s.links {
				if isTenantAll(k) {
					continue
				}
				for j := range e.uniq {
					fn(e.uniq[j].day, &e.uniq[j].sk)
				}
			}
		} else if e := s.links[key]; e != nil {
			for j := range e.uniq {
				fn(e.uniq[j].day, &e.uniq[j].sk)
			}
		}
		s.mu.Unlock()
	}
}
