package journal

import (
	"bufio"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// view is a piece as a reader sees it: its frames after skip and up to
// end, which Appends and Folds after the snapshot do not change.
type view struct {
	p         *piece
	skip, end int64
}

// snapshot holds every piece for a reader. The caller holds j.mu and
// releases each view with j.release.
func (j *Journal) snapshot() []view {
	vs := make([]view, 0, len(j.pieces))
	for _, p := range j.pieces {
		p.refs++
		vs = append(vs, view{p, p.skip, p.end})
	}
	return vs
}

// reader reads the records of pieces, one at a time, into a buffer that
// grows to the largest record read.
type reader struct {
	j   *Journal
	br  *bufio.Reader
	buf []byte
}

func (j *Journal) newReader() *reader {
	return &reader{j: j, br: bufio.NewReaderSize(nil, readBufSize)}
}

// errStop ends a read early without an error.
var errStop = errors.New("journal: stop")

// read calls fn for each record of v that ends after after and at or
// before upTo, in order. A record that does not check ends the piece: it is
// counted, the piece is marked bad, and read returns nil.
func (r *reader) read(v view, after, upTo Pos, fn func(end Pos, rec []byte) error) error {
	p := v.p
	last := p.to
	if !p.fold {
		last = Pos{p.seq, v.end}
	}
	if !after.Less(last) || p.fold && upTo.Less(p.to) {
		return nil
	}
	f, err := os.Open(p.path)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	if p.fold {
		return r.frames(f, p, foldHeader, 0, v.end, func(int64) Pos { return p.to }, after, upTo, fn)
	}
	return r.frames(f, p, 0, v.skip, v.end, func(off int64) Pos { return Pos{p.seq, off} }, after, upTo, fn)
}

// frames reads the frames of f from base to end; pos maps a frame's end
// offset to its position.
func (r *reader) frames(f *os.File, p *piece, base, skip, end int64, pos func(int64) Pos, after, upTo Pos, fn func(Pos, []byte) error) error {
	r.br.Reset(io.NewSectionReader(f, base, end-base))
	holes := p.holes
	var h [frameHeader]byte
	for off := base; off < end; {
		if len(holes) > 0 && holes[0].from == off {
			if _, err := r.br.Discard(int(holes[0].to - off)); err != nil {
				return fmt.Errorf("journal: %s: %w", filepath.Base(p.path), err)
			}
			off = holes[0].to
			holes = holes[1:]
			continue
		}
		if _, err := io.ReadFull(r.br, h[:]); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return r.corrupt(p, off)
			}
			return fmt.Errorf("journal: %s: %w", filepath.Base(p.path), err)
		}
		l, crc, ok := parseHeader(h[:])
		if !ok || off+frameHeader+l > end {
			return r.corrupt(p, off)
		}
		at := pos(off + frameHeader + l)
		if upTo.Less(at) {
			return nil
		}
		if !after.Less(at) || (!p.fold && at.off <= skip) {
			if _, err := r.br.Discard(int(l)); err != nil {
				return fmt.Errorf("journal: %s: %w", filepath.Base(p.path), err)
			}
			off += frameHeader + l
			continue
		}
		if int64(cap(r.buf)) < l {
			r.buf = make([]byte, l)
		}
		rec := r.buf[:l]
		if _, err := io.ReadFull(r.br, rec); err != nil {
			return fmt.Errorf("journal: %s: %w", filepath.Base(p.path), err)
		}
		if crc32.Checksum(rec, castagnoli) != crc {
			return r.corrupt(p, off)
		}
		if err := fn(at, rec); err != nil {
			return err
		}
		off += frameHeader + l
	}
	return nil
}

// corrupt counts a record found damaged after Open checked it (the disk
// changed under the journal) and ends its piece there.
func (r *reader) corrupt(p *piece, off int64) error {
	j := r.j
	j.corrupt.Add(1)
	j.mu.Lock()
	defer j.mu.Unlock()
	if !p.fold && off < p.end {
		p.end = off
		p.bad = true
		if p == j.active {
			j.closeActive()
		}
	}
	return nil
}

// Scan calls fn for each record after the position after (Acked() if after
// is before it), oldest first, with the position the record ends at, and
// returns fn's first error. rec is valid only during fn. Scan reads the
// journal as it was when Scan started: records appended during it are not
// scanned, and records acked or folded during it are still scanned (their
// files are removed once Scan is done with them). Memory is bounded by the
// largest record plus 64 KiB, whatever the journal's size.
//
// Damaged records Open found are skipped (Recovered counts them). A record
// damaged since Open ends the scan of its file (Corrupt counts it) and Scan
// goes on with the next file: an error returned by Scan is fn's or an I/O
// error, never damage.
func (j *Journal) Scan(after Pos, fn func(end Pos, rec []byte) error) error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	if after.Less(j.acked) {
		after = j.acked
	}
	vs := j.snapshot()
	j.mu.Unlock()
	r := j.newReader()
	for i, v := range vs {
		err := r.read(v, after, Pos{^uint64(0), 1<<63 - 1}, fn)
		j.release(v.p)
		if err != nil {
			for _, v := range vs[i+1:] {
				j.release(v.p)
			}
			return err
		}
	}
	return nil
}

// Fold replaces the records after Acked() that end at or before upTo with
// the one record fold returns, which ends where the last of them ended: a
// Scan after the fold yields it with that position, and Ack of that
// position acks it. fold gets the records through recs, oldest first, one
// at a time (each rec is valid only during yield); it must read them all,
// or return an error, and must not call Ack or Fold. If fold returns an
// error, nothing changes. If no record ends in (Acked(), upTo], Fold changes
// nothing.
//
// Fold is crash-safe: the folded record is written to a fold file (its
// name and header name the range it replaces) by a temporary file, fdatasync,
// rename and directory fsync, and only then are the files it replaces
// removed. A journal reopened after a crash at any point holds either the
// original records or the folded one, never both and never neither.
//
// The fold file is written before anything is removed, so Fold may take the
// journal past MaxBytes by the folded record's size; the segment the range
// ends in is kept until every record in it is acked or folded. Appends may
// go on during Fold.
func (j *Journal) Fold(upTo Pos, fold func(recs func(yield func(rec []byte) bool)) ([]byte, error)) error {
	j.opMu.Lock()
	defer j.opMu.Unlock()
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	from := j.acked
	if !from.Less(upTo) {
		j.mu.Unlock()
		return nil
	}
	vs := j.snapshot()
	j.mu.Unlock()
	held := true
	defer func() {
		if held {
			for _, v := range vs {
				j.release(v.p)
			}
		}
	}()

	out, to, ok, err := j.foldRecords(vs, from, upTo, fold)
	if err != nil || !ok {
		return err
	}
	if err := hookStep(j.hook, "fold: folded"); err != nil {
		return err
	}
	fp, err := j.writeFold(from, to, out)
	if err != nil {
		return err
	}

	// The fold file is in place: from here on a reopened journal reads it
	// instead of the records it replaces, whichever of them are still on
	// disk.
	j.mu.Lock()
	for _, v := range vs {
		v.p.refs--
	}
	held = false
	now := j.replaceFolded(fp)
	j.mu.Unlock()
	return j.removeFiles(now, "fold")
}

// foldRecords gives fold the records of vs in (from, upTo] and returns
// what it made of them and where the last of them ended; ok is false, and
// the error nil, when there was no record to fold.
func (j *Journal) foldRecords(vs []view, from, upTo Pos, fold func(recs func(yield func(rec []byte) bool)) ([]byte, error)) (out []byte, to Pos, ok bool, err error) {
	var (
		r        = j.newReader()
		n        int64
		complete bool
		rerr     error
	)
	recs := func(yield func(rec []byte) bool) {
		n, complete, rerr = 0, false, nil
		for _, v := range vs {
			err := r.read(v, from, upTo, func(end Pos, rec []byte) error {
				n++
				to = end
				if !yield(rec) {
					return errStop
				}
				return nil
			})
			if err == errStop {
				return
			}
			if err != nil {
				rerr = err
				return
			}
		}
		complete = true
	}
	out, err = fold(recs)
	switch {
	case rerr != nil:
		return nil, Pos{}, false, fmt.Errorf("journal: fold: %w", rerr)
	case err != nil:
		return nil, Pos{}, false, fmt.Errorf("journal: fold: %w", err)
	case n == 0:
		return nil, Pos{}, false, nil
	case !complete:
		return nil, Pos{}, false, errors.New("journal: fold: fold stopped reading the records before the last; nothing replaced")
	case len(out) > MaxRecordBytes:
		return nil, Pos{}, false, fmt.Errorf("journal: fold: a folded record of %d bytes is larger than %d", len(out), MaxRecordBytes)
	}
	return out, to, true, nil
}

// writeFold writes the fold file of the record out replacing (from, to]
// and returns its piece.
func (j *Journal) writeFold(from, to Pos, out []byte) (*piece, error) {
	var h [frameHeader]byte
	putFrameHeader(&h, out)
	b := slices.Concat(encodeFoldHeader(from, to), h[:], out)
	// Only Fold (under opMu) reads and bumps foldGen after Open.
	name := foldName(to, j.foldGen)
	j.foldGen++
	if err := writeFileSync(j.dir, name, b, !j.noSync, j.stepHook("fold")); err != nil {
		return nil, fmt.Errorf("journal: fold: %w", err)
	}
	return &piece{path: filepath.Join(j.dir, name), fold: true, seq: to.seg, disk: int64(len(b)), end: int64(len(b)), to: to}, nil
}

// replaceFolded puts fold piece fp in place of the pieces it replaces and
// returns those to remove now. The caller holds mu.
func (j *Journal) replaceFolded(fp *piece) []*piece {
	to := fp.to
	var gone []*piece
	keep := []*piece{fp}
	for _, p := range j.pieces {
		switch {
		case p.fold || p.seq < to.seg:
			gone = append(gone, p)
		case p.seq == to.seg:
			p.skip = to.off
			if p.end > to.off {
				keep = append(keep, p)
				break
			}
			if p == j.active {
				j.closeActive()
			}
			gone = append(gone, p)
		default:
			keep = append(keep, p)
		}
	}
	j.pieces = keep
	j.bytes += fp.disk
	return j.doom(gone)
}
