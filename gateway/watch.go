package gateway

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
// Kubernetes ConfigMap swaps a "..data" symlink beside it, so the event
// does not even carry the file's name. Only the events that can change the
// file count (see watchedNames): the file's own, and those of the links
// its path goes through. Other files of the folder (a log, a pid file)
// may change all the time; were their events to count, each would restart
// the wait below and no reload would ever happen.
//
// A file written in place arrives in pieces (truncated to nothing, then
// written, perhaps in several writes): a reload in between would run on a
// half-written file, and a half that compiles (the rules cut off) would be
// applied. So a change reloads only once the file is stable: the same
// content read twice, settleTime apart, with no event of the file between
// nor for settleTime before: a writer that pauses for less than twice
// settleTime is waited for.
func (g *Gateway) watch(ctx context.Context) {
	running := g.cur.Load().plan.cfg.Sum()
	sum := running[:] // the file as the running config was read from it
	var (
		events <-chan fsnotify.Event
		errs   <-chan error
	)
	if !g.opts.Watch || g.opts.Path == "" {
		// events stays nil: only SIGHUP reloads
	} else if w, err := fsnotify.NewWatcher(); err != nil {
		g.log.Warn("config file not watched", "err", err)
	} else {
		defer w.Close()
		if err := w.Add(filepath.Dir(g.opts.Path)); err != nil {
			g.log.Warn("config file not watched", "err", err)
		} else {
			events, errs = w.Events, w.Errors
		}
	}
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	var seen []byte // the content read at the last settle, if it was a change
	names := watchedNames(g.opts.Path)
	if events != nil && !bytes.Equal(fileSum(g.opts.Path), sum) {
		// Changed between the running config's read and the watch's
		// start: no event will tell.
		settle.Reset(settleTime)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.opts.Hangup:
			g.Reload("SIGHUP")
			sum = fileSum(g.opts.Path)
		case ev, ok := <-events:
			if !ok {
				events, errs = nil, nil
				g.log.Warn("config file watch ended; SIGHUP and POST /admin/reload still reload")
				continue
			}
			if !names[filepath.Clean(ev.Name)] {
				continue // another file of the folder
			}
			seen = nil
			settle.Reset(settleTime)
		case err, ok := <-errs:
			// fsnotify blocks its event loop until an error is read: this
			// case keeps the watch alive. An overflow may have hidden a
			// change, so look at the file.
			if ok {
				g.log.Warn("config file watch", "err", err)
				seen = nil
				settle.Reset(settleTime)
			}
		case <-settle.C:
			names = watchedNames(g.opts.Path) // a link may point elsewhere now
			s := fileSum(g.opts.Path)
			switch {
			case s == nil || bytes.Equal(s, sum):
				seen = nil // unreadable, or back to what runs
			case bytes.Equal(s, seen):
				sum, seen = s, nil
				g.Reload("file change")
			default:
				seen = s // changed: look again once more time passed
				settle.Reset(settleTime)
			}
		}
	}
}

// watchedNames returns the paths, as the watch of path's folder names
// them in its events, whose events can change the file at path: path itself
// and, when path is a symbolic link, every entry of the folder that its
// links go through. A Kubernetes ConfigMap mounts gateway.yaml as a link to
// ..data/gateway.yaml, and an update swaps the ..data link (renaming a new
// link over it): the events name ..data, never gateway.yaml. Links are
// followed a few deep, relative ones from the folder of the link.
func watchedNames(path string) map[string]bool {
	path = filepath.Clean(path)
	dir := filepath.Dir(path)
	names := map[string]bool{path: true}
	p := path
	for range 8 {
		target, err := os.Readlink(p)
		if err != nil {
			break // not a link (or gone): nothing more to follow
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(p), target)
		}
		target = filepath.Clean(target)
		// The entry of dir that target lies under, if any.
		for q := target; filepath.Dir(q) != q; q = filepath.Dir(q) {
			if filepath.Dir(q) == dir {
				names[q] = true
				break
			}
		}
		p = target
	}
	return names
}

// settleTime is how long a changed config file must stay unchanged before
// the watch reloads it.
const settleTime = 250 * time.Millisecond

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
