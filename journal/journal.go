package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
)

// ErrFull is returned by Append when the record would take the journal
// past Options.MaxBytes.
var ErrFull = errors.New("journal: full")

// ErrClosed is returned by the methods of a closed Journal.
var ErrClosed = errors.New("journal: closed")

// DefaultSegmentBytes is the segment size when Options.SegmentBytes is 0
// (and MaxBytes/16 is not smaller).
const DefaultSegmentBytes = 4 << 20

// minSegmentBytes bounds the default segment size from below.
const minSegmentBytes = 64 << 10

// Options configure a Journal. The zero value is usable: no cap, 4 MiB
// segments.
type Options struct {
	// MaxBytes caps the journal's bytes on disk (all segment and fold
	// files): Append returns ErrFull rather than pass it. 0 means no cap.
	MaxBytes int64
	// SegmentBytes is the size in bytes past which a new segment file is
	// started: a record that would take the current segment past it goes
	// to a new one (a record larger than SegmentBytes gets a segment of its
	// own). 0 means DefaultSegmentBytes, or MaxBytes/16 when that is
	// smaller (at least 64 KiB), so that acking or folding the oldest
	// records frees most of a full journal: space is given back a whole
	// segment at a time.
	SegmentBytes int64
	// Preallocate keeps the disk space of the segment being appended to
	// and of one spare segment allocated ahead of the appends (fallocate
	// with FALLOC_FL_KEEP_SIZE, where the file system has it), so that
	// Appends go on for up to two segments when something else fills the
	// volume: a journal next to a store on one disk is most needed when the
	// disk is full. It costs up to two segments of disk the journal has
	// not written yet.
	Preallocate bool
}

// Pos is the position just after a record: the segment it is in and the
// offset its frame ends at. Positions are comparable with == and ordered by
// Less in the order records were appended. The zero value is the start of
// the journal, before every record.
type Pos struct {
	seg uint64
	off int64
}

// Less reports whether p is before q.
func (p Pos) Less(q Pos) bool { return p.seg < q.seg || p.seg == q.seg && p.off < q.off }

// String returns "segment:offset", for logs.
func (p Pos) String() string { return fmt.Sprintf("%d:%d", p.seg, p.off) }

// Stats describe what Open found.
type Stats struct {
	// Segments is the number of segment files kept, Records the number of
	// records not yet acked (a folded record counts one), Bytes the
	// journal's bytes on disk.
	Segments int
	Records  int64
	Bytes    int64
	// TornBytes is what was cut from the end of the newest segment: the
	// part of a record whose append a crash interrupted (that append had
	// not returned, so nobody was told the record was kept).
	TornBytes int64
	// Corrupt is the number of damaged regions found: a frame whose header
	// or payload CRC did not check, up to the next good frame (or to the
	// end of an older segment when there is none). They are skipped, never
	// returned; LostBytes counts their bytes.
	Corrupt   int64
	LostBytes int64
	// Removed is the number of files removed: segments wholly acked and
	// records a fold replaced, which a crash left behind.
	Removed int
	// AckLost is true when the ack file did not check: every record is
	// scanned again, including some that were acked.
	AckLost bool
}

// piece is one file of the journal: a segment, or a fold file holding one
// record that replaces every record up to it.
type piece struct {
	path string
	fold bool
	seq  uint64 // segment number; for a fold, the segment its record ends in
	disk int64  // bytes on disk
	end  int64  // the end of the last frame that checks: scans stop there
	skip int64  // segments: frames ending at or before it are acked or folded
	bad  bool   // a frame at end does not check: no appends after it
	// holes are damaged regions Open found, skipped by scans; set before
	// the piece is shared and never changed.
	holes []hole
	to    Pos // folds: where the folded record ends

	// Guarded by Journal.mu.
	refs   int  // Scans and Folds reading it
	doomed bool // no longer in the journal: removed once refs is 0
}

func (p *piece) last() Pos {
	if p.fold {
		return p.to
	}
	return Pos{p.seq, p.end}
}

// Journal is an append-only log of opaque records in a directory, for data
// that must survive a crash until it is applied elsewhere. See the package
// documentation for the files, the fsync points and the guarantees.
//
// A Journal is safe for concurrent use: Appends are serialized; a Scan
// reads the records appended before it started, unaffected by Appends,
// Acks and Folds during it; Ack and Fold are serialized with each other.
// fn in Scan may call any method but Close; fold in Fold must not call
// Ack or Fold.
type Journal struct {
	dir  string
	opts Options
	lock *os.File

	opMu sync.Mutex // serializes Ack, Fold and Close

	mu        sync.Mutex
	closed    bool
	pieces    []*piece // in order: a fold (at most one, first), then segments by number
	active    *piece   // the last segment, open for appending; nil: the next Append starts one
	activeF   *os.File
	nextSeq   uint64
	foldGen   uint64            // the generation of the next fold file
	hdr       [frameHeader]byte // Append's frame header
	acked     Pos
	bytes     int64
	recovered Stats

	corrupt atomic.Int64

	// Test hooks: hook is called between the steps of Ack and Fold and
	// stops them when it returns an error; noSync skips every fsync.
	hook   func(step string) error
	noSync bool
}

// Open opens the journal in dir, creating dir (mode 0700) if needed, and
// recovers it: it removes what an interrupted Ack or Fold left behind,
// checks the CRC of every record still in the journal (streaming, without
// holding a whole record), truncates a torn tail of the newest segment and
// counts corrupt records (Recovered). Only one Journal may have dir open at
// a time.
func Open(dir string, opts Options) (*Journal, error) {
	if opts.MaxBytes < 0 {
		return nil, fmt.Errorf("journal: MaxBytes %d is negative", opts.MaxBytes)
	}
	if opts.SegmentBytes < 0 {
		return nil, fmt.Errorf("journal: SegmentBytes %d is negative", opts.SegmentBytes)
	}
	if opts.SegmentBytes == 0 {
		opts.SegmentBytes = DefaultSegmentBytes
		if opts.MaxBytes > 0 {
			opts.SegmentBytes = min(opts.SegmentBytes, max(opts.MaxBytes/16, minSegmentBytes))
		}
	}
	if err := mkdirSync(dir); err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	lock, err := lockDir(filepath.Join(dir, lockName))
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	j := &Journal{dir: dir, opts: opts, lock: lock, nextSeq: 1}
	if err := j.recover(); err != nil {
		j.closeFiles()
		return nil, err
	}
	if opts.Preallocate {
		if j.activeF != nil {
			preallocate(j.activeF, opts.SegmentBytes)
		}
		j.makeSpare()
	}
	return j, nil
}

// spareName is the file of a spare segment (Options.Preallocate): empty,
// with a segment's space allocated, renamed to the next segment's name
// when one starts. Open leaves it alone otherwise.
const spareName = "next.spare"

// makeSpare creates the spare segment unless there is one. Where the space
// cannot be had (a full disk) it leaves none, and the next segment is made
// as without Preallocate; the roll after it tries again.
func (j *Journal) makeSpare() {
	path := filepath.Join(j.dir, spareName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || fi.Size() != 0 {
		f.Truncate(0) // a spare is empty: never a record in it
	}
	if err := preallocate(f, j.opts.SegmentBytes); err != nil {
		os.Remove(path)
	}
}

// mkdirSync creates dir and its missing parents (mode 0700) and syncs the
// parent of each directory it created: a record is only as durable as the
// directory entries leading to its file.
func mkdirSync(dir string) error {
	var created []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || !errors.Is(err, os.ErrNotExist) {
			break
		}
		created = append(created, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, d := range created {
		if err := syncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

// Recovered returns what Open found and did.
func (j *Journal) Recovered() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.recovered
}

// Corrupt returns the number of records refused since Open because their
// length or CRC did not check: those Open found (Recovered().Corrupt) and
// those a Scan or Fold found later.
func (j *Journal) Corrupt() int64 { return j.corrupt.Load() }

// Dir returns the journal's directory.
func (j *Journal) Dir() string { return j.dir }

// Bytes returns the journal's bytes on disk: every segment and fold file,
// including those already acked or folded that a running Scan still reads.
func (j *Journal) Bytes() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.bytes
}

// Acked returns the ack position: records ending at or before it have
// been applied and are not scanned.
func (j *Journal) Acked() Pos {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.acked
}

// End returns the position after the last record: what Scan would stop
// at if called now. It is Acked() when there is nothing to scan.
func (j *Journal) End() Pos {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.end()
}

func (j *Journal) end() Pos {
	for _, p := range slices.Backward(j.pieces) {
		if e, ok := j.unacked(p); ok {
			return e
		}
	}
	return j.acked
}

// unacked returns p's end and whether p holds a record not acked yet. The
// caller holds mu.
func (j *Journal) unacked(p *piece) (Pos, bool) {
	e := p.last()
	return e, j.acked.Less(e) && (p.fold || e.off > p.skip)
}

// Reclaimable returns the smallest ack position that gives space back,
// and how many bytes Ack(upTo) would remove: the end of the oldest file
// (the folded record, or the oldest segment) holding a record not yet
// acked. Since space comes back a whole file at a time, acking less than
// upTo removes nothing. It returns the zero Pos and 0 when nothing is left
// to ack.
func (j *Journal) Reclaimable() (upTo Pos, bytes int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, p := range j.pieces {
		if e, ok := j.unacked(p); ok {
			return e, p.disk
		}
	}
	return Pos{}, 0
}

// Append writes rec as one record at the end of the journal and returns
// the position after it. When Append returns nil the record is on disk
// (fdatasync), and in a new segment whose creation is too (the directory
// is synced). It returns ErrFull when the record would take the journal
// past Options.MaxBytes. When a write or sync fails (ENOSPC, EIO) the
// segment is truncated back, so no part of the record stays, and the error
// is returned wrapped; the journal stays usable.
func (j *Journal) Append(rec []byte) (Pos, error) {
	if len(rec) > MaxRecordBytes {
		return Pos{}, fmt.Errorf("journal: append: a record of %d bytes is larger than %d", len(rec), MaxRecordBytes)
	}
	size := int64(frameHeader + len(rec))
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return Pos{}, ErrClosed
	}
	if j.opts.MaxBytes > 0 && j.bytes+size > j.opts.MaxBytes {
		return Pos{}, ErrFull
	}
	if p := j.active; p == nil || p.end > 0 && p.end+size > j.opts.SegmentBytes {
		if err := j.roll(); err != nil {
			return Pos{}, fmt.Errorf("journal: append: %w", err)
		}
	}
	p, f := j.active, j.activeF
	h := &j.hdr // not on the stack: it would escape to WriteAt, an allocation per record
	putFrameHeader(h, rec)
	off := p.end
	_, err := f.WriteAt(h[:], off)
	if err == nil {
		_, err = f.WriteAt(rec, off+frameHeader)
	}
	if err == nil && !j.noSync {
		err = fdatasync(f)
	}
	if err != nil {
		// Leave no part of the record: a later record after a partial one
		// would be refused with it. If even the truncate fails, appends go
		// to a new segment and this one ends at off.
		if terr := f.Truncate(off); terr != nil {
			p.bad = true
			p.disk = max(p.disk, off+size)
			j.closeActive()
		} else {
			if !j.noSync {
				fdatasync(f)
			}
			if j.opts.Preallocate {
				preallocate(f, j.opts.SegmentBytes) // a truncate may free the blocks past the end
			}
		}
		return Pos{}, fmt.Errorf("journal: append: %w", err)
	}
	p.end = off + size
	p.disk = p.end
	j.bytes += size
	return Pos{p.seq, p.end}, nil
}

// roll starts a new segment: the spare, renamed, when there is one. The
// caller holds j.mu.
func (j *Journal) roll() error {
	j.closeActive()
	p := &piece{path: filepath.Join(j.dir, segName(j.nextSeq)), seq: j.nextSeq}
	flags := os.O_RDWR | os.O_CREATE | os.O_EXCL
	if j.opts.Preallocate {
		// The spare's blocks are allocated already: the new segment needs
		// no space but its name (the directory's blocks). Then a new
		// spare, when there is room for one.
		if err := os.Rename(filepath.Join(j.dir, spareName), p.path); err == nil {
			flags = os.O_RDWR
		}
		defer j.makeSpare()
	}
	f, err := os.OpenFile(p.path, flags, 0o600)
	if err != nil {
		return err
	}
	if j.opts.Preallocate {
		preallocate(f, j.opts.SegmentBytes)
	}
	if !j.noSync {
		// The new name must be on disk before a record in it is said to be.
		if err := syncDir(j.dir); err != nil {
			f.Close()
			os.Remove(p.path)
			return err
		}
	}
	j.nextSeq++
	j.pieces = append(j.pieces, p)
	j.active, j.activeF = p, f
	return nil
}

func (j *Journal) closeActive() {
	if j.activeF != nil {
		j.activeF.Close()
	}
	j.active, j.activeF = nil, nil
}

// Ack records that every record ending at or before upTo has been applied:
// it writes upTo to the ack file durably (a temporary file, fsync, rename,
// fsync of the directory), then removes the files wholly before it. A
// reopened journal does not scan acked records, even those left in a
// partly acked segment. Acking a position at or before Acked() does
// nothing; acking past End() is an error.
func (j *Journal) Ack(upTo Pos) error {
	j.opMu.Lock()
	defer j.opMu.Unlock()
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	if !j.acked.Less(upTo) {
		j.mu.Unlock()
		return nil
	}
	// Checked against the last record, not the end of the active segment:
	// a later record could end at or before upTo and be taken as acked.
	if e := j.end(); e.Less(upTo) {
		j.mu.Unlock()
		return fmt.Errorf("journal: ack %v: past the last record, %v", upTo, e)
	}
	j.mu.Unlock()

	// Appends go on while the ack file is written: Ack and Fold (opMu)
	// are the only ones that change acked and remove files.
	if err := j.writeAck(upTo); err != nil {
		return fmt.Errorf("journal: ack: %w", err)
	}

	j.mu.Lock()
	j.acked = upTo
	var gone []*piece
	j.pieces = slices.DeleteFunc(j.pieces, func(p *piece) bool {
		if upTo.Less(p.last()) {
			return false
		}
		if p == j.active {
			j.closeActive()
		}
		gone = append(gone, p)
		return true
	})
	now := j.doom(gone)
	j.mu.Unlock()
	return j.removeFiles(now, "ack")
}

// writeAck writes the ack file durably: by a temporary file and rename,
// or, when the disk is full, over the existing file in place. A full disk
// must not stop acks, since only acks give space back. The in-place write
// is 24 bytes at offset 0, inside one sector, so a crash leaves the old or
// the new position; if it did tear, the CRC would refuse it and every
// record would be scanned again (Stats.AckLost), never one skipped.
func (j *Journal) writeAck(p Pos) error {
	b := encodeAck(p)
	err := writeFileSync(j.dir, ackName, b, !j.noSync, j.stepHook("ack"))
	if err == nil || !errors.Is(err, syscall.ENOSPC) {
		return err
	}
	f, oerr := os.OpenFile(filepath.Join(j.dir, ackName), os.O_WRONLY, 0)
	if oerr != nil {
		return err
	}
	defer f.Close()
	if fi, serr := f.Stat(); serr != nil || fi.Size() != ackSize {
		return err
	}
	if _, werr := f.WriteAt(b, 0); werr != nil {
		return werr
	}
	if !j.noSync {
		return fdatasync(f)
	}
	return nil
}

// doom takes pieces out of the journal: those no Scan reads are returned
// to be removed now (and no longer counted in Bytes), the others when the
// last reader releases them. The caller holds j.mu.
func (j *Journal) doom(ps []*piece) []*piece {
	var now []*piece
	for _, p := range ps {
		p.doomed = true
		if p.refs == 0 {
			j.bytes -= p.disk
			now = append(now, p)
		}
	}
	return now
}

// release ends a reader's hold on p, removing it if it was doomed meanwhile.
func (j *Journal) release(p *piece) {
	j.mu.Lock()
	p.refs--
	var now []*piece
	if p.refs == 0 && p.doomed {
		now = j.doom([]*piece{p})
	}
	j.mu.Unlock()
	j.removeFiles(now, "")
}

// removeFiles removes the files of doomed pieces and syncs the directory.
// A file that cannot be removed is removed by the next Open: the ack or
// fold file already says its records are gone.
func (j *Journal) removeFiles(ps []*piece, op string) error {
	if len(ps) == 0 {
		return nil
	}
	var first error
	for i, p := range ps {
		if err := os.Remove(p.path); err != nil && !errors.Is(err, os.ErrNotExist) && first == nil {
			first = err
		}
		if i == 0 && op != "" {
			if err := hookStep(j.hook, op+": removed one"); err != nil {
				return err
			}
		}
	}
	if !j.noSync {
		if err := syncDir(j.dir); err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return fmt.Errorf("journal: remove acked files: %w", first)
	}
	if op != "" {
		return hookStep(j.hook, op+": removed")
	}
	return nil
}

func (j *Journal) stepHook(op string) func(string) error {
	if j.hook == nil {
		return nil
	}
	return func(step string) error { return j.hook(op + ": " + step) }
}

// Close closes the journal's files. Records appended are already on disk;
// Close only releases the directory for another Journal. It waits for a
// running Ack or Fold; a Scan running meanwhile still reads its files.
func (j *Journal) Close() error {
	j.opMu.Lock()
	defer j.opMu.Unlock()
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil
	}
	j.closed = true
	var err error
	if j.activeF != nil {
		err = j.activeF.Close()
		j.active, j.activeF = nil, nil
	}
	if lerr := j.lock.Close(); err == nil {
		err = lerr
	}
	if err != nil {
		return fmt.Errorf("journal: close: %w", err)
	}
	return nil
}

// closeFiles releases the files without anything else, as a crash would.
func (j *Journal) closeFiles() {
	if j.activeF != nil {
		j.activeF.Close()
	}
	j.lock.Close()
}
