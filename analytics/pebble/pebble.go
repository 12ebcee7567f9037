// Package pebble is the embedded analytics store: visit counts on the local
// disk of one gateway, in a github.com/cockroachdb/pebble database.
//
// # Why Pebble
//
// A flush is a few hundred to a few hundred thousand "add n to this bucket"
// operations that must land all or nothing, since the flusher resends a
// failed batch merged into the next one. Pebble gives exactly that: all of a
// flush goes into one pebble.Batch committed with one fsync, and a merge
// operator adds counts inside the engine, so a flush never reads before it
// writes. It builds with CGO_ENABLED=0 (its cgo zstd binding is optional;
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
// iterator range and reads only the rows it returns (a year of days is at
// most 366 rows, whatever else the store holds); a time-major layout would
// make expiry a single range delete but a one-link read would scan every
// link of the time range. Expiry is served by a small time-major index
// written in the same batch:
//
//	'p' uvarint(len(key)) key step start -> visits   one bucket (merged by adding)
//	't' step start key                   -> empty    the bucket's index entry
//	'T' key                              -> visits   the all-time total (merged by adding)
//
// step is the tier's step in seconds (uint32, big-endian) and start the
// bucket's start in unix seconds (int64 with its sign bit flipped,
// big-endian, so keys sort in time order). visits is two varints, human and
// bot. Expire walks each tier's index up to its retention cutoff, deletes
// the buckets it names with point deletes and the walked index span with one
// range delete: its work grows with what expires, not with what is kept.
//
// Write sets a bucket's index entry with every count. It costs a second key
// per count but needs no read, and the entry is idempotent.
//
// # Use
//
//	s, err := pebble.Open(cfg.Embedded.Path, cfg.Retention, log) // expires old buckets hourly
//	// s is an analytics.Store: hand it to analytics.NewPipeline, whose
//	// Close closes it after the final flush.
package pebble

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
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

var _ analytics.Store = (*Store)(nil)

// cacheSize is the block cache's size in bytes.
const cacheSize = 64 << 20

// memTableSize is the memtable's size in bytes. A flush of 10,000 links is
// about 6 MB; a batch over half the memtable is flushed to its own table at
// once, which costs a sort and an L0 file per flush.
const memTableSize = 32 << 20

// minFreeBytes is the disk space Write leaves free: room for a memtable
// flush and the compaction after it, so that a disk filling up stops the
// writes before it fails Pebble's own.
const minFreeBytes = 2 * memTableSize

var (
	// ErrClosed is returned by the methods of a closed Store.
	ErrClosed = errors.New("pebble: store closed")
	// ErrDiskFull is returned by a Write refused because the disk has less
	// than minFreeBytes free. Nothing of the batch was applied; the flusher
	// keeps it and tries again.
	ErrDiskFull = errors.New("pebble: disk almost full")
	// ErrFailed is returned by every method once a commit failed in the
	// engine (its log could not be written or synced): the database's state
	// is unknown until it is opened again, by a restart.
	ErrFailed = errors.New("pebble: store failed")
)

// Store is the embedded analytics store. It is safe for concurrent use. One
// process at a time holds a database directory (Pebble locks it). Create it
// with Open.
type Store struct {
	db    *pebble.DB
	fs    vfs.FS
	dir   string
	tiers map[time.Duration]rollup.Tier
	log   *slog.Logger

	// failure is set, once, to the error of a commit that failed in the
	// engine (see ErrFailed).
	failure atomic.Pointer[error]

	// mu guards closed: Close takes it to write, every other method to read.
	mu     sync.RWMutex
	closed bool
	// closing is set by Close before it waits for mu, so that a long
	// Expire stops between chunks instead of holding up shutdown.
	closing atomic.Bool

	// commit serializes Write's commits with Expire's chunks, so that an
	// index entry set while Expire walks the index is either seen by the
	// walk or written after its range delete (and found next time). Without
	// it a late count to an expiring bucket could outlive its index entry.
	commit sync.Mutex

	// expiring serializes Expire calls.
	expiring sync.Mutex

	// stopExpiry ends the background expiry Open starts; expiryDone is
	// closed when it has returned. Both nil for a store opened without it.
	stopExpiry context.CancelFunc
	expiryDone chan struct{}
}

// firstExpiry is how long after Open the background expiry first runs:
// not at once, so that it does not slow the gateway's start.
const firstExpiry = time.Minute

// Open opens or creates the store in the directory path, holding the tiers
// of resolution that Write accepts and Expire enforces, and starts expiring
// old buckets in the background (Run, hourly, the first time a minute
// after Open) until Close. The tiers may differ from the last Open's:
// buckets of a tier no longer given stay on disk unread until they are
// removed by hand. log receives Pebble's messages and Expire's; nil
// discards them.
func Open(path string, tiers []rollup.Tier, log *slog.Logger) (*Store, error) {
	s, err := open(path, vfs.Default, tiers, log)
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	s.stopExpiry, s.expiryDone = stop, make(chan struct{})
	go func() {
		defer close(s.expiryDone)
		t := time.NewTimer(firstExpiry)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.Run(ctx, time.Hour)
	}()
	return s, nil
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
	if err := rollup.ValidateTiers(tiers); err != nil {
		return nil, fmt.Errorf("pebble: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "analytics/pebble")
	s := &Store{fs: fs, dir: path, tiers: map[time.Duration]rollup.Tier{}, log: log}
	for _, t := range tiers {
		s.tiers[t.Step] = t
	}
	// The block cache holds the index and recent blocks of every link's
	// rows; the table cache of open files keeps Pebble's default.
	cache := pebble.NewCache(cacheSize)
	defer cache.Unref()
	opts := &pebble.Options{
		FS:                 fs,
		Cache:              cache,
		MemTableSize:       memTableSize,
		Merger:             merger,
		Logger:             logger{log},
		FormatMajorVersion: pebble.FormatNewest,
		Levels:             make([]pebble.LevelOptions, 7),
	}
	for i := range opts.Levels {
		// Bloom filters answer Total for links never written without
		// reading a block.
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		opts.Levels[i].Compression = pebble.SnappyCompression
	}
	db, err := pebble.Open(path, opts)
	if err != nil {
		if other, ok := inUse(err); ok {
			holder := " (this process)"
			if other {
				holder = lockHolder(fs, path)
			}
			return nil, fmt.Errorf("%w: %s%s; each gateway needs its own analytics.embedded.path (stop the other process or give this one another folder): %w",
				ErrInUse, path, holder, err)
		}
		return nil, fmt.Errorf("pebble: open %s: %w", path, err)
	}
	s.db = db
	return s, nil
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
	if f := s.failure.Load(); f != nil {
		return *f
	}
	return nil
}

// commitBatch commits wb. Pebble does not return a failed commit (a write
// or sync of its log that the disk refused): it calls its logger's Fatalf,
// which panics. That panic is recovered here and marks the store failed, so
// that the gateway goes on proxying and its flusher keeps the counts (and
// spills them at shutdown) instead of the process dying with them.
func (s *Store) commitBatch(wb *pebble.Batch, o *pebble.WriteOptions) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v (restart once the disk is repaired)", ErrFailed, r)
			if s.failure.CompareAndSwap(nil, &err) {
				s.log.Error("analytics store failed; counts are kept in memory and spilled at shutdown", "err", err)
			}
		}
	}()
	return wb.Commit(o)
}

// checkSpace returns ErrDiskFull when writing n more bytes would leave less
// than minFreeBytes free on the store's disk.
func (s *Store) checkSpace(n int) error {
	du, err := s.fs.GetDiskUsage(s.dir)
	if err != nil {
		return nil // not every file system can tell: write, and let the engine decide
	}
	if du.AvailBytes < minFreeBytes+uint64(n) {
		return fmt.Errorf("%w: %d MiB free in %s, %d MiB kept free", ErrDiskFull, du.AvailBytes>>20, s.dir, minFreeBytes>>20)
	}
	return nil
}

// Write adds b's counts and totals in one atomic batch and returns once it
// is synced to disk. When it fails nothing of b was applied, so the
// flusher's resend counts everything once. A count whose step is not one of
// the store's tiers, or whose start is not a bucket start, fails the whole
// batch.
//
// A disk with less than minFreeBytes free refuses the batch (ErrDiskFull),
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
	wb := s.db.NewBatchWithSize(len(b.Counts)*64 + len(b.Totals)*32)
	defer wb.Close()
	var k, v []byte
	for _, c := range b.Counts {
		if _, ok := s.tiers[c.Step]; !ok {
			return fmt.Errorf("pebble: write: step %v of %q is not a tier", c.Step, c.Key)
		}
		if !rollup.Align(c.Start, c.Step).Equal(c.Start) {
			return fmt.Errorf("pebble: write: %v is not the start of a %v bucket", c.Start, c.Step)
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
	for _, t := range b.Totals {
		if t.Visits == (analytics.Visits{}) {
			continue
		}
		v = appendVisits(v[:0], t.Visits)
		if err := wb.Merge(appendTotalKey(k[:0], t.Key), v, nil); err != nil {
			return fmt.Errorf("pebble: write: %w", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pebble: write: %w", err)
	}
	if err := s.checkSpace(len(wb.Repr())); err != nil {
		return err
	}
	s.commit.Lock()
	defer s.commit.Unlock()
	if err := s.commitBatch(wb, pebble.Sync); err != nil {
		return fmt.Errorf("pebble: write: commit: %w", err)
	}
	return nil
}

// Points returns key's buckets of the tier of the given step whose start
// lies in [from, to), in time order, leaving out buckets without visits. It
// reads one iterator range holding only the returned rows. A step that is
// not one of the store's tiers is an error.
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
	prefix := appendPointKey(nil, key, step, 0)
	prefix = prefix[:len(prefix)-8]
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{
		LowerBound: binary.BigEndian.AppendUint64(slices.Clip(prefix), timeBits(lo)),
		UpperBound: binary.BigEndian.AppendUint64(slices.Clip(prefix), timeBits(hi)),
	})
	if err != nil {
		return nil, fmt.Errorf("pebble: points: %w", err)
	}
	// Room for every bucket of the range, up to a few thousand.
	ps := make([]analytics.Point, 0, min((hi-lo)/int64(step/time.Second)+1, 4096))
	for ok := it.First(); ok; ok = it.Next() {
		if len(ps)%1024 == 1023 {
			if err := ctx.Err(); err != nil {
				it.Close()
				return nil, fmt.Errorf("pebble: points: %w", err)
			}
		}
		k := it.Key()
		start := int64(binary.BigEndian.Uint64(k[len(k)-8:]) ^ 1<<63)
		vis, err := decodeVisits(it.Value())
		if err != nil {
			it.Close()
			return nil, fmt.Errorf("pebble: points: %q at %d: %w", key, start, err)
		}
		ps = append(ps, analytics.Point{Start: time.Unix(start, 0).UTC(), Visits: vis})
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("pebble: points: %w", err)
	}
	return ps, nil
}

// Total returns key's all-time visits; zero for a key never written.
func (s *Store) Total(ctx context.Context, key string) (analytics.Visits, error) {
	if err := ctx.Err(); err != nil {
		return analytics.Visits{}, fmt.Errorf("pebble: total: %w", err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usable(); err != nil {
		return analytics.Visits{}, err
	}
	v, c, err := s.db.Get(appendTotalKey(nil, key))
	if errors.Is(err, pebble.ErrNotFound) {
		return analytics.Visits{}, nil
	}
	if err != nil {
		return analytics.Visits{}, fmt.Errorf("pebble: total: %w", err)
	}
	defer c.Close()
	vis, err := decodeVisits(v)
	if err != nil {
		return analytics.Visits{}, fmt.Errorf("pebble: total %q: %w", key, err)
	}
	return vis, nil
}

// expireChunk is how many buckets Expire deletes per committed batch: small
// enough that Write waits at most a few milliseconds for it.
const expireChunk = 10_000

// Expire deletes, in every tier, the buckets that ended at least the tier's
// retention before now. Totals never expire. It is safe to call while
// writing and reading; its work grows with the number of buckets it
// deletes. The gateway calls it periodically (see Run).
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
	s.log.Debug("expired buckets", "now", now, "buckets", total)
	return nil
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

// Run calls Expire with the wall clock at once and then every interval
// until ctx is done or the store is closed, logging failures; an hour, the
// interval used when every is not positive, is fine. Open runs it in the
// background already.
func (s *Store) Run(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = time.Hour
	}
	t := time.NewTicker(every)
	defer t.Stop()
	s.run(ctx, time.Now, t.C)
}

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

func appendPointKey(b []byte, key string, step time.Duration, start int64) []byte {
	b = append(b, 'p')
	b = binary.AppendUvarint(b, uint64(len(key)))
	b = append(b, key...)
	b = binary.BigEndian.AppendUint32(b, uint32(step/time.Second))
	return binary.BigEndian.AppendUint64(b, timeBits(start))
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

func appendTotalKey(b []byte, key string) []byte { return append(append(b, 'T'), key...) }

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
// minFreeBytes free keeps a full disk from getting there.
func (l logger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.l.Error(msg)
	panic("pebble: " + msg)
}
