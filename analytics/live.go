package analytics

import (
	"strings"
	"time"

	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitclass"
)

// The live view
//
// Besides the per-minute counts it hands to the flusher, a Recorder keeps
// the last LiveWindow of visits in LiveStep buckets, per link and for all
// links together, for the stats API's live stream: read straight from
// memory, never from the store, so that it moves within a second of a visit
// whatever the flush interval. It is this process's visits only: every
// gateway of a fleet keeps its own.
//
// The buckets live in the same per-core shards as the minute counts and
// are counted under the lock Record takes anyway: a visit pays a map lookup
// and an increment more, no lock. A link has a ring in each shard that
// recorded it (the cores that served its visits), holding only the buckets
// that had visits: 28 bytes each (humans, bots and the classes of bots
// apart), at most LiveBuckets of them (with its map entry, up to 3 KB a
// ring, TestLiveMemory). The rings
// are capped at SetLiveLinks; a ring without a visit for LiveWindow is
// swept at the next flush (or sooner, when the cap is reached), so the cap
// holds the links visited in the last quarter of an hour.

// Geometry of the live view: 90 buckets of 10 seconds.
const (
	LiveStep    = 10 * time.Second
	LiveWindow  = 15 * time.Minute
	LiveBuckets = int(LiveWindow / LiveStep)
)

// DefaultLiveLinks is the default of analytics.live.max_links: ten thousand
// links visited in the last 15 minutes: at most about 30 MB of rings.
const DefaultLiveLinks = 10_000

// MaxLiveLinks is the most analytics.live.max_links may be: about 3 GB
// of rings at worst.
const MaxLiveLinks = 1_000_000

// liveCount is the visits of one live bucket; tick is Unix seconds / 10.
type liveCount struct {
	tick       uint32
	human, bot uint32
	other      [rollup.NumOther]uint32 // of bot, as Visits.Other
}

// liveRing is a link's live buckets in one shard, oldest first, only those
// with visits, none older than LiveWindow before the newest.
type liveRing struct {
	counts []liveCount
	dead   bool // swept: an entry that still points here must look it up again
}

// liveTick returns t's live bucket: Unix seconds / 10 (t is after 1970).
func liveTick(t time.Time) uint32 { return uint32(t.Unix() / int64(LiveStep/time.Second)) }

// add counts a visit in bucket tick, dropping the buckets that left the
// window. Visits are recorded at the time they end, so tick is nearly
// always the newest bucket or a new one after it.
func (r *liveRing) add(tick uint32, class visitclass.Class) {
	c := r.counts
	i := len(c) - 1
	for i >= 0 && c[i].tick > tick {
		i--
	}
	if i < 0 || c[i].tick != tick {
		if i == len(c)-1 {
			// A new newest bucket: drop those it pushes out of the window
			// (in place, at most once per bucket and ring).
			if n := len(c); n > 0 && c[0].tick+uint32(LiveBuckets) <= tick {
				k := 0
				for k < n && c[k].tick+uint32(LiveBuckets) <= tick {
					k++
				}
				c = c[:copy(c, c[k:])]
			}
			c = grow(c)
			c = append(c, liveCount{tick: tick})
			i = len(c) - 1
		} else {
			// An older bucket than the newest (a visit whose clock reading
			// came late): inserted in order, if still in the window.
			if tick+uint32(LiveBuckets) <= c[len(c)-1].tick {
				r.counts = c
				return
			}
			c = append(grow(c), liveCount{})
			copy(c[i+2:], c[i+1:])
			i++
			c[i] = liveCount{tick: tick}
		}
	}
	if class == visitclass.Human {
		c[i].human++
	} else {
		c[i].bot++
		if o := int(class) - int(visitclass.Preview); o >= 0 && o < len(c[i].other) {
			c[i].other[o]++
		}
	}
	r.counts = c
}

// grow returns c with room for one more bucket: its capacity doubles from 4
// up to LiveBuckets, never past it (append would take 128).
func grow(c []liveCount) []liveCount {
	if len(c) < cap(c) {
		return c
	}
	n := min(max(2*cap(c), 4), LiveBuckets)
	if n <= len(c) {
		n = len(c) + 1 // not reached: a ring holds at most LiveBuckets
	}
	return append(make([]liveCount, 0, n), c...)
}

// newest returns the tick of r's newest bucket, 0 when it has none.
func (r *liveRing) newest() uint32 {
	if len(r.counts) == 0 {
		return 0
	}
	return r.counts[len(r.counts)-1].tick
}

// recordLive counts a visit in key's ring of s (and in the all-links one)
// at tick. Called with s.mu held; e is key's entry of the interval, which
// caches its ring, or nil when the link is not tracked per link. key is
// copied when it makes a ring, unless owned (the copy e's map keeps).
func (r *Recorder) recordLive(s *shard, e *entry, key string, owned bool, tick uint32, class visitclass.Class) {
	s.allLive.add(tick, class)
	if e == nil {
		r.refuseLive(tick) // not tracked per link (max_keys): not followed live either
		return
	}
	lr := e.live
	if lr == nil || lr.dead {
		if e.liveRefused == tick {
			r.refuseLive(tick) // refused already in this bucket: not tried again per visit
			return
		}
		lr = s.live[key]
		if lr == nil {
			if !owned {
				key = strings.Clone(key) // it may point into the request
			}
			if lr = r.admitLive(s, key, tick); lr == nil {
				e.liveRefused = tick
				return
			}
		}
		e.live = lr
	}
	lr.add(tick, class)
}

// admitLive returns a new ring for key in s, or nil when the cap is
// reached and sweeping s frees no room. key must not point into a request
// (Record passes the copy its entry keeps). Called with s.mu held.
func (r *Recorder) admitLive(s *shard, key string, tick uint32) *liveRing {
	max := r.liveMax.Load()
	if max == 0 {
		r.refuseLive(tick)
		return nil
	}
	if !r.takeLive(max) {
		// Full: rings of links not visited for a window may still hold
		// the room. Sweep this shard, at most once per bucket.
		if s.liveSwept == tick {
			r.refuseLive(tick)
			return nil
		}
		s.liveSwept = tick
		r.sweepShard(s, tick)
		if !r.takeLive(max) {
			r.refuseLive(tick)
			return nil
		}
	}
	if s.live == nil {
		s.live = make(map[string]*liveRing)
	}
	lr := &liveRing{}
	s.live[key] = lr
	return lr
}

// refuseLive notes that a visit at tick could not be followed live. The
// shared word is written once per bucket, not once per visit.
func (r *Recorder) refuseLive(tick uint32) {
	if r.liveRefused.Load() != tick {
		r.liveRefused.Store(tick)
	}
}

// takeLive counts a new ring when fewer than max are held. A plain read
// first: at the cap, a flood of new links writes nothing to the counter
// every core shares.
func (r *Recorder) takeLive(max int64) bool {
	if r.liveRings.Load() >= max {
		return false
	}
	if r.liveRings.Add(1) > max {
		r.liveRings.Add(-1)
		return false
	}
	return true
}

// sweepShard removes the rings of s without a visit in the window ending
// at tick. Called with s.mu held.
func (r *Recorder) sweepShard(s *shard, tick uint32) {
	for k, lr := range s.live {
		if lr.newest()+uint32(LiveBuckets) <= tick {
			lr.dead = true
			delete(s.live, k)
			r.liveRings.Add(-1)
		}
	}
}

// sweepLive removes the rings without a visit in the window ending at now,
// a shard at a time: the flusher calls it at every flush, and it sweeps
// at most once a minute (a ring goes stale in 15).
func (r *Recorder) sweepLive(now time.Time) {
	tick := liveTick(now)
	if last := r.liveSweep.Load(); tick >= last && tick < last+liveSweepTicks {
		return
	}
	r.liveSweep.Store(tick)
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		if len(s.live) > 0 {
			r.sweepShard(s, tick)
		}
		s.mu.Unlock()
	}
}

// liveSweepTicks is how many live buckets apart sweepLive sweeps: a
// minute.
const liveSweepTicks = uint32(time.Minute / LiveStep)

// SetLiveLinks sets how many link rings the live view keeps at most
// (analytics.live.max_links; a link visited on several cores has a ring
// per core); 0 keeps none (the all-links live curve stays). Rings beyond a
// lowered cap go as they are swept. It takes effect at once.
func (r *Recorder) SetLiveLinks(n int) { r.liveMax.Store(int64(max(n, 0))) }

// LiveLinks returns the number of link rings the live view holds now.
func (r *Recorder) LiveLinks() int { return int(r.liveRings.Load()) }

// Since returns when r began counting (its creation: the process's start,
// as a Pipeline lives as long as the process). The live buckets before it
// are empty because r did not count them, not for want of visits: those
// are in the store, counted by the process before.
func (r *Recorder) Since() time.Time { return r.since }

// Live returns key's visits (AllLinks: all links together) in the
// LiveBuckets buckets of LiveStep that end with the one holding now, oldest
// first, every bucket present (zero when it had none), and whether they are
// complete: false when, within the window, a visit to some link could not
// be followed (max_links, or max_keys, reached), so that a link's buckets
// may lack visits. All links' buckets are always complete. It reads this
// process's memory only.
func (r *Recorder) Live(key string, now time.Time) ([]Point, bool) {
	last := liveTick(now)
	first := last - uint32(LiveBuckets) + 1
	pts := make([]Point, LiveBuckets)
	sec := int64(LiveStep / time.Second)
	for i := range pts {
		pts[i].Start = time.Unix(int64(first+uint32(i))*sec, 0).UTC()
	}
	add := func(c []liveCount) {
		for _, b := range c {
			if b.tick >= first && b.tick <= last {
				p := &pts[b.tick-first]
				p.Human += int64(b.human)
				p.Bot += int64(b.bot)
				for i, o := range b.other {
					p.Other[i] += int64(o)
				}
			}
		}
	}
	complete := key == AllLinks || isTenantAll(key) // followed whatever the caps
	if refused := r.liveRefused.Load(); refused == 0 || refused < first {
		complete = true
	}
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		if key == AllLinks {
			add(s.allLive.counts)
		} else if lr := s.live[key]; lr != nil {
			add(lr.counts)
		}
		s.mu.Unlock()
	}
	return pts, complete
}
