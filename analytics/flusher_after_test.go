package analytics_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
)

// TestFlusherAfter is a binary upgrade's hand-over of the journal: the new
// process's flusher (After not closed yet) takes its counts every interval
// and keeps them, readable, without writing or touching the journal the
// old one holds; once the old one's final flush is done and After closes,
// it writes them. Every visit of both is stored once.
func TestFlusherAfter(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore()
		opts := analytics.FlusherOptions{Interval: 10 * time.Second, JournalPath: dir}
		oldRec := analytics.NewRecorder(100, nil)
		old := analytics.NewFlusher(oldRec, st, analyticstest.DefaultPlan, opts, nil, nil)
		oldCtx, stopOld := context.WithCancel(t.Context())
		oldDone := make(chan struct{})
		go func() { old.Run(oldCtx); close(oldDone) }()

		var logs bytes.Buffer
		after := make(chan struct{})
		newOpts := opts
		newOpts.After = after
		newRec := analytics.NewRecorder(100, nil)
		nf := analytics.NewFlusher(newRec, st, analyticstest.DefaultPlan, newOpts, nil, slog.New(slog.NewTextHandler(&logs, nil)))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go nf.Run(ctx)

		oldRec.Record("a", time.Now(), false)
		newRec.Record("a", time.Now(), false)
		newRec.Record("b", time.Now(), false)
		time.Sleep(25 * time.Second) // two intervals of both
		synctest.Wait()
		for _, b := range st.batches {
			for _, c := range b.Counts {
				if c.Key == "b" { // the new process's alone
					t.Fatalf("the new flusher wrote before After: %+v", b)
				}
			}
		}
		// Its counts are taken and read as unsaved meanwhile.
		checkStored(t, nf.Reader(st), defTiers, map[string]analytics.Visits{
			"a": {Human: 2}, "b": {Human: 1}, analytics.AllLinks: {Human: 3},
		})

		// The old process stops: its final flush, then the folders are free.
		oldRec.Record("a", time.Now(), false)
		stopOld()
		<-oldDone
		if err := old.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
		close(after)
		newRec.Record("b", time.Now(), false)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		checkStored(t, exact(st), defTiers, map[string]analytics.Visits{
			"a": {Human: 3}, "b": {Human: 2}, analytics.AllLinks: {Human: 5},
		})
		if s := logs.String(); strings.Contains(s, "level=ERROR") || strings.Contains(s, "level=WARN") {
			t.Errorf("the new flusher complained during the hand-over:\n%s", s)
		}
	})
}

// TestFlusherCloseWaitsForAfter: a new process stopped before the old one
// is done (systemd stops both at once) waits for it, within Close's
// context, before its final flush: its visits reach the store, not the
// void of a journal it cannot open.
func TestFlusherCloseWaitsForAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemStore()
		after := make(chan struct{})
		rec := analytics.NewRecorder(100, nil)
		f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Interval: 10 * time.Second, After: after}, nil, nil)
		rec.Record("a", time.Now(), false)
		closed := make(chan error, 1)
		go func() { closed <- f.Close(t.Context()) }()
		time.Sleep(time.Minute)
		synctest.Wait()
		select {
		case err := <-closed:
			t.Fatalf("Close returned %v before After", err)
		default:
		}
		close(after)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		checkStored(t, exact(st), defTiers, map[string]analytics.Visits{"a": {Human: 1}, analytics.AllLinks: {Human: 1}})
	})
}
