package memcached

import (
	"fmt"
	"slices"
	"time"

	"github.com/linkgate/linkgate/limit"
)

// Checks of the same counter share their reads. A check of a counter
// whose read is on its way takes that read's answer when nothing of the
// counter was in flight when the read was sent and no send of its
// increments began and no AddNow or Reset of it ended between the read's
// send and the check's pin (Load): memcached then answers with every
// increment this Store had acknowledged when the check began, and none
// of those still pending, as a read of the check's own would (joinable).
// The other checks that arrive while the read is on its way (those that
// follow a write of the counter) gather into the next read, sent by the
// first of them as soon as the one on its way returns. Either way their
// keys are built, sent and parsed once, and each copies the counts. So a
// check waits for nobody when its counter is not being read, at most for
// the rest of the read on its way when it is, and under load a counter
// costs about one get per round trip however many of its checks arrive
// meanwhile: 64 concurrent requests of one client cost about one get
// instead of 64 (envoy's ratelimit pipelines Redis commands within 150 µs
// for the same reason). A check that joined a read sees the other
// gateways' increments as memcached held them when it answered, after
// the read was sent and before the check's own read would have been: an
// increment that landed in memcached is still seen by every check that
// begins more than a read's round trip and the reuse window (below)
// after, the bound it had before checks joined reads on their way.
//
// A read's answer also serves the checks of its counter and buckets that
// come within reuseWindow (1 ms, a fifth of the flush interval) after it
// arrived: they take its counts plus the pending increments at once (pin,
// store.go), without a get and without waiting, as long as it still
// holds: it was exact (nothing of the counter in flight when its Load
// pinned the counter, no send begun before it returned: the rule by which
// Load accepts a read), every send of the counter's increments since was
// acknowledged whole and taken into its counts (while one is on its way,
// the checks add its increments as well: so the answer plus what is
// pending and in flight is what memcached holds of this Store's
// increments), and no AddNow or Reset of the counter through this Store
// has ended since. The Store's own increments are thus exact as with a
// read of their own; the other gateways' are seen at most reuseWindow
// later than they would be. A counter keeps one such answer,
// in its entry, which the flusher drops with the entry once the counter
// has nothing pending and the answer is older than the window.
//
// Checks of distinct counters each send their own get at once: merging
// them into one command was measured to cost more than it saves (the
// parsing is per key, and the longer a read waits the more often it
// overlaps a flush of its counter and must be made again).
//
// No check waits longer than the configured timeout for the read on its
// way or for its group's answer: one that would is answered with an error,
// as a read that timed out. (A get itself is bounded by the timeout in
// all: getMulti.go.)

// readKey is what makes two checks read the same keys.
type readKey struct {
	c limit.Counter
	bucketsKey
}

// bucketsKey tells the bucket lists of a counter apart: a rule's list at a
// given time is determined by its first and last buckets and its length.
type bucketsKey struct {
	first, last limit.Bucket
	n           int
}

func keyOf(buckets []limit.Bucket) bucketsKey {
	return bucketsKey{first: buckets[0], last: buckets[len(buckets)-1], n: len(buckets)}
}

// readState is the reads of one readKey: the one on its way, the checks
// that joined it and the group gathering for the next.
type readState struct {
	busy chan struct{} // closed when the read on its way returns; nil when none is
	// The counter's generations (entry.gen, entry.wgen) when the read on
	// its way was sent, and whether nothing of the counter was in flight
	// then: a check pinned at the same generations, with nothing in
	// flight, may join it (joinable).
	gen, wgen uint64
	idle      bool
	joined    *readGroup // the checks that joined the read on its way; nil when none
	next      *readGroup // the checks waiting for the next read; nil when none
	err       error      // how the last read ended
}

// readGroup is the checks that share one read.
type readGroup struct {
	waiting int           // checks that joined it; guarded by the shard's mu
	done    chan struct{} // closed when counts, at and err are set
	expired <-chan time.Time
	timer   *time.Timer
	counts  []int64
	at      int64 // mono() when the answer arrived
	err     error
}

// sending marks st's read as on its way, sent now for e's counter. The
// caller holds the shard's mu and has set st.busy.
func (st *readState) sending(e *entry) {
	st.gen, st.wgen, st.idle = e.gen, e.wgen, e.done == nil
}

// joinable reports whether a check pinned at p, with nothing of its
// counter in flight then (idle), may take the answer of st's read on its
// way. The read was sent when nothing of the counter was in flight, and
// no send of its increments began and no AddNow or Reset of it ended
// between the read's send and the check's pin (the generations are the
// same): so memcached held, when it answered, every increment this Store
// had acknowledged when the check pinned its counter, and none of those
// pending then, as it would for a read of the check's own. (Whether a
// send begins before the answer arrives, addLocal tells, as for any
// read.) The caller holds the shard's mu.
func (st *readState) joinable(p pinned, idle bool) bool {
	return st.busy != nil && st.idle && idle && st.gen == p.gen && st.wgen == p.wgen
}

// getCounts reads the counts of c's buckets into counts (0 when missing),
// sharing the read with the concurrent checks of the same counter. The
// check pinned c's entry e at p (idle: nothing in flight then). It
// returns when the answer arrived (mono()).
func (sv *server) getCounts(sh *shard, e *entry, p pinned, idle bool, c limit.Counter, buckets []limit.Bucket, counts []int64) (int64, error) {
	if sv.open.Load() {
		return 0, ErrUnavailable
	}
	counts = counts[:len(buckets)]
	rk := readKey{c: c, bucketsKey: keyOf(buckets)}
	sh.mu.Lock()
	if sh.reads == nil {
		sh.reads = map[readKey]*readState{}
	}
	st := sh.reads[rk]
	if st == nil {
		st = &readState{}
		sh.reads[rk] = st
	}
	if st.busy == nil {
		// Nothing of this counter on its way: read now.
		st.busy = make(chan struct{})
		st.sending(e)
		sh.mu.Unlock()
		err := sv.read(c, buckets, counts)
		at := mono()
		sv.readDone(sh, rk, st, counts, at, err)
		return at, err
	}
	if st.joinable(p, idle) {
		// The read on its way answers this check as its own would.
		g := st.joined
		if g == nil {
			g = &readGroup{done: make(chan struct{})}
			st.joined = g
		}
		g.waiting++
		sh.mu.Unlock()
		return sv.awaitGroup(g, counts)
	}
	if g := st.next; g != nil {
		g.waiting++
		sh.mu.Unlock()
		return sv.awaitGroup(g, counts)
	}
	// The first to wait for the next read: it sends it for the group.
	g := &readGroup{done: make(chan struct{})}
	g.timer = time.NewTimer(sv.timeout)
	g.expired = g.timer.C
	st.next = g
	busy := st.busy
	sh.mu.Unlock()
	defer g.timer.Stop()
	return sv.leadGroup(sh, rk, st, busy, g, e, c, buckets, counts)
}

// awaitGroup waits for the read of group g, which another check sends,
// and copies its counts. A group that joined a read on its way has no
// timer of its own: that read, bounded by the timeout (getMulti),
// answers it sooner than a timer set now would.
func (sv *server) awaitGroup(g *readGroup, counts []int64) (int64, error) {
	select {
	case <-g.done:
	case <-g.expired:
		select {
		case <-g.done: // both ready: the answer is there
		default:
			clear(counts)
			return 0, fmt.Errorf("memcached: no answer within %v: %w", sv.timeout, errReadTimeout)
		}
	}
	if g.err != nil {
		clear(counts)
		return 0, g.err
	}
	copy(counts, g.counts)
	return g.at, nil
}

// leadGroup sends the read of group g, which it leads, once the read on
// its way (busy) returned, and gives the group its answer.
func (sv *server) leadGroup(sh *shard, rk readKey, st *readState, busy chan struct{}, g *readGroup, e *entry, c limit.Counter, buckets []limit.Bucket, counts []int64) (int64, error) {
	select {
	case <-busy:
	case <-g.expired:
		sh.mu.Lock()
		if st.next == g {
			st.next = nil
		}
		sh.mu.Unlock()
		g.err = fmt.Errorf("memcached: the read before took over %v: %w", sv.timeout, errReadTimeout)
		close(g.done)
		clear(counts)
		return 0, g.err
	}
	sh.mu.Lock()
	if st.next == g {
		st.next = nil // from here, checks gather for the read after
	}
	if st.err != nil {
		// The read before failed just now (a timeout, the breaker): the
		// group shares its error rather than wait as long again.
		g.err = st.err
		sh.mu.Unlock()
		close(g.done)
		clear(counts)
		return 0, g.err
	}
	if st.busy == nil {
		st.busy = make(chan struct{})
		sh.reads[rk] = st
	} else {
		// A check that found nothing on its way is reading: take it as
		// this group's predecessor and wait no more; read alongside.
		st = &readState{busy: make(chan struct{})}
	}
	st.sending(e)
	sh.mu.Unlock()
	g.err = sv.read(c, buckets, counts)
	g.at = mono()
	g.counts = slices.Clone(counts) // counts is the caller's, who adds to it
	close(g.done)
	sv.readDone(sh, rk, st, g.counts, g.at, g.err)
	return g.at, g.err
}

// readDone ends st's read on its way, which ended with err, its answer
// counts arriving at at: it answers the checks that joined it, and drops
// st when no group waits.
func (sv *server) readDone(sh *shard, rk readKey, st *readState, counts []int64, at int64, err error) {
	sh.mu.Lock()
	st.err = err
	close(st.busy)
	if g := st.joined; g != nil {
		st.joined = nil
		g.counts, g.at, g.err = slices.Clone(counts), at, err
		close(g.done)
	}
	if sh.reads[rk] == st {
		st.busy = nil
		if st.next == nil {
			delete(sh.reads, rk)
		}
	}
	sh.mu.Unlock()
}

// errReadTimeout is the error of a check that waited its timeout for a
// shared read.
var errReadTimeout = fmt.Errorf("memcached: timeout")

// read is one get command of c's buckets (getMulti), its result fed to
// the breaker: a value that is not a count is an answer, not a failure.
func (sv *server) read(c limit.Counter, buckets []limit.Bucket, counts []int64) error {
	inc(sv.opGet)
	err := sv.getMulti(c, buckets, counts)
	if isNotCount(err) {
		sv.result(opGet, nil)
		return err
	}
	return sv.result(opGet, err)
}
