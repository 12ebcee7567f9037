package cassandra

import "time"

// SetClock has s read the time from now (read ranges, the TTLs of rolled
// rows) rather than from the wall clock. Call it before s is used.
func SetClock(s *Store, now func() time.Time) { s.now = now }
