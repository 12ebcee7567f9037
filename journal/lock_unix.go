//go:build linux || darwin || freebsd || openbsd || netbsd || dragonfly

package journal

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockDir takes an exclusive flock(2) on dir/LOCK so that two processes (or
// two Journals in one process) never append to the same files. The lock
// goes with the process: a crash releases it.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s is held by another journal", path)
		}
		return nil, err
	}
	return f, nil
}
