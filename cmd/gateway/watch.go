package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watch reloads the config on SIGHUP and when the file's content changes.
// It watches the file's directory, not the file: editors replace a file by
// renaming another over it, which ends a watch on the file itself, and a
// Kubernetes ConfigMap swaps a "..data" symlink beside it, so the event does
// not even carry the file's name. Any event in the directory therefore
// leads to a look at the file, and only a change of its content reloads.
func (g *gateway) watch(ctx context.Context, hup <-chan os.Signal) {
	sum := fileSum(g.path)
	var (
		events <-chan fsnotify.Event
		errs   <-chan error
	)
	if !g.watchFile {
		// events stays nil: only SIGHUP reloads
	} else if w, err := fsnotify.NewWatcher(); err != nil {
		g.log.Warn("config file not watched", "err", err)
	} else {
		defer w.Close()
		if err := w.Add(filepath.Dir(g.path)); err != nil {
			g.log.Warn("config file not watched", "err", err)
		} else {
			events, errs = w.Events, w.Errors
		}
	}
	// A change shows as several events (truncate, write, rename): act once
	// they have settled.
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			g.reload("SIGHUP")
			sum = fileSum(g.path)
		case _, ok := <-events:
			if !ok {
				events, errs = nil, nil
				g.log.Warn("config file watch ended; SIGHUP and POST /admin/reload still reload")
				continue
			}
			settle.Reset(150 * time.Millisecond)
		case err, ok := <-errs:
			// fsnotify blocks its event loop until an error is read: this
			// case keeps the watch alive. An overflow may have hidden a
			// change, so look at the file.
			if ok {
				g.log.Warn("config file watch", "err", err)
				settle.Reset(150 * time.Millisecond)
			}
		case <-settle.C:
			if s := fileSum(g.path); s != nil && !bytes.Equal(s, sum) {
				sum = s
				g.reload("file change")
			}
		}
	}
}

// fileSum is the SHA-256 of the file's content, nil when it cannot be read
// (a file being replaced): the next event looks again.
func fileSum(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	s := sha256.Sum256(b)
	return s[:]
}
