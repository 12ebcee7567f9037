package h2guard

import "time"

// limit is a rate with a burst: burst events at once, then one every
// interval.
type limit struct {
	interval int64 // nanoseconds between two events at the sustained rate
	burst    int64 // events allowed at once
}

// perSecond returns the limit of rate events a second, burst at once.
func perSecond(rate, burst int) limit {
	return limit{interval: int64(time.Second) / int64(max(rate, 1)), burst: int64(max(burst, 1))}
}

// bucket is a token bucket kept as the time at which it will be full again
// (the theoretical arrival time of the generic cell rate algorithm): one
// number, no timer, exact at every event. Times are nanoseconds on the
// connection's monotonic clock. The zero value is full from time 0. A
// bucket is not safe for concurrent use.
type bucket struct{ full int64 }

// take spends a token at now. It reports false, spending nothing, when the
// bucket is empty.
func (b *bucket) take(now int64, l limit) bool {
	t := max(b.full, now) + l.interval
	if t-now > l.burst*l.interval {
		return false
	}
	b.full = t
	return true
}

// give puts a token back. A bucket never holds more than its burst: take
// counts from now at the latest.
func (b *bucket) give(l limit) { b.full -= l.interval }
