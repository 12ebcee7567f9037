package analytics

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/journal"
	"github.com/linkgate/linkgate/rollup"
)

// DefaultMaxBuffered is how many entries a Flusher holds in memory while
// neither the store nor the journal takes them, when
// FlusherOptions.MaxBuffered is not set: on the order of 100 MB (about 50
// bytes an entry, plus about 300 a link).
const DefaultMaxBuffered = 2_000_000

// minWriteTimeout is the shortest default deadline of one Write to the
// store: a short flush interval must not give a large batch (a burst, a
// replay) too little time to land, or it would fail again at every try.
const minWriteTimeout = 5 * time.Second

// FlusherOptions configure a Flusher. The zero value of a field means its
// default.
type FlusherOptions struct {
	// Interval is the time between two flushes: the "flush_interval"
	// setting. Default: that of DefaultConfig.
	Interval time.Duration
	// JournalPath is the directory of the journal that keeps the batches
	// the store refused on local disk until it takes them, also across a
	// crash or a restart. Run opens it in the background (and again at
	// each tick while it cannot be opened), Close too if Run did not.
	// Empty: no journal; refused batches stay in memory (MaxBuffered) and
	// are lost with the process.
	JournalPath string
	// JournalMaxBytes caps the journal's bytes on disk. Default
	// DefaultJournalMaxBytes.
	JournalMaxBytes int64
	// MaxBuffered is how many entries ((link, bucket) counts) of refused
	// batches are held in memory when the journal cannot take them (or
	// there is none); beyond it the oldest batches are dropped, counted in
	// linkgate_analytics_dropped_visits_total. Default DefaultMaxBuffered.
	MaxBuffered int
	// WriteTimeout bounds one Write to the store. Default 3 × Interval,
	// at least 5 s.
	WriteTimeout time.Duration
	// SpillAfter is how long a Write may go on before the batch it writes,
	// and every later one, is journaled while it goes on: so a store that
	// hangs (neither takes nor refuses a write) leaves at most the
	// recorder's interval and SpillAfter of counts only in memory. Default
	// half the interval, within [250ms, 2s].
	SpillAfter time.Duration
	// Now returns the current time, which stamps batches (Batch.At) and
	// paces retries. Default time.Now.
	Now func() time.Time
	// After, when not nil, holds back the journal and the writes until it
	// is closed: meanwhile every interval's counts are taken and kept in
	// memory (MaxBuffered), and read by Reader as unsaved. It is for a
	// process that takes over from another (a binary upgrade): the journal
	// is one process's at a time, and the embedded store too. Close waits
	// for it, within its context, before the final flush.
	After <-chan struct{}
	// Tracer, when not nil, makes each batch's write a span
	// (analytics.flush).
	Tracer trace.Tracer
}

// Flusher moves the visits a Recorder counted into a store every interval:
// it takes the recorder's counts and makes them one Batch, each (link,
// minute) as one count of the finest tier, with what the rollup worker
// needs to find it: an Active entry the first time this process writes a
// link in a batch period, or a Mark when the count comes after its period
// may have been rolled. Writes grow with the number of distinct links
// visited in an interval, not with the number of visits nor of tiers: the
// coarser tiers and the all-time totals are rolled from the finest one by a
// rollup.Worker.
//
// Every interval's batch has an identity (Batch Writer and Seq: an id new
// per Flusher, and the interval's number), and batches are never merged:
// they wait in a queue, oldest first, each written with its own Write, so
// that a store can apply each identity once however often it is sent (a
// retry after a lost answer, a replay after a crash, a late answer to a
// batch journaled meanwhile).
//
// Taking the recorder's counts and writing them are apart: Run takes them
// every interval whatever the store does, and a writer of its own writes
// the batches, one Write at a time. While the store takes every write
// within SpillAfter, nothing touches the disk: a crash loses at most the
// interval in memory. When a write fails, or goes on past SpillAfter (a
// store that hangs), that batch and every later one are appended to the
// journal (fsynced), while the write goes on; they are written to the
// store oldest first, after an exponential backoff when a write failed
// (one interval, doubling, at most six), and acknowledged in the journal
// once written. A later Flusher on the same journal (after a crash or a
// restart) writes what is left, in the background. So a crash during an
// outage, whether the store refuses or hangs, loses at most the last
// interval and SpillAfter; what cannot be kept (the journal unwritable and
// memory at MaxBuffered, or the journal at its cap after folding) is
// dropped, counted in a metric and logged.
//
// A Flusher is safe for concurrent use. Use NewFlusher.
type Flusher struct {
	rec    *Recorder
	w      Writer
	plan   *rollup.Plan
	opts   FlusherOptions
	m      *Metrics
	log    *slog.Logger
	writer string // the Batch.Writer of this Flusher's batches

	// mu guards where the counts not in the store are: the recorder's
	// swap, the queue, the journal (its appends, acks, folds and drops)
	// and the record of the write in progress. It is held only while
	// counts move between those places or a Reader copies what it needs
	// of them, never during a store's Write or read nor a Reader's scan of
	// the journal: a store that hangs never holds up the recorder's swap
	// or a read, and a read never holds up a flush. version tells a
	// Reader whether what it copied may have changed (see Flusher.Reader).
	// Record never takes mu.
	mu       sync.Mutex
	seq      uint64      // the last Seq given
	lastAt   time.Time   // the At of the last batch made
	dims     dimState    // the cumulative counts of the dimensions written
	queue    []*interval // batches in memory only, oldest first; the journal's are older
	queued   int         // entries (counts) in queue
	j        *spool      // nil: none, or not open yet
	jerr     error       // why the journal could not be opened
	fails    int         // consecutive failed writes
	retryAt  time.Time   // the writer writes no sooner than this after a failure
	dropped  uint64      // visits dropped since the start
	version  uint64      // +1 when a Write starts or returns, and when journal records are acked, folded or dropped
	writing  *inflight   // the Write in progress; nil when none
	outage   outage      // what the recovery logs say
	openMu   sync.Mutex  // serializes openJournal
	kick     chan struct{}
	announce announcedSet // guarded by writeMu
	pace     pace         // guarded by writeMu
	refused  journal.Pos  // the journal record last reported refused; guarded by writeMu
	storedAt time.Time    // the At of the newest batch written whole; guarded by writeMu

	// gate is held for writing only to begin a Write, and for reading
	// by a read's last try (see Flusher.Reader): a Write begun during that
	// try's store read would leave it unable to tell where the batch's
	// counts are. It never holds up the recorder's swap.
	gate sync.RWMutex

	// writeMu makes the writers (Run's, Flush, Close) write one at a time,
	// in Seq order. It is held for a whole drain, the store's Writes
	// included; mu is taken inside it, never the other way round.
	writeMu sync.Mutex

	// What backlog and Health report, kept apart from mu so that a health
	// check never waits.
	jopen     atomic.Pointer[spool]
	oldestNS  atomic.Int64 // unix ns of the oldest bucket waiting; 0: none
	droppedN  atomic.Uint64
	writeFrom atomic.Int64 // unix ns when the Write in progress began; 0: none
	// writeErr is the error of the last Write, nil after a success.
	writeErr atomic.Pointer[error]
}

// interval is one batch not yet in the store: its identity, At and
// Counts, fixed when it was made. Active entries and marks are worked out
// at each attempt, since which counts are late depends on when.
type interval struct {
	b         Batch
	attempted bool // a Write of it was tried: a store may hold part of it
}

// inflight is a Write in progress.
type inflight struct {
	iv   *interval     // the queue's batch it writes; nil for the journal's head
	done chan struct{} // closed when the Write returns
}

// outage is what the log says of a stretch of failed or hung writes: when
// it began and how much the journal held at most.
type outage struct {
	since      time.Time // zero: no outage
	spilled    bool      // a write went on past SpillAfter (said once)
	maxRecords int
	maxBytes   int64
}

// visits returns the visits b holds: those of the all-links key, which
// every visit counts in (even those beyond max_keys).
func batchVisits(b *Batch) int64 {
	var n int64
	for _, c := range b.Counts {
		if c.Key == AllLinks {
			n += c.Human + c.Bot
		}
	}
	return n
}

// LostError is what a final flush returns when counts could be neither
// written nor journaled: they are lost with the process.
type LostError struct {
	Visits int64 // visits lost (each counted once, as in the all-links total)
	Err    error // why: the store's and the journal's errors
}

func (e *LostError) Error() string {
	if e.Visits == 1 {
		return fmt.Sprintf("analytics: final flush: 1 visit lost: %v", e.Err)
	}
	return fmt.Sprintf("analytics: final flush: %d visits lost: %v", e.Visits, e.Err)
}

func (e *LostError) Unwrap() error { return e.Err }

// NewFlusher returns a Flusher that writes what rec counts to w, in the
// tiers of plan (Plan.Rollup of the compiled analytics section), whose
// grace decides which counts are late (rollup.Plan.Late). It does not read
// the journal: Run writes what a previous process left there, in the
// background. m and log may be nil.
func NewFlusher(rec *Recorder, w Writer, plan *rollup.Plan, opts FlusherOptions, m *Metrics, log *slog.Logger) *Flusher {
	if opts.Interval <= 0 {
		opts.Interval = DefaultConfig().FlushInterval
	}
	if opts.MaxBuffered <= 0 {
		opts.MaxBuffered = DefaultMaxBuffered
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = max(3*opts.Interval, minWriteTimeout)
	}
	if opts.SpillAfter <= 0 {
		opts.SpillAfter = min(max(opts.Interval/2, 250*time.Millisecond), 2*time.Second)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.After == nil {
		now := make(chan struct{})
		close(now)
		opts.After = now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Flusher{
		rec: rec, w: w, plan: plan, opts: opts, m: m, log: log, writer: newWriterID(),
		kick: make(chan struct{}, 1), announce: newAnnouncedSet(),
	}
}

// newWriterID returns a Batch.Writer for a new Flusher: 16 random bytes in
// hex, never the same twice.
func newWriterID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// Run flushes until ctx is done, then returns without a final flush: call
// Close after it (and after the servers stop) for that. Every interval it
// takes the recorder's counts, whatever the store does; its writer writes
// them, starting with what an earlier process left in the journal.
func (f *Flusher) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { f.writeLoop(ctx) })
	t := time.NewTicker(f.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.tick()
		}
	}
}

// tick is one round of Run: take the recorder's counts (so that the
// recorder stays within max_keys per interval, and a crash loses at most
// this interval) and wake the writer.
func (f *Flusher) tick() {
	f.openJournal() // a journal that could not be opened at start may be now
	f.mu.Lock()
	f.takeLocked()
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// writeLoop is Run's writer: it writes what waits whenever a tick made a
// batch, after the backoff when a write failed, at most an interval of
// writing at a time so that a long replay lets Flush in.
func (f *Flusher) writeLoop(ctx context.Context) {
	select {
	case <-f.opts.After:
	case <-ctx.Done():
		return
	}
	f.openJournal()
	for {
		f.mu.Lock()
		wait := f.retryAt.Sub(f.opts.Now())
		f.mu.Unlock()
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		f.writeMu.Lock()
		more, err := f.drain(ctx, f.opts.Interval)
		f.writeMu.Unlock()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.failed(err)
			continue
		}
		f.recovered()
		if more {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-f.kick:
		}
	}
}

// openJournal opens the journal if there is one to open and it is not
// open yet, and counts what an earlier process left in it. It reads the
// journal without f.mu held (Open checks every record's CRC), under
// openMu. It says whether the journal is open.
func (f *Flusher) openJournal() bool {
	select {
	case <-f.opts.After:
	default:
		return false // the journal is another process's yet
	}
	f.openMu.Lock()
	defer f.openMu.Unlock()
	f.mu.Lock()
	open := f.j != nil
	f.mu.Unlock()
	if open || f.opts.JournalPath == "" {
		return open
	}
	j, err := openSpool(f.opts.JournalPath, f.opts.JournalMaxBytes)
	if err != nil {
		f.mu.Lock()
		if f.jerr == nil || f.jerr.Error() != err.Error() {
			f.log.Error("analytics: journal cannot be opened; counts the store refuses stay in memory", "err", err,
				"max_buffered", f.opts.MaxBuffered)
		}
		f.jerr = err
		f.mu.Unlock()
		return false
	}
	j.setPlan(f.plan, f.m, f.log)
	n, oldest := j.survey()
	f.mu.Lock()
	f.j, f.jerr = j, nil
	f.jopen.Store(j)
	j.surveyed(n, oldest)
	f.noteBacklogLocked()
	f.mu.Unlock()
	return true
}

// failed notes a failed write and sets the backoff.
func (f *Flusher) failed(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails++
	wait := f.backoff()
	now := f.opts.Now()
	f.retryAt = now.Add(wait)
	if f.outage.since.IsZero() {
		f.outage = outage{since: now}
		f.log.Warn("analytics: the store stopped taking writes; counts are journaled until it does", "err", err)
	}
	f.log.Warn("analytics: flush failed; counts kept for a retry", "err", err,
		"fails", f.fails, "retry_in", wait, "buffered", f.queued, "journal_bytes", f.j.Bytes())
}

// recovered notes a drain that wrote everything it tried, and says so
// when it ends an outage.
func (f *Flusher) recovered() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails, f.retryAt = 0, time.Time{}
	f.noteOutageLocked()
}

// noteOutageLocked keeps the journal's peak during an outage and logs the
// end of one: once the store takes writes again and the journal is empty.
func (f *Flusher) noteOutageLocked() {
	o := &f.outage
	if o.since.IsZero() {
		return
	}
	if f.j != nil {
		o.maxRecords = max(o.maxRecords, f.j.records)
		o.maxBytes = max(o.maxBytes, f.j.Bytes())
	}
	if f.fails > 0 || f.writing != nil || f.j.waiting() || len(f.queue) > 1 {
		return
	}
	f.log.Info("analytics: the store takes writes again and the journal is empty: every count kept meanwhile is in the store",
		"outage", f.opts.Now().Sub(o.since).Round(time.Millisecond), "journal_max_records", o.maxRecords, "journal_max_bytes", o.maxBytes)
	*o = outage{}
}

// backoff is the wait after f.fails consecutive failures: one interval,
// doubling, at most six.
func (f *Flusher) backoff() time.Duration {
	return min(f.opts.Interval<<min(f.fails-1, 3), 6*f.opts.Interval)
}

// Flush takes the recorder's counts and writes them and everything waiting
// before them now, whatever the backoff. It returns the first failure.
func (f *Flusher) Flush(ctx context.Context) error {
	f.openJournal()
	f.mu.Lock()
	f.takeLocked()
	f.mu.Unlock()
	f.writeMu.Lock()
	defer f.writeMu.Unlock()
	_, err := f.drain(ctx, 0)
	return err
}

// Close is the final flush at shutdown, after Run returned: it takes the
// recorder's counts and writes everything waiting. What the store refuses
// stays in the journal for the next process (Close then returns nil:
// nothing is lost, and a warning is logged); what the journal cannot take
// either is lost, and Close returns a *LostError saying how many visits.
// It closes the journal.
func (f *Flusher) Close(ctx context.Context) error {
	select {
	case <-f.opts.After:
	case <-ctx.Done():
	}
	f.mu.Lock()
	f.takeLocked()
	f.mu.Unlock()
	f.writeMu.Lock()
	_, werr := f.drain(ctx, 0)
	f.writeMu.Unlock()
	f.mu.Lock()
	rest := len(f.queue) > 0
	f.mu.Unlock()
	if rest {
		f.openJournal()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.noteBacklogLocked()
	var lost int64
	var jerr error
	if len(f.queue) > 0 {
		jerr = f.journalLocked()
		for _, iv := range f.queue {
			lost += batchVisits(&iv.b)
		}
		f.queue, f.queued = nil, 0
		f.dropped += uint64(lost)
		f.m.setBuffered(0)
	}
	if f.j != nil {
		if f.j.waiting() && werr != nil {
			f.log.Warn("analytics: final flush refused; counts kept in the journal for the next start",
				"records", f.j.records, "journal_bytes", f.j.Bytes(), "err", werr)
		}
		if err := f.j.Close(); err != nil && lost == 0 {
			f.log.Error("analytics: close journal", "err", err)
		}
	}
	if lost > 0 {
		f.m.droppedVisits(lost)
		if jerr == nil {
			jerr = f.jerr
		}
		if jerr == nil {
			jerr = errors.New("no journal")
		}
		return &LostError{Visits: lost, Err: errors.Join(werr, jerr)}
	}
	return nil
}

// takeLocked makes the recorder's counts the next interval's batch at the
// end of the queue. While anything waits already (the store failing, a
// write in progress, the journal not empty), it is journaled at once, so
// that a crash loses no more than this interval.
func (f *Flusher) takeLocked() {
	// The batch's time is taken before the swap, so that every visit
	// recorded before it is in this batch or an earlier one: a journal
	// whose newest batch is of time t holds every visit recorded before
	// t (what a crash may lose was recorded after it).
	now := f.opts.Now().UTC()
	snap := f.rec.swap()
	f.rec.sweepLive(f.opts.Now())
	if snap.overflow > 0 {
		f.log.Warn("analytics: max_keys or max_buffer_bytes reached; visits to further links counted in the all-links total only",
			"visits", snap.overflow, "max_keys", f.rec.maxKeys.Load(), "max_buffer_bytes", f.rec.maxBytes.Load())
	}
	// At grows with Seq, to the microsecond: a store that keeps the
	// newest cumulative count of a writer's dimension by write timestamp
	// relies on it (DimCount).
	at := now
	if at.UnixMicro() <= f.lastAt.UnixMicro() {
		at = time.UnixMicro(f.lastAt.UnixMicro() + 1).UTC()
	}
	// The breakdowns are made on another goroutine while the counts and
	// the sketches are made on this one (each has its part of p; the
	// snapshot is only read): at 100,000 links each takes about half of
	// the work, and the store waits for all of it.
	p := newPending()
	var dims []DimCount
	dimsDone := make(chan struct{})
	go func() {
		defer close(dimsDone)
		p.addDims(snap)
		dims = f.dims.batch(p.dims, int(f.rec.maxValues.Load()), unixDay(at))
	}()
	p.add(snap, f.plan.Tiers()[0].Step)
	p.addUniques(snap)
	counts, uniques := p.place(at, f.plan), p.uniqueSketches()
	<-dimsDone
	if p.n > 0 || !p.dims.empty() || len(p.uniqs) > 0 {
		f.seq++
		f.lastAt = at
		b := Batch{Writer: f.writer, Seq: f.seq, At: at, Counts: counts, Dims: dims, Uniques: uniques}
		f.queue = append(f.queue, &interval{b: b})
		f.queued += b.entries()
	}
	if f.fails > 0 || len(f.queue) > 1 || f.writing != nil || f.j.waiting() {
		f.journalLocked()
	}
	f.boundLocked()
	f.m.setBuffered(f.queued)
	f.noteBacklogLocked()
}

// journalLocked appends the queue to the journal, oldest first, and
// removes what it appended from memory. It stops at the first batch the
// journal refuses, keeping it and the later ones in memory so that the
// journal stays in Seq order.
func (f *Flusher) journalLocked() error {
	if f.j == nil {
		return nil
	}
	rewrites := f.j.rewrites
	defer func() {
		if f.j.rewrites != rewrites { // a fold or a drop made room
			f.version++
		}
		f.noteOutageLocked()
	}()
	for len(f.queue) > 0 {
		iv := f.queue[0]
		if err := f.j.Append(&iv.b, iv.attempted); err != nil {
			f.log.Error("analytics: journal append failed; counts stay in memory", "err", err,
				"buffered", f.queued, "journal_bytes", f.j.Bytes())
			return err
		}
		f.queue = f.queue[1:]
		f.queued -= iv.b.entries()
	}
	f.queue = nil // release the array
	return nil
}

// boundLocked drops the oldest batches in memory beyond MaxBuffered
// entries, keeping the newest and the one being written.
func (f *Flusher) boundLocked() {
	for f.queued > f.opts.MaxBuffered && len(f.queue) > 1 {
		iv := f.queue[0]
		if f.writing != nil && f.writing.iv == iv {
			iv = f.queue[1]
			f.queue = slices.Delete(f.queue, 1, 2)
		} else {
			f.queue = f.queue[1:]
		}
		n := batchVisits(&iv.b)
		f.queued -= iv.b.entries()
		f.dropped += uint64(n)
		f.m.droppedVisits(n)
		f.log.Error("analytics: counts dropped: neither the store nor the journal takes them and memory is full",
			"visits", n, "entries", len(iv.b.Counts), "seq", iv.b.Seq, "max_buffered", f.opts.MaxBuffered, "dropped_total", f.dropped)
	}
}

// drain writes what waits, oldest first: the journal's batches, then the
// queue's. It returns the first failure, or says whether more waits after
// budget (0: no limit) ran out. Called with writeMu held; f.mu is held
// only to pick a batch and to note its outcome, never during its Write.
func (f *Flusher) drain(ctx context.Context, budget time.Duration) (more bool, err error) {
	start := time.Now()
	for {
		if err := ctx.Err(); err != nil {
			return false, fmt.Errorf("analytics: write: %w", err)
		}
		more, err := f.writeNext(ctx)
		if err != nil || !more {
			return false, err
		}
		if budget > 0 && time.Since(start) > budget {
			return true, nil
		}
	}
}

// writeNext writes the oldest batch waiting and says whether there may be
// more.
func (f *Flusher) writeNext(ctx context.Context) (more bool, err error) {
	f.gate.Lock()
	f.mu.Lock()
	if sp := f.j; sp.waiting() {
		rewrites := sp.rewrites
		f.mu.Unlock()
		f.gate.Unlock()
		return f.writeJournalHead(ctx, sp, rewrites)
	}
	if len(f.queue) == 0 {
		f.mu.Unlock()
		f.gate.Unlock()
		return false, nil
	}
	iv := f.queue[0]
	in := f.beginLocked(iv)
	f.mu.Unlock()
	f.gate.Unlock()
	spill := time.AfterFunc(f.opts.SpillAfter, func() { f.spill(in) })
	err = f.write(ctx, &iv.b)
	spill.Stop()

	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.noteBacklogLocked()
	f.endLocked(in)
	if err != nil {
		iv.attempted = true
		f.journalLocked()
		f.m.setBuffered(f.queued)
		return false, err
	}
	if len(f.queue) > 0 && f.queue[0] == iv {
		f.queue = f.queue[1:]
		f.queued -= iv.b.entries()
		if len(f.queue) == 0 {
			f.queue = nil
		}
		f.m.setBuffered(f.queued)
	} else {
		// Journaled while it was written: it is the journal's head now.
		f.j.ackBatch(&iv.b)
	}
	return true, nil
}

// writeJournalHead writes the batches of the journal's oldest record and
// acks it, unless a fold or a drop rewrote the journal meanwhile (rewrites
// is the spool's count of them when the record was picked): the record is
// then written again, which the store applies once.
func (f *Flusher) writeJournalHead(ctx context.Context, sp *spool, rewrites uint64) (more bool, err error) {
	h, err := sp.head(rewrites)
	f.gate.Lock()
	f.mu.Lock()
	if err != nil || !h.found {
		defer f.gate.Unlock()
		defer f.mu.Unlock()
		return sp.headUnusable(h, err)
	}
	in := f.beginLocked(nil)
	f.mu.Unlock()
	f.gate.Unlock()
	for i := range h.batches {
		if err = f.write(ctx, &h.batches[i].b); err != nil {
			break
		}
	}
	if err != nil && !isTimeout(ctx, err) && h.end != f.refused {
		// Not the store's pace (a timeout makes smaller parts): said once
		// for the record, which waits for the backoff at every attempt.
		f.refused = h.end
		var visits int64
		for i := range h.batches {
			visits += batchVisits(&h.batches[i].b)
		}
		f.log.Error("analytics: the store refuses a journaled batch; it is tried again after the backoff, and the batches after it wait",
			"seq", h.batches[0].b.Seq, "batches", len(h.batches), "visits", visits, "err", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.noteBacklogLocked()
	f.endLocked(in)
	if err != nil {
		return false, err
	}
	sp.ack(h)
	f.version++
	f.noteOutageLocked()
	return true, nil
}

// beginLocked notes that a Write of iv (nil: the journal's head) begins.
func (f *Flusher) beginLocked(iv *interval) *inflight {
	in := &inflight{iv: iv, done: make(chan struct{})}
	f.writing = in
	f.version++
	f.writeFrom.Store(time.Now().UnixNano())
	return in
}

// endLocked notes that the Write in begun with in returned.
func (f *Flusher) endLocked(in *inflight) {
	f.writing = nil
	f.version++
	f.writeFrom.Store(0)
	close(in.done)
}

// spill journals the queue, the batch being written by in included, when
// that Write is still going on: called SpillAfter after it began.
func (f *Flusher) spill(in *inflight) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.writing != in || len(f.queue) == 0 || f.queue[0] != in.iv {
		return
	}
	in.iv.attempted = true // a store may hold part of it already
	if f.outage.since.IsZero() {
		f.outage = outage{since: f.opts.Now()}
	}
	if !f.outage.spilled {
		f.outage.spilled = true
		f.log.Warn("analytics: the store has not answered a write; counts are journaled while it goes on",
			"waited", f.opts.SpillAfter, "write_timeout", f.opts.WriteTimeout)
	}
	f.journalLocked()
	f.m.setBuffered(f.queued)
	f.noteBacklogLocked()
}

// write writes b, in parts to a PartWriter whose last Write of a whole
// part timed out (see pace), with more time to another store after a
// timeout. Called with writeMu held.
func (f *Flusher) write(ctx context.Context, b *Batch) (err error) {
	defer func() {
		if err == nil && b.At.After(f.storedAt) {
			f.storedAt = b.At
			f.m.stored(b.At)
		}
	}()
	if tr := f.opts.Tracer; tr != nil {
		var span trace.Span
		ctx, span = tr.Start(ctx, "analytics.flush", trace.WithAttributes(
			attribute.String("linkgate.batch.writer", b.Writer), attribute.Int64("linkgate.batch.seq", int64(b.Seq)),
			attribute.Int("linkgate.batch.entries", b.entries()), attribute.Int64("linkgate.batch.visits", batchVisits(b))))
		defer func() {
			if err != nil {
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}()
	}
	if _, ok := f.w.(PartWriter); !ok {
		err := f.writeOnce(ctx, b, f.opts.WriteTimeout<<f.pace.grow)
		f.pace.wrote(ctx, err)
		return err
	}
	n := b.entries()
	for from := 0; from < n || n == 0; {
		to := n
		if f.pace.part > 0 {
			to = min(from+f.pace.part, n)
		}
		p := *b
		if from > 0 || to < n {
			p = b.part(from, to)
		}
		err := f.writeOnce(ctx, &p, f.opts.WriteTimeout)
		if err == nil {
			if f.pace.fitted(to-from, n) {
				f.log.Info("analytics: the store keeps up: writing larger parts", "part", f.pace.part, "whole", f.pace.part == 0)
			}
			if n == 0 {
				return nil
			}
			from = to
			continue
		}
		if !f.pace.split(ctx, err, to-from) {
			return err
		}
		f.log.Warn("analytics: a write timed out; writing its batch in smaller parts", "err", err,
			"entries", to-from, "part", f.pace.part, "seq", b.Seq)
	}
	return nil
}

// pace is how much a Write may hold for the store's current pace: a
// Write of a whole batch that times out is tried again at once as two
// halves, and so on, each with the full WriteTimeout, down to minPart
// entries (a smaller part that times out is the store failing, not being
// slow: the writer backs off); batches are then written in parts of that
// size, doubled after partsToGrow parts in a row fit. A store that takes
// no parts gets twice the time after a timeout instead, up to 8 times.
type pace struct {
	part int  // entries per Write; 0: whole batches
	fit  int  // parts in a row written within the deadline
	grow uint // a Write's deadline is WriteTimeout << grow
}

const (
	minPart     = 64
	partsToGrow = 8
	maxGrow     = 3
)

// isTimeout says whether err is a Write that ran out of time, at the store
// or on its deadline, rather than refused (ctx is the writer's own: its
// end is no timeout).
func isTimeout(ctx context.Context, err error) bool {
	return ctx.Err() == nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTimeout))
}

// split notes a Write of size entries that failed with err and says
// whether to try again at once with the smaller part it sets.
func (p *pace) split(ctx context.Context, err error, size int) bool {
	p.fit = 0
	if !isTimeout(ctx, err) || size <= minPart {
		return false
	}
	p.part = max(size/2, minPart)
	return true
}

// fitted notes a part of size entries, of a batch of n, written in time,
// and says whether that made parts bigger (whole batches again when they
// reach n).
func (p *pace) fitted(size, n int) bool {
	if p.part == 0 || size < p.part {
		return false
	}
	if p.fit++; p.fit < partsToGrow {
		return false
	}
	p.fit = 0
	p.part *= 2
	if p.part >= n {
		p.part = 0
	}
	return true
}

// wrote notes the outcome of a Write to a store that takes no parts.
func (p *pace) wrote(ctx context.Context, err error) {
	switch {
	case err == nil:
		p.grow = 0
	case isTimeout(ctx, err) && p.grow < maxGrow:
		p.grow++
	}
}

// writeOnce writes b with the Active entries and marks of its counts as
// of now, on a deadline of timeout, and remembers the Active entries it
// stored. Called with writeMu held.
func (f *Flusher) writeOnce(ctx context.Context, b *Batch, timeout time.Duration) error {
	now := f.opts.Now()
	wb := *b
	wb.Active, wb.Marks = follow(wb.Counts, now, f.plan, f.announce.has)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	err := f.w.Write(ctx, wb)
	f.setWriteErr(err)
	n := len(wb.Counts) + len(wb.Active) + len(wb.Marks)
	f.m.wrote(time.Since(start), n, err)
	if err != nil {
		return fmt.Errorf("analytics: write %d counts: %w", len(wb.Counts), err)
	}
	f.announce.add(wb.Active, now, f.plan)
	return nil
}

// announced is an Active entry that a successful write stored.
type announced struct {
	step   time.Duration
	period int64 // unix seconds
	key    string
}

// maxAnnouncedBytes bounds the memory of the Active entries a Flusher
// remembers having stored, so that it stores each once per period rather
// than at every flush: 32 MiB, about 400,000 links with keys of 20 bytes.
// Past it, further entries are stored again at every flush that has their
// link (harmless: storing one twice changes nothing).
const maxAnnouncedBytes = 32 << 20

// announcedOverhead is what an entry of announcedSet costs beyond its
// key's bytes: the struct and its slot in the map.
const announcedOverhead = 64

// announcedSet is the Active entries a Flusher stored, bounded by bytes.
// Entries of periods rolled already are forgotten once per marks period,
// and the map is made anew when that leaves it much smaller, so that the
// memory of a burst of links goes back to the runtime.
type announcedSet struct {
	m        map[announced]struct{}
	bytes    int64
	peak     int // entries at most since the map was made
	forgotAt time.Time
}

func newAnnouncedSet() announcedSet { return announcedSet{m: make(map[announced]struct{})} }

func (s *announcedSet) has(a announced) bool { _, ok := s.m[a]; return ok }

// add remembers the Active entries a write stored at at, within the bound,
// and forgets those of periods rolled already (a count for them now is
// late and gets a mark).
func (s *announcedSet) add(as []rollup.Active, at time.Time, plan *rollup.Plan) {
	if at.Sub(s.forgotAt) >= plan.MarkPeriod() {
		s.forgotAt = at
		for a := range s.m {
			if announcedExpired(a, at, plan) {
				delete(s.m, a)
				s.bytes -= int64(len(a.key)) + announcedOverhead
			}
		}
		if len(s.m) < s.peak/4 { // a map never shrinks: make a smaller one
			m := make(map[announced]struct{}, len(s.m))
			for a := range s.m {
				m[a] = struct{}{}
			}
			s.m, s.peak = m, len(m)
		}
	}
	for _, a := range as {
		cost := int64(len(a.Key)) + announcedOverhead
		if s.bytes+cost > maxAnnouncedBytes {
			return
		}
		k := announced{a.Step, a.Period.Unix(), a.Key}
		if _, ok := s.m[k]; !ok {
			s.m[k] = struct{}{}
			s.bytes += cost
		}
	}
	s.peak = max(s.peak, len(s.m))
}

// announcedExpired says whether the period of a ended more than the grace
// before at.
func announcedExpired(a announced, at time.Time, plan *rollup.Plan) bool {
	span := plan.MarkPeriod()
	if i, ok := plan.Level(a.step); ok && a.step != rollup.MarksQueue {
		span = plan.Batch(i)
	}
	return time.Unix(a.period, 0).Add(span + plan.Grace()).Before(at)
}

// pending is the counts of one interval taken from the recorder, per link
// and bucket of the finest tier, on their way to a Batch.
type pending struct {
	links map[string]*linkCounts
	n     int // entries: (link, bucket) counts
	dims  dimInput
	uniqs map[uniqKey]*hll.Sketch
}

type bucketKey struct {
	step  time.Duration
	start int64 // Unix seconds
}

// linkCounts is one link's pending counts. Its buckets are a short list
// (a link visited in one interval has one minute, or two) that becomes a
// map once long (a link whose visits were recorded over many minutes).
type linkCounts struct {
	list  []bucketCount
	m     map[bucketKey]Visits // once len(list) would exceed maxListed; list is then nil
	first [2]bucketCount       // list's first room: one allocation a link, not two
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
		lc = new(linkCounts)
		lc.list = lc.first[:0]
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

// place returns p as the counts of a batch made at at: each in the finest
// tier that keeps its bucket at at (rollup.Plan.Place), those that share a
// bucket added up, sorted by link, then tier, then bucket start (so that
// a link's counts are found by a binary search).
func (p *pending) place(at time.Time, plan *rollup.Plan) []Count {
	out := make([]Count, 0, p.n)
	keys := make([]string, 0, len(p.links))
	for key := range p.links {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	tiers := plan.Tiers()
	for _, key := range keys {
		first := len(out)
		p.links[key].each(func(k bucketKey, v Visits) {
			from, _ := plan.Level(k.step)
			start := time.Unix(k.start, 0).UTC()
			j := plan.Place(from, start, at)
			step := tiers[j].Step
			out = append(out, Count{Key: key, Step: step, Start: rollup.Align(start, step), Visits: v})
		})
		out = append(out[:first], mergeCounts(out[first:])...)
	}
	return out
}

// mergeCounts sorts one link's counts by tier and bucket start and adds up
// those of the same bucket, in place.
func mergeCounts(cs []Count) []Count {
	slices.SortFunc(cs, func(x, y Count) int {
		return cmp.Or(cmp.Compare(x.Step, y.Step), x.Start.Compare(y.Start))
	})
	merged := cs[:0]
	for _, c := range cs {
		if n := len(merged); n > 0 && merged[n-1].Step == c.Step && merged[n-1].Start.Equal(c.Start) {
			merged[n-1].Visits = merged[n-1].Visits.Add(c.Visits)
			continue
		}
		merged = append(merged, c)
	}
	return merged
}

// follow returns what the rollup worker needs to find counts written at
// now (see Batch): an Active entry for each (link, period of the next
// tier) not in done, or a Mark on the coarser bucket of a count that comes
// after its period may have been rolled. counts are sorted by link.
func follow(counts []Count, now time.Time, plan *rollup.Plan, done func(announced) bool) (active []rollup.Active, marks []rollup.Mark) {
	tiers := plan.Tiers()
	// A link's counts fall in a few periods: its entries and marks are
	// told apart from those already made for it by a scan of the few made
	// since linkActive and linkMarks, cheaper than maps.
	linkActive, linkMarks := 0, 0
	for i, c := range counts {
		if i == 0 || counts[i-1].Key != c.Key {
			linkActive, linkMarks = len(active), len(marks)
		}
		j, ok := plan.Level(c.Step)
		if !ok || j+1 >= len(tiers) {
			continue
		}
		key := c.Key
		var a announced
		if plan.Late(j, c.Start, now) {
			up := tiers[j+1].Step
			bucket := rollup.Align(c.Start, up)
			if !slices.ContainsFunc(marks[linkMarks:], func(m rollup.Mark) bool { return m.Step == up && m.Start.Equal(bucket) }) {
				marks = append(marks, rollup.Mark{Key: key, Step: up, Start: bucket, At: now, ID: mrand.Uint64()})
			}
			a = announced{rollup.MarksQueue, rollup.Align(now, plan.MarkPeriod()).Unix(), key}
		} else {
			a = announced{tiers[j+1].Step, plan.Period(j+1, c.Start).Unix(), key}
		}
		if slices.ContainsFunc(active[linkActive:], func(x rollup.Active) bool { return x.Step == a.step && x.Period.Unix() == a.period }) {
			continue
		}
		if !done(a) {
			active = append(active, rollup.Active{Step: a.step, Period: time.Unix(a.period, 0).UTC(), Key: key})
		}
	}
	return active, marks
}
