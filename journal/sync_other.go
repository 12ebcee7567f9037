//go:build !linux

package journal

import "os"

// fdatasync is f.Sync where the system has no fdatasync(2).
func fdatasync(f *os.File) error { return f.Sync() }
