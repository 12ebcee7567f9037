package visitclass

import (
	"hash/maphash"
	"strings"
	"sync"
	"time"
)

// burstShards is the number of independently locked parts of a burst
// table.
const burstShards = 16

// burstTable remembers, per link, when it was first visited from a cloud
// network. Each shard holds up to per links; a full shard is emptied,
// which only makes the next cloud visit to a forgotten link look like a
// first one: memory stays bounded whatever links are visited.
type burstTable struct {
	window time.Duration
	per    int
	seed   maphash.Seed
	shards [burstShards]burstShard
}

type burstShard struct {
	mu    sync.Mutex
	first map[string]int64 // link → first cloud visit, Unix nanoseconds
	_     [40]byte
}

func newBurstTable(window time.Duration, links int) *burstTable {
	t := &burstTable{window: window, per: max(links/burstShards, 1), seed: maphash.MakeSeed()}
	for i := range t.shards {
		t.shards[i].first = map[string]int64{}
	}
	return t
}

// within records a cloud visit to key at now and reports whether it lies
// within the window after the link's first one.
func (t *burstTable) within(key string, now time.Time) bool {
	s := &t.shards[maphash.String(t.seed, key)%burstShards]
	ns := now.UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	first, ok := s.first[key]
	if !ok {
		if len(s.first) >= t.per {
			clear(s.first)
		}
		s.first[strings.Clone(key)] = ns
		return true
	}
	if ns < first { // clocks and goroutines disagree by a little
		s.first[key] = ns
		return true
	}
	return time.Duration(ns-first) < t.window
}
