package cqlsession

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics/cassandra/cqlmodel"
	"github.com/linkgate/linkgate/internal/testkit"
)

// records is a slog handler that keeps every record's message and
// attributes.
type records struct {
	mu   sync.Mutex
	recs []map[string]string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	m := map[string]string{"msg": rec.Message}
	rec.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	r.recs = append(r.recs, m)
	r.mu.Unlock()
	return nil
}

// gocql returns the records gocql's lines made.
func (r *records) gocql() []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, m := range r.recs {
		if m["source"] == "gocql" {
			out = append(out, m)
		}
	}
	return out
}

// TestGocqlLoggerThrottles: gocql's lines of one kind (one format) reach
// the log at most once every 10 s, the next one saying how many were held
// back; other kinds have their own interval.
func TestLoggerThrottles(t *testing.T) {
	var recs records
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	l := NewLogger(slog.New(&recs), func() time.Time { return now })
	for i := range 50 { // five a second for ten seconds, from two hosts
		l.Printf("gocql: unable to dial %q: %v\n", []string{"10.0.0.1", "10.0.0.2"}[i%2], "connection refused")
		l.Println(io.ErrUnexpectedEOF)
		now = now.Add(200 * time.Millisecond)
	}
	l.Printf("gocql: Session.handleNodeDown: %s:%d\n", "10.0.0.1", 9042)
	l.Printf("gocql: unable to dial %q: %v\n", "10.0.0.1", "connection refused")
	got := recs.gocql()
	want := []struct{ msg, suppressed string }{
		{`gocql: unable to dial "10.0.0.1": connection refused`, "0"},
		{"unexpected EOF", "0"},
		{"gocql: Session.handleNodeDown: 10.0.0.1:9042", "0"},
		{`gocql: unable to dial "10.0.0.1": connection refused`, "49"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i]["msg"] != w.msg || got[i]["suppressed"] != w.suppressed {
			t.Errorf("line %d: %q suppressed=%s, want %q suppressed=%s", i, got[i]["msg"], got[i]["suppressed"], w.msg, w.suppressed)
		}
	}
}

// TestOutageLogs drives a real gocql session into an outage: the cluster
// (the CQL wire model) goes away after the session connected, and
// gocql tries to reconnect its control connection every second, with
// several lines each time. Each kind of line reaches the log once in the
// 4 s watched, however often gocql repeats it.
func TestOutageLogs(t *testing.T) {
	var recs records
	var h *Handle
	before := 0 // gocql's lines before the outage
	// The server lives as long as this subtest: its end is the outage.
	t.Run("connect", func(t *testing.T) {
		srv := cqlmodel.New(t)
		h = NewPool(slog.New(&recs)).Open(Config{Hosts: []string{srv.Addr()}, Timeout: time.Second}, "test", nil)
		select {
		case <-h.Ready():
		case <-time.After(testkit.Slack(10 * time.Second)):
			t.Fatalf("not connected: %v", h.State().Err)
		}
		before = len(recs.gocql())
	})
	if h == nil {
		t.FailNow()
	}
	defer h.Close()
	// Watched for 4 s from gocql's first line of the outage (reconnecting
	// every second, it logs about six lines a second without the throttle).
	for deadline := time.Now().Add(10 * time.Second); len(recs.gocql()) == before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("gocql logged nothing in 10 s of outage")
		}
	}
	time.Sleep(4 * time.Second)
	lines := recs.gocql()[before:]
	seen := map[string]int{}
	for _, l := range lines {
		seen[kindOf(l["msg"])]++
	}
	for k, n := range seen {
		if n > 1 {
			t.Errorf("%d lines of the kind %q in 4 s of outage, want 1", n, k)
		}
	}
	t.Logf("%d gocql lines in 4 s of outage", len(lines))
	for _, l := range lines {
		t.Logf("%s (suppressed %s)", l["msg"], l["suppressed"])
	}
}

// kindOf is a gocql line without its addresses and numbers, to group the
// lines of one format.
func kindOf(msg string) string {
	b := []byte(msg)
	out := b[:0]
	for _, c := range b {
		if c >= '0' && c <= '9' {
			continue
		}
		out = append(out, c)
	}
	return string(out)
}
