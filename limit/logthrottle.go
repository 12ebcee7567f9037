package limit

import (
	"sync"
	"time"
)

// logKey names a repeated event: the rule it happened under and its kind
// ("store_error", "shadow_limited", ...). Keys come from the config (rule
// names) and from constants, never from a request, so the set is bounded.
type logKey struct{ rule, kind string }

// logThrottle lets a repeated event through to the log at most once per
// second per key, and says how many occurrences it held back since the
// key's last line. A store outage or a shadow rule under load happens on
// every request (thousands a second); the log needs one line a second to
// show it, and the metrics keep the exact counts.
//
// The zero value is ready to use. It is safe for concurrent use and must not
// be copied after first use. Occurrences held back after a key's last line
// are reported only if the event happens again.
type logThrottle struct {
	mu   sync.Mutex
	keys map[logKey]*logState
}

type logState struct {
	last       time.Time // when the key's last line was let through
	suppressed int64     // occurrences held back since then
}

// logEvery is the shortest time between two lines of one key.
const logEvery = time.Second

// allow reports whether an occurrence of k at now may be logged, and if so
// how many occurrences of k were held back since its last line.
func (t *logThrottle) allow(k logKey, now time.Time) (suppressed int64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.keys[k]
	if s == nil {
		if t.keys == nil {
			t.keys = make(map[logKey]*logState)
		}
		t.keys[k] = &logState{last: now}
		return 0, true
	}
	// Concurrent requests read the clock before they get here, so now can
	// be a little before the last line's time: that is the same second. A
	// clock stepped back further lets a line through rather than silencing
	// the key until it catches up.
	if d := now.Sub(s.last); d > -logEvery && d < logEvery {
		s.suppressed++
		return 0, false
	}
	n := s.suppressed
	s.last, s.suppressed = now, 0
	return n, true
}
