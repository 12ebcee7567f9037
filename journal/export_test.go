package journal

// Test hooks, for the journal_test package only.

// ErrHookStop is what a hook returns to stop an operation as a crash would.
var ErrHookStop = errHookStop

// SetHook makes j call h between the steps of Ack and Fold; an error from
// h stops the operation there, leaving the files as a crash would.
func SetHook(j *Journal, h func(step string) error) { j.hook = h }

// SetNoSync makes j skip every fsync: for building large journals fast.
func SetNoSync(j *Journal) { j.noSync = true }

// Crash abandons j as a crash would: its files are closed and nothing else
// is done.
func Crash(j *Journal) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closed = true
	j.closeFiles()
}

// Split returns the segment and offset of p.
func Split(p Pos) (seg uint64, off int64) { return p.seg, p.off }

// FrameHeader is the size of a record's frame header.
const FrameHeader = frameHeader

// MakePos returns the position at offset off of segment seg.
func MakePos(seg uint64, off int64) Pos { return Pos{seg, off} }
