// Package logthrottle keeps a repeated event from flooding the log: one
// line per key and interval, and on the next line the count of those held
// back. A store outage or a shadow rule under load happens on every request
// (thousands a second), and a Cassandra client retries every connection of
// every host; the log needs one line now and then to show it, and the
// metrics keep the exact counts. The limiter (by rule and kind) and the
// Cassandra store (by gocql message) use it.
package logthrottle

import (
	"sync"
	"time"
)

// Throttle lets an event of each key through to the log at most once per
// Every, and says how many it held back since the key's last line. Keys
// must come from a bounded set (rule names, constants, format strings),
// never from a request: the Throttle keeps one entry per key.
//
// The zero value lets one line a second through per key. A Throttle is
// safe for concurrent use and must not be copied after first use. Events
// held back after a key's last line are reported only if the key happens
// again.
type Throttle[K comparable] struct {
	// Every is the shortest time between two lines of one key; zero means
	// a second.
	Every time.Duration

	mu   sync.Mutex
	keys map[K]*state
}

type state struct {
	last       time.Time // when the key's last line was let through
	suppressed int64     // events held back since then
}

// Allow reports whether an event of k at now may be logged, and if so how
// many events of k were held back since its last line.
func (t *Throttle[K]) Allow(k K, now time.Time) (suppressed int64, ok bool) {
	every := t.Every
	if every <= 0 {
		every = time.Second
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.keys[k]
	if s == nil {
		if t.keys == nil {
			t.keys = make(map[K]*state)
		}
		t.keys[k] = &state{last: now}
		return 0, true
	}
	// Concurrent callers read the clock before they get here, so now can
	// be a little before the last line's time: that is the same interval. A
	// clock stepped back further lets a line through rather than silencing
	// the key until it catches up.
	if d := now.Sub(s.last); d > -every && d < every {
		s.suppressed++
		return 0, false
	}
	n := s.suppressed
	s.last, s.suppressed = now, 0
	return n, true
}
