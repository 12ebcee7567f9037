//go:build linux || darwin || freebsd || netbsd || openbsd

package pebblestore

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/cockroachdb/pebble/vfs"
)

// lockHolder returns " (process N)" naming the process that holds the lock
// of the Pebble folder dir, or "" when it cannot tell: another file system
// than the real one, or a holder in another PID namespace (a container),
// which fcntl reports as 0. Call it only when this process does not hold
// the lock: closing any descriptor of a file drops the fcntl locks its
// process holds on it.
func lockHolder(fs vfs.FS, dir string) string {
	if fs != vfs.Default {
		return ""
	}
	f, err := os.Open(filepath.Join(dir, "LOCK"))
	if err != nil {
		return ""
	}
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil || lk.Type == syscall.F_UNLCK || lk.Pid <= 0 {
		return ""
	}
	return fmt.Sprintf(" (process %d)", lk.Pid)
}
