package h2serve

import "sync"

// workers is a pool of goroutines that ran a handler and wait for the
// next one. A goroutine made for each stream starts with a small stack
// that a handler and the HPACK encoder grow at once, at the price of a
// stack copy each time (a fifth of the CPU of a redirect, measured);
// a goroutine reused keeps its grown stack. The idle ones are taken last
// in, first out, at most maxIdle of them wait, and stop ends them all.
type workers struct {
	mu      sync.Mutex
	idle    []*worker
	stopped bool
}

// maxIdle bounds the goroutines waiting for a handler to run.
const maxIdle = 256

// worker is a goroutine of the pool; ch hands it its next function (nil:
// the pool stopped).
type worker struct{ ch chan func() }

// run runs f on an idle worker, or on a new goroutine.
func (p *workers) run(f func()) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		w.ch <- f
		return
	}
	stopped := p.stopped
	p.mu.Unlock()
	if stopped {
		go f()
		return
	}
	w := &worker{ch: make(chan func(), 1)}
	go w.loop(p, f)
}

// loop runs f, then the functions handed to w while it is idle.
func (w *worker) loop(p *workers, f func()) {
	for f != nil {
		f()
		p.mu.Lock()
		if p.stopped || len(p.idle) >= maxIdle {
			p.mu.Unlock()
			return
		}
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		f = <-w.ch
	}
}

// stop ends the idle workers; those running end after their function.
func (p *workers) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	for _, w := range p.idle {
		close(w.ch)
	}
	p.idle = nil
}
