package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"strings"
	"sync"
)

// Logs is the log records a test has seen, each a map of its attributes
// with "msg" and "level" included, values as text: the records of an
// in-process logger (Handler) or the JSON lines of a process (Add). The
// zero value is empty and ready; safe for concurrent use.
type Logs struct {
	mu    sync.Mutex
	lines []map[string]string
}

// Add keeps one record.
func (l *Logs) Add(line map[string]string) {
	l.mu.Lock()
	l.lines = append(l.lines, line)
	l.mu.Unlock()
}

// Records returns copies of the records that have msg (any message when
// msg is "") and every given attribute value, in the order they came.
func (l *Logs) Records(msg string, fields map[string]string) []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, line := range l.lines {
		if matches(line, msg, fields) {
			out = append(out, maps.Clone(line))
		}
	}
	return out
}

// Count is how many records have msg and every given attribute value.
func (l *Logs) Count(msg string, fields map[string]string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if matches(line, msg, fields) {
			n++
		}
	}
	return n
}

func matches(line map[string]string, msg string, fields map[string]string) bool {
	if msg != "" && line["msg"] != msg {
		return false
	}
	for k, v := range fields {
		if line[k] != v {
			return false
		}
	}
	return true
}

// Logged reports whether a record has msg and every given attribute value.
func (l *Logs) Logged(msg string, fields map[string]string) bool {
	return l.Count(msg, fields) > 0
}

// Clear forgets the records seen so far.
func (l *Logs) Clear() {
	l.mu.Lock()
	l.lines = nil
	l.mu.Unlock()
}

// String is the records as JSON lines, for a failure message.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, line := range l.lines {
		j, _ := json.Marshal(line)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// Handler returns a slog.Handler that keeps every record in l, at every
// level, with the attributes given to WithAttrs. Groups are flattened: an
// attribute is kept under its own key.
func (l *Logs) Handler() slog.Handler { return &logHandler{logs: l} }

type logHandler struct {
	logs  *Logs
	attrs []slog.Attr
}

func (h *logHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *logHandler) WithGroup(string) slog.Handler            { return h }

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &logHandler{h.logs, append(append([]slog.Attr{}, h.attrs...), as...)}
}

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	line := map[string]string{"msg": r.Message, "level": r.Level.String()}
	for _, a := range h.attrs {
		line[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		line[a.Key] = a.Value.String()
		return true
	})
	h.logs.Add(line)
	return nil
}

// Buffer is a bytes.Buffer safe for concurrent use: a log destination or a
// process's stderr.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
