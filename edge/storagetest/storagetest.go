// Package storagetest is the conformance suite every certificate storage
// of the TLS edge runs (certmagic's file storage, the default, and
// edge/cassandra): the Storage contract certmagic documents (file and
// folder semantics, fs.ErrNotExist, Delete of a folder) and a Locker that
// excludes, waits, honours cancellation and frees on Unlock.
package storagetest

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/linkgate/linkgate/internal/testkit"
)

// Opener returns an empty storage, and a second call in the same test
// another client of the same storage.
type Opener = func(t *testing.T) certmagic.Storage

// Run runs the suite; open returns an empty storage, and a second call in
// the same test returns another client of the same storage (another
// gateway of a fleet). Every call a case makes has a deadline: a storage
// that hangs fails the case instead of the test binary.
func Run(t *testing.T, open Opener) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T, ctx context.Context, open Opener)
	}{
		{"StoreLoad", testStoreLoad},
		{"ExistsStat", testExistsStat},
		{"List", testList},
		{"Delete", testDelete},
		{"LockExcludes", testLockExcludes},
		{"LockCancelled", testLockCancelled},
		{"LockConcurrent", testLockConcurrent},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testkit.Slack(2*time.Minute))
			defer cancel()
			c.run(t, ctx, open)
		})
	}
}

func testStoreLoad(t *testing.T, ctx context.Context, open Opener) {
	s := open(t)
	if _, err := s.Load(ctx, "certificates/ca/a.example/a.example.crt"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load of a missing key: %v, want fs.ErrNotExist", err)
	}
	must(t, s.Store(ctx, "certificates/ca/a.example/a.example.crt", []byte("one")))
	must(t, s.Store(ctx, "certificates/ca/a.example/a.example.crt", []byte("two")))
	if v, err := s.Load(ctx, "certificates/ca/a.example/a.example.crt"); err != nil || string(v) != "two" {
		t.Errorf("Load after two Stores: %q %v, want the last", v, err)
	}
	if v, err := open(t).Load(ctx, "certificates/ca/a.example/a.example.crt"); err != nil || string(v) != "two" {
		t.Errorf("another client's Load: %q %v, want what the first stored", v, err)
	}
}

func testExistsStat(t *testing.T, ctx context.Context, open Opener) {
	s := open(t)
	must(t, s.Store(ctx, "acme/ca/users/ops/ops.json", []byte("{}")))
	for _, k := range []string{"acme", "acme/ca", "acme/ca/users/ops", "acme/ca/users/ops/ops.json"} {
		if !s.Exists(ctx, k) {
			t.Errorf("Exists(%q) = false", k)
		}
	}
	for _, k := range []string{"acme/c", "acme/ca/users/ops/ops", "other"} {
		if s.Exists(ctx, k) {
			t.Errorf("Exists(%q) = true for a key never stored", k)
		}
	}
	ki, err := s.Stat(ctx, "acme/ca/users/ops/ops.json")
	if err != nil || !ki.IsTerminal || ki.Size != 2 || time.Since(ki.Modified) > time.Minute {
		t.Errorf("Stat of a file: %+v %v", ki, err)
	}
	ki, err = s.Stat(ctx, "acme/ca")
	if err != nil || ki.IsTerminal {
		t.Errorf("Stat of a folder: %+v %v, want a non-terminal key", ki, err)
	}
	if _, err := s.Stat(ctx, "nothing/here"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat of a missing key: %v, want fs.ErrNotExist", err)
	}
}

func testList(t *testing.T, ctx context.Context, open Opener) {
	s := open(t)
	for _, k := range []string{"c/x/1.crt", "c/x/1.key", "c/y/2.crt", "c/z.json"} {
		must(t, s.Store(ctx, k, []byte(k)))
	}
	got, err := s.List(ctx, "c", false)
	slices.Sort(got)
	if want := []string{"c/x", "c/y", "c/z.json"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("List(c) = %q %v, want %q", got, err, want)
	}
	got, err = s.List(ctx, "c", true)
	slices.Sort(got)
	if want := []string{"c/x", "c/x/1.crt", "c/x/1.key", "c/y", "c/y/2.crt", "c/z.json"}; err != nil || !isSubset([]string{"c/x/1.crt", "c/x/1.key", "c/y/2.crt", "c/z.json"}, got) || !isSubset(got, want) {
		t.Errorf("List(c, recursive) = %q %v, want the files %q (folders may be listed too)", got, err, want)
	}
}

func testDelete(t *testing.T, ctx context.Context, open Opener) {
	s := open(t)
	for _, k := range []string{"d/a/1", "d/a/2", "d/b/3"} {
		must(t, s.Store(ctx, k, []byte(k)))
	}
	must(t, s.Delete(ctx, "d/b/3"))
	if s.Exists(ctx, "d/b/3") {
		t.Errorf("a deleted file exists")
	}
	must(t, s.Delete(ctx, "d/a"))
	for _, k := range []string{"d/a", "d/a/1", "d/a/2"} {
		if _, err := s.Load(ctx, k); !errors.Is(err, fs.ErrNotExist) && k != "d/a" {
			t.Errorf("after deleting its folder, Load(%q): %v", k, err)
		}
		if s.Exists(ctx, k) {
			t.Errorf("after deleting its folder, %q exists", k)
		}
	}
	if err := s.Delete(ctx, "d/never"); err != nil {
		t.Errorf("Delete of a missing key: %v, want nil", err)
	}
}

func testLockExcludes(t *testing.T, ctx context.Context, open Opener) {
	a, b := open(t), open(t)
	must(t, a.Lock(ctx, "issue_cert_x.example"))
	tctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	err := b.Lock(tctx, "issue_cert_x.example")
	cancel()
	if err == nil {
		t.Fatalf("a second client took a held lock")
	}
	if tl, ok := b.(certmagic.TryLocker); ok {
		if ok, err := tl.TryLock(ctx, "issue_cert_x.example"); ok || err != nil {
			t.Errorf("TryLock of a held lock: %v %v, want false", ok, err)
		}
	}
	// Another name is another lock.
	must(t, b.Lock(ctx, "issue_cert_y.example"))
	must(t, b.Unlock(ctx, "issue_cert_y.example"))
	got := make(chan error, 1)
	go func() { got <- b.Lock(ctx, "issue_cert_x.example") }()
	time.Sleep(100 * time.Millisecond)
	must(t, a.Unlock(ctx, "issue_cert_x.example"))
	must(t, testkit.Recv(t, got, 10*time.Second, "a waiting Lock getting the lock after its Unlock"))
	must(t, b.Unlock(ctx, "issue_cert_x.example"))
}

func testLockCancelled(t *testing.T, ctx context.Context, open Opener) {
	a, b := open(t), open(t)
	must(t, a.Lock(ctx, "held"))
	defer a.Unlock(ctx, "held")
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Lock(cctx, "held") }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := testkit.Recv(t, done, 5*time.Second, "Lock returning after its context's cancellation"); err == nil {
		t.Errorf("Lock returned nil after its context was cancelled, the lock being held")
	}
}

func testLockConcurrent(t *testing.T, ctx context.Context, open Opener) {
	var inside, most atomic.Int32
	var wg sync.WaitGroup
	for range 4 {
		s := open(t)
		wg.Go(func() {
			for range 2 {
				if err := s.Lock(ctx, "shared"); err != nil {
					t.Error(err)
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(5 * time.Millisecond)
				inside.Add(-1)
				if err := s.Unlock(ctx, "shared"); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait() // bounded: every Lock and Unlock has ctx's deadline
	if most.Load() != 1 {
		t.Errorf("%d clients held the lock at once", most.Load())
	}
}

func isSubset(sub, of []string) bool {
	for _, s := range sub {
		if !slices.Contains(of, s) {
			return false
		}
	}
	return true
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
