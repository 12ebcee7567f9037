package edge

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"
)

// The certificate storage's health. certmagic writes a test file
// (rw_test_<n>) before every order and fails the handshake when that
// fails, saying so only at debug level; a storage that answers but takes
// no write would keep every new name from getting a certificate while the
// gateway looked healthy. So the edge checks the storage the same way
// itself, writing, reading back and deleting a file of its own: once the
// storage answers, then every storageCheckEvery, and every
// storageRecheckEvery while it fails, or once certmagic's own check
// failed. StorageState reports the outcome.

const (
	storageCheckEvery   = 5 * time.Minute
	storageRecheckEvery = 15 * time.Second
	// storageCheckTimeout bounds one check.
	storageCheckTimeout = 30 * time.Second
)

// storageCheckPrefix is the folder of the edge's test files.
const storageCheckPrefix = "linkgate_storage_check"

// certmagicStorageCheck begins the error of certmagic's storage check.
const certmagicStorageCheck = "failed storage check"

// storageHealth is the outcome of the last check. Safe for concurrent use.
type storageHealth struct {
	mu       sync.Mutex
	err      error    // nil: the last check succeeded, or none ran
	leftover []string // test files whose delete failed: deleted at a later check
	poke     chan struct{}
}

func (h *storageHealth) set(err error) {
	h.mu.Lock()
	h.err = err
	h.mu.Unlock()
}

func (h *storageHealth) get() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// failed records a failed write seen elsewhere (certmagic's own check)
// and asks for a check soon.
func (h *storageHealth) failed(err error) {
	h.set(err)
	select {
	case h.poke <- struct{}{}:
	default:
	}
}

// checkStorage writes a test file, reads it back and deletes it, as
// certmagic's storage check does. The file is deleted whatever happened
// after the write was attempted; when that fails too, a later check
// deletes it, so that no check leaves one behind.
func (e *Edge) checkStorage(ctx context.Context) error {
	err := e.checkStorageOnce(ctx)
	e.health.mu.Lock()
	left := e.health.leftover
	e.health.leftover = nil
	e.health.mu.Unlock()
	for _, key := range left {
		if err != nil || e.deleteTestFile(key) != nil {
			e.health.mu.Lock()
			e.health.leftover = append(e.health.leftover, key)
			e.health.mu.Unlock()
		}
	}
	return err
}

// deleteTestFile deletes a test file, or records it for a later check.
func (e *Edge) deleteTestFile(key string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return e.storage.Delete(ctx, key)
}

func (e *Edge) checkStorageOnce(ctx context.Context) error {
	b := make([]byte, 8)
	rand.Read(b)
	key := storageCheckPrefix + "/" + hex.EncodeToString(b)
	want := make([]byte, 1024)
	rand.Read(want)
	ctx, cancel := context.WithTimeout(ctx, storageCheckTimeout)
	defer cancel()
	err := e.storage.Store(ctx, key, want)
	if err == nil {
		var got []byte
		got, err = e.storage.Load(ctx, key)
		if err == nil && !bytes.Equal(got, want) {
			err = fmt.Errorf("read back %d bytes that differ from the %d written", len(got), len(want))
		}
	}
	if derr := e.deleteTestFile(key); derr != nil {
		e.health.mu.Lock()
		if len(e.health.leftover) < 100 {
			e.health.leftover = append(e.health.leftover, key)
		}
		e.health.mu.Unlock()
		if err == nil {
			err = fmt.Errorf("delete: %w", derr)
		}
	}
	if err != nil {
		return fmt.Errorf("writing to the certificate storage fails: %w", err)
	}
	return nil
}

// watchStorage checks the storage once it answers, then every
// storageCheckEvery, and every storageRecheckEvery while it fails, until
// ctx is done. A failure is logged at WARN once, and the recovery.
func (e *Edge) watchStorage(ctx context.Context) {
	if c, ok := e.storage.(Connecting); ok {
		select {
		case <-c.Connected():
		case <-ctx.Done():
			return
		}
	}
	var was error
	for {
		err := e.checkStorage(ctx)
		if ctx.Err() != nil {
			return
		}
		e.health.set(err)
		switch {
		case err != nil && was == nil:
			e.log.Warn("the certificate storage takes no write: no certificate can be obtained or renewed", "err", err)
		case err == nil && was != nil:
			e.log.Info("the certificate storage takes writes again")
		}
		was = err
		wait := storageCheckEvery
		if err != nil {
			wait = storageRecheckEvery
		}
		select {
		case <-ctx.Done():
			return
		case <-e.health.poke:
			// certmagic's check failed: wait a little, then check.
			select {
			case <-ctx.Done():
				return
			case <-time.After(storageRecheckEvery):
			}
		case <-time.After(wait):
		}
	}
}

// Storage states of StorageState.
const (
	StorageOK         = "ok"
	StorageConnecting = "connecting" // not answering yet
	StorageFailing    = "failing"    // answering, but a write or read back failed
)

// StorageState returns the certificate storage's state and, unless it is
// StorageOK, why: not connected yet, or its last check (the edge's own or
// certmagic's before an order) failed. It is StorageOK without ACME (no
// storage).
func (e *Edge) StorageState() (string, error) {
	if e.magic == nil {
		return StorageOK, nil
	}
	if err := e.storageReady(); err != nil {
		return StorageConnecting, err
	}
	if err := e.health.get(); err != nil {
		return StorageFailing, err
	}
	return StorageOK, nil
}

// isStorageCheck reports whether err is certmagic's storage check failing.
func isStorageCheck(err error) bool {
	return err != nil && strings.Contains(err.Error(), certmagicStorageCheck)
}
