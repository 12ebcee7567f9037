package pebblestore

import (
	"fmt"
	"path/filepath"

	"github.com/cockroachdb/pebble/vfs"
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
