// Package cache is the gateway's cache of the upstream's redirects: the
// 301, 302, 303, 307 and 308 answers (and, for a short time, the 404 and
// 410 ones) that the upstream asks it to keep with a targeted field (RFC
// 9213: Linkgate-Cache-Control, else CDN-Cache-Control), or that a
// route's default_ttl allows, held in memory within a bound in bytes, and
// served again without asking the upstream. It sits behind the limiter
// and the visit counter, so that every request is limited and counted as
// before, answered from the cache or not.
//
// Concurrent misses of one key send one request upstream (Handler); an
// answer past its freshness is served while it is renewed in the
// background (stale-while-revalidate) and when the upstream fails
// (stale-if-error, RFC 5861). Purges (Store.Purge, PurgePrefix, PurgeAll)
// come from the admin API, from the upstream's PurgeField, and from the
// other gateways of a fleet (Fleet).
//
// The entries live in an otter cache (github.com/maypok86/otter/v2):
// bounded by weight, here the bytes of an entry, evicting by W-TinyLFU,
// which keeps the keys asked for often when a flood of keys asked for
// once passes through, with an expiry per entry and Set visible to the
// next Get (ristretto drops and delays sets, which would send a second
// request upstream for a key just fetched).
package cache

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/maypok86/otter/v2"
)

// entry is an answer kept, or a note: with vary set, that the answers
// of a key depend on some request fields, each kept under a key of its
// own, made of the note's key, its generation and those fields' values
// (variantKey); with search set, that the answers of a path carry a
// No-Vary-Search, each kept under the path's note key, the note's
// generation and the query as the field sees it (searchKey).
type entry struct {
	status     int
	fields     []field // as the client gets them (a slice: faster to copy than a map)
	body       []byte
	stored     time.Time     // when the answer arrived
	arrivedAge time.Duration // its Age when it arrived
	fresh      time.Time     // fresh until then
	swr        time.Time     // served while renewed until then
	sie        time.Time     // served when the upstream fails until then
	vary       []string      // canonical names: the note of a varying key
	search     *search       // the note of a path whose answers carry a No-Vary-Search
	gen        uint64        // the note's generation
	weight     uint32

	ageField atomic.Pointer[ageField] // the last Age served, for the hits of the same second
}

// field is a field of a kept answer: its canonical name and its values,
// clipped, so that an append by a handler in front copies them (the hits
// share them).
type field struct {
	name   string
	values []string
}

// ageField is an Age value made once for the hits of one second.
type ageField struct {
	secs   int64
	values []string // clipped: shared by the hits
}

// age returns the Age field's values for an age of secs seconds, made
// once per second rather than once per hit.
func (e *entry) age(secs int64) []string {
	if a := e.ageField.Load(); a != nil && a.secs == secs {
		return a.values
	}
	a := &ageField{secs: secs, values: []string{strconv.FormatInt(secs, 10)}}
	e.ageField.Store(a)
	return a.values
}

// entryOverhead is what an entry costs beyond its key, fields and body:
// the entry, its field slice and the cache library's node, measured (see
// TestMemoryBound).
const entryOverhead = 320

// expires is when e may no longer be served at all.
func (e *entry) expires() time.Time {
	t := e.fresh
	if e.swr.After(t) {
		t = e.swr
	}
	if e.sie.After(t) {
		t = e.sie
	}
	return t
}

// Store holds the entries of one gateway process: it outlives config
// reloads. It is safe for concurrent use.
type Store struct {
	c       *otter.Cache[string, *entry]
	m       *Metrics
	now     func() time.Time
	gen     atomic.Uint64
	flights flights
	renew   flights // background renewals, one per key

	mu    sync.Mutex
	fleet Publisher // nil: purges stay local
}

// Publisher sends a purge to the other gateways of a fleet.
type Publisher interface {
	Publish(p Purge)
}

// NewStore returns a Store holding at most maxBytes of entries. m may be
// nil; now nil is time.Now.
func NewStore(maxBytes int64, m *Metrics, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	s := &Store{m: m, now: now}
	s.c = otter.Must(&otter.Options[string, *entry]{
		MaximumWeight: uint64(maxBytes),
		Weigher:       func(_ string, e *entry) uint32 { return e.weight },
		ExpiryCalculator: otter.ExpiryWritingFunc(func(en otter.Entry[string, *entry]) time.Duration {
			return en.Value.expires().Sub(s.now())
		}),
		OnDeletion: func(e otter.DeletionEvent[string, *entry]) {
			if e.Cause == otter.CauseOverflow {
				s.m.evicted()
			}
		},
	})
	m.watch(s)
	return s
}

// Resize sets the bound in bytes, evicting what no longer fits.
func (s *Store) Resize(maxBytes int64) { s.c.SetMaximum(uint64(maxBytes)) }

// Len is the number of entries (an estimate while evictions run).
func (s *Store) Len() int { return s.c.EstimatedSize() }

// Bytes is the weight of the entries.
func (s *Store) Bytes() uint64 { return s.c.WeightedSize() }

// SetPublisher makes the purges of this store reach the fleet through p
// (nil: local only).
func (s *Store) SetPublisher(p Publisher) {
	s.mu.Lock()
	s.fleet = p
	s.mu.Unlock()
}

func (s *Store) publisher() Publisher {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fleet
}

// get returns the entry of key, nil for none.
func (s *Store) get(key string) *entry {
	e, _ := s.c.GetIfPresent(key)
	return e
}

func (s *Store) set(key string, e *entry) {
	if e.expires().After(s.now()) {
		s.c.Set(key, e)
	}
}

// Purge is one purge: of a key with its query strings and variants, of
// every key starting with a prefix, or of everything.
type Purge struct {
	Key    string `json:"key,omitempty"`
	Prefix string `json:"prefix,omitempty"`
	All    bool   `json:"all,omitempty"`
}

// Apply purges p here and publishes it to the fleet. It returns the
// number of entries removed.
func (s *Store) Apply(p Purge, source string) int {
	n := s.ApplyLocal(p, source)
	if f := s.publisher(); f != nil {
		f.Publish(p)
	}
	return n
}

// ApplyLocal purges p here only: a purge that came from the fleet.
func (s *Store) ApplyLocal(p Purge, source string) int {
	s.m.purged(source)
	p.Key, p.Prefix = lowerHost(p.Key), lowerHost(p.Prefix)
	switch {
	case p.All:
		n := s.c.EstimatedSize()
		s.c.InvalidateAll()
		return n
	case p.Prefix != "":
		return s.invalidateWhere(func(k string) bool { return strings.HasPrefix(k, p.Prefix) })
	case p.Key != "":
		// The key, its query strings and, through its note, its variants.
		n := 0
		if _, ok := s.c.Invalidate(p.Key); ok {
			n++
		}
		q := p.Key + "?"
		return n + s.invalidateWhere(func(k string) bool { return strings.HasPrefix(k, q) })
	}
	return 0
}

// lowerHost writes the host of a key, or of a prefix, in lower case,
// as Key does.
func lowerHost(k string) string {
	i := strings.IndexByte(k, '/')
	if i < 0 {
		return strings.ToLower(k)
	}
	return strings.ToLower(k[:i]) + k[i:]
}

// invalidateWhere removes the entries whose key match reports: a walk of
// every key, for purges by prefix.
func (s *Store) invalidateWhere(match func(string) bool) int {
	n := 0
	for k := range s.c.Keys() {
		if match(k) {
			if _, ok := s.c.Invalidate(k); ok {
				n++
			}
		}
	}
	return n
}

// flights coalesces the requests of one key: the first runs, the others
// wait for it, then look the key up again.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

// flight is one request upstream for a key, and its outcome.
type flight struct {
	done   chan struct{}
	failed bool // the upstream failed (stale-if-error): the waiters serve their stale answer
}

// join returns the flight of key and whether the caller leads it: the
// leader must call land once it knows what it kept.
func (f *flights) join(key string) (*flight, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl, ok := f.m[key]; ok {
		return fl, false
	}
	if f.m == nil {
		f.m = map[string]*flight{}
	}
	fl := &flight{done: make(chan struct{})}
	f.m[key] = fl
	return fl, true
}

// land ends the flight of key. Its fields are set before: close
// publishes them to the waiters.
func (f *flights) land(key string, fl *flight) {
	f.mu.Lock()
	delete(f.m, key)
	f.mu.Unlock()
	close(fl.done)
}
