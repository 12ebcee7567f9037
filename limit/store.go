package limit

import (
	"context"
	"time"
)

// Level is a bucket size: hits are counted in buckets of one second, one
// minute or one hour (seed 000: "分级存储").
type Level uint8

// The bucket levels, finest first.
const (
	Second Level = iota
	Minute
	Hour
	NumLevels
)

// Size returns the length of a bucket of level l.
func (l Level) Size() time.Duration {
	return [...]time.Duration{time.Second, time.Minute, time.Hour}[l]
}

// Counter names the hits of one feature value under one rule: the seed's
// event + feature. All buckets of a counter are stored together (on one
// memcached server) so that a check is one round trip.
type Counter struct {
	Rule  string // the rule's name
	Value string // the normalized feature value: an address or prefix, a user id, an email
}

// Bucket is one bucket of a counter.
type Bucket struct {
	Level Level
	Start int64 // unix seconds at which the bucket begins, a multiple of Level.Size
	// TTL is how long after Start the bucket must still be readable: the
	// longest window that reads it plus one bucket. Only Add and AddNow use it.
	TTL time.Duration
}

// Store holds bucket counts. It is what the limiter needs from a backend; the
// in-process Memory store is the default, limit/memcached the distributed one.
// Implementations are safe for concurrent use.
type Store interface {
	// Load writes the count of buckets[i] of c into counts[i], reading all
	// of them in one round trip. A missing or expired bucket counts 0. Adds
	// this process made that the backend has not yet acknowledged are
	// included, so a client never sees its own hits vanish.
	Load(ctx context.Context, c Counter, buckets []Bucket, counts []int64) error
	// Add adds n to each bucket of c, creating missing ones with their TTL.
	// It may return before the backend has applied the add (batched,
	// asynchronous); an error it returns means the add was not accepted.
	Add(ctx context.Context, c Counter, buckets []Bucket, n int64) error
	// AddNow is Add that returns only once the backend has applied the add,
	// for strict rules (count first, then check).
	AddNow(ctx context.Context, c Counter, buckets []Bucket, n int64) error
	// Reset deletes the given buckets of c ("unblock this user").
	Reset(ctx context.Context, c Counter, buckets []Bucket) error
}
