package storagetest_test

import (
	"testing"

	"github.com/caddyserver/certmagic"

	"github.com/linkgate/linkgate/edge/storagetest"
)

// TestFileStorage runs the suite on certmagic's file storage, the default
// (server.tls.storage.path): two clients of one folder are two gateways on
// one machine.
func TestFileStorage(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) certmagic.Storage {
		return &certmagic.FileStorage{Path: folder(t)}
	})
}

var folders = map[string]string{}

// folder returns one folder per test, the same for every client it opens.
func folder(t *testing.T) string {
	if d, ok := folders[t.Name()]; ok {
		return d
	}
	d := t.TempDir()
	folders[t.Name()] = d
	return d
}
