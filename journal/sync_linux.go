package journal

import (
	"os"
	"runtime"
	"syscall"
)

// fdatasync flushes f's data and the metadata needed to read it back (its
// size) but not its times: fdatasync(2), one disk flush cheaper than fsync
// on most file systems. It uses f.Fd (which would make a pollable file
// blocking: a regular file always is) rather than SyscallConn, whose
// callback allocates on every call.
func fdatasync(f *os.File) error {
	fd := int(f.Fd())
	var err error
	for {
		if err = syscall.Fdatasync(fd); err != syscall.EINTR {
			break
		}
	}
	runtime.KeepAlive(f)
	if err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: err}
	}
	return nil
}

// preallocate allocates the blocks of f's first size bytes without changing
// its size (fallocate(2) with FALLOC_FL_KEEP_SIZE), so that writes there
// need no more space. A file system without it (EOPNOTSUPP) is not an
// error: nothing is reserved.
func preallocate(f *os.File, size int64) error {
	const keepSize = 0x01 // FALLOC_FL_KEEP_SIZE
	var err error
	for {
		if err = syscall.Fallocate(int(f.Fd()), keepSize, 0, size); err != syscall.EINTR {
			break
		}
	}
	runtime.KeepAlive(f)
	if err == syscall.EOPNOTSUPP {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "fallocate", Path: f.Name(), Err: err}
	}
	return nil
}
