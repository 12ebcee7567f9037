package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// target is one upstream web server. Its health flips without locks: the
// request path only loads it.
type target struct {
	name    string   // scheme://host[:port], the metric label and log field
	url     *url.URL // scheme and host only (Compile refuses paths)
	healthy atomic.Bool
	// failures counts requests that could not connect. A health check that
	// saw failures rise while it ran does not put the target back: its
	// success predates the failure.
	failures atomic.Uint64
	latency  prometheus.Observer // nil without metrics
	gauge    prometheus.Gauge    // nil without metrics
	h1       *h1Pool             // its connections, when the proxy's own client serves it
}

// setHealthy records up and reports whether it changed.
func (t *target) setHealthy(up bool) bool {
	changed := t.healthy.Swap(up) != up
	if t.gauge != nil {
		// From the flag, not from up: when a health check and a failed
		// request race, the gauge shows whichever verdict won.
		v := 0.0
		if t.healthy.Load() {
			v = 1
		}
		t.gauge.Set(v)
	}
	return changed
}

// pool balances requests round-robin over the healthy targets.
type pool struct {
	ring    []*target // in config order; a target listed twice appears twice (a weight)
	targets []*target // each target once
	next    atomic.Uint64
}

func newPool(urls []*url.URL, m *Metrics) *pool {
	p := &pool{}
	seen := map[string]*target{}
	for _, u := range urls {
		name := u.String()
		t := seen[name]
		if t == nil {
			t = &target{name: name, url: u}
			t.latency, t.gauge = m.acquire(name)
			// Targets start healthy so the gateway serves at once; the first
			// health check runs immediately and corrects this.
			t.setHealthy(true)
			seen[name] = t
			p.targets = append(p.targets, t)
		}
		p.ring = append(p.ring, t)
	}
	return p
}

// pick returns the next healthy target in round-robin order, or the next
// target when none is healthy (nil only for a pool without targets). One
// atomic add per call, no lock.
func (p *pool) pick() *target {
	n := uint64(len(p.ring))
	if n == 0 {
		return nil
	}
	start := p.next.Add(1) - 1
	for i := range n {
		if t := p.ring[(start+i)%n]; t.healthy.Load() {
			return t
		}
	}
	// Every target is out: try them all the same, in turn, as Envoy's
	// panic routing does. A check or a connection that failed under a
	// moment's load takes a target out until the next check; with every
	// target out, refusing every request would turn that moment into an
	// outage, while a target that is really down answers a connection
	// refused as fast as the refusal would.
	return p.ring[start%n]
}

// pickExcept is pick skipping the targets already tried (the retry path).
func (p *pool) pickExcept(tried []*target) *target {
	n := uint64(len(p.ring))
	start := p.next.Add(1) - 1
next:
	for i := range n {
		t := p.ring[(start+i)%n]
		if !t.healthy.Load() {
			continue
		}
		for _, x := range tried {
			if x == t {
				continue next
			}
		}
		return t
	}
	return nil
}

// lookup returns the target whose scheme and host u points at, or nil.
func (p *pool) lookup(u *url.URL) *target {
	for _, t := range p.targets {
		if t.url.Host == u.Host && t.url.Scheme == u.Scheme {
			return t
		}
	}
	return nil
}

func (p *pool) anyHealthy() bool {
	for _, t := range p.targets {
		if t.healthy.Load() {
			return true
		}
	}
	return false
}

// healthLoop checks every target now and then every interval until ctx ends.
func (p *Proxy) healthLoop(ctx context.Context, interval time.Duration) {
	defer close(p.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		p.checkAll(ctx)
		p.rounds.Add(1)
		now := time.Now()
		for _, t := range p.pool.targets {
			if t.h1 != nil {
				t.h1.prune(now)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// checkAll checks the targets in parallel, so one hanging target does not
// delay the verdict on the others.
func (p *Proxy) checkAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, t := range p.pool.targets {
		wg.Go(func() {
			failures := t.failures.Load()
			err := p.check(ctx, t)
			if ctx.Err() != nil {
				return // closing: the verdict is meaningless
			}
			if err == nil && t.failures.Load() != failures {
				return // a request failed to connect meanwhile: wait for the next check
			}
			p.setHealth(t, err)
		})
	}
	wg.Wait()
}

// check GETs the target's health path. Any answer but 2xx within the dial
// timeout is a failure. It shares the proxy's connection pool, so a healthy
// target costs one kept-alive connection, not one per check.
func (p *Proxy) check(ctx context.Context, t *target) error {
	ctx, cancel := context.WithTimeout(ctx, p.checkTimeout)
	defer cancel()
	u := *t.url
	u.Path = p.checkPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("User-Agent", "linkgate-health-check")
	if t.h1 != nil && !t.h1.speaksH2() {
		if err := p.checkH1(req, t); err != errH2 {
			return err
		}
	}
	resp, err := p.transport.RoundTrip(req)
	if err != nil {
		return err
	}
	// Drain a little so the connection can be reused.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("health check answered %d", resp.StatusCode)
	}
	return nil
}

// connectFailed takes t out after a request could not connect to it.
func (p *Proxy) connectFailed(t *target, err error) {
	t.failures.Add(1)
	p.setHealth(t, err)
}

// setHealth takes t out of the pool (err != nil) or puts it back, logging
// the transitions only.
func (p *Proxy) setHealth(t *target, err error) {
	up := err == nil
	if !t.setHealthy(up) {
		return
	}
	if up {
		p.log.Info("upstream target up", "target", t.name)
	} else {
		p.log.Warn("upstream target down", "target", t.name, "err", err)
	}
}
