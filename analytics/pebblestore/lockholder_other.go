//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package pebblestore

import "github.com/cockroachdb/pebble/vfs"

// lockHolder cannot name the holder of a folder's lock on this system.
func lockHolder(vfs.FS, string) string { return "" }
