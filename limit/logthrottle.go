package limit

import (
	"time"

	"github.com/linkgate/linkgate/logthrottle"
)

// logKey names a repeated event: the rule it happened under and its kind
// ("store_error", "shadow_limited", ...). Keys come from the config (rule
// names) and from constants, never from a request, so the set is bounded.
type logKey struct{ rule, kind string }

// logThrottle lets a repeated event through to the log at most once per
// second per key (a logthrottle.Throttle). The zero value is ready to use;
// it is safe for concurrent use.
type logThrottle struct{ t logthrottle.Throttle[logKey] }

// allow reports whether an occurrence of k at now may be logged, and if so
// how many occurrences of k were held back since its last line.
func (t *logThrottle) allow(k logKey, now time.Time) (suppressed int64, ok bool) {
	return t.t.Allow(k, now)
}
