package analytics

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/rollup"
)

// switchWriter fails while down is set and discards what it is given.
type switchWriter struct{ down atomic.Bool }

func (w *switchWriter) Write(context.Context, Batch) error {
	if w.down.Load() {
		return errors.New("down")
	}
	return nil
}

// TestBacklog: what waits is reported with the oldest bucket it holds,
// the journal's bytes and the visits dropped, and nothing once written.
func TestBacklog(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 10, 7, 30, 0, time.UTC)
	w := &switchWriter{}
	w.down.Store(true)
	rec := NewRecorder(10, nil)
	f := NewFlusher(rec, w, testPlan, FlusherOptions{
		JournalPath: filepath.Join(t.TempDir(), "j"), Now: func() time.Time { return t0 },
	}, nil, nil)
	if b, o, d := f.backlog(); b != 0 || !o.IsZero() || d != 0 {
		t.Errorf("backlog at start = %d, %v, %d; want nothing", b, o, d)
	}
	rec.Record("a", t0.Add(-3*time.Minute), false)
	rec.Record("b", t0, false)
	if err := f.Flush(t.Context()); err == nil {
		t.Fatal("Flush with the store down: no error")
	}
	// The write failed, so the batch went to the journal.
	b, o, d := f.backlog()
	if b == 0 || !o.Equal(t0.Add(-3*time.Minute).Truncate(time.Minute)) || d != 0 {
		t.Errorf("backlog after a failed flush = %d bytes, oldest %v, %d dropped; want bytes, %v, 0", b, o, d, t0.Add(-3*time.Minute).Truncate(time.Minute))
	}
	w.down.Store(false)
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, o, _ := f.backlog(); !o.IsZero() {
		t.Errorf("oldest after the store took everything = %v, want zero", o)
	}

	// Without a journal and with room for one entry, the older batch goes.
	w.down.Store(true)
	f2 := NewFlusher(rec, w, testPlan, FlusherOptions{MaxBuffered: 1, Now: func() time.Time { return t0 }}, nil, nil)
	for range 3 {
		rec.Record("c", t0, true)
	}
	f2.Flush(t.Context())
	rec.Record("d", t0, false)
	f2.Flush(t.Context())
	if _, _, d := f2.backlog(); d != 3 {
		t.Errorf("dropped = %d, want the 3 visits of the older batch", d)
	}
}

// testPlan is the plan of the default tiers and grace (this package's own
// tests cannot import analyticstest, which imports it).
var testPlan = func() *rollup.Plan {
	p, err := rollup.NewPlan(rollup.DefaultTiers(), rollup.DefaultGrace)
	if err != nil {
		panic(err)
	}
	return p
}()
