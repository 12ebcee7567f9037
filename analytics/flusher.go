package analytics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/linkgate/linkgate/rollup"
)

// DefaultMaxBuffered is how many entries a Flusher holds in memory while the
// store fails, when FlusherOptions.MaxBuffered is not set: on the order of
// 100 MB (about 50 bytes an entry, plus about 300 a link).
const DefaultMaxBuffered = 2_000_000

// maxAnnounced bounds the Active entries a Flusher remembers having stored,
// so that it does not store them again. Beyond it, entries are stored again
// (harmless: storing one twice changes nothing) rather than remembered.
const maxAnnounced = 2_000_000

// FlusherOptions configure a Flusher. The zero value of a field means its
// default.
type FlusherOptions struct {
	// Interval is the time between two flushes: the "flush_interval"
	// setting. Default 10s.
	Interval time.Duration
	// Grace is the rollup grace: the "rollup_grace" setting, which decides
	// which counts are late (rollup.Plan.Late). Default
	// rollup.DefaultGrace.
	Grace time.Duration
	// SpillPath is a directory for the counts that do not fit in memory
	// while the store fails (MaxBuffered) or that a failed final flush
	// could not write. Empty: no spilling; the counts stay in memory
	// however many there are.
	SpillPath string
	// MaxBuffered is how many entries ((link, bucket) counts) are held in
	// memory before they are spilled to SpillPath. Default
	// DefaultMaxBuffered.
	MaxBuffered int
	// WriteTimeout bounds one Write to the store. Default 3 × Interval.
	WriteTimeout time.Duration
	// Now returns the current time, which stamps batches (Batch.At) and
	// paces retries. Default time.Now.
	Now func() time.Time
}

// Flusher moves the visits a Recorder counted into a store every interval:
// it takes the recorder's counts and writes them in one Batch, each
// (link, minute) as one count of the finest tier, with what the rollup
// worker needs to find it: an Active entry the first time this process
// writes a link in a batch period, or a Mark when the count comes after
// its period may have been rolled. Writes grow with the number of distinct
// links visited in an interval, not with the number of visits nor of tiers:
// the coarser tiers and the all-time totals are rolled from the finest one
// by a rollup.Worker.
//
// When a write fails its counts are kept and merged into the next batch,
// which is sent after an exponential backoff (one interval, doubling, at most
// six) while visits keep being taken from the recorder every interval. The
// counts kept are bounded by MaxBuffered; beyond it they go to a spill file
// under SpillPath, written back once the store accepts writes again, also by
// a later Flusher on the same path after a restart. So a store outage loses
// nothing; a crash loses what was in memory, at most one interval while the
// store is healthy.
//
// A Flusher is safe for concurrent use. Use NewFlusher.
type Flusher struct {
	rec  *Recorder
	w    Writer
	plan *rollup.Plan
	opts FlusherOptions
	m    *Metrics
	log  *slog.Logger

	// mu orders the moves of counts between the recorder, pending, the
	// spill files and the store against the reads that merge them (see
	// Reader): a move holds it for writing, from taking the counts out of
	// their old place until they are in their new one, the store's Write
	// included; a read holds it for reading while it reads all the places.
	// So a read sees every count in exactly one place: it never misses a
	// visit nor counts one twice. Record never takes mu.
	mu        sync.RWMutex
	pending   *pending
	spills    []spillFile // oldest first
	fails     int         // consecutive failed flushes
	retryAt   time.Time   // Run writes no sooner than this after a failure
	announced map[announced]struct{}
	forgotAt  time.Time // when remember last forgot the entries of rolled periods

	// writeErr is the error of the last Write, nil after a success: Health
	// reads it without waiting for mu.
	writeErr atomic.Pointer[error]
}

// announced is an Active entry that a successful write stored.
type announced struct {
	step   time.Duration
	period int64 // unix seconds
	key    string
}

// NewFlusher returns a Flusher that writes what rec counts to w, in the
// given tiers (the "retention" setting). It looks for spill files a previous
// process left in opts.SpillPath and writes them with its first successful
// flush. m and log may be nil. tiers and opts.Grace must pass
// rollup.NewPlan, as Config.Validate checks; it panics otherwise.
func NewFlusher(rec *Recorder, w Writer, tiers []rollup.Tier, opts FlusherOptions, m *Metrics, log *slog.Logger) *Flusher {
	if opts.Interval <= 0 {
		opts.Interval = 10 * time.Second
	}
	if opts.Grace <= 0 {
		opts.Grace = rollup.DefaultGrace
	}
	plan, err := rollup.NewPlan(tiers, opts.Grace)
	if err != nil {
		panic("analytics: NewFlusher: " + err.Error())
	}
	if opts.MaxBuffered <= 0 {
		opts.MaxBuffered = DefaultMaxBuffered
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 3 * opts.Interval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Flusher{
		rec: rec, w: w, plan: plan, opts: opts, m: m, log: log,
		pending: newPending(), announced: make(map[announced]struct{}),
	}
	if opts.SpillPath != "" {
		spills, err := findSpills(opts.SpillPath)
		if err != nil {
			log.Error("analytics: spill files left unread", "path", opts.SpillPath, "err", err)
		}
		f.spills = spills
		if n := spilledEntries(spills); n > 0 {
			log.Warn("analytics: counts from an earlier run wait in spill files", "files", len(spills), "entries", n)
		}
		m.setSpilled(spilledEntries(spills))
	}
	return f
}

// Run flushes every interval until ctx is done, then returns without a final
// flush: call Close after it (and after the servers stop) for that.
func (f *Flusher) Run(ctx context.Context) {
	t := time.NewTicker(f.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.tick(ctx)
		}
	}
}

// tick is one round of Run: always take the recorder's counts (so that the
// recorder stays within max_keys per interval), write them unless a backoff
// is still running.
func (f *Flusher) tick(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.takeLocked()
	now := f.opts.Now()
	if now.Before(f.retryAt) {
		return
	}
	if err := f.writeLocked(ctx); err != nil {
		f.fails++
		wait := f.backoff()
		f.retryAt = now.Add(wait)
		f.log.Warn("analytics: flush failed; counts kept for a retry", "err", err,
			"fails", f.fails, "retry_in", wait, "buffered", f.pending.n, "spilled", spilledEntries(f.spills))
		return
	}
	f.fails, f.retryAt = 0, time.Time{}
}

// backoff is the wait after f.fails consecutive failures: one interval,
// doubling, at most six. Run checks it at its next tick after the wait,
// less half an interval so that a tick a little early is not skipped.
func (f *Flusher) backoff() time.Duration {
	d := f.opts.Interval << min(f.fails-1, 3)
	return min(d, 6*f.opts.Interval) - f.opts.Interval/2
}

// Flush takes the recorder's counts and writes them and everything kept
// from failed writes now, whatever the backoff.
func (f *Flusher) Flush(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.takeLocked()
	return f.writeLocked(ctx)
}

// Close is the final flush at shutdown. If it fails, the counts are spilled
// to SpillPath for the next process; without a SpillPath they are lost, and
// Close says how many.
func (f *Flusher) Close(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.takeLocked()
	err := f.writeLocked(ctx)
	if err == nil || f.pending.n == 0 {
		return err
	}
	if f.opts.SpillPath == "" {
		return fmt.Errorf("analytics: final flush: %d counts lost: %w", f.pending.n, err)
	}
	if serr := f.spillLocked(); serr != nil {
		return errors.Join(fmt.Errorf("analytics: final flush: %d counts lost: %w", f.pending.n, err), serr)
	}
	return fmt.Errorf("analytics: final flush: counts spilled to %s: %w", f.opts.SpillPath, err)
}

// takeLocked moves the recorder's counts into pending, spilling pending
// when it grows beyond MaxBuffered.
func (f *Flusher) takeLocked() {
	snap := f.rec.swap()
	f.pending.add(snap, f.plan.Tiers()[0].Step)
	if snap.overflow > 0 {
		f.log.Warn("analytics: max_keys reached; visits to further links counted in the all-links total only",
			"visits", snap.overflow, "max_keys", f.rec.maxKeys.Load())
	}
	if f.pending.n > f.opts.MaxBuffered && f.opts.SpillPath != "" {
		if err := f.spillLocked(); err != nil {
			f.log.Error("analytics: spill failed; counts stay in memory", "err", err, "buffered", f.pending.n)
		}
	}
	f.m.setBuffered(f.pending.n)
}

// writeLocked writes pending, then each spill file, each as one batch. It
// stops at the first failure, keeping what is not written.
func (f *Flusher) writeLocked(ctx context.Context) error {
	if f.pending.n > 0 {
		if err := f.writePending(ctx, f.pending); err != nil {
			return err
		}
		f.pending = newPending()
		f.m.setBuffered(0)
	}
	for len(f.spills) > 0 {
		sf := f.spills[0]
		counts, err := readSpill(sf.path)
		if err != nil {
			// A file that cannot be read is set aside, not retried forever
			// and not deleted: an operator can look at it.
			f.log.Error("analytics: spill file unreadable, set aside", "path", sf.path, "err", err)
			setAside(sf.path)
		} else {
			p := newPending()
			p.addCounts(counts, f.plan)
			if err := f.writePending(ctx, p); err != nil {
				return err
			}
			if err := removeSpill(sf.path); err != nil {
				// Written but not removed: the next process would write it
				// again. Say so loudly; there is nothing better to do.
				f.log.Error("analytics: spill file written but not removed", "path", sf.path, "err", err)
			}
		}
		f.spills = f.spills[1:]
		f.m.setSpilled(spilledEntries(f.spills))
	}
	return nil
}

// writePending writes p as one batch made now, and remembers the Active
// entries it stored.
func (f *Flusher) writePending(ctx context.Context, p *pending) error {
	at := f.opts.Now()
	b := p.batch(at, f.plan, f.announced)
	ctx, cancel := context.WithTimeout(ctx, f.opts.WriteTimeout)
	defer cancel()
	start := time.Now()
	err := f.w.Write(ctx, b)
	f.setWriteErr(err)
	n := len(b.Counts) + len(b.Active) + len(b.Marks)
	f.m.wrote(time.Since(start), n, err)
	if err != nil {
		return fmt.Errorf("analytics: write %d counts: %w", len(b.Counts), err)
	}
	f.remember(b.Active, at)
	return nil
}

// remember records the Active entries a write stored, and forgets those of
// periods rolled already (a count for them now is late and gets a mark).
func (f *Flusher) remember(as []rollup.Active, at time.Time) {
	if at.Sub(f.forgotAt) >= f.plan.MarkPeriod() {
		f.forgotAt = at
		for a := range f.announced {
			if f.expired(a, at) {
				delete(f.announced, a)
			}
		}
	}
	for _, a := range as {
		if len(f.announced) >= maxAnnounced {
			return
		}
		f.announced[announced{a.Step, a.Period.Unix(), a.Key}] = struct{}{}
	}
}

// expired says whether the period of a ended more than the grace before at.
func (f *Flusher) expired(a announced, at time.Time) bool {
	span := f.plan.MarkPeriod()
	if i, ok := f.plan.Level(a.step); ok && a.step != rollup.MarksQueue {
		span = f.plan.Batch(i)
	}
	return time.Unix(a.period, 0).Add(span + f.plan.Grace()).Before(at)
}

// spillLocked writes pending to a new spill file and empties it.
func (f *Flusher) spillLocked() error {
	sf, err := writeSpill(f.opts.SpillPath, f.pending.counts())
	if err != nil {
		return err
	}
	f.log.Warn("analytics: counts spilled to disk until the store accepts writes", "path", sf.path, "entries", sf.entries)
	f.spills = append(f.spills, sf)
	f.pending = newPending()
	f.m.setBuffered(0)
	f.m.setSpilled(spilledEntries(f.spills))
	return nil
}

// pending is the counts taken from the recorder (or read from a spill
// file) and not yet written, per link and bucket, in the tier they were
// counted in: the finest, except for counts from spill files of an earlier
// configuration.
type pending struct {
	links map[string]*linkCounts
	n     int // entries: (link, bucket) counts
}

type bucketKey struct {
	step  time.Duration
	start int64 // Unix seconds
}

// linkCounts is one link's pending counts. Its buckets are a short list
// (a link visited in one interval has one minute, or two) that becomes a
// map once long (a link visited through a long store outage).
type linkCounts struct {
	list []bucketCount
	m    map[bucketKey]Visits // once len(list) would exceed maxListed; list is then nil
}

type bucketCount struct {
	bucketKey
	Visits
}

const maxListed = 32

// each calls fn for every bucket of lc, in no particular order.
func (lc *linkCounts) each(fn func(bucketKey, Visits)) {
	for _, b := range lc.list {
		fn(b.bucketKey, b.Visits)
	}
	for k, v := range lc.m {
		fn(k, v)
	}
}

// total returns the sum of lc's buckets.
func (lc *linkCounts) total() Visits {
	var v Visits
	lc.each(func(_ bucketKey, c Visits) { v = v.Add(c) })
	return v
}

func newPending() *pending { return &pending{links: make(map[string]*linkCounts)} }

func (p *pending) link(key string) *linkCounts {
	lc := p.links[key]
	if lc == nil {
		lc = &linkCounts{list: make([]bucketCount, 0, 2)}
		p.links[key] = lc
	}
	return lc
}

func (p *pending) addBucket(lc *linkCounts, k bucketKey, v Visits) {
	if lc.m != nil {
		old, ok := lc.m[k]
		if !ok {
			p.n++
		}
		lc.m[k] = old.Add(v)
		return
	}
	for i := len(lc.list) - 1; i >= 0; i-- { // recent buckets are at the end
		if b := &lc.list[i]; b.bucketKey == k {
			b.Visits = b.Visits.Add(v)
			return
		}
	}
	p.n++
	if len(lc.list) < maxListed {
		lc.list = append(lc.list, bucketCount{k, v})
		return
	}
	lc.m = make(map[bucketKey]Visits, 2*maxListed)
	for _, b := range lc.list {
		lc.m[b.bucketKey] = b.Visits
	}
	lc.m[k] = v
	lc.list = nil
}

// addMinutes adds one link's minutes to its buckets of the finest tier,
// whose step is step.
func (p *pending) addMinutes(key string, step time.Duration, each func(func(minuteCount))) {
	lc := p.link(key)
	each(func(c minuteCount) {
		start := rollup.Align(time.Unix(c.minute*60, 0), step)
		p.addBucket(lc, bucketKey{step, start.Unix()}, c.Visits)
	})
}

func (p *pending) add(s snapshot, step time.Duration) {
	for _, links := range s.links {
		for key, e := range links {
			p.addMinutes(key, step, e.each)
		}
	}
	if len(s.all) > 0 {
		p.addMinutes(AllLinks, step, func(fn func(minuteCount)) {
			for _, c := range s.all {
				fn(c)
			}
		})
	}
}

// addCounts adds counts read from a spill file. A count whose step is no
// tier's (the retention setting changed since) goes to the finest tier
// whose step is a multiple of it, or is dropped, with the others of its
// kind, when there is none.
func (p *pending) addCounts(cs []Count, plan *rollup.Plan) {
	for _, c := range cs {
		step := c.Step
		if _, ok := plan.Level(step); !ok {
			step = 0
			for _, t := range plan.Tiers() {
				if t.Step%c.Step == 0 {
					step = t.Step
					break
				}
			}
			if step == 0 {
				continue
			}
		}
		start := rollup.Align(c.Start, step)
		p.addBucket(p.link(c.Key), bucketKey{step, start.Unix()}, c.Visits)
	}
}

// counts returns p as counts, in the tier each was counted in: what a
// spill file holds.
func (p *pending) counts() []Count {
	out := make([]Count, 0, p.n)
	for key, lc := range p.links {
		lc.each(func(k bucketKey, v Visits) {
			out = append(out, Count{Key: key, Step: k.step, Start: time.Unix(k.start, 0).UTC(), Visits: v})
		})
	}
	return out
}

// batch returns p as the Batch a flush at at writes (see Batch), in a
// stable order: by link, then tier, then bucket start. Active entries in
// done are left out: this process stored them already.
func (p *pending) batch(at time.Time, plan *rollup.Plan, done map[announced]struct{}) Batch {
	b := Batch{At: at, Counts: make([]Count, 0, p.n)}
	keys := make([]string, 0, len(p.links))
	for key := range p.links {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	tiers := plan.Tiers()
	// A link's counts fall in a few periods: its entries and marks are
	// told apart from those already made for it by a scan of the few made
	// since linkActive and linkMarks, cheaper than maps.
	var linkActive, linkMarks int
	follow := func(key string, j int, start time.Time) {
		if j+1 >= len(tiers) {
			return
		}
		var a announced
		if plan.Late(j, start, at) {
			up := tiers[j+1].Step
			bucket := rollup.Align(start, up)
			if !slices.ContainsFunc(b.Marks[linkMarks:], func(m rollup.Mark) bool { return m.Step == up && m.Start.Equal(bucket) }) {
				b.Marks = append(b.Marks, rollup.Mark{Key: key, Step: up, Start: bucket, At: at, ID: rand.Uint64()})
			}
			a = announced{rollup.MarksQueue, rollup.Align(at, plan.MarkPeriod()).Unix(), key}
		} else {
			a = announced{tiers[j+1].Step, plan.Period(j+1, start).Unix(), key}
		}
		if slices.ContainsFunc(b.Active[linkActive:], func(x rollup.Active) bool { return x.Step == a.step && x.Period.Unix() == a.period }) {
			return
		}
		if _, ok := done[a]; !ok {
			b.Active = append(b.Active, rollup.Active{Step: a.step, Period: time.Unix(a.period, 0).UTC(), Key: key})
		}
	}
	for _, key := range keys {
		first := len(b.Counts)
		linkActive, linkMarks = len(b.Active), len(b.Marks)
		p.links[key].each(func(k bucketKey, v Visits) {
			from, _ := plan.Level(k.step)
			start := time.Unix(k.start, 0).UTC()
			j := plan.Place(from, start, at)
			step := tiers[j].Step
			b.Counts = append(b.Counts, Count{Key: key, Step: step, Start: rollup.Align(start, step), Visits: v})
		})
		cs := b.Counts[first:]
		slices.SortFunc(cs, func(x, y Count) int {
			return cmp.Or(cmp.Compare(x.Step, y.Step), x.Start.Compare(y.Start))
		})
		// Counts placed in a coarser tier may share a bucket: add them up.
		merged := cs[:0]
		for _, c := range cs {
			if n := len(merged); n > 0 && merged[n-1].Step == c.Step && merged[n-1].Start.Equal(c.Start) {
				merged[n-1].Visits = merged[n-1].Visits.Add(c.Visits)
				continue
			}
			merged = append(merged, c)
		}
		b.Counts = b.Counts[:first+len(merged)]
		for _, c := range merged {
			j, _ := plan.Level(c.Step)
			follow(key, j, c.Start)
		}
	}
	return b
}
