package testkit

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
)

// Logs is the log records a test has seen, each a map of its attributes
// with "msg" and "level" included; safe for concurrent use.
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

// Count is how many records have msg and every given attribute value.
func (l *Logs) Count(msg string, fields map[string]string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if line["msg"] != msg {
			continue
		}
		ok := true
		for k, v := range fields {
			ok = ok && line[k] == v
		}
		if ok {
			n++
		}
	}
	return n
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
