package journal

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// recovery is one Open's look at the journal's directory: what it lists,
// the latest fold it keeps, the segments after it and the active one.
type recovery struct {
	j       *Journal
	st      *Stats
	br      *bufio.Reader
	removed bool // a file was removed: the directory wants a sync
}

func (j *Journal) recover() error {
	r := &recovery{j: j, st: &j.recovered, br: bufio.NewReaderSize(nil, readBufSize)}
	segs, folds, hasAck, err := r.list()
	if err != nil {
		return err
	}
	if err := r.readAck(hasAck); err != nil {
		return err
	}
	skip, err := r.keepFold(folds)
	if err != nil {
		return err
	}
	if err := r.checkSegments(segs, skip); err != nil {
		return err
	}
	if r.removed {
		if err := syncDir(j.dir); err != nil {
			return fmt.Errorf("journal: %w", err)
		}
	}
	if n := len(j.pieces); n > 0 && !j.pieces[n-1].fold && !j.pieces[n-1].bad {
		last := j.pieces[n-1]
		f, err := os.OpenFile(last.path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		j.active, j.activeF = last, f
	}
	r.st.Bytes = j.bytes
	j.corrupt.Store(r.st.Corrupt)
	return nil
}

func (r *recovery) remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("journal: %w", err)
	}
	r.removed = true
	return nil
}

// list reads the directory: its segments and fold files, whether it has
// an ack file, and the next segment and fold numbers. It removes what an
// interrupted write left.
func (r *recovery) list() (segs []*piece, folds []foldFile, hasAck bool, err error) {
	j := r.j
	des, err := os.ReadDir(j.dir)
	if err != nil {
		return nil, nil, false, fmt.Errorf("journal: %w", err)
	}
	for _, de := range des {
		name := de.Name()
		if !de.Type().IsRegular() {
			continue
		}
		switch {
		case name == ackName:
			hasAck = true
		case strings.HasSuffix(name, tmpSuffix):
			// An ack or fold file whose write a crash interrupted: the
			// state it would have replaced is still in place.
			if err := r.remove(filepath.Join(j.dir, name)); err != nil {
				return nil, nil, false, err
			}
		case strings.HasPrefix(name, segPrefix):
			if seq, ok := parseSegName(name); ok {
				segs = append(segs, &piece{path: filepath.Join(j.dir, name), seq: seq})
				j.nextSeq = max(j.nextSeq, seq+1)
			}
		case strings.HasPrefix(name, foldPrefix):
			if to, gen, ok := parseFoldName(name); ok {
				folds = append(folds, foldFile{name, to, gen})
				j.foldGen = max(j.foldGen, gen+1)
			}
		}
	}
	return segs, folds, hasAck, nil
}

// readAck reads the ack position, or creates the ack file.
func (r *recovery) readAck(hasAck bool) error {
	j := r.j
	if hasAck {
		b, err := os.ReadFile(filepath.Join(j.dir, ackName))
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		if j.acked, err = decodeAck(b); err != nil {
			// Written by rename, so only a damaged disk gets here. Scanning
			// from the start repeats acked records, which the consumer must
			// tolerate after any crash anyway; refusing to open would lose
			// them all.
			r.st.AckLost = true
			j.acked = Pos{}
		}
	}
	j.nextSeq = max(j.nextSeq, j.acked.seg+1)
	if !hasAck {
		// Created now so that an Ack on a full disk can overwrite it in
		// place (writeAck). Not being able to is no reason to fail Open.
		writeFileSync(j.dir, ackName, encodeAck(Pos{}), !j.noSync, nil)
	}
	return nil
}

// keepFold keeps the latest fold that checks, unless the ack is past it,
// and returns where the segments' records begin to count: the end of that
// fold or the ack position.
func (r *recovery) keepFold(folds []foldFile) (skip Pos, err error) {
	j, st := r.j, r.st
	// The fold with the latest end (and of those the latest generation)
	// replaces every record up to it, including older folds: a crash after
	// it was renamed into place may have left some of those.
	slices.SortFunc(folds, func(a, b foldFile) int {
		return cmp.Or(cmp.Compare(a.to.seg, b.to.seg), cmp.Compare(a.to.off, b.to.off), cmp.Compare(a.gen, b.gen))
	})
	var fold *piece
	for i := len(folds) - 1; i >= 0; i-- {
		path := filepath.Join(j.dir, folds[i].name)
		if fold != nil {
			if err := r.remove(path); err != nil {
				return Pos{}, err
			}
			st.Removed++
			continue
		}
		p, err := checkFold(r.br, path)
		if err != nil {
			return Pos{}, err
		}
		if p == nil {
			// Written by rename, so only a damaged disk gets here: set it
			// aside for a person, count it, keep what else there is.
			st.Corrupt++
			if fi, err := os.Stat(path); err == nil {
				st.LostBytes += fi.Size()
			}
			os.Rename(path, path+".bad")
			continue
		}
		fold = p
	}
	if fold == nil {
		return j.acked, nil
	}
	if !j.acked.Less(fold.to) {
		if err := r.remove(fold.path); err != nil {
			return Pos{}, err
		}
		st.Removed++
		return j.acked, nil
	}
	j.nextSeq = max(j.nextSeq, fold.to.seg+1)
	j.pieces = append(j.pieces, fold)
	j.bytes += fold.disk
	st.Records++
	return fold.to, nil
}

// checkSegments removes the segments wholly before skip and checks the
// others, in order.
func (r *recovery) checkSegments(segs []*piece, skip Pos) error {
	j, st := r.j, r.st
	slices.SortFunc(segs, func(a, b *piece) int { return cmp.Compare(a.seq, b.seq) })
	for i, p := range segs {
		newest := i == len(segs)-1
		fi, err := os.Stat(p.path)
		if err != nil {
			return fmt.Errorf("journal: %w", err)
		}
		p.disk = fi.Size()
		if p.seq < skip.seg || p.seq == skip.seg && p.disk <= skip.off {
			// Wholly acked or folded: what a crash between writing the ack
			// (or fold) file and removing the segment leaves.
			if err := r.remove(p.path); err != nil {
				return err
			}
			st.Removed++
			continue
		}
		if p.seq == skip.seg {
			p.skip = skip.off
		}
		if err := j.checkSegment(r.br, p, newest); err != nil {
			return err
		}
		j.pieces = append(j.pieces, p)
		j.bytes += p.disk
		st.Segments++
	}
	return nil
}

// checkSegment checks the frames of segment p, sets p.end, p.holes and
// p.bad and counts its records. A tail with no good frame in it is
// truncated in the newest segment (a torn append) and ends any other
// segment (damage: counted, and no appends after it).
func (j *Journal) checkSegment(br *bufio.Reader, p *piece, newest bool) error {
	st := &j.recovered
	f, err := os.OpenFile(p.path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	c, err := checkFrames(br, f, 0, p.disk, p.skip)
	if err != nil {
		return fmt.Errorf("journal: %s: %w", filepath.Base(p.path), err)
	}
	p.end, p.holes = c.end, c.holes
	st.Records += c.n
	st.Corrupt += c.corrupt
	st.LostBytes += c.lost
	if !c.tail {
		return nil
	}
	if !newest {
		p.bad = true
		st.Corrupt++
		st.LostBytes += p.disk - c.end
		return nil
	}
	if err := f.Truncate(c.end); err != nil {
		return fmt.Errorf("journal: %s: truncate torn tail: %w", filepath.Base(p.path), err)
	}
	if !j.noSync {
		if err := fdatasync(f); err != nil {
			return fmt.Errorf("journal: %s: truncate torn tail: %w", filepath.Base(p.path), err)
		}
	}
	st.TornBytes += p.disk - c.end
	p.disk = c.end
	return nil
}

// checkFold checks a fold file and returns its piece, or nil if it does
// not check.
func checkFold(br *bufio.Reader, path string) (*piece, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("journal: %w", err)
	}
	h := make([]byte, foldHeader)
	if _, err := f.ReadAt(h, 0); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("journal: %w", err)
	}
	_, to, ok := decodeFoldHeader(h)
	if name, _, _ := parseFoldName(filepath.Base(path)); !ok || name != to {
		return nil, nil
	}
	c, err := checkFrames(br, f, foldHeader, fi.Size(), 0)
	if err != nil {
		return nil, fmt.Errorf("journal: %s: %w", filepath.Base(path), err)
	}
	if c.tail || c.n != 1 || len(c.holes) > 0 {
		return nil, nil
	}
	return &piece{path: path, fold: true, seq: to.seg, disk: c.end, end: c.end, to: to}, nil
}

// foldFile is a fold file Open found.
type foldFile struct {
	name string
	to   Pos
	gen  uint64
}
