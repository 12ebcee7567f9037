package pebblestore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/pebblestore"
)

// TestOpenInUseByAnotherProcess opens a folder that a second process holds
// open, as a second gateway on the same analytics.embedded.path would: the
// error says the folder is in use, by which process, and which setting to
// change, instead of only "resource temporarily unavailable".
func TestOpenInUseByAnotherProcess(t *testing.T) {
	if dir := os.Getenv("LINKGATE_PEBBLE_HOLD_DIR"); dir != "" {
		holdChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOpenInUseByAnotherProcess$")
	cmd.Env = append(os.Environ(), "LINKGATE_PEBBLE_HOLD_DIR="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "open\n" {
		t.Fatalf("child: %q, %v; want it to say it opened the store", line, err)
	}

	_, err = pebblestore.Open(dir, analyticstest.DefaultPlan, nil)
	if !errors.Is(err, pebblestore.ErrInUse) {
		t.Fatalf("Open of a folder another process has open = %v, want ErrInUse", err)
	}
	t.Log(err)
	for _, want := range []string{"in use by another process", dir, fmt.Sprintf("(process %d)", cmd.Process.Pid), "analytics.embedded.path"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	// Once the other process has closed it, the folder opens.
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	s, err := pebblestore.Open(dir, analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatalf("Open after the other process closed the folder: %v", err)
	}
	s.Close()
}

// holdChild opens the store in dir, says so, and holds it until its
// standard input closes.
func holdChild(dir string) {
	s, err := pebblestore.Open(dir, analyticstest.DefaultPlan, nil)
	if err != nil {
		panic(err)
	}
	fmt.Println("open")
	io.Copy(io.Discard, os.Stdin)
	if err := s.Close(); err != nil {
		panic(err)
	}
	os.Exit(0)
}

// TestOpenTwiceInProcess: a second Store on an open folder in the same
// process is refused the same way, and the refusal leaves the first one
// working and still holding the folder.
func TestOpenTwiceInProcess(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, analyticstest.DefaultPlan)
	defer s.Close()
	for range 2 {
		_, err := pebblestore.Open(dir, analyticstest.DefaultPlan, nil)
		if !errors.Is(err, pebblestore.ErrInUse) || !strings.Contains(err.Error(), "(this process)") {
			t.Fatalf("second Open = %v, want ErrInUse naming this process", err)
		}
	}
	t0 := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	if err := s.Write(context.Background(), analytics.Batch{Counts: []analytics.Count{{Key: "a", Step: time.Minute, Start: t0, Visits: analytics.Visits{Human: 3}}}}); err != nil {
		t.Fatalf("the first store after a refused second Open: %v", err)
	}
	if ps, err := s.Points(context.Background(), "a", time.Minute, t0, t0.Add(time.Minute)); err != nil || len(ps) != 1 || ps[0].Human != 3 {
		t.Errorf("Points = %v, %v; want the 3 visits written", ps, err)
	}
}

// TestOpenOtherErrorsAreNotInUse: a folder that cannot be a database is
// reported as such, not as in use.
func TestOpenOtherErrorsAreNotInUse(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-folder")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := pebblestore.Open(file, analyticstest.DefaultPlan, nil)
	if err == nil || errors.Is(err, pebblestore.ErrInUse) || !strings.Contains(err.Error(), file) {
		t.Errorf("Open of a regular file = %v, want an error naming it, not ErrInUse", err)
	}
}

// records is a slog.Handler that keeps every record.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *records) WithGroup(string) slog.Handler      { return h }

// TestWALReplayIsLoggedPlainly reopens a store and checks how Pebble's
// replay of the last run's write-ahead log is told: at info level, in plain
// words, with the figures as attributes, and without "stopped reading at
// offset", which reads like damage.
func TestWALReplayIsLoggedPlainly(t *testing.T) {
	dir := t.TempDir()
	t0 := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)
	s := open(t, dir, analyticstest.DefaultPlan)
	err := s.Write(context.Background(), analytics.Batch{
		Counts: []analytics.Count{{Key: "a", Step: time.Minute, Start: t0, Visits: analytics.Visits{Human: 1}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	h := &records{}
	s, err = pebblestore.Open(dir, analyticstest.DefaultPlan, slog.New(h))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	var replays int
	for _, r := range h.recs {
		if strings.Contains(r.Message, "stopped reading") {
			t.Errorf("logged %s %q: Pebble's wording", r.Level, r.Message)
		}
		if !strings.Contains(r.Message, "replayed the write-ahead log of the last run") {
			continue
		}
		replays++
		attrs := map[string]slog.Value{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value; return true })
		if r.Level != slog.LevelInfo || !strings.Contains(r.Message, "normal") {
			t.Errorf("replay logged at %s as %q, want info saying it is normal", r.Level, r.Message)
		}
		// The one write: a count and its index entry, in one batch.
		if attrs["keys"].Kind() != slog.KindInt64 || attrs["keys"].Int64() != 2 || attrs["batches"].Int64() != 1 || attrs["bytes"].Int64() <= 0 ||
			!strings.HasPrefix(attrs["file"].String(), dir) {
			t.Errorf("replay attributes %v, want file under %s, 2 keys in 1 batch, bytes > 0", attrs, dir)
		}
	}
	if replays != 1 {
		t.Errorf("%d replay lines in %d records, want 1", replays, len(h.recs))
	}
}
