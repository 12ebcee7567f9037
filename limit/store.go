package limit

import (
	"context"
	"time"
)

// Level is a bucket size: hits are counted in buckets of one second, one
// minute or one hour, tiers of resolution, so that a short window is
// counted finely and a long one reads few buckets: a day is 24 hours, not
// 86,400 seconds (package doc, Counting).
type Level uint8

// The bucket levels, finest first.
const (
	Second Level = iota
	Minute
	Hour
	NumLevels
)

// BoxLevel is not a bucket size: the one bucket of this level of a counter
// (Start 0) is its penalty box, which Load reads with the counts, in the
// same round trip, as Box.Pack packs it (0: no box). Add and AddNow are
// never given it; PutBox writes it and Reset deletes it.
const BoxLevel = NumLevels

// BoxBucket is the bucket that holds a counter's penalty box.
var BoxBucket = Bucket{Level: BoxLevel}

// Size returns the length of a bucket of level l (0 for BoxLevel).
func (l Level) Size() time.Duration {
	if l >= NumLevels {
		return 0
	}
	return [...]time.Duration{time.Second, time.Minute, time.Hour}[l]
}

// Counter names the hits of one feature value under one rule: the event
// counted (the rule: a login, a signup) and who did it (the client's
// address, user or email). All buckets of a counter are stored together (on one
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
	// Reset deletes the given buckets of c ("unblock this user"); with
	// BoxBucket, its penalty box.
	Reset(ctx context.Context, c Counter, buckets []Bucket) error
	// PutBox puts c in the penalty box b, replacing the box it was in,
	// and keeps the box readable (BoxBucket) until the unix second keep,
	// which is at least b.Until: after the box's end, its trips decide
	// the next box's length. It returns once the backend holds it, so
	// that the reads of every gateway on the same backend made after it
	// see it (memcached: a read answers the checks of its counter for a
	// millisecond after it).
	PutBox(ctx context.Context, c Counter, b Box, keep int64) error
	// Boxes calls yield with each box that has not ended at the unix
	// second now, in no order, until yield returns false: every box of
	// the backend or, where the backend cannot list its keys (memcached),
	// those this process put or read, as it last knew them (see the
	// backend's documentation). yield must not call the store.
	Boxes(ctx context.Context, now int64, yield func(Boxed) bool) error
}

// Box is a counter's penalty box: the client is kept out from Start until
// Until (unix seconds), after its Trips-th trip within the rule's
// penalty.forget_after of each other. The zero Box is no box.
type Box struct {
	Start, Until int64
	Trips        int
}

// In returns whether the box keeps its client out at the unix second now.
func (b Box) In(now int64) bool { return now < b.Until }

// Boxed is a counter and its box.
type Boxed struct {
	Counter
	Box
}

// The fields of a packed box, from the low bits: trips, length (Until -
// Start), Until. 34 bits of unix seconds last until the year 2514.
const (
	packTripBits = 8
	packLenBits  = 21 // 24 days: a week's penalty past a week's window
	packTrips    = 1<<packTripBits - 1
	packLen      = 1<<packLenBits - 1
)

// Pack returns b as one non-negative number, what Load reads for a
// BoxBucket: 0 for no box. A store keeps it as it keeps a count, so that
// the box is read with the counts, by the same command. Trips above 255
// and boxes over 24 days are kept as 255 and 24 days.
func (b Box) Pack() int64 {
	if b.Until <= 0 || b.Until >= 1<<(63-packTripBits-packLenBits) {
		return 0
	}
	n := min(max(b.Until-b.Start, 0), packLen)
	return b.Until<<(packTripBits+packLenBits) | n<<packTripBits | int64(min(max(b.Trips, 1), packTrips))
}

// UnpackBox returns the box v packs (Box.Pack); the zero Box for 0 or a
// number no box packs to.
func UnpackBox(v int64) Box {
	if v <= 0 {
		return Box{}
	}
	b := Box{Until: v >> (packTripBits + packLenBits), Trips: int(v & packTrips)}
	if b.Trips == 0 {
		return Box{}
	}
	b.Start = b.Until - v>>packTripBits&packLen
	return b
}
