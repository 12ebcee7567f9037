//go:build !linux

package journal

import "os"

// fdatasync is f.Sync where the system has no fdatasync(2).
func fdatasync(f *os.File) error { return f.Sync() }

// preallocate does nothing where the system has no fallocate(2).
func preallocate(f *os.File, size int64) error { return nil }
