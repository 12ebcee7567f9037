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
	return e.Covers(key) && !endOf(start, step).After(e.At)
}

func endOf(start time.Time, step time.Duration) time.Time { return start.Add(step) }

// erasedIn reports whether an entry of key in a batch placed at at, in
// the bucket [start, start+step), is covered by one of es: the batch was
// placed by the erasure (its counts are older), or the bucket ended by it.
func erasedIn(es []Erasure, at time.Time, key string, start time.Time, step time.Duration) bool {
	for _, e := range es {
		if e.Covers(key) && (!at.After(e.At) || !endOf(start, step).After(e.At)) {
			return true
		}
	}
	return false
}

// Unerased returns b without what es erased: the counts, breakdowns and
// sketches of the keys they cover, and the top lists' counts of those
// links (DimLink values), placed before an erasure or in a bucket that
// ended before it. b itself is not changed; b is returned as it is when
// nothing in it is erased.
func Unerased(b Batch, es []Erasure) Batch {
	if len(es) == 0 {
		return b
	}
	counts := func(c Count) bool { return erasedIn(es, b.At, c.Key, c.Start, c.Step) }
	dims := func(d DimCount) bool {
		return erasedIn(es, b.At, d.Key, d.Day, rollup.Day) ||
			d.Dim == DimLink && erasedIn(es, b.At, d.Value, d.Day, rollup.Day)
	}
	uniqs := func(u UniqueSketch) bool { return erasedIn(es, b.At, u.Key, u.Day, rollup.Day) }
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
