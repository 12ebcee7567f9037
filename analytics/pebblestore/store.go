package pebblestore

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"log/slog"
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
	_ rollup.Readier  = (*Store)(nil)
)

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
	plan    *rollup.Plan // the tiers, the all-time one included
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

	// erased is the store's erasures (erase.go).
	erased eraseState
	// tenantKeep is the tenants' retentions (retention.go).
	tenantKeep tenantRetention

	// dimRetention is how long breakdowns are kept, in nanoseconds.
	dimRetention atomic.Int64

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
// of plan: those Write accepts and Expire enforces, the all-time tier
// (rollup.TotalTier) included, and starts expiring old buckets in the
// background (Run, hourly, the first time a minute after Open) until
// Close. The tiers may differ from the last Open's:
// buckets of a tier no longer given stay on disk unread until they are
// removed by hand. log receives Pebble's messages and Expire's; nil
// discards them. Open fails when the folder cannot be opened now; Start
// is the same without waiting for it.
func Open(path string, plan *rollup.Plan, log *slog.Logger) (*Store, error) {
	s, err := open(path, vfs.Default, plan, log)
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
// mend: an empty path (analytics.Compile refuses it already).
func Start(path string, plan *rollup.Plan, log *slog.Logger) (*Store, error) {
	return start(path, vfs.Default, plan, log, openRetryMin, openRetryMax)
}

// StartAfter is Start that makes its first attempt only once after is
// closed, for a process that takes over from another (a binary upgrade):
// the folder is the other's until it closes it. Meanwhile State says the
// store is starting, with ErrWaiting, and nothing is logged.
func StartAfter(after <-chan struct{}, path string, plan *rollup.Plan, log *slog.Logger) (*Store, error) {
	if strings.TrimSpace(path) == "" {
		return nil, errors.New("pebble: the folder's path is empty")
	}
	s := newStore(path, vfs.Default, plan, log)
	s.notOpen = ErrWaiting
	s.background(func(ctx context.Context) {
		select {
		case <-after:
		case <-ctx.Done():
			return
		}
		var said string
		if s.tryOpen(1, &said, openRetryMax) || s.openLoop(ctx, openRetryMin, openRetryMax, said) {
			s.expireLater(ctx)
		}
	})
	return s, nil
}

// ErrWaiting is why a store of StartAfter is not open yet while it waits.
var ErrWaiting = errors.New("pebble: waiting for the process this one replaces to close the folder")

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
func start(path string, fs vfs.FS, plan *rollup.Plan, log *slog.Logger, lo, hi time.Duration) (*Store, error) {
	if strings.TrimSpace(path) == "" {
		return nil, errors.New("pebble: the folder's path is empty")
	}
	s := newStore(path, fs, plan, log)
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

// Ready returns nil once the database is open and usable, or why it is
// not (rollup.Readier).
func (s *Store) Ready() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.usable()
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
func open(path string, fs vfs.FS, plan *rollup.Plan, log *slog.Logger) (*Store, error) {
	s := newStore(path, fs, plan, log)
	var err error
	if s.db, err = s.openDB(); err != nil {
		return nil, err
	}
	close(s.opened)
	return s, nil
}

// newStore returns a Store whose database is not open.
func newStore(path string, fs vfs.FS, plan *rollup.Plan, log *slog.Logger) *Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "analytics/pebble")
	s := &Store{fs: fs, dir: path, plan: plan, tiers: map[time.Duration]rollup.Tier{}, log: log,
		notOpen: errors.New("opening"), opened: make(chan struct{})}
	for _, t := range plan.Tiers() {
		s.tiers[t.Step] = t
	}
	s.dimRetention.Store(int64(DefaultDimRetention))
	return s
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
