package edge

import (
	"bytes"
	"context"
	"crypto/tls"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// watchFiles reads the static certificate and key again when their files
// change, and serves the new pair once both read and match: a renewal
// tool that writes the certificate, then the key, is served the new pair
// when the key lands, and the old pair until then. It watches the files'
// folders (an editor or a Kubernetes secret replaces files by renaming)
// and, in case an event is lost, looks at the files every minute.
func (e *Edge) watchFiles(ctx context.Context) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		e.log.Warn("certificate files not watched; they are read every minute", "err", err)
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	watched := map[string]bool{}
	if w != nil {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}
	add := func() {
		if w == nil {
			return
		}
		c := e.plan.Load().cfg
		for _, f := range []string{c.CertFile, c.KeyFile} {
			if f == "" {
				continue
			}
			if d := filepath.Dir(f); !watched[d] {
				if err := w.Add(d); err == nil {
					watched[d] = true
				}
			}
		}
	}
	add()
	poll := time.NewTicker(time.Minute)
	defer poll.Stop()
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-events:
			if !ok {
				events, errs = nil, nil
				continue
			}
			settle.Reset(fileSettle)
		case <-errs:
			settle.Reset(fileSettle)
		case <-poll.C:
			add()
			e.reloadStatic()
		case <-settle.C:
			add()
			e.reloadStatic()
		}
	}
}

// fileSettle is how long the certificate files must be quiet before they
// are read again.
const fileSettle = 200 * time.Millisecond

// reloadStatic reads the plan's certificate files and serves them if they
// hold a new, matching pair. A pair that does not load leaves the running
// one served, and is counted and logged.
func (e *Edge) reloadStatic() {
	c := e.plan.Load().cfg
	if c.CertFile == "" {
		return
	}
	cert, err := LoadPair(c.CertFile, c.KeyFile)
	if err != nil {
		e.m.reloads.WithLabelValues("failed").Inc()
		e.log.Warn("certificate files changed but do not load; the running certificate stays", "err", err)
		return
	}
	if cur := e.static.Load(); cur != nil && samePair(cur, cert) {
		return
	}
	e.static.Store(cert)
	e.m.reloads.WithLabelValues("ok").Inc()
	e.log.Info("certificate files reloaded", "names", cert.Leaf.DNSNames, "not_after", cert.Leaf.NotAfter)
}

func samePair(a, b *tls.Certificate) bool {
	if len(a.Certificate) != len(b.Certificate) {
		return false
	}
	for i := range a.Certificate {
		if !bytes.Equal(a.Certificate[i], b.Certificate[i]) {
			return false
		}
	}
	return true
}
