package limit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// checker checks windows against a Store (check, in limiter.go): the
// store, the memory of values found over a limit, the scratch of a check
// and the log of counts the store refused. A Limiter holds one for all its
// rules, a Windows one of its own. Safe for concurrent use once init ran.
type checker struct {
	store   Store
	blocked *blocked
	pool    sync.Pool // *readSet
	timed   bool      // observe store latency (not for the in-process store)
	log     *slog.Logger
	logs    logThrottle
	latest  atomic.Int64 // the newest unix second a check counted at (clock)
}

// clock returns now, or the start of the newest second a check of ck
// counted at when now is older: a check's clock is read before it runs
// (with the request, before a wait), and one read before another check's
// but run after it must still count that check's hit, which a window
// ending at its own older second would leave out. Checks of one process
// are so ordered by time. A clock stepped back holds at the newest second
// until it catches up: windows then slide late, never early.
func (ck *checker) clock(now time.Time) time.Time {
	sec := now.Unix()
	for {
		l := ck.latest.Load()
		if sec < l {
			return time.Unix(l, 0)
		}
		if sec == l || ck.latest.CompareAndSwap(l, sec) {
			return now
		}
	}
}

func (ck *checker) init(store Store, log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ck.store, ck.blocked, ck.log = store, newBlocked(), log
	ck.pool.New = func() any { return new(readSet) }
	_, inProcess := store.(*Memory)
	ck.timed = !inProcess
}

// windows is what a check counts, and how: a rule's limits, or those of a
// Windows.
type windows struct {
	name    string  // the counters' name (Counter.Rule): a rule's name
	key     Feature // what the values are, for the logs
	plan    *bucketPlan
	pen     *penalty     // nil: no penalty box
	shadow  bool         // never limits: reports shadowLimited, remembers no client as blocked
	strict  bool         // counts first (Store.AddNow), then checks
	headers bool         // finds the limit with the least room and its reset, for the RateLimit headers
	metrics *ruleMetrics // nil: none
}

// Windows counts events of any number of values (client addresses, say)
// in several windows at once ("5/m, 30/h") and tells whether a value is
// over one, in a Store, with the buckets and the memory of values over a
// limit that a rule of the config has: the limiter's counting without a
// request around it. The TLS edge counts the handshakes each client
// address makes for names whose answer it does not know yet with one. A
// Windows is safe for concurrent use.
type Windows struct {
	ck checker
	w  windows
}

// NewWindows returns the Windows counting under name, in store, that
// allows an event while every one of limits holds. The counters are those
// of a rule of that name (Counter.Rule is name): name must be no rule's
// name, or the two count together; a name holding '/', which no rule's
// can, never is one. Limits are counted in buckets (precision "bucket":
// the package doc says how far they may be off).
func NewWindows(name string, limits []Limit, store Store) (*Windows, error) {
	if name == "" {
		return nil, errors.New("limit: windows: no name")
	}
	if len(limits) == 0 {
		return nil, fmt.Errorf("limit: windows %s: no limit", name)
	}
	for _, l := range limits {
		if l.N < 1 || l.Window < time.Second || l.Window > MaxWindow {
			return nil, fmt.Errorf("limit: windows %s: %d per %v: want at least 1 per 1s to %v", name, l.N, l.Window, MaxWindow)
		}
	}
	ws := &Windows{w: windows{name: name, plan: newBucketPlan(limits, Bucketed)}}
	ws.ck.init(store, nil)
	return ws, nil
}

// Allow counts one event of value at now, unless value is over a limit
// already (an event refused is not counted), and reports whether every
// limit held. A store that fails is returned with ok true, whether it
// failed the check or the count: the caller decides whether a failing
// store lets events pass.
func (ws *Windows) Allow(ctx context.Context, value string, now time.Time) (ok bool, err error) {
	v := ws.ck.check(ctx, &ws.w, value, now, true)
	return v.out != limited, v.err
}
