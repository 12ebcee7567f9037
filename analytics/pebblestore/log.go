package pebblestore

import (
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
)

// logger passes Pebble's messages to slog.
type logger struct{ l *slog.Logger }

// walReplayed matches the line Pebble logs at every Open for each log file it
// replays, whose "stopped reading at offset" reads like trouble but is how
// replay ends: at the end of the file, or at the torn tail of a write that a
// crash cut short and that was never acknowledged.
var walReplayed = regexp.MustCompile(`WAL file (\S+) with log number \S+ stopped reading at offset: (\d+); replayed (\d+) keys in (\d+) batches`)

func (l logger) Infof(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if m := walReplayed.FindStringSubmatch(msg); m != nil {
		// Counts written since the last memtable flush live only in the
		// write-ahead log until the next flush: replaying it is how every
		// start finds them, not a repair.
		l.l.Info("analytics store: replayed the write-ahead log of the last run (normal at start: it ends where that run stopped writing)",
			"file", m[1], "bytes", atoiOr(m[2]), "keys", atoiOr(m[3]), "batches", atoiOr(m[4]))
		return
	}
	l.l.Info(msg)
}

// atoiOr returns s as a number, or s itself when it is not one.
func atoiOr(s string) any {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	return s
}

// Fatalf is called when the engine cannot go on; Pebble's default logger
// exits the process, this one panics with the message. On the commit path
// (a log write or sync that failed) commitBatch recovers the panic; on
// broken invariants or a failed write in the engine's background work (its
// MANIFEST) nothing can, and the process stops as after a crash. Keeping
// the reserve free keeps a full disk from getting there.
func (l logger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.l.Error(msg)
	panic("pebble: " + msg)
}
