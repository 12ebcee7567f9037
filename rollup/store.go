package rollup

import (
	"context"
	"time"
)

// Visits is a count of human visits and, counted apart, of all the
// others (Bot: declared bots, link unfurlers, scanners, prefetches, the
// operator's own networks), of which Other splits out the classes after
// declared bots. It is defined here, not in analytics, so that rollup can
// move counts between tiers without importing analytics (which imports
// rollup); analytics.Visits is this type.
type Visits struct {
	Human, Bot int64
	// Other are the visits of Bot from each class after declared bots, in
	// the order of package visitclass: preview, scanner, prefetch,
	// internal. Bot less their sum are the declared bots' visits, so counts
	// stored before classes were counted (all zero here) read as declared
	// bots, as they were counted then.
	Other [NumOther]int64
}

// NumOther is the number of classes Visits.Other counts.
const NumOther = 4

// Add returns v plus w.
func (v Visits) Add(w Visits) Visits {
	v.Human += w.Human
	v.Bot += w.Bot
	for i := range v.Other {
		v.Other[i] += w.Other[i]
	}
	return v
}

// Declared returns the visits of v's declared bots: Bot less Other.
func (v Visits) Declared() int64 {
	n := v.Bot
	for _, o := range v.Other {
		n -= o
	}
	return n
}

// Split reports whether v counts any visit in Other.
func (v Visits) Split() bool { return v.Other != [NumOther]int64{} }

// Point is the visits of one stored bucket: analytics.Point is this type.
type Point struct {
	Start time.Time
	Visits
}

// Row is a rolled value: the visits of one bucket of a coarser tier,
// computed from the next finer tier. It replaces the bucket's rolled value,
// unless the stored one is larger (see Store.Apply).
type Row struct {
	Key   string
	Step  time.Duration // the tier's step
	Start time.Time     // the bucket's start, aligned
	Visits
}

// MarksQueue is the Step of Active entries and of Progress that stands for
// marks to process rather than a tier to roll.
const MarksQueue time.Duration = 0

// Active says that Key has work in the period that starts at Period: data
// of the tier below the tier of step Step to roll into it (Period is then
// aligned to Plan.Batch of that tier), or, when Step is MarksQueue, marks
// to process (Period aligned to Plan.MarkPeriod). The worker lists a
// period's keys from these entries instead of scanning the data, so an
// entry must be stored no later than the data it announces. Storing the
// same entry again changes nothing.
type Active struct {
	Step   time.Duration
	Period time.Time
	Key    string
}

// Mark says that the bucket of Key starting at Start in the tier of step
// Step may be stale: data below it changed after the bucket was rolled (a
// late flush, or a re-rolled finer bucket). The worker rolls the bucket
// again and then deletes the mark; readers answer a stale bucket, and every
// coarser bucket holding it, from the finer tiers until then.
type Mark struct {
	Key   string
	Step  time.Duration
	Start time.Time
	// At is when the mark was made. A mark is processed once the data that
	// made it has surely landed: in the marks period holding At, after that
	// period's end plus the grace.
	At time.Time
	// ID tells apart marks of the same bucket, so that deleting the marks
	// a worker processed never deletes one made meanwhile.
	ID uint64
}

// Progress is how far the rollup has got, by queue: for each tier's step,
// every batch period of that tier ending at or before the time was rolled
// (buckets marked stale apart); for MarksQueue, every marks period ending
// at or before it was processed. A missing entry means nothing was.
type Progress map[time.Duration]time.Time

// Done returns how far the queue of step has got: the zero time when
// nothing was rolled.
func (p Progress) Done(step time.Duration) time.Time { return p[step] }

// Update is what one step of the worker stores.
type Update struct {
	Rows   []Row    // rolled values
	Active []Active // work announced for later periods
	Marks  []Mark   // new marks: the coarser buckets of re-rolled ones
	Done   []Mark   // marks processed: delete exactly these
}

// Store is what the worker needs from an analytics store. Its methods are
// called from one goroutine per worker, with several Points calls in
// flight at once.
type Store interface {
	// Points, Progress and Marks: the worker reads what a Reader reads.
	// A Point is the sum of everything stored for its bucket (flushed
	// counts and the rolled value).
	Source
	// Active returns up to limit keys that have an Active entry for (step,
	// period), in an order of the store's choosing that does not change
	// between calls; after is the last key of the previous page, or "".
	Active(ctx context.Context, step time.Duration, period time.Time, after string, limit int) ([]string, error)
	// Apply stores u. Rows, Active and Marks must be durable before any
	// mark of Done is deleted: a crash in between leaves the done marks,
	// which are then processed again. A Row replaces the bucket's rolled
	// value unless the stored one has more visits (Human+Bot): counts only
	// grow, so a larger stored value was computed from fresher data, by
	// another worker or before the finer tier began to expire. Rows are
	// kept apart from the counts a flush adds to the same bucket (very old
	// counts are flushed into a coarse tier directly), and Points returns
	// their sum.
	Apply(ctx context.Context, u Update) error
	// Advance records that the queue of step has got to done. A store
	// never moves a queue back: an older done than the stored one is
	// ignored.
	Advance(ctx context.Context, step time.Duration, done time.Time) error
}

// Leaser is implemented by stores that several gateways share: the worker
// rolls only while it holds the store's lease, so that one gateway does
// the work at a time. Correctness never depends on it (rolled values are
// deterministic and larger values win); the lease only saves duplicated
// work.
type Leaser interface {
	// Lease takes or renews the lease for ttl and reports whether this
	// store holds it now.
	Lease(ctx context.Context, ttl time.Duration) (bool, error)
}

// Readier is implemented by stores that open or connect in the
// background, as both analytics stores do: until Ready returns nil the
// worker does not run, so that a gateway's start, while its store still
// connects, counts no failed run (and fires no alert on them).
type Readier interface {
	// Ready returns nil once the store can be used, or why it cannot yet.
	Ready() error
}

// Metrics receives what a Worker does. analytics.Metrics implements it. A
// nil Metrics in WorkerOptions records nothing.
type Metrics interface {
	// RollupRun is called after every run with its duration and report,
	// and its error if it failed.
	RollupRun(took time.Duration, r Report, err error)
	// RollupLag is called after every run for every queue (a tier's step,
	// or MarksQueue) with how far behind now its progress is.
	RollupLag(step time.Duration, lag time.Duration)
}
