package memcached

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/bradfitz/gomemcache/memcache"

	"github.com/linkgate/linkgate/limit"
)

// A counter's penalty box is one more key of the counter,
//
//	lg:<rule>:<value>|b0
//
// on the counter's server, holding the box packed into a number
// (limit.Box.Pack), so that a check of a rule with a penalty reads it in
// the same get as the counts: one more key, no more round trip. PutBox
// writes it with set (one round trip, at a trip only), expiring when the
// limiter no longer needs its trips; Reset deletes it.
//
// memcached cannot list its keys, so Boxes lists those this Store has seen:
// the boxes it put, and those its reads found (a client boxed by another
// gateway that comes to this one). So GET /admin/boxed on a gateway of a
// fleet lists the clients boxed that tried this gateway since they were
// boxed, each as memcached has it when listed; a client boxed on one
// gateway that never came back through another is listed on the first
// alone. The list keeps at most maxSeen boxes: past that, once the ended
// ones are dropped, a new box is not listed (it keeps its client out all
// the same).

// maxSeen bounds the boxes a Store lists.
const maxSeen = 1 << 16

// seenBoxes is the boxes a Store put or read, by counter. It is safe for
// concurrent use.
type seenBoxes struct {
	mu sync.Mutex
	m  map[limit.Counter]limit.Box
}

// note records c's box b as read or put at the unix second now.
func (s *seenBoxes) note(c limit.Counter, b limit.Box, now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[limit.Counter]limit.Box{}
	}
	if _, ok := s.m[c]; !ok && len(s.m) >= maxSeen {
		for k, v := range s.m {
			if !v.In(now) {
				delete(s.m, k)
			}
		}
		if len(s.m) >= maxSeen {
			return
		}
	}
	s.m[c] = b
}

func (s *seenBoxes) forget(c limit.Counter) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
}

// PutBox implements limit.Store: a set of the counter's box key, kept
// until keep.
func (s *Store) PutBox(ctx context.Context, c limit.Counter, b limit.Box, keep int64) error {
	if err := s.check(ctx, "put box"); err != nil {
		return err
	}
	sv, sh := s.locate(c)
	defer sh.written(c) // the counter's last read no longer answers
	now := time.Now().Unix()
	if err := sv.set(Key(c, limit.BoxBucket), b.Pack(), time.Duration(keep-now)*time.Second); err != nil {
		return fmt.Errorf("memcached: put box: %w", err)
	}
	s.seen.note(c, b, now)
	return nil
}

// Boxes implements limit.Store: the boxes this Store put or read (see
// above), as it last saw them.
func (s *Store) Boxes(ctx context.Context, now int64, yield func(limit.Boxed) bool) error {
	if err := s.check(ctx, "boxes"); err != nil {
		return err
	}
	s.seen.mu.Lock()
	var live []limit.Boxed
	for c, b := range s.seen.m {
		if b.In(now) {
			live = append(live, limit.Boxed{Counter: c, Box: b})
		}
	}
	s.seen.mu.Unlock()
	for _, b := range live {
		if !yield(b) {
			break
		}
	}
	return nil
}

// noteRead records the box a Load read, if it read one: the box bucket
// is last in a check's list.
func (s *Store) noteRead(c limit.Counter, buckets []limit.Bucket, counts []int64) {
	if n := len(buckets); n > 0 && buckets[n-1].Level == limit.BoxLevel && counts[n-1] != 0 {
		if b := limit.UnpackBox(counts[n-1]); b.Until != 0 {
			s.seen.note(c, b, time.Now().Unix())
		}
	}
}

// set stores v under key for ttl (at least a second).
func (sv *server) set(key string, v int64, ttl time.Duration) error {
	if sv.open.Load() {
		return ErrUnavailable
	}
	inc(sv.opSet)
	return sv.result(opSet, sv.client.Set(&memcache.Item{Key: key, Value: strconv.AppendInt(nil, v, 10), Expiration: expiration(ttl)}))
}
