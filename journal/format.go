package journal

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// frameHeader is the size of a record's frame header: the payload's length
// (uint32, little-endian), the CRC-32C of the payload, and the CRC-32C of
// those eight bytes. The header's own CRC makes the length trustworthy on
// its own: a damaged payload is skipped without losing the records after
// it, and a frame can be found again after damage (see checkFrames).
const frameHeader = 12

// MaxRecordBytes is the largest record Append accepts.
const MaxRecordBytes = 1 << 30

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// putFrameHeader writes the frame header of rec into h.
func putFrameHeader(h *[frameHeader]byte, rec []byte) {
	binary.LittleEndian.PutUint32(h[0:4], uint32(len(rec)))
	binary.LittleEndian.PutUint32(h[4:8], crc32.Checksum(rec, castagnoli))
	binary.LittleEndian.PutUint32(h[8:12], crc32.Checksum(h[0:8], castagnoli))
}

// parseHeader returns the payload length and CRC of a frame header, and
// whether the header checks.
func parseHeader(h []byte) (l int64, crc uint32, ok bool) {
	l = int64(binary.LittleEndian.Uint32(h[0:4]))
	crc = binary.LittleEndian.Uint32(h[4:8])
	ok = binary.LittleEndian.Uint32(h[8:12]) == crc32.Checksum(h[0:8], castagnoli) && l <= MaxRecordBytes
	return l, crc, ok
}

// Files in a journal directory. Sequence numbers and offsets are written
// with 20 digits so that names sort in numeric order.
const (
	segPrefix  = "seg-"
	foldPrefix = "fold-"
	logSuffix  = ".log"
	tmpSuffix  = ".tmp"
	ackName    = "ack"
	lockName   = "LOCK"
)

func segName(seq uint64) string { return fmt.Sprintf("%s%020d%s", segPrefix, seq, logSuffix) }

// foldName names a fold file by where its record ends and its generation,
// which grows with every Fold: folding the folded record alone again
// makes a file ending at the same place, and the two must not share a name.
func foldName(to Pos, gen uint64) string {
	return fmt.Sprintf("%s%020d-%020d-%020d%s", foldPrefix, to.seg, to.off, gen, logSuffix)
}

// parseSegName returns the sequence number of a segment file name.
func parseSegName(name string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, segPrefix)
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, logSuffix)
	if !ok || len(s) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil && n > 0
}

// parseFoldName returns the position a fold file's name says its record
// ends at, and its generation.
func parseFoldName(name string) (to Pos, gen uint64, ok bool) {
	s, ok := strings.CutPrefix(name, foldPrefix)
	if !ok {
		return Pos{}, 0, false
	}
	s, ok = strings.CutSuffix(s, logSuffix)
	if !ok || len(s) != 62 || s[20] != '-' || s[41] != '-' {
		return Pos{}, 0, false
	}
	seg, err1 := strconv.ParseUint(s[:20], 10, 64)
	off, err2 := strconv.ParseInt(s[21:41], 10, 64)
	gen, err3 := strconv.ParseUint(s[42:], 10, 64)
	return Pos{seg, off}, gen, err1 == nil && err2 == nil && err3 == nil
}

// The ack file: magic, the position (segment, offset) and the CRC-32C of
// the 20 bytes before it.
const (
	ackMagic = "LGJA"
	ackSize  = 4 + 8 + 8 + 4
)

func encodeAck(p Pos) []byte {
	b := make([]byte, ackSize)
	copy(b, ackMagic)
	binary.LittleEndian.PutUint64(b[4:], p.seg)
	binary.LittleEndian.PutUint64(b[12:], uint64(p.off))
	binary.LittleEndian.PutUint32(b[20:], crc32.Checksum(b[:20], castagnoli))
	return b
}

func decodeAck(b []byte) (Pos, error) {
	if len(b) != ackSize || string(b[:4]) != ackMagic ||
		binary.LittleEndian.Uint32(b[20:]) != crc32.Checksum(b[:20], castagnoli) {
		return Pos{}, errors.New("journal: ack file does not check")
	}
	p := Pos{binary.LittleEndian.Uint64(b[4:]), int64(binary.LittleEndian.Uint64(b[12:]))}
	if p.off < 0 {
		return Pos{}, errors.New("journal: ack file does not check")
	}
	return p, nil
}

// A fold file starts with a header naming the range of records it
// replaces, (from, to], followed by one frame: the folded record, which
// ends at to.
const (
	foldMagic  = "LGJF"
	foldHeader = 4 + 4*8 + 4
)

func encodeFoldHeader(from, to Pos) []byte {
	b := make([]byte, foldHeader)
	copy(b, foldMagic)
	binary.LittleEndian.PutUint64(b[4:], from.seg)
	binary.LittleEndian.PutUint64(b[12:], uint64(from.off))
	binary.LittleEndian.PutUint64(b[20:], to.seg)
	binary.LittleEndian.PutUint64(b[28:], uint64(to.off))
	binary.LittleEndian.PutUint32(b[36:], crc32.Checksum(b[:36], castagnoli))
	return b
}

func decodeFoldHeader(b []byte) (from, to Pos, ok bool) {
	if len(b) != foldHeader || string(b[:4]) != foldMagic ||
		binary.LittleEndian.Uint32(b[36:]) != crc32.Checksum(b[:36], castagnoli) {
		return Pos{}, Pos{}, false
	}
	from = Pos{binary.LittleEndian.Uint64(b[4:]), int64(binary.LittleEndian.Uint64(b[12:]))}
	to = Pos{binary.LittleEndian.Uint64(b[20:]), int64(binary.LittleEndian.Uint64(b[28:]))}
	return from, to, from.off >= 0 && to.off >= 0 && from.Less(to)
}

// readBufSize is the size of the buffered readers that check and scan
// files: what Open and Scan hold besides the largest record.
const readBufSize = 64 << 10

// hole is a damaged region [from, to) of a segment that Open found, with
// good frames before and after it: scans skip it.
type hole struct{ from, to int64 }

// checked is what checkFrames found in a file.
type checked struct {
	end     int64  // where the frames end: size, or where a tail starts
	n       int64  // good frames that end after skip
	holes   []hole // damaged regions, each followed by a good frame
	tail    bool   // [end, size) holds no good frame: a torn or damaged tail
	corrupt int64  // damaged regions before good frames (holes)
	lost    int64  // their bytes
}

// checkFrames reads the frames of f between base and size with br,
// checking each header and payload CRC without holding a whole payload in
// memory. Frames ending at or before skip (acked or folded) are walked by
// their length only, so damage to one of them costs nothing.
//
// At a frame that does not check, it looks for the next good frame: with a
// good header (the length is trusted) that is the next frame; otherwise it
// searches every later offset for a frame whose header and payload both
// check. Damage followed by a good frame is a hole; damage with no good
// frame after it is a tail, which in the newest segment is what a crash in
// the middle of the last append leaves: only the last append can be torn,
// since each returns only after its record is synced. err is an I/O error.
func checkFrames(br *bufio.Reader, f io.ReaderAt, base, size, skip int64) (c checked, err error) {
	br.Reset(io.NewSectionReader(f, base, size-base))
	off := base
	var h [frameHeader]byte
	for off < size {
		if size-off < frameHeader {
			break
		}
		if _, err := io.ReadFull(br, h[:]); err != nil {
			return c, err
		}
		l, crc, ok := parseHeader(h[:])
		fe := off + frameHeader + l
		if !ok {
			next, err := findFrame(f, off+1, size)
			if err != nil {
				return c, err
			}
			if next < 0 {
				break
			}
			c.holes = append(c.holes, hole{off, next})
			c.corrupt++
			c.lost += next - off
			off = next
			br.Reset(io.NewSectionReader(f, off, size-off))
			continue
		}
		if fe > size {
			// A good header whose payload is not all there: the torn
			// last append (nothing good can be inside its payload).
			break
		}
		if fe <= skip {
			if _, err := br.Discard(int(l)); err != nil {
				return c, err
			}
			off = fe
			continue
		}
		got, err := crcOf(br, l)
		if err != nil {
			return c, err
		}
		if got != crc {
			if fe == size {
				break
			}
			c.holes = append(c.holes, hole{off, fe})
			c.corrupt++
			c.lost += fe - off
			off = fe
			continue
		}
		c.n++
		off = fe
	}
	c.end = off
	c.tail = off < size
	return c, nil
}

// crcOf reads l bytes from br and returns their CRC-32C, holding no more
// than br's buffer.
func crcOf(br *bufio.Reader, l int64) (uint32, error) {
	var c uint32
	for rem := l; rem > 0; {
		p, err := br.Peek(int(min(rem, readBufSize)))
		if err != nil {
			return 0, err
		}
		c = crc32.Update(c, castagnoli, p)
		br.Discard(len(p))
		rem -= int64(len(p))
	}
	return c, nil
}

// findFrame returns the first offset in [from, size) where a frame whose
// header and payload check starts, or -1. A header checks by chance once in
// 2^32 offsets, and its payload then too once in 2^32 more.
func findFrame(f io.ReaderAt, from, size int64) (int64, error) {
	buf := make([]byte, readBufSize)
	br := bufio.NewReaderSize(nil, readBufSize)
	for base := from; size-base >= frameHeader; {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), size-base)], base)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, err
		}
		b := buf[:n]
		for i := 0; i+frameHeader <= len(b); i++ {
			l, crc, ok := parseHeader(b[i : i+frameHeader])
			o := base + int64(i)
			if !ok || o+frameHeader+l > size {
				continue
			}
			br.Reset(io.NewSectionReader(f, o+frameHeader, l))
			got, err := crcOf(br, l)
			if err != nil {
				return 0, err
			}
			if got == crc {
				return o, nil
			}
		}
		if n < frameHeader {
			break
		}
		base += int64(n - frameHeader + 1)
	}
	return -1, nil
}

// writeFileSync writes b to dir/name durably: to a temporary file that is
// synced, renamed over name, and the directory synced. A crash leaves
// either the old file or the new one, and at most a *.tmp that Open
// removes. hook, if not nil, is called after each step and stops the
// write when it returns an error (tests use it to stop "crash" between
// steps).
func writeFileSync(dir, name string, b []byte, sync bool, hook func(step string) error) error {
	tmp := filepath.Join(dir, name+tmpSuffix)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = hookStep(hook, "written")
	}
	if err == nil && sync {
		err = fdatasync(f)
	}
	if err == nil {
		err = hookStep(hook, "synced")
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err == nil {
		err = hookStep(hook, "renamed")
	}
	if err == nil && sync {
		err = syncDir(dir)
	}
	if err != nil {
		if !errors.Is(err, errHookStop) {
			os.Remove(tmp)
		}
		return err
	}
	return hookStep(hook, "dir synced")
}

// errHookStop is what a test hook returns to stop an operation between
// two steps, as a crash would.
var errHookStop = errors.New("journal: stopped by test hook")

func hookStep(hook func(string) error, step string) error {
	if hook == nil {
		return nil
	}
	return hook(step)
}

// syncDir makes the creation, renaming or removal of files in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
