package limit

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// blocked remembers clients over a limit until the second they can pass
// again, so that a flood from one client is answered without a store
// operation. It is safe for concurrent use; entries are dropped when they
// are found expired and a shard holds at most blockedShardCap of them.
type blocked struct {
	n      atomic.Int64 // entries held: a check skips the cache while it is empty
	seed   maphash.Seed
	shards [blockedShards]blockedShard
}

const (
	blockedShards   = 64
	blockedShardCap = 1 << 14
)

type blockedShard struct {
	mu    sync.RWMutex
	m     map[Counter]blockedEntry
	swept int64 // unix second of the last sweep of a full shard
	_     [24]byte
}

// blockedEntry is until when a counter is answered from memory, and why:
// the limit that binds, or the box it is in.
type blockedEntry struct {
	until int64 // unix seconds
	limit int   // index of the binding limit in the rule
	box   Box   // the box, when the counter is in one (then until is at most boxRecheck seconds away)
}

// verdict returns the verdict of a check answered from e at sec.
func (e blockedEntry) verdict(sec int64) verdict {
	if e.box.Until != 0 {
		return verdict{out: boxed, reset: e.box.Until - sec, box: e.box}
	}
	return verdict{out: limited, limit: e.limit, reset: e.until - sec}
}

func newBlocked() *blocked {
	b := &blocked{seed: maphash.MakeSeed()}
	for i := range b.shards {
		b.shards[i].m = make(map[Counter]blockedEntry)
	}
	return b
}

func (b *blocked) shard(c Counter) *blockedShard {
	return &b.shards[maphash.String(b.seed, c.Value)%blockedShards]
}

// get returns the entry of c if it is still blocked at unix second now.
func (b *blocked) get(c Counter, now int64) (blockedEntry, bool) {
	if b.n.Load() == 0 {
		return blockedEntry{}, false
	}
	s := b.shard(c)
	s.mu.RLock()
	e, ok := s.m[c]
	s.mu.RUnlock()
	if ok && now >= e.until {
		s.mu.Lock()
		if e2, ok := s.m[c]; ok && now >= e2.until {
			delete(s.m, c)
			b.n.Add(-1)
		}
		s.mu.Unlock()
		return blockedEntry{}, false
	}
	return e, ok
}

// put blocks c until e.until.
func (b *blocked) put(c Counter, e blockedEntry, now int64) {
	s := b.shard(c)
	s.mu.Lock()
	if len(s.m) >= blockedShardCap && now > s.swept {
		s.swept = now
		for k, v := range s.m {
			if now >= v.until {
				delete(s.m, k)
				b.n.Add(-1)
			}
		}
	}
	if _, ok := s.m[c]; ok {
		s.m[c] = e
	} else if len(s.m) < blockedShardCap {
		s.m[c] = e
		b.n.Add(1)
	}
	s.mu.Unlock()
}

// del unblocks c (an admin reset).
func (b *blocked) del(c Counter) {
	s := b.shard(c)
	s.mu.Lock()
	if _, ok := s.m[c]; ok {
		delete(s.m, c)
		b.n.Add(-1)
	}
	s.mu.Unlock()
}
