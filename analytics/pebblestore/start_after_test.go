package pebblestore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/pebblestore"
)

// TestStartAfter: a store that takes over from another process's makes no
// attempt while it waits (it is starting, not degraded: no attempt failed),
// and opens at once when told the folder is free.
func TestStartAfter(t *testing.T) {
	dir := t.TempDir()
	holder := open(t, dir, analyticstest.DefaultPlan)
	after := make(chan struct{})
	s, err := pebblestore.StartAfter(after, dir, analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	st := s.State()
	if st.Open || st.Attempts != 0 || !errors.Is(st.Err, pebblestore.ErrWaiting) || !errors.Is(st.Err, pebblestore.ErrNotOpen) {
		t.Errorf("State while waiting = %+v, want not open, no attempt, ErrWaiting", st)
	}
	if err := s.Write(t.Context(), oneVisit(time.Now())); !errors.Is(err, pebblestore.ErrNotOpen) {
		t.Errorf("Write while waiting = %v, want ErrNotOpen", err)
	}
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	close(after)
	waitOpen(t, s)
	if err := s.Write(t.Context(), oneVisit(time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC))); err != nil {
		t.Errorf("Write once open: %v", err)
	}
}

// TestStartAfterClosedWhileWaiting: Close ends the wait.
func TestStartAfterClosedWhileWaiting(t *testing.T) {
	s, err := pebblestore.StartAfter(make(chan struct{}), t.TempDir(), analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close while waiting = %v, want nil", err)
	}
	if _, err := pebblestore.StartAfter(nil, " ", analyticstest.DefaultPlan, nil); err == nil {
		t.Error("StartAfter with an empty path succeeded, want an error")
	}
}
