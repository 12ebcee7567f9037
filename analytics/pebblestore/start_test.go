package pebblestore_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/pebblestore"
	"github.com/linkgate/linkgate/internal/testkit"
)

// waitAttempts waits until s has failed to open n times.
func waitAttempts(t *testing.T, s *pebblestore.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.State().Attempts < n {
		if time.Now().After(deadline) {
			t.Fatalf("not %d failed attempts to open within 10s: %+v", n, s.State())
		}
		time.Sleep(time.Millisecond)
	}
}

// waitOpen waits until s's database is open.
func waitOpen(t *testing.T, s *pebblestore.Store) {
	t.Helper()
	select {
	case <-pebblestore.Opened(s):
	case <-time.After(testkit.Slack(10 * time.Second)):
		t.Fatalf("not open within 10s: %+v", s.State())
	}
}

// TestStartWhileTheFolderIsUnusable: a store started on a path that cannot
// be a folder now returns at once, says why it is not open (State, and the
// error of every method), logs the reason once however many attempts fail,
// and opens by itself once the path is usable.
func TestStartWhileTheFolderIsUnusable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "analytics")
	if err := os.WriteFile(path, []byte("not a folder"), 0o644); err != nil {
		t.Fatal(err)
	}
	h := &records{}
	s, err := pebblestore.StartFS(path, vfs.Default, analyticstest.DefaultPlan, slog.New(h), time.Millisecond, 2*time.Millisecond)
	if err != nil {
		t.Fatalf("Start on a regular file = %v, want a store that opens later", err)
	}
	defer s.Close()
	waitAttempts(t, s, 5)

	st := s.State()
	if st.Open || !errors.Is(st.Err, pebblestore.ErrNotOpen) || !strings.Contains(st.Err.Error(), path) {
		t.Errorf("State = %+v, want not open, ErrNotOpen naming %s", st, path)
	}
	at := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC)
	err = s.Write(t.Context(), oneVisit(at))
	if !errors.Is(err, pebblestore.ErrNotOpen) || !strings.HasPrefix(err.Error(), "pebble: not open yet: ") {
		t.Errorf("Write before open = %v, want %q and the reason", err, "pebble: not open yet: ")
	}
	if _, err := s.Points(t.Context(), "abc", time.Minute, at, at.Add(time.Minute)); !errors.Is(err, pebblestore.ErrNotOpen) {
		t.Errorf("Points before open = %v, want ErrNotOpen", err)
	}
	h.mu.Lock()
	warned := 0
	for _, r := range h.recs {
		if strings.Contains(r.Message, "cannot be opened yet") {
			warned++
		}
	}
	h.mu.Unlock()
	if warned != 1 {
		t.Errorf("%d warnings for %d failed attempts with the same reason, want 1", warned, s.State().Attempts)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitOpen(t, s)
	if st := s.State(); !st.Open || st.Err != nil {
		t.Errorf("State once open = %+v, want open and usable", st)
	}
	if err := s.Write(t.Context(), oneVisit(at)); err != nil {
		t.Fatalf("Write once open: %v", err)
	}
	ps, err := s.Points(t.Context(), "abc", time.Minute, at, at.Add(time.Minute))
	if err != nil || len(ps) != 1 || ps[0].Human != 1 {
		t.Errorf("Points = %v, %v; want the visit written", ps, err)
	}
}

// TestStartWhileAnotherStoreHoldsTheFolder: the folder held by another
// store is a reason like any other; the store opens once it is released.
func TestStartWhileAnotherStoreHoldsTheFolder(t *testing.T) {
	dir := t.TempDir()
	holder := open(t, dir, analyticstest.DefaultPlan)
	s, err := pebblestore.StartFS(dir, vfs.Default, analyticstest.DefaultPlan, nil, time.Millisecond, 2*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waitAttempts(t, s, 2)
	if st := s.State(); !errors.Is(st.Err, pebblestore.ErrInUse) || !errors.Is(st.Err, pebblestore.ErrNotOpen) {
		t.Errorf("State while held = %+v, want ErrNotOpen and ErrInUse", st)
	}
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	waitOpen(t, s)
	if err := s.Write(t.Context(), oneVisit(time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC))); err != nil {
		t.Errorf("Write once released: %v", err)
	}
}

// TestStartClosedBeforeOpen: Close stops the attempts at once, and the
// store is closed, not "not open yet".
func TestStartClosedBeforeOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := pebblestore.Start(path, analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitAttempts(t, s, 1)
	if err := s.Close(); err != nil {
		t.Errorf("Close of a store never opened = %v, want nil", err)
	}
	if err := s.Write(t.Context(), oneVisit(time.Now())); !errors.Is(err, pebblestore.ErrClosed) {
		t.Errorf("Write after Close = %v, want ErrClosed", err)
	}
	if _, err := pebblestore.Start(" ", analyticstest.DefaultPlan, nil); err == nil {
		t.Error("Start with an empty path succeeded, want an error")
	}
}
