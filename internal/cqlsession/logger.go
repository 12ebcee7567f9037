package cqlsession

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/linkgate/linkgate/logthrottle"
)

// Logger passes gocql's log lines (hosts going down and up, dial errors)
// to a slog.Logger, each kind of line (its format) at most once every
// LogEvery, with the count held back since ("suppressed"): during an
// outage gocql retries every connection of every host and would log
// several lines a second for as long as it lasts. Use NewLogger.
type Logger struct {
	log  *slog.Logger
	now  func() time.Time
	keys *logthrottle.Throttle[string]
}

// LogEvery is the shortest time between two gocql lines of one kind.
const LogEvery = 10 * time.Second

// NewLogger returns a Logger to log, reading the time from now.
func NewLogger(log *slog.Logger, now func() time.Time) Logger {
	return Logger{log: log, now: now, keys: &logthrottle.Throttle[string]{Every: LogEvery}}
}

func (l Logger) Print(v ...any)   { l.emit(argTypes(v), fmt.Sprint(v...)) }
func (l Logger) Println(v ...any) { l.emit(argTypes(v), fmt.Sprintln(v...)) }
func (l Logger) Printf(format string, v ...any) {
	l.emit(format, fmt.Sprintf(format, v...))
}

// emit logs msg unless a line of its kind was logged less than LogEvery
// ago. The kinds come from gocql's code (its formats, the types of what it
// prints), so their set is bounded.
func (l Logger) emit(kind, msg string) {
	n, ok := l.keys.Allow(kind, l.now())
	if !ok {
		return
	}
	l.log.Info(strings.TrimSpace(msg), "source", "gocql", "suppressed", n)
}

// argTypes is the kind of an unformatted line: the types of its values.
func argTypes(v []any) string {
	var b strings.Builder
	for _, x := range v {
		fmt.Fprintf(&b, "%T ", x)
	}
	return b.String()
}
