package limit

import (
	"context"
	"fmt"
	"time"
)

// Gate is one rule checked outside an HTTP request, counted in a Store
// with the same buckets as a rule of the config: the TLS edge limits the
// handshakes each client address makes for names it has no answer for.
// A Gate is safe for concurrent use.
type Gate struct {
	l *Limiter
	r *rule
}

// NewGate returns a Gate counting under name (the counters' key prefix, so
// it must not be a rule's name) with limits, in store. Every limit must
// hold for Allow to pass.
func NewGate(name string, limits []Limit, store Store) (*Gate, error) {
	r, err := compileRule(Rule{Name: name, Match: defaultGateMatch, Key: IP, Limits: limits}, Bucketed, Identity{}, emailReader{})
	if err != nil {
		return nil, fmt.Errorf("limit: gate %s: %w", name, err)
	}
	l := New(&Plan{}, store, nil, nil)
	return &Gate{l: l, r: r}, nil
}

// defaultGateMatch satisfies compileRule: a Gate is never matched
// against a request.
var defaultGateMatch = Match{Path: "/"}

// Allow counts one event of value at now and reports whether every limit
// still held. A store error is returned with ok true: the caller decides
// whether a failing store lets events pass.
func (g *Gate) Allow(ctx context.Context, value string, now time.Time) (ok bool, err error) {
	v := g.l.check(ctx, g.r, value, now, true)
	switch v.out {
	case limited:
		return false, nil
	case storeError:
		return true, v.err
	}
	return true, nil
}
