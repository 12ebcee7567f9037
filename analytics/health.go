package analytics

import (
	"fmt"
	"time"
)

// StoreState is what a store says of itself: whether it can be used now
// and, when not, why. The embedded and Cassandra stores report it the same
// way (State), so that a store that cannot be opened at start and one that
// cannot be reached look alike to the operator.
type StoreState struct {
	// Open is set once the store opened (the embedded store's database) or
	// connected (Cassandra), even if it failed later.
	Open bool
	// Attempts is how many attempts to open or connect have failed so far;
	// 0 while the first one runs.
	Attempts int
	// Err is why the store cannot be used now; nil when it can.
	Err error
}

// stater is what Health needs from a store: both stores implement it. A
// store without it is taken to be usable.
type stater interface {
	State() StoreState
}

// The analytics states of Health.State and of the metric
// linkgate_analytics_state.
const (
	// StateOK: the store is usable and the last write to it succeeded.
	StateOK = "ok"
	// StateStarting: the store is opening or connecting and no attempt
	// has failed yet.
	StateStarting = "starting"
	// StateDegraded: the store cannot be opened or reached, has failed,
	// or the last write to it failed. Visits are still counted: they wait
	// in memory (or the journal) and are written once the store takes
	// them.
	StateDegraded = "degraded"
)

// states lists the states in the order the metric shows them.
var states = []string{StateOK, StateStarting, StateDegraded}

// Health is the state of link analytics as the admin listener shows it.
// The zero value means nothing; Pipeline.Health makes one.
type Health struct {
	// State is StateOK, StateStarting or StateDegraded.
	State string `json:"state"`
	// Reason says why the state is not ok; empty when it is.
	Reason string `json:"reason,omitempty"`
	// JournalBytes is the size in bytes of the counts kept on local disk
	// for the store.
	JournalBytes int64 `json:"journal_bytes"`
	// OldestUnsaved is the start of the oldest bucket (a minute) whose
	// counts are not in the store yet; nil when none is waiting or it is
	// not known at the moment.
	OldestUnsaved *time.Time `json:"oldest_unsaved,omitempty"`
	// DroppedVisits counts the visits dropped since start because they
	// could be kept neither in memory nor on disk.
	DroppedVisits uint64 `json:"dropped_visits"`
}

// health derives the state from what the store says of itself and the
// flusher's writeProblem.
func health(st StoreState, writes string) Health {
	switch {
	case st.Err != nil && !st.Open && st.Attempts == 0:
		return Health{State: StateStarting, Reason: st.Err.Error()}
	case st.Err != nil:
		return Health{State: StateDegraded, Reason: st.Err.Error()}
	case writes != "":
		return Health{State: StateDegraded, Reason: writes}
	}
	return Health{State: StateOK}
}

// writeProblem says why f's writes to the store do not go well: the last
// one failed, or one has gone on for longer than SpillAfter (a store that
// hangs); "" when neither. It never waits.
func (f *Flusher) writeProblem() string {
	if p := f.writeErr.Load(); p != nil {
		return "the last write to the store failed: " + (*p).Error()
	}
	if from := f.writeFrom.Load(); from != 0 {
		if d := time.Since(time.Unix(0, from)); d > f.opts.SpillAfter {
			return fmt.Sprintf("the store has not answered a write for %v", d.Round(time.Second/10))
		}
	}
	return ""
}

// setWriteErr records the outcome of a write to the store.
func (f *Flusher) setWriteErr(err error) {
	if err == nil {
		f.writeErr.Store(nil)
		return
	}
	f.writeErr.Store(&err)
}
