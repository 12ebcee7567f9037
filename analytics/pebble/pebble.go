// Package pebble is the embedded analytics store: visit counts on the local
// disk of one gateway, in a github.com/cockroachdb/pebble database.
//
// # Why Pebble
//
// A flush is a few hundred to a few hundred thousand "add n to this bucket"
// operations that must land all or nothing, and exactly once however often
// the flusher sends the batch (a retry, a replay of the journal after a
// crash). Pebble gives exactly that: all of a flush goes into one
// pebble.Batch committed with one fsync, together with the batch's
// sequence number as its writer's watermark, and a merge operator adds
// counts inside the engine, so a flush reads one key (the watermark)
// before it writes. It builds with CGO_ENABLED=0 (its cgo zstd binding is optional;
// this store uses snappy), so the gateway stays one static binary, and it is
// kept by Cockroach Labs as CockroachDB's engine. SQLite through a pure-Go
// driver would let an operator poke at the data with SQL, but each flush
// would be an UPSERT per bucket through a C engine translated to Go, and
// expiring old buckets a DELETE through an index; the stats API already
// serves the data, so Pebble wins.
//
// # Layout
//
// The keys of one link's tier lie together, so that any query is one
// iterator range and reads only the rows it returns (a year of days is at most 366 rows, whatever else the store
// holds); a time-major layout would make expiry a single range delete but a
// one-link read would scan every link of the time range. Expiry is served
// by a small time-major index written in the same batch:
//
//	'p' uvarint(len(key)) key step start     -> visits   flushed counts (merged by adding)
//	'p' uvarint(len(key)) key step start 'r' -> visits   the rolled value (set by the rollup worker)
//	't' step start key                   -> empty    the bucket's index entry, for expiry
//	'a' step period key                  -> empty    rollup.Active: key has work in period
//	'd' uvarint(len(key)) key step start id -> at    rollup.Mark: the bucket may be stale
//	'w' step                             -> done     rollup.Progress of the queue of step
//	'q' writer                           -> seq      the last batch of writer applied
//
// step is the tier's step in seconds (uint32, big-endian; 0 for the marks
// queue) and start, period and done are unix seconds (int64 with the sign
// bit flipped, big-endian, so keys sort in time order); id is the mark's ID
// (uint64) and at its time in unix nanoseconds. visits is two varints,
// human and bot. A bucket's value is the sum of its two rows, which sort
// next to each other: the flush adds to the finest tier (and, for counts too old for it, to a
// coarser one), the worker sets coarse buckets computed from the finer
// tier. Expire walks each tier's index up to its retention cutoff, deletes
// the buckets it names with point deletes and the walked index span with
// one range delete: its work grows with what expires, not with what is
// kept. The all-time tier (rollup.TotalTier) never expires. Active entries
// and marks whose source data has expired are deleted too.
//
// Write sets a bucket's index entry with every count. It costs a second key
// per count but needs no read, and the entry is idempotent.
//
// A batch with an identity (analytics.Batch Writer and Seq) is applied
// only when its Seq (its FirstSeq, for a batch folding several intervals)
// is above its writer's watermark ('q'), which the same atomic commit
// raises to Seq: the flusher sends a writer's batches in Seq
// order, so one number per writer tells every batch applied already, and a
// resent or replayed batch changes nothing. There is one such key per
// gateway process that ever wrote (a few bytes each); they are not
// expired, since a journal can be replayed long after it was written.
//
// The rollup worker (rollup.Worker) reads and writes through the
// rollup.Store methods; this store has one process, so it needs no lease.
// Apply reads the rolled values it replaces under the same lock as
// Write's commits, so that a larger value is never replaced.
//
// # Use
//
//	s, err := pebble.Start(cfg.Embedded.Path, cfg.Retention, log) // expires old buckets hourly
//	// s is the flusher's analytics.Store and the rollup worker's
//	// rollup.Store: hand it to analytics.NewPipeline, whose Close stops
//	// the worker, makes the final flush and closes the store. Start
//	// opens a folder that is not usable yet in the background (State
//	// says why it is not open); Open fails instead.
//
// # Disk space
//
// Write and Apply refuse a batch (ErrDiskFull) that would leave less free
// than the engine takes by itself when the memtable fills (reserveFor),
// and the memtable is sized to the volume (memTableFor), so that on a
// small volume the log Pebble preallocates does not use up the reserve.
// A refused batch marks nothing: writes resume once space is back.
package pebble

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

var (
	_ analytics.Store = (*Store)(nil)
	_ rollup.Store    = (*Store)(nil)
)

// cacheSize is the block cache's size in bytes.
const cacheSize = 64 << 20

// maxMemTable and minMemTable bound the memtable's size in bytes, which
// Open picks from the size of the volume (memTableFor). A flush of 10,000
// links is about 6 MB; a batch over half the memtable is flushed to its own
// table at once, which costs a sort and an L0 file per flush, so large
// volumes get the largest memtable.
const (
	maxMemTable = 32 << 20
	minMemTable = 4 << 20
)

// memTableFor returns the memtable size for a volume of total bytes: a
// sixteenth of it within [minMemTable, maxMemTable], whole MiB, so that
// what the engine allocates ahead (reserveFor) stays a small part of a
// small volume. total 0 (the file system cannot tell) gets the largest.
func memTableFor(total uint64) uint64 {
	if total == 0 {
		return maxMemTable
	}
	return min(max(total/16>>20<<20, minMemTable), maxMemTable)
}

// reserveFor returns the disk space in bytes that Write leaves free for a
// memtable of size mem: what the engine writes without asking when the
// memtable fills, so that a disk filling up stops the writes before it
// fails the engine's own (which would mark the store failed). That is the
// next write-ahead log, which Pebble preallocates at 110% of the memtable
// size (DB.walPreallocateSize) and fallocate takes from the volume at once;
// the flush of the full memtable to a table (at most its size); and as much
// again for the compaction after it, whose output exists before its inputs
// are deleted. The current log's preallocated space is not part of it: it
// is in use already, and the writes go into it.
func reserveFor(mem uint64) uint64 { return mem + mem/10 + 2*mem }

var (
	// ErrClosed is returned by the methods of a closed Store.
	ErrClosed = errors.New("pebble: store closed")
	// ErrDiskFull is returned by a Write refused because the disk would
	// keep less than the reserve free (see reserveFor). Nothing of the
	// batch was applied; the flusher keeps it and tries again, and the
	// store is not marked failed: writes resume once space is back.
	ErrDiskFull = errors.New("pebble: disk almost full")
	// ErrFailed is returned by every method once a commit failed in the
	// engine (its log could not be written or synced): the database's state
	// is unknown until it is opened again, by a restart.
	ErrFailed = errors.New("pebble: store failed")
	// ErrNotOpen is wrapped, with the reason, by the errors of a Store
	// made by Start whose database has not opened yet.
	ErrNotOpen = errors.New("pebble: not open yet")
)

// Store is the embedded analytics store. It is safe for concurrent use. One
// process at a time holds a database directory (Pebble locks it). Create it
// with Open, or with Start to open it in the background.
type Store struct {
	db      *pebble.DB // nil until open; set under mu
	fs      vfs.FS
	dir     string
	reserve uint64       // bytes Write leaves free on the disk: reserveFor the memtable
	plan    *rollup.Plan // the tiers, the all-time one included; no grace
	tiers   map[time.Duration]rollup.Tier
	log     *slog.Logger

	// failure is set, once, to the error of a commit that failed in the
	// engine (see ErrFailed).
	failure atomic.Pointer[error]

	// mu guards closed, db, notOpen and attempts: Close and the opening
	// take it to write, every other method to read.
	mu       sync.RWMutex
	closed   bool
	notOpen  error // why db is nil
	attempts int   // failed attempts to open the database
	// opened is closed once db is set.
	opened chan struct{}
	// closing is set by Close before it waits for mu, so that a long
	// Expire stops between chunks instead of holding up shutdown.
	closing atomic.Bool

	// commit serializes Write's commits with Expire's chunks, so that an
	// index entry set while Expire walks the index is either seen by the
	// walk or written after its range delete (and found next time). Without
	// it a late count to an expiring bucket could outlive its index entry.
	// Apply and Advance hold it from reading the values they compare with
	// until they commit.
	commit sync.Mutex

	// expiring serializes Expire calls.
	expiring sync.Mutex

	// stopExpiry ends the background opening (Start) and expiry (Open,
	// Start); expiryDone is closed when they have returned. Both nil for a
	// store opened without them.
	stopExpiry context.CancelFunc
	expiryDone chan struct{}
}

// firstExpiry is how long after Open the background expiry first runs:
// not at once, so that it does not slow the gateway's start.
const firstExpiry = time.Minute

// Open opens or creates the store in the directory path, holding the tiers
// of resolution that Write accepts and Expire enforces, plus the all-time
// tier (rollup.TotalTier), and starts expiring old buckets in the
// background (Run, hourly, the first time a minute after Open) until
// Close. The tiers may differ from the last Open's:
// buckets of a tier no longer given stay on disk unread until they are
// removed by hand. log receives Pebble's messages and Expire's; nil
// discards them. Open fails when the folder cannot be opened now; Start
// is the same without waiting for it.
func Open(path string, tiers []rollup.Tier, log *slog.Logger) (*Store, error) {
	s, err := open(path, vfs.Default, tiers, log)
	if err != nil {
		return nil, err
	}
	s.background(s.expireLater)
	return s, nil
}

// Start is Open that does not fail when the folder cannot be opened: it
// makes one attempt and, when that fails, returns a Store that keeps
// trying in the background, with backoff (a quarter of a second,
// doubling, at most every openRetryMax), while the folder cannot be
// opened (read-only, not a folder, held by another process, a disk not
// mounted yet), logging each new reason once rather than each try. Until
// then every method but Close and State returns an error wrapping
// ErrNotOpen with the reason, so the flusher keeps the counts and
// retries, as with a Cassandra cluster still connecting. Once open it
// expires old buckets as Open does. It fails only on what no retry can
// mend: an empty path or tiers rollup.NewPlan refuses (both checked by
// analytics.Compile already).
func Start(path string, tiers []rollup.Tier, log *slog.Logger) (*Store, error) {
	return start(path, vfs.Default, tiers, log, openRetryMin, openRetryMax)
}

// openRetryMin and openRetryMax bound the wait between two attempts of
// Start to open the database. Opening a local folder that is not usable
// fails fast and costs little, so the wait stays short: the store opens
// within a few seconds of the folder becoming usable.
const (
	openRetryMin = 250 * time.Millisecond
	openRetryMax = 5 * time.Second
)

// start is Start on the file system fs, waiting from lo to hi between
// attempts.
func start(path string, fs vfs.FS, tiers []rollup.Tier, log *slog.Logger, lo, hi time.Duration) (*Store, error) {
	if strings.TrimSpace(path) == "" {
		return nil, errors.New("pebble: the folder's path is empty")
	}
	s, err := newStore(path, fs, tiers, log)
	if err != nil {
		return nil, err
	}
	// The first attempt is made here: a usable folder, the common case,
	// is open before the gateway listens, so that the stats API answers
	// from the first request. Failing to open a local folder is fast.
	var said string
	if s.tryOpen(1, &said, hi) {
		s.background(s.expireLater)
		return s, nil
	}
	s.background(func(ctx context.Context) {
		if s.openLoop(ctx, lo, hi, said) {
			s.expireLater(ctx)
		}
	})
	return s, nil
}

// background runs fn in a goroutine until Close, which cancels its
// context and waits for it.
func (s *Store) background(fn func(context.Context)) {
	ctx, stop := context.WithCancel(context.Background())
	s.stopExpiry, s.expiryDone = stop, make(chan struct{})
	go func() {
		defer close(s.expiryDone)
		fn(ctx)
	}()
}

// expireLater waits firstExpiry, then runs Expire at once and hourly
// until ctx is done or the store is closed.
func (s *Store) expireLater(ctx context.Context) {
	t := time.NewTimer(firstExpiry)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	tick := time.NewTicker(time.Hour)
	defer tick.Stop()
	s.run(ctx, time.Now, tick.C)
}

// tryOpen is attempt number attempt to open the database: true once it
// is open. A failure is kept for State and logged when its reason differs
// from *said, the last one logged, not every attempt.
func (s *Store) tryOpen(attempt int, said *string, hi time.Duration) bool {
	db, err := s.openDB()
	if err == nil {
		s.mu.Lock()
		s.db, s.notOpen = db, nil
		s.mu.Unlock()
		close(s.opened)
		return true
	}
	s.mu.Lock()
	s.notOpen, s.attempts = err, attempt
	s.mu.Unlock()
	if msg := err.Error(); msg != *said {
		*said = msg
		s.log.Warn("analytics store cannot be opened yet; the gateway proxies, counts are kept in memory, opening is retried",
			"path", s.dir, "err", err, "attempt", attempt, "retry_at_most_every", hi)
	}
	return false
}

// openLoop tries to open the database after a first failed attempt whose
// reason was said, until it succeeds (true) or ctx is done (false),
// waiting from lo, doubling, to hi between attempts.
func (s *Store) openLoop(ctx context.Context, lo, hi time.Duration, said string) bool {
	began := time.Now()
	wait := lo
	for attempt := 2; ; attempt++ {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		if s.tryOpen(attempt, &said, hi) {
			s.log.Info("analytics store open", "path", s.dir, "attempts", attempt, "after", time.Since(began).Round(time.Millisecond))
			return true
		}
		wait = min(2*wait, hi)
	}
}

// State says whether the store can be used and, when not, why: the
// gateway's health detail reads it. Attempts counts the failed attempts
// to open the database of a Store made by Start; Open is set once it
// opened, even if it failed later (Err then says how).
func (s *Store) State() analytics.StoreState {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return analytics.StoreState{Open: s.db != nil, Attempts: s.attempts, Err: s.usable()}
}

// ErrInUse is returned by Open when another process (or another Store in
// this one) has the folder open: Pebble locks its folder for as long as it
// is open, and the lock goes with the process, so a crash leaves none.
var ErrInUse = errors.New("pebble: folder in use by another process")

// inUse says whether err from pebble.Open is its folder lock being held,
// and whether by another process. Pebble returns the lock's error as it is:
// the errno of fcntl(F_SETLK), EAGAIN or EACCES as POSIX allows either,
// unlike a failure to create the lock file, which is an *fs.PathError
// (EACCES there is a permission problem). Within one process Pebble refuses
// a second lock itself, with an error that only its text tells apart.
func inUse(err error) (otherProcess, ok bool) {
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) {
		var pe *iofs.PathError
		return true, !errors.As(err, &pe)
	}
	return false, strings.Contains(err.Error(), "lock held by current process")
}

// open is Open on the file system fs: tests inject faults through it.
func open(path string, fs vfs.FS, tiers []rollup.Tier, log *slog.Logger) (*Store, error) {
	s, err := newStore(path, fs, tiers, log)
	if err != nil {
		return nil, err
	}
	if s.db, err = s.openDB(); err != nil {
		return nil, err
	}
	close(s.opened)
	return s, nil
}

// newStore returns a Store whose database is not open.
func newStore(path string, fs vfs.FS, tiers []rollup.Tier, log *slog.Logger) (*Store, error) {
	plan, err := rollup.NewPlan(tiers, 0)
	if err != nil {
		return nil, fmt.Errorf("pebble: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "analytics/pebble")
	s := &Store{fs: fs, dir: path, plan: plan, tiers: map[time.Duration]rollup.Tier{}, log: log,
		notOpen: errors.New("opening"), opened: make(chan struct{})}
	for _, t := range plan.Tiers() {
		s.tiers[t.Step] = t
	}
	return s, nil
}

// openDB opens the database in s.dir, sizing its memtable, and s.reserve
// with it, to the volume.
func (s *Store) openDB() (*pebble.DB, error) {
	mem := memTableFor(volumeSize(s.fs, s.dir))
	s.reserve = reserveFor(mem)
	// The block cache holds the index and recent blocks of every link's
	// rows; the table cache of open files keeps Pebble's default.
	cache := pebble.NewCache(cacheSize)
	defer cache.Unref()
	opts := &pebble.Options{
		FS:                 s.fs,
		Cache:              cache,
		MemTableSize:       mem,
		Merger:             merger,
		Logger:             logger{s.log},
		FormatMajorVersion: pebble.FormatNewest,
		Levels:             make([]pebble.LevelOptions, 7),
	}
	for i := range opts.Levels {
		// Bloom filters answer Total for links never written without
		// reading a block.
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		opts.Levels[i].Compression = pebble.SnappyCompression
	}
	db, err := pebble.Open(s.dir, opts)
	if err != nil {
		if other, ok := inUse(err); ok {
			holder := " (this process)"
			if other {
				holder = lockHolder(s.fs, s.dir)
			}
			return nil, fmt.Errorf("%w: %s%s; each gateway needs its own analytics.embedded.path (stop the other process or give this one another folder): %w",
				ErrInUse, s.dir, holder, err)
		}
		return nil, fmt.Errorf("pebble: open %s: %w", s.dir, err)
	}
	return db, nil
}

// volumeSize returns the size in bytes of the volume that holds dir (or
// would: its nearest existing parent), 0 when the file system cannot tell.
func volumeSize(fs vfs.FS, dir string) uint64 {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if du, err := fs.GetDiskUsage(d); err == nil {
			return du.TotalBytes
		}
		if d == filepath.Dir(d) {
			return 0
		}
	}
}

// Close stops the background expiry, closes the database and releases its
// directory. Later calls of any method return ErrClosed.
func (s *Store) Close() error {
	s.closing.Store(true) // a running Expire stops between chunks
	if s.stopExpiry != nil {
		s.stopExpiry()
		<-s.expiryDone
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.closed = true
	if s.db == nil {
		return nil
	}
	return s.closeDB()
}

// closeDB closes the database. After a failed commit the engine may
// panic while closing too; that is reported, not passed on.
func (s *Store) closeDB() (err error) {
	if s.failure.Load() != nil {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("pebble: close after a failure: %v", r)
			}
		}()
	}
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("pebble: close: %w", err)
	}
	return nil
}

// usable returns why s cannot be used, or nil. Call it holding mu.
func (s *Store) usable() error {
	if s.closed {
		return ErrClosed
	}
	if s.db == nil {
		return fmt.Errorf("%w: %w", ErrNotOpen, s.notOpen)
	}
	if f := s.failure.Load(); f != nil {
		return *f
	}
	return nil
}

// commitBatch commits wb. Pebble does not return a failed commit (a write
// or sync of its log that the disk refused): it calls its logger's Fatalf,
// which panics. That panic is recovered here and marks the store failed, so
// that the gateway goes on proxying and its flusher keeps the counts (in
// its journal) instead of the process dying with them.
func (s *Store) commitBatch(wb *pebble.Batch, o *pebble.WriteOptions) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v (restart once the disk is repaired)", ErrFailed, r)
			if s.failure.CompareAndSwap(nil, &err) {
				s.log.Error("analytics store failed; counts are kept in the journal until a restart", "err", err)
			}
		}
	}()
	return wb.Commit(o)
}

// checkSpace returns ErrDiskFull when writing n more bytes would leave less
// than the reserve free on the store's disk. The batch goes into the log's
// preallocated space while there is some, so this is conservative by up
// to n.
func (s *Store) checkSpace(n int) error {
	du, err := s.fs.GetDiskUsage(s.dir)
	if err != nil {
		return nil // not every file system can tell: write, and let the engine decide
	}
	if du.AvailBytes < s.reserve+uint64(n) {
		return fmt.Errorf("%w: %d MiB free in %s, %d MiB kept free", ErrDiskFull, du.AvailBytes>>20, s.dir, s.reserve>>20)
	}
	return nil
}

// Write adds b's counts, Active entries and marks in one atomic batch and
// returns once it is synced to disk. When it fails nothing of b was
// applied; a batch whose identity was applied already is skipped (see the
// package documentation), so a resend counts everything once. A count whose
// step is not one of the store's tiers, or whose start is not a bucket
// start, fails the whole batch, as does an Active entry or mark of an
// unknown tier.
//
// A disk with less than the reserve free refuses the batch (ErrDiskFull),
// so a filling disk stops the writes cleanly. A commit that fails in the
// engine anyway marks the store failed (ErrFailed): from then on every
// method returns that error, reads included, since the failed batch may or
// may not have been applied. After a restart the batch is counted if its log
// record reached the disk whole.
func (s *Store) Write(ctx context.Context, b analytics.Batch) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pebble: write: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return err
	}
	wb := s.db.NewBatchWithSize(len(b.Counts)*64 + len(b.Active)*32 + len(b.Marks)*48)
	defer wb.Close()
	var k, v []byte
	for _, c := range b.Counts {
		if err := s.checkBucket(c.Key, c.Step, c.Start); err != nil {
			return fmt.Errorf("pebble: write: %w", err)
		}
		if c.Visits == (analytics.Visits{}) {
			continue
		}
		v = appendVisits(v[:0], c.Visits)
		k = appendPointKey(k[:0], c.Key, c.Step, c.Start.Unix())
		if err := wb.Merge(k, v, nil); err != nil {
			return fmt.Errorf("pebble: write: %w", err)
		}
		k = appendIndexKey(k[:0], c.Step, c.Start.Unix(), c.Key)
		if err := wb.Set(k, nil, nil); err != nil {
			return fmt.Errorf("pebble: write: %w", err)
		}
	}
	if err := s.addRollup(wb, b.Active, b.Marks); err != nil {
		return fmt.Errorf("pebble: write: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pebble: write: %w", err)
	}
	if err := s.checkSpace(len(wb.Repr())); err != nil {
		return err
	}
	s.commit.Lock()
	defer s.commit.Unlock()
	if b.Writer != "" {
		// Read and raised under the commit lock: no other Write of the
		// writer can slip in between.
		k = appendWriterKey(k[:0], b.Writer)
		applied, err := s.watermark(k)
		if err != nil {
			return fmt.Errorf("pebble: write: %w", err)
		}
		if b.FirstSeq() <= applied {
			return nil // applied already: a retry or a replay
		}
		if err := wb.Set(k, binary.BigEndian.AppendUint64(nil, b.Seq), nil); err != nil {
			return fmt.Errorf("pebble: write: %w", err)
		}
	}
	if err := s.commitBatch(wb, pebble.Sync); err != nil {
		return fmt.Errorf("pebble: write: commit: %w", err)
	}
	return nil
}

// watermark returns the last Seq applied of the writer whose key is k, 0
// when none was.
func (s *Store) watermark(k []byte) (uint64, error) {
	v, c, err := s.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("bad watermark %x = %x", k, v)
	}
	return binary.BigEndian.Uint64(v), nil
}

// checkBucket checks that step names a tier and start is one of its
// bucket starts.
func (s *Store) checkBucket(key string, step time.Duration, start time.Time) error {
	if _, ok := s.tiers[step]; !ok {
		return fmt.Errorf("step %v of %q is not a tier", step, key)
	}
	if !rollup.Align(start, step).Equal(start) {
		return fmt.Errorf("%v is not the start of a %v bucket", start, step)
	}
	return nil
}

// checkQueue checks that step names a rollup queue: a tier above the
// finest, or the marks queue.
func (s *Store) checkQueue(step time.Duration) error {
	if step == rollup.MarksQueue {
		return nil
	}
	if i, ok := s.plan.Level(step); !ok || i == 0 {
		return fmt.Errorf("step %v is not a tier the rollup writes", step)
	}
	return nil
}

// addRollup adds Active entries and marks to wb.
func (s *Store) addRollup(wb *pebble.Batch, as []rollup.Active, ms []rollup.Mark) error {
	var k, v []byte
	for _, a := range as {
		if err := s.checkQueue(a.Step); err != nil {
			return err
		}
		if err := wb.Set(appendActiveKey(k[:0], a.Step, a.Period.Unix(), a.Key), nil, nil); err != nil {
			return err
		}
	}
	for _, m := range ms {
		if err := s.checkQueue(m.Step); err != nil || m.Step == rollup.MarksQueue {
			return fmt.Errorf("mark of %q: step %v is not a tier the rollup writes", m.Key, m.Step)
		}
		k = appendMarkKey(k[:0], m.Key, m.Step, m.Start.Unix(), m.ID)
		v = binary.BigEndian.AppendUint64(v[:0], uint64(m.At.UnixNano()))
		if err := wb.Set(k, v, nil); err != nil {
			return err
		}
	}
	return nil
}

// Points returns key's buckets of the tier of the given step whose start
// lies in [from, to), in time order, leaving out buckets without visits:
// each the sum of its flushed counts and its rolled value. It reads one
// iterator range holding only the returned rows. A step that is not one
// of the store's tiers is an error.
func (s *Store) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]analytics.Point, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pebble: points: %w", err)
	}
	if _, ok := s.tiers[step]; !ok {
		return nil, fmt.Errorf("pebble: points: step %v is not a tier", step)
	}
	// Buckets start on whole seconds: the first at or after from, the
	// first at or after to.
	lo, hi := ceilUnix(from), ceilUnix(to)
	if lo >= hi {
		return nil, nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	return s.scan(ctx, key, step, lo, hi)
}

// scan reads key's buckets of the tier of step with starts in [lo, hi)
// unix seconds, in time order, adding a bucket's rolled value to its
// flushed counts. Call it holding mu.
func (s *Store) scan(ctx context.Context, key string, step time.Duration, lo, hi int64) ([]analytics.Point, error) {
	prefix := appendPointKey(nil, key, step, 0)
	prefix = prefix[:len(prefix)-8]
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{
		LowerBound: binary.BigEndian.AppendUint64(slices.Clip(prefix), timeBits(lo)),
		UpperBound: binary.BigEndian.AppendUint64(slices.Clip(prefix), timeBits(hi)),
	})
	if err != nil {
		return nil, fmt.Errorf("pebble: points: %w", err)
	}
	// Room for every bucket of the range, up to a few hundred: a year of
	// days fits, longer curves grow it.
	ps := make([]analytics.Point, 0, min((hi-lo)/int64(step/time.Second)+1, 512))
	for ok := it.First(); ok; ok = it.Next() {
		if len(ps)%1024 == 1023 {
			if err := ctx.Err(); err != nil {
				it.Close()
				return nil, fmt.Errorf("pebble: points: %w", err)
			}
		}
		k := it.Key()
		if k[len(k)-1] == 'r' && len(k) == len(prefix)+9 {
			k = k[:len(k)-1] // the rolled value
		}
		start := int64(binary.BigEndian.Uint64(k[len(k)-8:]) ^ 1<<63)
		vis, err := decodeVisits(it.Value())
		if err != nil {
			it.Close()
			return nil, fmt.Errorf("pebble: points: %q at %d: %w", key, start, err)
		}
		t := time.Unix(start, 0).UTC()
		if n := len(ps); n > 0 && ps[n-1].Start.Equal(t) {
			ps[n-1].Visits = ps[n-1].Visits.Add(vis)
			continue
		}
		ps = append(ps, analytics.Point{Start: t, Visits: vis})
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("pebble: points: %w", err)
	}
	return ps, nil
}

// Active implements rollup.Store: the keys of (step, period) in byte order.
func (s *Store) Active(ctx context.Context, step time.Duration, period time.Time, after string, limit int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pebble: active: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	prefix := appendActiveKey(nil, step, period.Unix(), "")
	lo := appendActiveKey(nil, step, period.Unix(), after)
	if after != "" {
		lo = append(lo, 0) // the first key after it
	}
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("pebble: active: %w", err)
	}
	var keys []string
	for ok := it.First(); ok && len(keys) < limit; ok = it.Next() {
		keys = append(keys, string(it.Key()[len(prefix):]))
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("pebble: active: %w", err)
	}
	return keys, nil
}

// Marks implements rollup.Store and analytics.Source: one iterator range.
func (s *Store) Marks(ctx context.Context, key string) ([]rollup.Mark, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pebble: marks: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	prefix := appendMarkKey(nil, key, 0, 0, 0)
	prefix = prefix[:len(prefix)-20]
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return nil, fmt.Errorf("pebble: marks: %w", err)
	}
	var ms []rollup.Mark
	for ok := it.First(); ok; ok = it.Next() {
		m, err := parseMark(it.Key(), it.Value())
		if err != nil {
			it.Close()
			return nil, fmt.Errorf("pebble: marks of %q: %w", key, err)
		}
		ms = append(ms, m)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("pebble: marks: %w", err)
	}
	return ms, nil
}

// Apply implements rollup.Store in one atomic batch. A row replaces the
// rolled value of its bucket unless that has more visits; the values are
// read under the commit lock, so nothing commits in between.
func (s *Store) Apply(ctx context.Context, u rollup.Update) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pebble: apply: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return err
	}
	wb := s.db.NewBatch()
	defer wb.Close()
	if err := s.addRollup(wb, u.Active, u.Marks); err != nil {
		return fmt.Errorf("pebble: apply: %w", err)
	}
	for _, m := range u.Done {
		if err := wb.Delete(appendMarkKey(nil, m.Key, m.Step, m.Start.Unix(), m.ID), nil); err != nil {
			return fmt.Errorf("pebble: apply: %w", err)
		}
	}
	for _, r := range u.Rows {
		if err := s.checkBucket(r.Key, r.Step, r.Start); err != nil {
			return fmt.Errorf("pebble: apply: %w", err)
		}
		if i, _ := s.plan.Level(r.Step); i == 0 {
			return fmt.Errorf("pebble: apply: %q: the finest tier is not rolled", r.Key)
		}
	}
	if err := s.checkSpace(len(wb.Repr()) + 64*len(u.Rows)); err != nil {
		return err
	}
	s.commit.Lock()
	defer s.commit.Unlock()
	var k, v []byte
	for _, r := range u.Rows {
		k = append(appendPointKey(k[:0], r.Key, r.Step, r.Start.Unix()), 'r')
		old, c, err := s.db.Get(k)
		switch {
		case errors.Is(err, pebble.ErrNotFound):
		case err != nil:
			return fmt.Errorf("pebble: apply: %w", err)
		default:
			was, err := decodeVisits(old)
			c.Close()
			if err != nil {
				return fmt.Errorf("pebble: apply: %q: %w", r.Key, err)
			}
			if was.Human+was.Bot > r.Human+r.Bot {
				continue // computed from fresher data than r
			}
		}
		v = appendVisits(v[:0], r.Visits)
		if err := wb.Set(k, v, nil); err != nil {
			return fmt.Errorf("pebble: apply: %w", err)
		}
		if err := wb.Set(appendIndexKey(k[:0], r.Step, r.Start.Unix(), r.Key), nil, nil); err != nil {
			return fmt.Errorf("pebble: apply: %w", err)
		}
	}
	// Not synced: the worker's Advance, synced, comes after it in the log
	// and makes it durable with itself; a crash before that redoes it.
	if err := s.commitBatch(wb, pebble.NoSync); err != nil {
		return fmt.Errorf("pebble: apply: commit: %w", err)
	}
	return nil
}

// Progress implements rollup.Store and analytics.Source.
func (s *Store) Progress(ctx context.Context) (rollup.Progress, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pebble: progress: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return nil, err
	}
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: []byte{'w'}, UpperBound: []byte{'w' + 1}})
	if err != nil {
		return nil, fmt.Errorf("pebble: progress: %w", err)
	}
	p := rollup.Progress{}
	for ok := it.First(); ok; ok = it.Next() {
		k, v := it.Key(), it.Value()
		if len(k) != 5 || len(v) != 8 {
			it.Close()
			return nil, fmt.Errorf("pebble: progress: bad entry %x = %x", k, v)
		}
		step := time.Duration(binary.BigEndian.Uint32(k[1:])) * time.Second
		p[step] = time.Unix(int64(binary.BigEndian.Uint64(v)^1<<63), 0).UTC()
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("pebble: progress: %w", err)
	}
	return p, nil
}

// Advance implements rollup.Store, synced to disk (see Apply).
func (s *Store) Advance(ctx context.Context, step time.Duration, done time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pebble: advance: %w", err)
	}
	if err := s.checkQueue(step); err != nil {
		return fmt.Errorf("pebble: advance: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return err
	}
	k := binary.BigEndian.AppendUint32([]byte{'w'}, uint32(step/time.Second))
	s.commit.Lock()
	defer s.commit.Unlock()
	old, c, err := s.db.Get(k)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return fmt.Errorf("pebble: advance: %w", err)
	default:
		was := int64(binary.BigEndian.Uint64(old) ^ 1<<63)
		c.Close()
		if was >= done.Unix() {
			return nil
		}
	}
	wb := s.db.NewBatch()
	defer wb.Close()
	if err := wb.Set(k, binary.BigEndian.AppendUint64(nil, timeBits(done.Unix())), nil); err != nil {
		return fmt.Errorf("pebble: advance: %w", err)
	}
	if err := s.commitBatch(wb, pebble.Sync); err != nil {
		return fmt.Errorf("pebble: advance: commit: %w", err)
	}
	return nil
}

// expireChunk is how many buckets Expire deletes per committed batch: small
// enough that Write waits at most a few milliseconds for it.
const expireChunk = 10_000

// Expire deletes, in every tier but the all-time one, the buckets that
// ended at least the tier's retention before now, and the Active entries
// and marks about data that expired. It is safe to call while writing and
// reading; its work grows with the number of buckets it deletes (and the
// marks pending, which are few). The gateway calls it periodically (see
// Run).
func (s *Store) Expire(now time.Time) error {
	s.expiring.Lock()
	defer s.expiring.Unlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return err
	}
	total := 0
	for _, t := range s.tiers {
		if !t.Expires() {
			continue
		}
		// A bucket [start, start+step) has ended by now-retention when
		// start <= now-retention-step.
		cut := now.Add(-t.Retention - t.Step).Unix()
		lo := appendIndexKey(nil, t.Step, -1<<63, "")
		hi := appendIndexKey(nil, t.Step, cut+1, "")
		for {
			if s.closing.Load() {
				return ErrClosed
			}
			n, next, err := s.expireChunk(lo, hi)
			total += n
			if err != nil {
				return fmt.Errorf("pebble: expire %v: %w", t, err)
			}
			if next == nil {
				break
			}
			lo = next
		}
	}
	if err := s.expireRollup(now); err != nil {
		return fmt.Errorf("pebble: expire: %w", err)
	}
	s.log.Debug("expired buckets", "now", now, "buckets", total)
	return nil
}

// source returns the tier that the queue of step rolls from: the finest
// for marks.
func (s *Store) source(step time.Duration) (rollup.Tier, time.Duration) {
	tiers := s.plan.Tiers()
	if i, ok := s.plan.Level(step); ok && step != rollup.MarksQueue {
		return tiers[i-1], s.plan.Batch(i)
	}
	return tiers[0], s.plan.MarkPeriod()
}

// expireRollup deletes the Active entries of periods whose source data
// has expired (one range delete per queue) and the marks of buckets whose
// source has (a full walk of the marks, which are few: each is deleted
// once processed).
func (s *Store) expireRollup(now time.Time) error {
	s.commit.Lock()
	defer s.commit.Unlock()
	wb := s.db.NewBatch()
	defer wb.Close()
	queues := []time.Duration{rollup.MarksQueue}
	for _, t := range s.plan.Tiers()[1:] {
		queues = append(queues, t.Step)
	}
	for _, q := range queues {
		src, span := s.source(q)
		cut := now.Add(-src.Retention - span).Unix()
		if err := wb.DeleteRange(appendActiveKey(nil, q, -1<<63, ""), appendActiveKey(nil, q, cut, ""), nil); err != nil {
			return err
		}
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'d'}, UpperBound: []byte{'d' + 1}})
	if err != nil {
		return err
	}
	for ok := it.First(); ok; ok = it.Next() {
		m, err := parseMark(it.Key(), it.Value())
		if err != nil {
			it.Close()
			return err
		}
		t := s.tiers[m.Step]
		if src, _ := s.source(m.Step); !m.Start.Add(t.Step + src.Retention).After(now) {
			if err := wb.Delete(it.Key(), nil); err != nil {
				it.Close()
				return err
			}
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	return s.commitBatch(wb, pebble.NoSync)
}

// expireChunk deletes up to expireChunk buckets named by the index in
// [lo, hi), and the index entries it walked. It returns how many it deleted
// and where to go on, nil when it reached hi.
func (s *Store) expireChunk(lo, hi []byte) (int, []byte, error) {
	s.commit.Lock()
	defer s.commit.Unlock()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, nil, err
	}
	wb := s.db.NewBatch()
	defer wb.Close()
	n := 0
	var next []byte
	var pk []byte
	for ok := it.First(); ok; ok = it.Next() {
		if n == expireChunk {
			next = slices.Clone(it.Key())
			break
		}
		step, start, key, err := parseIndexKey(it.Key())
		if err != nil {
			it.Close()
			return 0, nil, err
		}
		pk = appendPointKey(pk[:0], key, step, start)
		if err := wb.Delete(pk, nil); err != nil {
			it.Close()
			return 0, nil, err
		}
		if err := wb.Delete(append(pk, 'r'), nil); err != nil {
			it.Close()
			return 0, nil, err
		}
		n++
	}
	if err := it.Close(); err != nil {
		return 0, nil, err
	}
	if n == 0 {
		return 0, nil, nil
	}
	end := hi
	if next != nil {
		end = next
	}
	if err := wb.DeleteRange(lo, end, nil); err != nil {
		return 0, nil, err
	}
	// Expiry lost to a crash is done again by the next call: no fsync.
	if err := s.commitBatch(wb, pebble.NoSync); err != nil {
		return 0, nil, err
	}
	return n, next, nil
}

// run calls Expire with now at once and then at every tick until ctx is
// done or the store is closed, logging failures.
func (s *Store) run(ctx context.Context, now func() time.Time, tick <-chan time.Time) {
	for {
		if err := s.Expire(now()); err != nil {
			if errors.Is(err, ErrClosed) || errors.Is(err, ErrFailed) {
				return
			}
			s.log.Error("expire", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
	}
}

// Key encoding.

// appendPointKey appends the key of a bucket's flushed counts; the rolled
// value's is the same followed by 'r'.
func appendPointKey(b []byte, key string, step time.Duration, start int64) []byte {
	b = append(b, 'p')
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.BigEndian.AppendUint32(b, uint32(step/time.Second))
	return binary.BigEndian.AppendUint64(b, timeBits(start))
}

func appendWriterKey(b []byte, writer string) []byte {
	return append(append(b, 'q'), writer...)
}

func appendIndexKey(b []byte, step time.Duration, start int64, key string) []byte {
	b = append(b, 't')
	b = binary.BigEndian.AppendUint32(b, uint32(step/time.Second))
	b = binary.BigEndian.AppendUint64(b, timeBits(start))
	return append(b, key...)
}

func parseIndexKey(k []byte) (time.Duration, int64, string, error) {
	if len(k) < 13 || k[0] != 't' {
		return 0, 0, "", fmt.Errorf("bad index key %q", k)
	}
	step := time.Duration(binary.BigEndian.Uint32(k[1:5])) * time.Second
	start := int64(binary.BigEndian.Uint64(k[5:13]) ^ 1<<63)
	return step, start, string(k[13:]), nil
}

func appendActiveKey(b []byte, step time.Duration, period int64, key string) []byte {
	b = append(b, 'a')
	b = binary.BigEndian.AppendUint32(b, uint32(step/time.Second))
	b = binary.BigEndian.AppendUint64(b, timeBits(period))
	return append(b, key...)
}

func appendMarkKey(b []byte, key string, step time.Duration, start int64, id uint64) []byte {
	b = append(b, 'd')
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.BigEndian.AppendUint32(b, uint32(step/time.Second))
	b = binary.BigEndian.AppendUint64(b, timeBits(start))
	return binary.BigEndian.AppendUint64(b, id)
}

func parseMark(k, v []byte) (rollup.Mark, error) {
	if len(k) < 1 || k[0] != 'd' || len(v) != 8 {
		return rollup.Mark{}, fmt.Errorf("bad mark %x = %x", k, v)
	}
	n, w := binary.Uvarint(k[1:])
	if w <= 0 || n > uint64(len(k)) || uint64(len(k)) != 1+uint64(w)+n+20 {
		return rollup.Mark{}, fmt.Errorf("bad mark %x = %x", k, v)
	}
	rest := k[1+w:]
	key, rest := string(rest[:n]), rest[n:]
	return rollup.Mark{
		Key:   key,
		Step:  time.Duration(binary.BigEndian.Uint32(rest)) * time.Second,
		Start: time.Unix(int64(binary.BigEndian.Uint64(rest[4:])^1<<63), 0).UTC(),
		ID:    binary.BigEndian.Uint64(rest[12:]),
		At:    time.Unix(0, int64(binary.BigEndian.Uint64(v))).UTC(),
	}, nil
}

// prefixEnd returns the first key after every key that starts with p.
func prefixEnd(p []byte) []byte {
	end := slices.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}

// timeBits maps unix seconds to a uint64 that sorts as they do.
func timeBits(sec int64) uint64 { return uint64(sec) ^ 1<<63 }

// ceilUnix returns t in unix seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() != 0 {
		s++
	}
	return s
}

// Values and their merging.

func appendVisits(b []byte, v analytics.Visits) []byte {
	return binary.AppendVarint(binary.AppendVarint(b, v.Human), v.Bot)
}

func decodeVisits(b []byte) (analytics.Visits, error) {
	h, n := binary.Varint(b)
	if n <= 0 {
		return analytics.Visits{}, fmt.Errorf("bad visits value %x", b)
	}
	bot, m := binary.Varint(b[n:])
	if m <= 0 || n+m != len(b) {
		return analytics.Visits{}, fmt.Errorf("bad visits value %x", b)
	}
	return analytics.Visits{Human: h, Bot: bot}, nil
}

// merger adds visits. Its name is stored in the database: a different
// name, or a different encoding under the same name, cannot open it.
//
// Every read of a bucket goes through it (a bucket's value is a merge
// operand even when there is only one), so adders are pooled and Finish
// returns the adder's own buffer, given back by Pebble through Close.
var merger = &pebble.Merger{
	Name: "linkgate.visits.v1",
	Merge: func(_, value []byte) (pebble.ValueMerger, error) {
		v, err := decodeVisits(value)
		if err != nil {
			return nil, err
		}
		a := adders.Get().(*adder)
		a.v = v
		return a, nil
	},
}

var adders = sync.Pool{New: func() any { return new(adder) }}

// adder is a pebble.ValueMerger that sums visits; addition does not care
// about the order of operands.
type adder struct {
	v   analytics.Visits
	buf [2 * binary.MaxVarintLen64]byte
}

func (a *adder) MergeNewer(value []byte) error { return a.add(value) }
func (a *adder) MergeOlder(value []byte) error { return a.add(value) }

func (a *adder) add(value []byte) error {
	v, err := decodeVisits(value)
	if err != nil {
		return err
	}
	a.v.Human += v.Human
	a.v.Bot += v.Bot
	return nil
}

// Finish returns the sum in a's buffer and a as the io.Closer that frees
// it.
func (a *adder) Finish(bool) ([]byte, io.Closer, error) {
	return appendVisits(a.buf[:0], a.v), a, nil
}

// Close puts a back in the pool once Pebble is done with its result.
func (a *adder) Close() error {
	adders.Put(a)
	return nil
}

// logger passes Pebble's messages to slog.
type logger struct{ l *slog.Logger }

// walReplayed matches the line Pebble logs at every Open for each log file it
// replays, whose "stopped reading at offset" reads like trouble but is how
// replay ends: at the end of the file, or at the torn tail of a write that a
// crash cut short and that was never acknowledged.
var walReplayed = regexp.MustCompile(`WAL file (\S+) with log number \S+ stopped reading at offset: (\d+); replayed (\d+) keys in (\d+) batches`)

func (l logger) Infof(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if m := walReplayed.FindStringSubmatch(msg); m != nil {
		// Counts written since the last memtable flush live only in the
		// write-ahead log until the next flush: replaying it is how every
		// start finds them, not a repair.
		l.l.Info("analytics store: replayed the write-ahead log of the last run (normal at start: it ends where that run stopped writing)",
			"file", m[1], "bytes", atoiOr(m[2]), "keys", atoiOr(m[3]), "batches", atoiOr(m[4]))
		return
	}
	l.l.Info(msg)
}

// atoiOr returns s as a number, or s itself when it is not one.
func atoiOr(s string) any {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	return s
}

// Fatalf is called when the engine cannot go on; Pebble's default logger
// exits the process, this one panics with the message. On the commit path
// (a log write or sync that failed) commitBatch recovers the panic; on
// broken invariants or a failed write in the engine's background work (its
// MANIFEST) nothing can, and the process stops as after a crash. Keeping
// the reserve free keeps a full disk from getting there.
func (l logger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.l.Error(msg)
	panic("pebble: " + msg)
}
