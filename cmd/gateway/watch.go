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

// watch reloads the config on SIGHUP and when the file changes. It watches
// the file's directory, not the file: editors and Kubernetes replace a file
// by renaming another over it, which ends a watch on the file itself.
func (g *gateway) watch(ctx context.Context, hup <-chan os.Signal) {
	sum := fileSum(g.path)
	var events <-chan fsnotify.Event
	if !g.watchFile {
		// events stays nil: only SIGHUP reloads
	} else if w, err := fsnotify.NewWatcher(); err != nil {
		g.log.Warn("config file not watched", "err", err)
	} else {
		defer w.Close()
		if err := w.Add(filepath.Dir(g.path)); err != nil {
			g.log.Warn("config file not watched", "err", err)
		} else {
			events = w.Events
		}
	}
	// A change shows as several events (truncate, write, rename): act once
	// they have settled.
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	base := filepath.Base(g.path)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			g.reload("SIGHUP")
			sum = fileSum(g.path)
		case ev := <-events:
			if filepath.Base(ev.Name) == base {
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

func fileSum(path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	s := sha256.Sum256(b)
	return s[:]
}
