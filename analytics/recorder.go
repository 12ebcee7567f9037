package analytics

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// numShards is the number of independently locked parts of a Recorder. A
// power of two well above the core count keeps two requests for different
// links from waiting on the same lock.
const numShards = 64

var shardSeed = maphash.MakeSeed()

// Recorder counts visits in memory per (short_key, minute) until a Flusher
// takes them. It is safe for concurrent use; Record takes the lock of one of
// numShards shards chosen by the key's hash, never a global one.
//
// A Recorder lives as long as the process: it is not rebuilt on a config
// reload, so counts in memory survive one (SetMaxKeys applies a new
// max_keys). Use NewRecorder; the zero Recorder is not usable.
type Recorder struct {
	maxKeys atomic.Int64 // distinct links tracked at most between two swaps
	keys    atomic.Int64 // distinct links tracked now, over all shards
	m       *Metrics
	shards  [numShards]shard
}

// shard is one part of a Recorder. Everything in it is guarded by mu.
type shard struct {
	mu       sync.Mutex
	links    map[string]*entry
	all      entry // every visit recorded in this shard, overflow included
	overflow int64 // visits not tracked per link because max_keys was reached
	human    int64 // visits recorded since the last swap, for the metric
	bot      int64
	_        [40]byte // keep neighbouring shards' locks off one cache line
}

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
}

func (e *entry) add(minute int64, bot bool) {
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
	if bot {
		c.Bot++
	} else {
		c.Human++
	}
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
// between two flushes (see SetMaxKeys). m may be nil.
func NewRecorder(maxKeys int, m *Metrics) *Recorder {
	r := &Recorder{m: m}
	r.SetMaxKeys(maxKeys)
	for i := range r.shards {
		r.shards[i].links = make(map[string]*entry)
	}
	return r
}

// SetMaxKeys sets how many distinct links are tracked at most between two
// flushes; n < 1 means 1. Visits to further links are counted in the
// all-links total only, and in the overflow metric. It takes effect at once;
// links already tracked stay tracked until the next flush.
func (r *Recorder) SetMaxKeys(n int) {
	r.maxKeys.Store(int64(max(n, 1)))
}

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
// Visits are kept per minute of t (UTC, from the Unix epoch). Recording a visit to a link already tracked since the last flush does not
// allocate; key is copied when it is new, so it may point into a request.
func (r *Recorder) Record(key string, t time.Time, bot bool) {
	minute := unixMinute(t)
	s := &r.shards[maphash.String(shardSeed, key)&(numShards-1)]
	s.mu.Lock()
	if bot {
		s.bot++
	} else {
		s.human++
	}
	s.all.add(minute, bot)
	if e := s.links[key]; e != nil {
		e.add(minute, bot)
		s.mu.Unlock()
		return
	}
	if r.keys.Add(1) > r.maxKeys.Load() {
		r.keys.Add(-1)
		s.overflow++
		s.mu.Unlock()
		r.m.overflowed()
		return
	}
	e := &entry{last: minuteCount{minute: minute}}
	e.add(minute, bot)
	s.links[strings.Clone(key)] = e
	s.mu.Unlock()
}

// snapshot is what a swap takes out of a Recorder.
type snapshot struct {
	links      []map[string]*entry // per link, one map per shard that had any
	all        []minuteCount       // all links together, overflow included
	overflow   int64
	human, bot int64
}

// swap takes everything recorded so far, leaving every shard empty. Each
// shard is locked only to exchange its map for a fresh one; merging the
// shards' maps happens outside the locks.
func (r *Recorder) swap() snapshot {
	var all entry
	snap := snapshot{}
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		taken := s.links
		if len(taken) > 0 { // an empty map stays: nothing to take
			s.links = make(map[string]*entry, len(taken))
			snap.links = append(snap.links, taken)
		}
		sAll := s.all
		s.all = entry{}
		snap.overflow += s.overflow
		snap.human += s.human
		snap.bot += s.bot
		s.overflow, s.human, s.bot = 0, 0, 0
		s.mu.Unlock()
		r.keys.Add(-int64(len(taken)))
		sAll.each(func(c minuteCount) { all.addVisits(c) })
	}
	all.each(func(c minuteCount) { snap.all = append(snap.all, c) })
	r.m.recorded(snap.human, snap.bot)
	return snap
}

// addVisits adds c to e's minute c.minute.
func (e *entry) addVisits(c minuteCount) {
	if e.last.Human|e.last.Bot == 0 && len(e.more) == 0 {
		e.last = c
		return
	}
	if e.last.minute == c.minute {
		e.last.Human += c.Human
		e.last.Bot += c.Bot
		return
	}
	for i := range e.more {
		if e.more[i].minute == c.minute {
			e.more[i].Human += c.Human
			e.more[i].Bot += c.Bot
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
	s := &r.shards[maphash.String(shardSeed, key)&(numShards-1)]
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.links[key]; e != nil {
		e.each(fn)
	}
}
