//go:build !(linux || darwin || freebsd || openbsd || netbsd || dragonfly)

package journal

import "os"

// lockDir only creates dir/LOCK where flock(2) is not available: the
// caller must not open one directory twice.
func lockDir(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}
