package analytics

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/tenant"
)

// Erasure
//
// An Erasure removes the counts of one link, or of every link of one
// tenant, counted up to its time At: every tier of the curve, the
// breakdowns, the unique-visitor sketches and the link's entries in the
// top lists. Counts of it that no store held yet (in the flusher's queue,
// in the journal of this or of an earlier process) must not bring it back,
// so a store that erases keeps its erasures and drops, in every later
// Write, what they cover (Unerased), and in every rollup, the rolled rows
// of buckets that ended before the erasure (Erasure.Bucket).
//
// A tenant erasure covers the tenant's all-links total (TenantAll) too. A
// link erasure does not change the tenant's all-links total, nor does any
// erasure change AllLinks, the service's: a total holds no trace of which
// link its visits were on, so the link's share of it cannot be told from
// the rest once summed (see docs/stats-api.md#erasure).

// Erasure is one request to erase: a link (Tenant, Key) or a whole tenant
// (Key ""), up to At.
type Erasure struct {
	Tenant string    // the tenant; "" is the default tenant (a link only)
	Key    string    // the short key; "" for all of Tenant's links
	At     time.Time // counted at or before it is erased
}

// Eraser is a Store that can erase.
type Eraser interface {
	// Erase removes what e covers and keeps e, durably, so that later
	// Writes and rollups of the data it covers change nothing (Unerased,
	// Erasure.Bucket).
	Erase(ctx context.Context, e Erasure) error
}

// ErrCannotErase is returned by Pipeline.Erase when the store keeps no
// erasures.
var ErrCannotErase = errors.New("analytics: this store cannot erase")

// Check returns why e cannot be done, or nil.
func (e Erasure) Check() error {
	switch {
	case e.Tenant == "" && e.Key == "":
		return errors.New("the default tenant is every link without a tenant: erase its links one by one")
	case e.Tenant != "" && !tenant.ValidName(e.Tenant):
		return fmt.Errorf("%q is not a tenant's name", e.Tenant)
	case strings.Contains(e.Key, "/"):
		return fmt.Errorf("%q: a short key holds no /", e.Key)
	case e.At.IsZero():
		return errors.New("no time")
	}
	return nil
}

// Covers reports whether key (as stored: TenantKey, TenantAll) is one e
// erases.
func (e Erasure) Covers(key string) bool {
	if e.Key != "" {
		return key == TenantKey(e.Tenant, e.Key)
	}
	return strings.HasPrefix(key, e.Tenant+"/")
}

// Prefix returns the stored keys e covers: the link's key, or the start
// of every key of the tenant ("<tenant>/", its TenantAll among them).
func (e Erasure) Prefix() (prefix string, exact bool) {
	if e.Key != "" {
		return TenantKey(e.Tenant, e.Key), true
	}
	return e.Tenant + "/", false
}

// Bucket reports whether the bucket of key starting at start and lasting
// step is erased for good: it is one of e's keys and it ended by e.At, so
// that nothing it holds was counted after the erasure.
func (e Erasure) Bucket(key string, start time.Time, step time.Duration) bool {
	return e.Covers(key) && !start.Add(step).After(e.At)
}

// Erased is a set of erasures, indexed by link and by tenant, so that
// telling whether a key is erased costs two map lookups however many
// erasures a store keeps. The zero Erased erases nothing.
type Erased struct {
	links   map[string]time.Time // a link's stored key → its latest erasure
	tenants map[string]time.Time // a tenant → its latest erasure
}

// NewErased returns the set of es.
func NewErased(es []Erasure) Erased {
	var s Erased
	for _, e := range es {
		m, k := &s.links, TenantKey(e.Tenant, e.Key)
		if e.Key == "" {
			m, k = &s.tenants, e.Tenant
		}
		if *m == nil {
			*m = make(map[string]time.Time)
		}
		if e.At.After((*m)[k]) {
			(*m)[k] = e.At
		}
	}
	return s
}

// at returns the latest erasure covering key, if any.
func (s Erased) at(key string) (time.Time, bool) {
	at, ok := s.links[key]
	if t, _ := SplitKey(key); t != "" {
		if ta, tok := s.tenants[t]; tok && (!ok || ta.After(at)) {
			at, ok = ta, true
		}
	}
	return at, ok
}

// Bucket is Erasure.Bucket for the latest erasure of key in s.
func (s Erased) Bucket(key string, start time.Time, step time.Duration) bool {
	at, ok := s.at(key)
	return ok && !start.Add(step).After(at)
}

// Holds reports whether the bucket of key starting at start and lasting
// step holds the time of key's latest erasure in s: a rolled value of it
// may have been read before that erasure and written after it, so it
// must be rolled again from what the finer tier holds since.
func (s Erased) Holds(key string, start time.Time, step time.Duration) bool {
	at, ok := s.at(key)
	return ok && !at.Before(start) && start.Add(step).After(at)
}

// covers reports whether an entry of key in a batch placed at placed, in
// the bucket [start, start+step), is erased: the batch was placed by the
// latest erasure of key (its counts are older), or the bucket ended by it.
func (s Erased) covers(placed time.Time, key string, start time.Time, step time.Duration) bool {
	at, ok := s.at(key)
	return ok && (!placed.After(at) || !start.Add(step).After(at))
}

// Unerased returns b without what s erased: the counts, breakdowns and
// sketches of the keys it covers, and the top lists' counts of those
// links (DimLink values), placed before an erasure or in a bucket that
// ended before it. b itself is not changed; b is returned as it is when
// nothing in it is erased.
func Unerased(b Batch, s Erased) Batch {
	if len(s.links) == 0 && len(s.tenants) == 0 {
		return b
	}
	counts := func(c Count) bool { return s.covers(b.At, c.Key, c.Start, c.Step) }
	dims := func(d DimCount) bool {
		return s.covers(b.At, d.Key, d.Day, rollup.Day) ||
			d.Dim == DimLink && s.covers(b.At, d.Value, d.Day, rollup.Day)
	}
	uniqs := func(u UniqueSketch) bool { return s.covers(b.At, u.Key, u.Day, rollup.Day) }
	b.Counts = without(b.Counts, counts)
	b.Dims = without(b.Dims, dims)
	b.Uniques = without(b.Uniques, uniqs)
	return b
}

// without returns s without the elements drop reports, s itself when it
// drops none.
func without[T any](s []T, drop func(T) bool) []T {
	for i, x := range s {
		if !drop(x) {
			continue
		}
		kept := append(make([]T, 0, len(s)-1), s[:i]...)
		for _, y := range s[i+1:] {
			if !drop(y) {
				kept = append(kept, y)
			}
		}
		return kept
	}
	return s
}

// Erase erases the link key of tenant, or all of tenant's links when key
// is "", in the pipeline's store (Flusher.Erase). It returns the erasure
// done; ErrCannotErase when the store cannot erase.
func (p *Pipeline) Erase(ctx context.Context, tenant, key string) (Erasure, error) {
	er, ok := p.store.(Eraser)
	if !ok {
		return Erasure{}, ErrCannotErase
	}
	return p.fl.Erase(ctx, er, tenant, key)
}

// Erase has er erase the link key of tenant, or all of tenant's links
// when key is "": it first takes the recorder's counts and writes them
// with everything waiting, so that they are placed (Batch.At) before the
// erasure, which covers them whether they reach the store now or later
// (from the queue, or from the journal after a restart); then er erases
// up to then.
func (f *Flusher) Erase(ctx context.Context, er Eraser, tenant, key string) (Erasure, error) {
	e := Erasure{Tenant: tenant, Key: key, At: f.opts.Now().UTC()}
	if err := e.Check(); err != nil {
		return Erasure{}, err
	}
	// A batch the store refuses now stays queued or journaled, placed
	// before the erasure, and is dropped when it is written.
	f.Flush(ctx)
	f.mu.Lock()
	e.At = f.opts.Now().UTC()
	if !e.At.After(f.lastAt) {
		e.At = f.lastAt
	}
	f.mu.Unlock()
	if err := er.Erase(ctx, e); err != nil {
		return Erasure{}, err
	}
	return e, nil
}
