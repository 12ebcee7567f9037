// Package memcached is the distributed limit.Store: bucket counters on one
// or more memcached servers. The read of a check is a get command of its
// own (getmulti.go, see Performance), and so are the flusher's increments
// and adds (incr.go); AddNow's increments, deletes and the probe go
// through github.com/bradfitz/gomemcache.
//
// # Keys
//
// A bucket of a counter is the key
//
//	lg:<rule>:<value>|<level><start>
//
// for example "lg:login_ip:203.0.113.7|s1700000000" (level s, m or h; start
// in unix seconds). The rule is the event counted, the value the normalized
// feature; the limit's number is never part of a key, so editing 5/m to 8/m
// keeps the counts. A rule name longer than 64 bytes or holding ':', and a
// value longer than 128 bytes, are replaced by '~' and 22 base64url
// characters of their SHA-256 (132 bits), as is any part holding a byte
// outside printable ASCII or one of '|' and '~'; so every key is a valid
// memcached key (at most 218 bytes, no space or control character) whatever
// the input, and distinct counters never share a key short of a SHA-256
// collision. A counter's penalty box is one more key, "|b0" after the
// counter (box.go), read in the same get as the counts.
//
// # Placement
//
// Every key of a counter lives on one server, chosen by rendezvous (highest
// random weight) hashing of the rule and value only: FNV-1a of the counter,
// mixed with each server's hash of its configured address, highest score
// wins. Adding a server moves only the counters it now wins (about 1/n);
// the order of the server list does not matter, but every gateway must name
// the servers alike. The Store keeps one gomemcache client per server and
// picks the server itself, so a check of 144 buckets (2/s, 5/m, 10/h, 100/d)
// is one get command (its own) to one server: exactly one round trip, however many
// servers there are (TestLoadIsOneRoundTrip counts them through a TCP proxy),
// and a second one only when a flush of the same counter overlaps the read
// (below); none when a read of the same counter answered within the last
// millisecond (Shared reads).
//
// # Asynchronous counting
//
// Add sends nothing: it adds n to a local pending increment per (counter,
// bucket), in shards keyed by the counter. A flusher per server sends the
// pending increments every 5 ms (sooner when 4096 are pending), one
// memcached operation sequence per (counter, bucket) per flush however many
// hits it holds: increment; if the key is missing, add it with the count and
// its TTL (seconds from now, so a bucket lives at most one bucket longer
// than its limits need); if another gateway added it first, increment again
// (the envoy ratelimit and Sentry sequence). The buckets of a counter go
// together, pipelined (incr.go): its increments in one write, the adds of
// the keys missing in a second, the increments after a lost add in a
// third, so a flush of a counter whose keys exist is one round trip
// however many buckets it touches (TestFlushPipelined), and a check that
// waits for it (below) waits that long. An increment that fails goes
// back to pending and is retried: at least once, so a timed-out increment
// that memcached had applied counts twice, erring towards limiting. One
// that memcached refuses for good (its key holds something other than a
// count) is dropped (TestFlushOfANonCount).
//
// Load adds this process's increments that memcached has not acknowledged,
// so a client never sees its own hits vanish. If a flush of the same counter
// overlaps the read, whether memcached applied it is unknown: Load waits for
// the acknowledgement (one or two round trips of the flusher) and reads
// again. A third read that still overlaps a flush (a counter hit without
// pause, as in an attack) counts the increments in flight as not applied:
// those memcached had applied count twice for that check, by at most one
// flush's increments of the counter, erring towards limiting. AddNow increments synchronously (one to three round trips per
// bucket), for strict rules.
//
// # Overshoot
//
// Two gateways only see each other's hits once flushed, so a burst spread
// over G gateways can pass a limit by about (G-1) × r × (5 ms + a flush's
// round trips + 1 ms + a check's round trip), r being the rate one gateway
// admits that counter at, plus the requests one gateway has between its
// check and its count at the same moment. (The 1 ms is the reuse window of
// a read, Shared reads below.) TestOvershoot measures it with two
// gateways and a limit of 100 on loopback (a loaded 2-core machine): at 500
// checks a second each they admitted 100 to 102; at full speed (each
// checking again as soon as memcached answered, so that the whole burst
// fits in a few flush intervals) 110 to 200, the worst case being each
// gateway admitting the whole limit before the other's first flush; 200
// in four runs of four since reads answer the checks of the next
// millisecond, within which a whole burst of 100 fits. A
// strict rule counts first with AddNow and then checks: it never admits
// more than N (same test), and may admit one fewer per other gateway, at
// the cost of a blocking round trip per level and counting rejected
// requests too.
//
// # Connections
//
// Each server keeps limit.Memcached.MaxIdleConns connections open (default
// 128), and they are dialed before they are needed: in the background when
// the Store starts, and by the probe before the breaker closes after an
// outage. Without that, the first burst of checks (64 client connections
// arriving at once) finds no connection and dials one per check; on a
// loaded machine those dozens of simultaneous dials are what missed the
// 100 ms timeout (tens of store errors at the start of a load, 503s under
// on_store_error: deny). The reads take their connections from this pool
// and put them back after a clean answer, as do the flusher's sends;
// gomemcache (AddNow, Reset, the probe) takes from it when its own idle
// list is empty. gomemcache
// keeps 2 idle connections by default, so
// a pool smaller than the checks in flight also redials under steady load:
// linkgate_memcached_dials_total shows it. Size max_idle_conns to the
// requests on limited routes in flight at once plus the flusher's four;
// every gateway holds that many connections to each server, so memcached's
// connection limit (-c, 1024 by default) must exceed the gateways times it.
// TestWarmPoolAbsorbsBurst checks that a burst of 64 checks dials nothing.
//
// # Failure
//
// Each operation is bounded by limit.Memcached.Timeout (default 100 ms): a
// read, dial included, by one deadline; gomemcache's operations by its dial
// and read/write timeout. ctx is checked before each operation, not during
// it: gomemcache takes no context, and a goroutine per check to watch ctx
// would cost more than the round trip it guards, so a cancelled check
// returns within the timeout at worst. A read whose answer is malformed,
// cut short or late is a failure like a refused connection (the breaker
// counts it), and its connection is closed, never read again; a key that
// holds something other than a count is an error of that check only.
//
// Each server has a circuit breaker. Three failures (timeouts, refused or
// broken connections, server errors; not misses), each within a second of
// the previous, open it: Load, Add and AddNow on its counters then fail at
// once with an error wrapping ErrUnavailable, so the limiter applies its
// on_store_error policy without waiting out a timeout. The flusher probes the
// server (a version command) every 200 ms while it is open and closes it on
// the first answer, so counting resumes within about 200 ms of memcached
// returning. Increments pending when the breaker opened are kept and sent
// after recovery; beyond 100,000 per server the oldest buckets' are dropped
// and counted. A restarted memcached is empty: counts start again from zero.
//
// # Metrics
//
// NewMetrics registers linkgate_memcached_breaker_open{server},
// linkgate_memcached_errors_total{server,op}, linkgate_memcached_ops_total{op},
// linkgate_memcached_pending_deltas and linkgate_memcached_dropped_deltas_total.
//
// # Shared reads
//
// Checks of the same counter share their reads (read.go). A check of a
// counter nobody reads goes at once. One that arrives while a get of its
// counter is on its way takes that get's answer, as soon as it arrives,
// when nothing of the counter was in flight when the get was sent and no
// send of the counter's increments began and no AddNow or Reset of it
// through this Store ended between that send and the check's start: the
// answer then holds everything of this gateway's own increments that a
// get of the check's own would (TestConcurrentChecksShareReads: 21
// checks, one get). The checks that arrive after such a write gather
// into the next get, sent by the first of them when the one on its way
// returns (TestChecksAfterAWriteGatherForTheNextRead, which fails if they
// take the earlier answer). Each copies the counts.
//
// A read's answer then serves the checks of the same counter and buckets
// that come within 1 ms (reuseWindow, a fifth of the flush interval) after
// it arrived, at once: its counts plus this gateway's pending increments,
// no get, no wait. It goes on serving across a send of the counter's
// increments: while the send is on its way the checks add its increments
// too (the answer has none of them), and once memcached acknowledged it
// whole the answer takes them in; a send that failed in part ends it
// (memcached may or may not hold what failed: the check reads again). It
// also ends when an AddNow or a Reset of the counter through this Store
// ends. So this gateway's own increments count exactly
// as with a read of their own (TestOwnIncrementsExactAtEveryCheck checks
// every check of a tight add-and-check loop against a reference), and
// another gateway's increment is seen at most 5 ms (its flush) + its
// flush's round trips + 1 ms + a read's round trip after it was counted,
// instead of the same without the 1 ms (TestOtherStoreSeenWithinBound:
// median 2-6 ms, at most about 7 ms, on loopback under -race). A counter
// keeps one answer, a slice of its buckets' counts in its entry, dropped
// with the entry when the counter has nothing pending. Under a load test
// from one address this cut the gets from about 0.106 a request to about
// 0.04 (bench/run.sh reports it).
//
// Clients over a limit cost no read at all: the limiter
// answers them from its local cache of blocked counters until their bucket
// ends (TestBlockedClientCostsNoRoundTrip). No check waits longer than the
// timeout for a read another sends (TestSharedReadTimeout), and one that
// follows a read that just failed shares its error.
//
// # Performance
//
// BenchmarkDecision is one check of a 2/s, 5/m, 10/h, 100/d rule (Load of
// 144 buckets) plus one count (Add of 3) against a real local memcached:
// serial, 64 at once of 64 clients (parallel), 64 at once of one client
// (oneclient, what a load test from one address makes), and oneclient
// without the reuse window (oneclient-reads: every check waits for a
// shared get); BenchmarkFloor is
// gomemcache's GetMulti of the same 144 keys alone. serial and parallel
// run with the reuse window off, so that every decision reads (a client
// checks far less often than once a millisecond); oneclient with it. On
// the shared 2-core machine, memcached and the benchmark sharing the
// cores:
//
//	go test -run '^$' -bench 'Decision|Floor' -benchmem -count 3 ./limit/memcached
//	Decision/serial     65-69 µs/op    14,500-15,300 decisions/s   36-38 µs gateway CPU     32-33 µs memcached CPU   2 allocs
//	Decision/parallel   27-29 µs/op    33,900-36,500 decisions/s   18.0-20.8 µs gateway CPU 24-26 µs memcached CPU   2 allocs
//	Decision/oneclient  0.67-0.71 µs/op  1,409,000-1,495,000 decisions/s   1.1-1.2 µs gateway CPU   0.05 µs memcached CPU   0 allocs
//
// Checks joining the get on its way (Shared reads), measured against the
// code before in three interleaved pairs on the loaded machine (load
// 33-34): oneclient-reads went from 0.059-0.066 to 0.020 gets a decision
// (about one get per 50 of the 64 checks at once instead of one per 16),
// 7.4-8.3 to 4.4-4.6 µs of gateway CPU and 4.1-4.7 to 1.6-1.7 µs of
// memcached CPU a decision, 47,000-89,000 to 110,000-171,000 decisions/s;
// serial, parallel and oneclient within their spread (oneclient 0.0016-
// 0.0018 to 0.0010-0.0015 gets a decision). The gets a decision are the
// benchmark's gets/op (memcached's cmd_get, which counts keys, over 144).
//
// 1e6 / gateway CPU is 48,000-55,000 decisions per second per core for 64
// clients at once at Go's GOGC of 100, and the same at the gateway's
// default runtime.gogc of 400 (parallel 17.8-18.1 µs, one run of three
// 26 µs on a busy moment of the machine): there is next to no garbage left
// to collect. Decisions of one client share reads, and a read answers the
// checks of the next millisecond: about 850,000 per second per core
// (before the reuse window: 3.0-3.3 µs gateway and 1.6 µs memcached CPU,
// about 300,000 per second per core).
//
// Through the gateway (bench/run.sh, wrk from one address, 64
// connections), the reuse window took the limiter on memcached from
// 0.79-0.81 to 0.87-0.89 of the in-process limiter's requests per second,
// from about 0.10 to 0.04 gets a request, 37-38.5 to 34-35 µs of gateway
// CPU and 3.7-3.9 to 2.0-2.1 µs of memcached CPU a request (old and new
// binaries back to back, twice each):
//
//	BENCH_TARGETS="gateway-ip gateway-mc" ROUNDS=3 DURATION=5s bash bench/run.sh
//
// Checks joining the get on their way, then the pipelined flush, each
// measured against the build before them interleaved in one run
// (bench/protocols.sh with base-ip base-mc gateway-ip gateway-mc, 3-4
// rounds of 4 s, at load 18-33, where one target's rounds spread by up
// to 1.5x), in eight comparisons (five of plain HTTP, three of HTTPS):
// the gets a request went from 0.073-0.092 to 0.046-0.057 in each; the
// limiter on memcached served 1.03-1.55 times the requests a second of
// the build before (median 1.13), at 25 % less to 5 % more gateway CPU a
// request (median 13 % less); its req/s over the in-process limiter's of
// the same build, before and after: 0.80 and 0.85, 0.80 and 0.84
// (HTTPS), 0.80 and 0.93 with the join alone, 0.71 and 0.83, 0.72 and
// 0.96, 0.79 and 0.81 (HTTPS), 0.62 and 1.11, 0.64 and 0.76 (HTTPS) with
// both (medians 0.76 and 0.84; the in-process targets' own rounds moved
// as much, so whether it reaches 0.9 needs a quiet machine). Under perf
// (wrk -c64, 8 s) the limiter on
// memcached took 9 % of the gateway's CPU samples, the in-process one
// 2 %; the flusher's share went from 3.3 % to 1.6 % with the pipelining.
//
//	PROTOCOLS=http1 TARGETS="base-ip base-mc gateway-ip gateway-mc" BASE_BIN=<build before> bench/protocols.sh
//
// The read is our own because gomemcache's GetMulti was the floor: with
// it, parallel cost 50-55 µs of gateway CPU and 34 allocations (27 KB) a
// decision at GOGC 100 (about 19,000 per second per core; 31-34 µs, about
// 31,000, at GOGC 400), measured alongside on the same machine. Its
// profile: nearly half the gateway CPU in GetMulti (legalKey over each key,
// the command built with fmt.Fprintf and strings.Join of 144 strings, a
// goroutine per call, a map and an Item per key found, a deadline set per
// answer line), a sixth building the 144 key strings, a fifth garbage
// collection. getmulti.go writes the keys straight into a pooled buffer,
// sends it in one write, and parses the answer from a pooled reader into
// the counts, matching each answered key to the one requested (memcached
// answers in request order, skipping misses). Its profile now: a quarter
// of the gateway CPU is the write system call (on loopback, the kernel
// delivering the 4.5 KB command to memcached), an eighth the reads, a
// seventh formatting the 144 keys into the command, a twelfth matching the
// answered keys, a sixth the scheduler waiting for answers; allocation and
// garbage collection about 1%. Merging the reads of distinct counters into
// one command was measured too and dropped: with 64 clients it doubled the
// CPU per decision (the parsing is per key, and reads that wait longer
// overlap flushes of their counter and are made again).
package memcached
