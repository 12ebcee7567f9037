package proxy

import (
	"log/slog"
	"time"
)

// NewStdlib is New with httputil.ReverseProxy over http.Transport for
// every target: the client the proxy's own replaced, which the HTTP/1.1
// conformance cases run against too.
func NewStdlib(plan *Plan, m *Metrics, log *slog.Logger) *Proxy {
	return newProxy(nil, plan, m, log, true)
}

// OwnClient reports whether p sends requests through its own HTTP/1.1
// client.
func (p *Proxy) OwnClient() bool { return p.h1 }

// IdleConns is the number of idle connections to each target of the own
// client, in config order.
func (p *Proxy) IdleConns() []int {
	var n []int
	for _, t := range p.pool.targets {
		if t.h1 != nil {
			n = append(n, t.h1.idleCount())
		}
	}
	return n
}

// SetIdleSince backdates every idle connection, as if it had waited d.
func (p *Proxy) SetIdleSince(d time.Duration) {
	for _, t := range p.pool.targets {
		if t.h1 == nil {
			continue
		}
		t.h1.mu.Lock()
		for _, c := range t.h1.idle {
			c.idleAt = c.idleAt.Add(-d)
		}
		t.h1.mu.Unlock()
	}
}

// CheckRounds is how many rounds of health checks p has completed.
func (p *Proxy) CheckRounds() int64 { return p.rounds.Load() }
