// Package limit throttles abusive traffic: rules keyed by client address,
// user or email, each with several windows at once ("2/s, 5/m, 10/h,
// 100/d"), counted in buckets of a second, a minute and an hour (below),
// on a Store that is in process (Memory, the default) or shared
// (limit/memcached). Windows counts the same way outside a request (the TLS
// edge's handshakes per client).
//
// # Counting
//
// A rule's counter (Counter: the rule's name, the event, and the normalized
// feature value) counts hits in buckets of three levels: 1 s, 1 min, 1 h.
// Keys never hold a limit's number, so editing 5/m to 8/m keeps the counts.
// A window up to a minute is counted in seconds, up to an hour in minutes,
// beyond in hours, so no limit reads more than about 60 buckets. Buckets are
// shared per level: 2/s and 5/m both read the second buckets, and the rule
// 2/s, 5/m, 10/h, 100/d reads 60 + 60 + 24 = 144 buckets in one Store.Load
// and a counted hit increments 3.
//
// With precision "bucket" a limit of window w on a level of bucket size S
// sums the current bucket and the k−1 before it, k = ⌈w/S⌉. Its count at
// time t is exactly the hits of those buckets, which lies between the hits
// of (t−(k−1)·S, t] and those of (t−k·S, t]. For w a multiple of S (every
// window but odd ones like 90s) that is: never more than the true count of
// the window, and less by at most the hits of one bucket at its far edge.
// So a client can exceed N per w by at most one bucket's worth of hits
// (2/s can pass 4 hits across a second boundary; 100/d, hits of the
// oldest hour again). Retry-After is exact: the second at which the oldest
// buckets leave the window.
//
// Checks of one process are ordered by time: a check whose clock was read
// before another check counted (a request's clock is read when it comes,
// and it may wait before its check runs) counts at that check's second,
// so it sees that hit. Without that, concurrent checks of one client
// could pass one more than the limit across a second boundary.
//
// With precision "exact" every hit is written to all three levels and a
// window is covered by the coarsest aligned buckets that fit (at 23:30:33 the
// last day is 23:30:00–33 in seconds, 23:00–29 in minutes, 00–22 in hours,
// and yesterday's 23:30:34–59 in seconds and 23:31–59 in minutes: 142
// buckets). The count is exactly the hits whose second lies in the last
// ⌈w⌉ seconds: the error is below one second at the window's far edge.
// Second and minute buckets then live as long as the longest window (a
// day); Bucket.TTL says so. Retry-After is exact here too: for a client
// over a limit, the finer buckets of the minute or hour whose hits must
// leave the window are read (one or two more store operations, only then)
// to find the second they do. The RateLimit header's t on an allowed
// response is an upper bound: a coarse bucket's hits are taken to leave
// with its last second.
// A reset in exact precision clears the minute and hour levels and the
// last two minutes of seconds; a later check may still count up to one
// minute's worth of older hits in the seconds tail of its oldest minute.
//
// # Decisions
//
// Every rule matching a request is checked; the first over a limit answers
// 429 and the request is not counted under any rule, so a client that keeps
// retrying while blocked is free again when its counted hits age out. A
// Strict rule counts first (Store.AddNow) and then checks, so several
// gateways sharing a store never let more than N hits through; a rejection
// that reached the store was counted (one answered from the local memory of
// blocked clients was not). A client found over its limit is remembered by the
// Limiter until the second it can pass again, and its requests until then
// are answered without a store operation.
//
// # Penalty box
//
// A rule with a Penalty keeps a client that went over a limit out for a
// while: the request over the limit (a trip) puts the rule's key in a box
// of the rule's duration, longer by its factor at each trip within
// forget_after of the one before, up to its max, and every request the
// rule matches until the box ends is refused (penalty.go). The box is one
// more bucket of the counter (BoxBucket), read with its counts in the
// same store operation, and written by PutBox at a trip; so a store shared
// by a fleet boxes a client on every gateway. The Limiter remembers a
// client in a box with the blocked ones, for a second at a time.
//
// A rule's key may be a pair of features (Pair): its counters are then per
// pair of values ("alice@example.com,203.0.113.7").
//
// Several gateways sharing a store with asynchronous adds (memcached) can
// overshoot a limit by the hits each gateway admitted but had not yet
// flushed when the others checked; Strict rules avoid this at the cost of a
// synchronous add per request.
//
// # Use
//
//	plan, err := limit.Compile(cfg.Rules, cfg.Identity, cfg.Limiter, trust)
//	m := limit.NewMetrics(prometheus.DefaultRegisterer)
//	l := limit.New(plan, limit.NewMemory(), m, logger)
//	handler := l.Middleware(proxy)
//	admin.Mount("/admin/limits", l.AdminHandler())
package limit
