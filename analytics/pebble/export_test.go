package pebble

// Compact compacts all of s's data, as a store that has run for weeks is
// mostly compacted: the read benchmark measures that state rather than the
// compactions that follow its bulk load.
func Compact(s *Store) error { return s.db.Compact([]byte{0}, []byte{0xff}, true) }

// OpenFS is Open on the file system fs, for fault injection.
var OpenFS = open
