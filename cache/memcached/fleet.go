// Package memcached carries the cache's purges between the gateways of a
// fleet through the memcached servers their limiter shares: each purge is
// numbered by an increment of one counter and kept under its number for
// a minute, and every gateway reads the counter a few times a second and
// applies the purges it has not seen. memcached has no publish and
// subscribe; a counter read every 200 ms costs one small request, and a
// purge reaches every gateway within about a second. The requests go
// through the limiter's own client of the server that holds the counter
// (limit/memcached.Store.Client): one client per memcached server in a
// gateway, whatever uses it.
package memcached

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/linkgate/linkgate/cache"
)

// Client is what a Fleet asks of memcached: a *memcache.Client of the
// server that holds the Fleet's keys (they live on one server, so that
// one get reads every purge missed).
type Client interface {
	Get(key string) (*memcache.Item, error)
	GetMulti(keys []string) (map[string]*memcache.Item, error)
	Increment(key string, delta uint64) (uint64, error)
	Add(item *memcache.Item) error
	Set(item *memcache.Item) error
}

var _ Client = (*memcache.Client)(nil)

// Name is what picks the server of the Fleet's keys among the limiter's
// (limit/memcached.Store.Client(Name)).
const Name = "linkgate:cache:purge"

// The keys, and how long a purge is kept: far longer than a poll, so that
// a gateway that misses a few polls still finds every purge.
const (
	seqKey    = "linkgate:cache:purge:seq"
	recPrefix = "linkgate:cache:purge:"
	recTTL    = 60 // seconds
	// Poll is how often a gateway reads the counter.
	Poll = 200 * time.Millisecond
	// lostAfter is how long a number may stay without its purge (its
	// sender died between the increment and the write, or memcached
	// evicted it) before the gateway purges everything instead.
	lostAfter = 2 * time.Second
	// maxBehind is how many purges a gateway reads one by one; further
	// behind, it purges everything.
	maxBehind = 256
)

// record is a purge as memcached keeps it.
type record struct {
	From  string      `json:"from"`
	Purge cache.Purge `json:"purge"`
}

// Fleet sends this gateway's purges to the others and applies theirs to
// its Store. Create it with New; Close stops it. Safe for concurrent use.
type Fleet struct {
	c     Client
	store *cache.Store
	m     *cache.Metrics
	log   *slog.Logger
	id    string

	out  chan cache.Purge
	stop chan struct{}
	done sync.WaitGroup
	once sync.Once

	// poll's state, touched only by its goroutine.
	last        int64 // the last number applied; -1: not read yet
	missingFrom time.Time
}

var _ cache.Publisher = (*Fleet)(nil)

// New starts a Fleet on c (the limiter's client of the server that
// holds Name) for store. m and log may be nil.
func New(c Client, store *cache.Store, m *cache.Metrics, log *slog.Logger) *Fleet {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var b [8]byte
	rand.Read(b[:])
	f := &Fleet{c: c, store: store, m: m, log: log, id: hex.EncodeToString(b[:]),
		out: make(chan cache.Purge, 64), stop: make(chan struct{}), last: -1}
	// The counter read once before the gateway serves: the purges
	// numbered after it are the ones this gateway applies.
	if err := f.read(time.Now()); err != nil {
		f.log.Warn("cache purges of the fleet not read", "err", err)
	}
	f.done.Add(2)
	go f.send()
	go f.poll()
	return f
}

// Publish queues p for the fleet. It never blocks a request: with 64
// purges queued already, p is dropped and counted in
// linkgate_cache_fleet_errors_total.
func (f *Fleet) Publish(p cache.Purge) {
	select {
	case f.out <- p:
	default:
		f.m.FleetError()
		f.log.Warn("cache purge not sent to the fleet: too many queued", "purge", p)
	}
}

// Close stops the Fleet; the purges still queued are not sent.
func (f *Fleet) Close() error {
	f.once.Do(func() { close(f.stop) })
	f.done.Wait()
	return nil
}

func (f *Fleet) send() {
	defer f.done.Done()
	for {
		select {
		case <-f.stop:
			return
		case p := <-f.out:
			if err := f.write(p); err != nil {
				f.m.FleetError()
				f.log.Warn("cache purge not sent to the fleet", "purge", p, "err", err)
			}
		}
	}
}

// write numbers p and keeps it under its number.
func (f *Fleet) write(p cache.Purge) error {
	n, err := f.c.Increment(seqKey, 1)
	if errors.Is(err, memcache.ErrCacheMiss) {
		if err = f.c.Add(&memcache.Item{Key: seqKey, Value: []byte("0")}); err != nil && !errors.Is(err, memcache.ErrNotStored) {
			return err
		}
		n, err = f.c.Increment(seqKey, 1)
	}
	if err != nil {
		return err
	}
	b, _ := json.Marshal(record{From: f.id, Purge: p})
	return f.c.Set(&memcache.Item{Key: recPrefix + strconv.FormatUint(n, 10), Value: b, Expiration: recTTL})
}

func (f *Fleet) poll() {
	defer f.done.Done()
	t := time.NewTicker(Poll)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
			if err := f.read(time.Now()); err != nil {
				f.m.FleetError()
				f.log.Warn("cache purges of the fleet not read", "err", err)
			}
		}
	}
}

// read applies the purges numbered after the last one applied.
func (f *Fleet) read(now time.Time) error {
	it, err := f.c.Get(seqKey)
	seq := int64(0)
	switch {
	case errors.Is(err, memcache.ErrCacheMiss):
	case err != nil:
		return err
	default:
		if seq, err = strconv.ParseInt(string(it.Value), 10, 64); err != nil {
			return err
		}
	}
	switch {
	case f.last < 0:
		// The first read. Before New returned, the store had nothing
		// the purges before could have removed; after a failed first
		// read, what it kept since may have missed some.
		if f.store.Len() > 0 {
			f.all("the fleet's purges could not be read since the start", seq)
		}
		f.last = seq
		return nil
	case seq == f.last:
		return nil
	case seq < f.last || seq-f.last > maxBehind:
		// memcached restarted (the counter started again) or this gateway
		// fell far behind: purges were lost.
		f.all("the fleet's purge counter went from "+strconv.FormatInt(f.last, 10)+" to "+strconv.FormatInt(seq, 10), seq)
		return nil
	}
	keys := make([]string, 0, seq-f.last)
	for n := f.last + 1; n <= seq; n++ {
		keys = append(keys, recPrefix+strconv.FormatInt(n, 10))
	}
	items, err := f.c.GetMulti(keys)
	if err != nil {
		return err
	}
	for _, k := range keys {
		it, ok := items[k]
		if !ok {
			// Written after its number: wait for it a while.
			if f.missingFrom.IsZero() {
				f.missingFrom = now
			}
			if now.Sub(f.missingFrom) >= lostAfter {
				f.all("a purge of the fleet was lost", seq)
			}
			return nil
		}
		f.missingFrom = time.Time{}
		f.last++
		var r record
		if err := json.Unmarshal(it.Value, &r); err != nil {
			f.all("a purge of the fleet does not parse", seq)
			return nil
		}
		if r.From != f.id {
			f.store.ApplyLocal(r.Purge, "fleet")
		}
	}
	return nil
}

// all purges everything, purges having been lost, and goes on from seq.
func (f *Fleet) all(why string, seq int64) {
	f.log.Warn("cache purged whole: "+why, "seq", seq)
	f.store.ApplyLocal(cache.Purge{All: true}, "fleet")
	f.last, f.missingFrom = seq, time.Time{}
}
