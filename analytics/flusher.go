package analytics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/linkgate/linkgate/rollup"
)

// DefaultMaxBuffered is how many entries a Flusher holds in memory while the
// store fails, when FlusherOptions.MaxBuffered is not set: on the order of
// 100 MB (about 50 bytes an entry, plus about 300 a link).
const DefaultMaxBuffered = 2_000_000

// FlusherOptions configure a Flusher. The zero value of a field means its
// default.
type FlusherOptions struct {
	// Interval is the time between two flushes: the "flush_interval"
	// setting. Default 10s.
	Interval time.Duration
	// SpillPath is a directory for the counts that do not fit in memory
	// while the store fails (MaxBuffered) or that a failed final flush
	// could not write. Empty: no spilling; the counts stay in memory
	// however many there are.
	SpillPath string
	// MaxBuffered is how many entries ((link, tier, bucket) counts plus
	// link totals) are held in memory before they are spilled to SpillPath.
	// Default DefaultMaxBuffered.
	MaxBuffered int
	// WriteTimeout bounds one Write to the store. Default 3 × Interval.
	WriteTimeout time.Duration
	// Now returns the current time, which stamps batches (Batch.At) and
	// paces retries. Default time.Now.
	Now func() time.Time
}

// Flusher moves the visits a Recorder counted into a store every interval:
// it takes the recorder's counts, adds each (link, minute) to the bucket of
// every tier that holds that minute and to the link's all-time total, and
// writes them all in one Batch. Writes grow with the number of distinct links
// visited in an interval, not with the number of visits.
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
	rec   *Recorder
	w     Writer
	tiers []rollup.Tier
	opts  FlusherOptions
	m     *Metrics
	log   *slog.Logger

	// mu orders the moves of counts between the recorder, pending, the
	// spill files and the store against the reads that merge them (see
	// Reader): a move holds it for writing, from taking the counts out of
	// their old place until they are in their new one, the store's Write
	// included; a read holds it for reading while it reads all the places.
	// So a read sees every count in exactly one place: it never misses a
	// visit nor counts one twice. Record never takes mu.
	mu      sync.RWMutex
	pending *pending
	spills  []spillFile // oldest first
	fails   int         // consecutive failed flushes
	retryAt time.Time   // Run writes no sooner than this after a failure
}

// NewFlusher returns a Flusher that writes what rec counts to w, in the
// given tiers (the "retention" setting). It looks for spill files a previous
// process left in opts.SpillPath and writes them with its first successful
// flush. m and log may be nil.
func NewFlusher(rec *Recorder, w Writer, tiers []rollup.Tier, opts FlusherOptions, m *Metrics, log *slog.Logger) *Flusher {
	if opts.Interval <= 0 {
		opts.Interval = 10 * time.Second
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
		rec: rec, w: w, tiers: slices.Clone(tiers), opts: opts, m: m, log: log,
		pending: newPending(),
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
	f.pending.add(snap, f.tiers)
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
		b := f.pending.batch(f.opts.Now())
		if err := f.write(ctx, b); err != nil {
			return err
		}
		f.pending = newPending()
		f.m.setBuffered(0)
	}
	for len(f.spills) > 0 {
		sf := f.spills[0]
		b, err := readSpill(sf.path)
		if err != nil {
			// A file that cannot be read is set aside, not retried forever
			// and not deleted: an operator can look at it.
			f.log.Error("analytics: spill file unreadable, set aside", "path", sf.path, "err", err)
			setAside(sf.path)
		} else {
			b.At = f.opts.Now()
			if err := f.write(ctx, b); err != nil {
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

func (f *Flusher) write(ctx context.Context, b Batch) error {
	ctx, cancel := context.WithTimeout(ctx, f.opts.WriteTimeout)
	defer cancel()
	start := time.Now()
	err := f.w.Write(ctx, b)
	n := len(b.Counts) + len(b.Totals)
	f.m.wrote(time.Since(start), n, err)
	if err != nil {
		return fmt.Errorf("analytics: write %d counts: %w", n, err)
	}
	return nil
}

// spillLocked writes pending to a new spill file and empties it.
func (f *Flusher) spillLocked() error {
	b := f.pending.batch(f.opts.Now())
	sf, err := writeSpill(f.opts.SpillPath, b)
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

// pending is the counts taken from the recorder and not yet written, per
// link: every tier's buckets and the all-time total.
type pending struct {
	links map[string]*linkCounts
	n     int // entries: buckets plus totals
}

type bucketKey struct {
	step  time.Duration
	start int64 // Unix seconds
}

// linkCounts is one link's pending counts. Its buckets are a short list
// (a link visited in one interval has one bucket per tier, or a few) that
// becomes a map once long (a link visited through a long store outage).
type linkCounts struct {
	total Visits
	list  []bucketCount
	m     map[bucketKey]Visits // once len(list) would exceed maxListed; list is then nil
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

func newPending() *pending { return &pending{links: make(map[string]*linkCounts)} }

func (p *pending) link(key string) *linkCounts {
	lc := p.links[key]
	if lc == nil {
		lc = &linkCounts{list: make([]bucketCount, 0, 8)} // one bucket per default tier, and some
		p.links[key] = lc
		p.n++ // its total
	}
	return lc
}

func (p *pending) addBucket(lc *linkCounts, k bucketKey, v Visits) {
	if lc.m != nil {
		old, ok := lc.m[k]
		if !ok {
			p.n++
		}
		lc.m[k] = Visits{Human: old.Human + v.Human, Bot: old.Bot + v.Bot}
		return
	}
	for i := len(lc.list) - 1; i >= 0; i-- { // recent buckets are at the end
		if b := &lc.list[i]; b.bucketKey == k {
			b.Human += v.Human
			b.Bot += v.Bot
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

// addMinutes adds one link's minutes to every tier and to its total.
func (p *pending) addMinutes(key string, tiers []rollup.Tier, each func(func(minuteCount))) {
	lc := p.link(key)
	each(func(c minuteCount) {
		lc.total.Human += c.Human
		lc.total.Bot += c.Bot
		t := time.Unix(c.minute*60, 0)
		for _, tier := range tiers {
			p.addBucket(lc, bucketKey{tier.Step, rollup.Align(t, tier.Step).Unix()}, c.Visits)
		}
	})
}

func (p *pending) add(s snapshot, tiers []rollup.Tier) {
	for _, links := range s.links {
		for key, e := range links {
			p.addMinutes(key, tiers, e.each)
		}
	}
	if len(s.all) > 0 {
		p.addMinutes(AllLinks, tiers, func(fn func(minuteCount)) {
			for _, c := range s.all {
				fn(c)
			}
		})
	}
}

// batch returns p as a Batch made at, in a stable order: by link, then
// tier, then bucket start. Sorting the links once and each link's few
// buckets apart costs far less than sorting all counts together.
func (p *pending) batch(at time.Time) Batch {
	b := Batch{At: at, Counts: make([]Count, 0, p.n-len(p.links)), Totals: make([]Total, 0, len(p.links))}
	keys := make([]string, 0, len(p.links))
	for key := range p.links {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, key := range keys {
		lc := p.links[key]
		if lc.total != (Visits{}) {
			b.Totals = append(b.Totals, Total{Key: key, Visits: lc.total})
		}
		first := len(b.Counts)
		lc.each(func(k bucketKey, v Visits) {
			b.Counts = append(b.Counts, Count{Key: key, Step: k.step, Start: time.Unix(k.start, 0).UTC(), Visits: v})
		})
		slices.SortFunc(b.Counts[first:], func(x, y Count) int {
			return cmp.Or(cmp.Compare(x.Step, y.Step), x.Start.Compare(y.Start))
		})
	}
	return b
}
