package pebblestore

// Compact compacts all of s's data, as a store that has run for weeks is
// mostly compacted: the read benchmark measures that state rather than the
// compactions that follow its bulk load.
func Compact(s *Store) error { return s.db.Compact([]byte{0}, []byte{0xff}, true) }

// OpenFS is Open on the file system fs, for fault injection.
var OpenFS = open

// Reserve returns the free space s's writes leave on its disk.
func Reserve(s *Store) uint64 { return s.reserve }

// StartFS is Start on the file system fs, waiting from lo to hi between
// attempts to open.
var StartFS = start

// Opened returns a channel closed once s's database is open.
func Opened(s *Store) <-chan struct{} { return s.opened }
