package memcached

import "time"

// Gathered returns how many checks wait, in all, for a read of their
// counter that another check sends for them.
func (s *Store) Gathered() int {
	return s.waiting(func(st *readState) int {
		if st.next == nil {
			return 0
		}
		return 1 + st.next.waiting // its leader, and those that joined it
	})
}

// Joined returns how many checks wait, in all, for the answer of a read
// of their counter already on its way, sent by another check.
func (s *Store) Joined() int {
	return s.waiting(func(st *readState) int {
		if st.joined == nil {
			return 0
		}
		return st.joined.waiting
	})
}

// waiting sums n over the shared reads of every shard.
func (s *Store) waiting(n func(*readState) int) int {
	sum := 0
	for _, sv := range s.servers {
		for i := range sv.shards {
			sh := &sv.shards[i]
			sh.mu.Lock()
			for _, st := range sh.reads {
				sum += n(st)
			}
			sh.mu.Unlock()
		}
	}
	return sum
}

// ReuseWindow is how long a read answers the checks that follow it.
const ReuseWindow = reuseWindow

// SetReuseWindow sets how long after its answer a read answers the
// checks of its counter; call it before the Store is used.
func (s *Store) SetReuseWindow(d time.Duration) {
	for _, sv := range s.servers {
		sv.reuse = int64(d)
	}
}

// Inexact returns how many Loads ended on a read that overlapped a flush
// of their counter, counting its increments in flight as unapplied.
func (s *Store) Inexact() int64 {
	var n int64
	for _, sv := range s.servers {
		n += sv.inexact.Load()
	}
	return n
}

// FlushNow runs a flush of every server at once, as the flusher's tick
// does.
func (s *Store) FlushNow() {
	for _, sv := range s.servers {
		sv.flush()
	}
}
