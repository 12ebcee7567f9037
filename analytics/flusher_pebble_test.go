package analytics_test

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/pebblestore"
)

// downWriter fails every Write while down is set, else passes it on.
type downWriter struct {
	analytics.Writer
	down atomic.Bool
}

func (w *downWriter) Write(ctx context.Context, b analytics.Batch) error {
	if w.down.Load() {
		return errDown
	}
	return w.Writer.Write(ctx, b)
}

// TestFlusherWithPebble runs the recorder and flusher against the embedded
// store: counts survive a restart of the store, an outage ended by a
// restart loses nothing (the final flush journals, the next process writes
// the journal), a replay of batches the store applied already changes
// nothing, and the memory merge neither misses nor double counts around a
// flush.
func TestFlusherWithPebble(t *testing.T) {
	dir := t.TempDir()
	dbPath, journalPath := filepath.Join(dir, "db"), filepath.Join(dir, "journal")
	now := time.Now().UTC().Truncate(time.Minute)
	ctx := t.Context()

	// Run 1: two flushes with visits around them.
	st, err := pebblestore.Open(dbPath, analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := analytics.NewRecorder(1000, nil)
	opts := analytics.FlusherOptions{JournalPath: journalPath, Now: func() time.Time { return now }}
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, opts, nil, nil)
	r := f.Reader(st)
	want := map[string]analytics.Visits{}
	visit := func(key string, at time.Time, bot bool) {
		rec.Record(key, at, bot)
		for _, k := range []string{key, analytics.AllLinks} {
			v := want[k]
			if bot {
				v.Bot++
			} else {
				v.Human++
			}
			want[k] = v
		}
	}
	visit("abc", now, false)
	visit("abc", now.Add(-time.Minute), true)
	visit("xyz", now.Add(-2*time.Hour), false)
	checkStored(t, r, defTiers, want) // from memory only
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkStored(t, r, defTiers, want) // from the store only
	visit("abc", now, false)
	checkStored(t, r, defTiers, want) // both
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkStored(t, exact(st), defTiers, want)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// Run 2: the store reopened keeps everything; then it fails, and the
	// process stops during the outage.
	st, err = pebblestore.Open(dbPath, analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkStored(t, exact(st), defTiers, want)
	dw := &downWriter{Writer: st}
	dw.down.Store(true)
	rec = analytics.NewRecorder(1000, nil)
	f = analytics.NewFlusher(rec, dw, analyticstest.DefaultPlan, opts, nil, nil)
	visit("abc", now, false)
	visit("new", now, true)
	if err := f.Flush(ctx); err == nil {
		t.Fatal("Flush with the store down: no error")
	}
	visit("new", now, false)
	checkStored(t, f.Reader(st), defTiers, want) // kept in the journal, merged
	if err := f.Close(ctx); err != nil {
		t.Fatalf("Close with the store down and the journal writable = %v, want nil", err)
	}

	// Run 3: the store is back; the journal is written once.
	rec = analytics.NewRecorder(1000, nil)
	f = analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, opts, nil, nil)
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkStored(t, exact(st), defTiers, want)
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	checkStored(t, exact(st), defTiers, want)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
}
