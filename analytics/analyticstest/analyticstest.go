// Package analyticstest is the conformance suite that every analytics store
// runs: the embedded one always, Cassandra whenever a cluster is at hand.
//
// A backend's test calls Run with a function that opens a store for one
// subtest:
//
//	func TestConformance(t *testing.T) {
//		analyticstest.Run(t, func(t *testing.T, tiers []rollup.Tier) analyticstest.Harness {
//			s, err := pebble.Open(t.TempDir(), tiers, nil)
//			...
//			return analyticstest.Harness{Store: s, Reopen: ..., Expire: s.Expire}
//		})
//	}
//
// Every subtest writes under short_keys of its own (a random token of the run,
// the subtest's name and a suffix). The all-links key is the exception; the
// subtest that writes it compares what it reads before and after. The
// rollup's state (progress, Active entries, the lease) is shared by
// everything in a store, so open must give each subtest a store of its own
// (for Cassandra, a keyspace of its own).
//
// Bucket times are taken near the wall clock (hours to a few hundred days
// back), so that a store that derives a TTL from a bucket's age keeps what the
// suite writes; Batch.At is the wall clock, strictly increasing.
package analyticstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/rollup"
)

// Store is what the suite tests: what the flusher and the stats API need
// (analytics.Store) and what the rollup worker needs (rollup.Store).
type Store = analytics.Store

// Harness is one store under test and the hooks that some subtests need
// beyond Store. A nil hook skips, with a message, the subtests that need it.
// Hooks are called from the subtest's goroutine, never concurrently with each
// other. The backend closes what it opened with t.Cleanup.
type Harness struct {
	// Store is the store the subtest uses first. Required.
	Store Store

	// Reopen closes the store the subtest uses last (Store, or what the
	// previous Reopen returned) and opens it again on the same data, as a
	// restarted gateway does. Durability subtests need it.
	Reopen func() Store

	// Another opens a second store on the same data, used alongside the
	// first as a second gateway process would use it. Writes from both
	// must add up. Stores that one process holds exclusively leave it nil.
	Another func() Store

	// Expire deletes what each tier holds beyond its retention as of now,
	// on the store the subtest uses last. Stores that expire by themselves
	// (a TTL) leave it nil and set TTL.
	Expire func(now time.Time) error

	// TTL is for a store that expires by itself, counting a row's time to
	// live from its batch's At to the end of its retention (Cassandra):
	// the expiry subtests write the rows meant to expire with an At that
	// leaves them TTL, and the others now, then read until the first have
	// gone (for at most TTL and two minutes), on the store's own clock.
	// Unset with Expire nil, the expiry subtests skip.
	TTL time.Duration

	// Clock, when set, has the subtest's stores (the one in use and those
	// opened later) take the time from now rather than from the wall
	// clock: the Erase subtest moves it days on, as the rollup needs, and
	// a store that clamps its reads, or counts its rows' TTLs, around its
	// own now (Cassandra) must read there. Stores that keep no clock
	// leave it nil.
	Clock func(now func() time.Time)
}

// Plan returns the rollup plan of tiers with the given grace: what the
// gateway's compile step (analytics.Compile) passes to the flusher, the
// readers and the stores, made here for tests that have no config. It
// panics when the tiers are not valid: a test's own mistake.
func Plan(tiers []rollup.Tier, grace time.Duration) *rollup.Plan {
	p, err := rollup.NewPlan(tiers, grace)
	if err != nil {
		panic("analyticstest: " + err.Error())
	}
	return p
}

// DefaultPlan is the plan of the default tiers and grace.
var DefaultPlan = Plan(rollup.DefaultTiers(), rollup.DefaultGrace)

// ownStore are the subtests that read what a store holds beyond their own
// keys: the rollup's work lists, progress and lease, the top lists, the
// Active entries of a period.
var ownStore = map[string]bool{
	"LargeBatch": true, "Expiry": true, "ActivePages": true, "Progress": true, "RollupDurable": true,
	"RollupExact": true, "DimsExpiry": true, "Top": true, "Erase": true,
}

// NeedsOwnStore reports whether the subtest named name (the last element
// of its t.Name()) needs a store of its own. The others only read their
// own keys and AllLinks (whose subtest compares what it reads before and
// after): a backend whose stores are costly to create (a Cassandra
// keyspace is a schema change) may give them all one store's data, a
// store of its own each still.
func NeedsOwnStore(name string) bool { return ownStore[name] }

// Run runs the conformance subtests. open is called once per subtest with
// the plan to use: DefaultPlan, except for RollupExact, whose tiers are
// short enough for its simulated days to roll every one of them.
func Run(t *testing.T, open func(t *testing.T, plan *rollup.Plan) Harness) {
	run := token()
	for _, tc := range []struct {
		name string
		f    func(*testing.T, *env)
	}{
		{"PointsPerTier", testPointsPerTier},
		{"AllTimeTier", testAllTimeTier},
		{"AllLinks", testAllLinks},
		{"RangeHalfOpenInTimeOrder", testRange},
		{"KeysDoNotLeak", testKeysDoNotLeak},
		{"EmptyBucketsOmittedOrZero", testEmptyBuckets},
		{"UnknownKey", testUnknownKey},
		{"BatchesToOneBucketAddUp", testBatchesAddUp},
		{"FailedWriteResentOnce", testFailedWriteResent},
		{"ReplayChangesNothing", testReplay},
		{"ContextCanceled", testContextCanceled},
		{"WeeksStartMonday", testWeeks},
		{"LongRange", testLongRange},
		{"ReadWhileWriting", testReadWhileWriting},
		{"ConcurrentWriters", testConcurrentWriters},
		{"Durability", testDurability},
		{"LargeBatch", testLargeBatch},
		{"Expiry", testExpiry},
		{"ActivePages", testActivePages},
		{"Marks", testMarks},
		{"RolledRows", testRolledRows},
		{"Progress", testProgress},
		{"RollupDurable", testRollupDurable},
		{"RollupExact", testRollupExact},
		{"DimsPerDay", testDimsPerDay},
		{"DimsEvery", testDimsEvery},
		{"DimsResentOnce", testDimsResentOnce},
		{"DimsWriters", testDimsWriters},
		{"DimsExpiry", testDimsExpiry},
		{"DimsYear", testDimsYear},
		{"Top", testTop},
		{"TenantTop", testTenantTop},
		{"Uniques", testUniques},
		{"Erase", testErase},
		{"EraseBeforeApply", testEraseBeforeApply},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := DefaultPlan
			if tc.name == "RollupExact" {
				plan = exactPlan
			}
			h := open(t, plan)
			if h.Store == nil {
				t.Fatal("open returned a Harness without a Store")
			}
			e := &env{h: h, s: h.Store, prefix: run + "-" + tc.name + "-", now: time.Now().UTC()}
			tc.f(t, e)
		})
	}
}

// env is one subtest's store, keys and clock.
type env struct {
	h      Harness
	s      Store // the store in use: h.Store or what Reopen returned
	prefix string
	now    time.Time // the wall clock when the subtest started

	mu     sync.Mutex
	lastAt time.Time
}

// key returns the subtest's short_key for name.
func (e *env) key(name string) string { return e.prefix + name }

// at returns a Batch.At: the wall clock, strictly increasing.
func (e *env) at() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := time.Now().UTC()
	if !t.After(e.lastAt) {
		t = e.lastAt.Add(time.Microsecond)
	}
	e.lastAt = t
	return t
}

// base returns midnight UTC of the day that was three hours ago: recent
// enough for every tier's retention, and a bucket start in every tier up to
// a day.
func (e *env) base() time.Time { return rollup.Align(e.now.Add(-3*time.Hour), rollup.Day) }

func token() string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func count(key string, step time.Duration, start time.Time, human, bot int64) analytics.Count {
	return analytics.Count{Key: key, Step: step, Start: start, Visits: analytics.Visits{Human: human, Bot: bot}}
}

func point(start time.Time, human, bot int64) analytics.Point {
	return analytics.Point{Start: start, Visits: analytics.Visits{Human: human, Bot: bot}}
}

func write(t *testing.T, s Store, b analytics.Batch) {
	t.Helper()
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatalf("Write(%d counts, %d active, %d marks): %v", len(b.Counts), len(b.Active), len(b.Marks), err)
	}
}

// points reads key's points, checks what the Reader contract promises of
// them (in [from, to), in time order, aligned, UTC) and returns those that
// are not zero: a store may return empty buckets as zeros.
func points(t *testing.T, s Store, key string, step time.Duration, from, to time.Time) []analytics.Point {
	t.Helper()
	got, err := s.Points(context.Background(), key, step, from, to)
	if err != nil {
		t.Fatalf("Points(%q, %v, %v, %v): %v", key, step, from, to, err)
	}
	var out []analytics.Point
	for i, p := range got {
		switch {
		case p.Start.Before(from) || !p.Start.Before(to):
			t.Fatalf("Points(%q, %v, %v, %v): point %d at %v is outside [from, to)", key, step, from, to, i, p.Start)
		case i > 0 && !p.Start.After(got[i-1].Start):
			t.Fatalf("Points(%q, %v, %v, %v): point %d at %v does not follow %v", key, step, from, to, i, p.Start, got[i-1].Start)
		case p.Start.Location() != time.UTC:
			t.Fatalf("Points(%q, %v, %v, %v): point %d at %v is not in UTC", key, step, from, to, i, p.Start)
		case !rollup.Align(p.Start, step).Equal(p.Start):
			t.Fatalf("Points(%q, %v, %v, %v): point %d at %v is not a bucket start", key, step, from, to, i, p.Start)
		}
		if p.Visits != (analytics.Visits{}) {
			out = append(out, p)
		}
	}
	return out
}

func checkPoints(t *testing.T, s Store, key string, step time.Duration, from, to time.Time, want []analytics.Point) {
	t.Helper()
	got := points(t, s, key, step, from, to)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Points(%q, %v, %v, %v) (-want +got):\n%s", key, step, from.Format(time.RFC3339), to.Format(time.RFC3339), diff)
	}
}

// sum returns the visits of every point of key in the tier of step.
func sum(t *testing.T, s Store, key string, step time.Duration, from, to time.Time) analytics.Visits {
	t.Helper()
	var v analytics.Visits
	for _, p := range points(t, s, key, step, from, to) {
		v = v.Add(p.Visits)
	}
	return v
}

// testPointsPerTier writes three buckets in every tier, starting at the same
// midnight in all tiers up to a day, and reads each tier back. Two of each
// tier's buckets split their bots by class (Visits.Other), one is all
// human.
func testPointsPerTier(t *testing.T, e *env) {
	k := e.key("a")
	tiers := rollup.DefaultTiers()
	b := analytics.Batch{At: e.at()}
	want := make([][]analytics.Point, len(tiers))
	for i, tr := range tiers {
		s0 := rollup.Align(e.base(), tr.Step)
		for j := 2; j >= 0; j-- {
			start := s0.Add(-time.Duration(j) * tr.Step)
			h, bot := int64(100*i+j+1), int64(3*j)
			// Bots split by class in every bucket but the last (all
			// human), the first with a class beyond the second's.
			c := count(k, tr.Step, start, h, bot)
			c.Other[j%rollup.NumOther], c.Other[(j+i)%rollup.NumOther] = int64(j), int64(j)
			b.Counts = append(b.Counts, c)
			want[i] = append(want[i], analytics.Point{Start: start, Visits: c.Visits})
		}
	}
	write(t, e.s, b)
	for i, tr := range tiers {
		s0 := rollup.Align(e.base(), tr.Step)
		checkPoints(t, e.s, k, tr.Step, s0.Add(-2*tr.Step), s0.Add(tr.Step), want[i])
	}
}

// testAllTimeTier writes counts straight into the all-time tier (a flush
// does so for counts older than every tier keeps) and reads them back over
// all time; they add up across batches.
func testAllTimeTier(t *testing.T, e *env) {
	k := e.key("a")
	total, err := rollup.TotalTier(rollup.DefaultTiers())
	if err != nil {
		t.Fatal(err)
	}
	old := rollup.Align(e.now.Add(-20*rollup.Year), total.Step)
	recent := rollup.Align(e.base(), total.Step)
	for range 3 {
		write(t, e.s, analytics.Batch{At: e.at(), Counts: []analytics.Count{
			count(k, total.Step, old, 1, 2), count(k, total.Step, recent, 3, 0),
		}})
	}
	far, future := time.Unix(0, 0), e.now.Add(100*rollup.Year)
	checkPoints(t, e.s, k, total.Step, far, future, []analytics.Point{point(old, 3, 6), point(recent, 9, 0)})
	checkPoints(t, e.s, k, total.Step, recent, future, []analytics.Point{point(recent, 9, 0)})
}

// testAllLinks writes under AllLinks, which other runs sharing the store
// may write too, and checks that what it reads grew by what it wrote.
func testAllLinks(t *testing.T, e *env) {
	start := rollup.Align(e.base(), time.Hour).Add(-5 * time.Hour)
	from, to := start, start.Add(time.Hour)
	before := points(t, e.s, analytics.AllLinks, time.Hour, from, to)
	k := e.key("a")
	write(t, e.s, analytics.Batch{
		At:     e.at(),
		Counts: []analytics.Count{count(analytics.AllLinks, time.Hour, start, 11, 4), count(k, time.Hour, start, 5, 1)},
	})
	var was analytics.Visits
	if len(before) == 1 {
		was = before[0].Visits
	}
	checkPoints(t, e.s, analytics.AllLinks, time.Hour, from, to, []analytics.Point{point(start, was.Human+11, was.Bot+4)})
	checkPoints(t, e.s, k, time.Hour, from, to, []analytics.Point{point(start, 5, 1)})
}

// testRange writes ten hours out of order, in separate batches, and reads
// ranges whose ends fall on and between bucket starts.
func testRange(t *testing.T, e *env) {
	k := e.key("a")
	s0 := e.base().Add(-10 * time.Hour)
	hour := func(i int) time.Time { return s0.Add(time.Duration(i) * time.Hour) }
	for _, i := range []int{7, 2, 9, 0, 4, 1, 8, 3, 6, 5} {
		write(t, e.s, analytics.Batch{At: e.at(), Counts: []analytics.Count{count(k, time.Hour, hour(i), int64(i+1), int64(i%3))}})
	}
	want := func(lo, hi int) []analytics.Point {
		var ps []analytics.Point
		for i := lo; i < hi; i++ {
			ps = append(ps, point(hour(i), int64(i+1), int64(i%3)))
		}
		return ps
	}
	for _, r := range []struct {
		name     string
		from, to time.Time
		want     []analytics.Point
	}{
		{"all", hour(0), hour(10), want(0, 10)},
		{"wider", hour(-100), hour(100), want(0, 10)},
		{"on starts", hour(3), hour(7), want(3, 7)},
		{"between starts", hour(3).Add(time.Second), hour(7).Add(time.Second), want(4, 8)},
		{"one", hour(9), hour(9).Add(time.Minute), want(9, 10)},
		{"before", hour(-5), hour(0), nil},
		{"after", hour(10), hour(20), nil},
		{"empty", hour(5), hour(5), nil},
		{"inverted", hour(7), hour(3), nil},
	} {
		t.Run(r.name, func(t *testing.T) { checkPoints(t, e.s, k, time.Hour, r.from, r.to, r.want) })
	}
	// The same bucket starts in the minute and day tiers hold nothing.
	checkPoints(t, e.s, k, time.Minute, hour(0), hour(10), nil)
	checkPoints(t, e.s, k, rollup.Day, hour(-24), hour(24), nil)
}

// testKeysDoNotLeak writes keys that are prefixes of each other, non-ASCII
// and long, and reads each alone.
func testKeysDoNotLeak(t *testing.T, e *env) {
	names := []string{"ab", "abc", "ab-", "abd", "a", "ключ", "🔗", strings.Repeat("x", 200), "A", "a b", "a%2Fb"}
	start := rollup.Align(e.base(), time.Minute).Add(-30 * time.Minute)
	b := analytics.Batch{At: e.at()}
	for i, n := range names {
		k := e.key(n)
		b.Counts = append(b.Counts,
			count(k, time.Minute, start, int64(i+1), int64(10*i)),
			count(k, time.Minute, start.Add(time.Minute), int64(i+100), 0))
		b.Marks = append(b.Marks, rollup.Mark{Key: k, Step: 5 * time.Minute, Start: rollup.Align(start, 5*time.Minute), At: b.At, ID: uint64(i)})
	}
	write(t, e.s, b)
	for i, n := range names {
		k := e.key(n)
		checkPoints(t, e.s, k, time.Minute, start.Add(-time.Hour), start.Add(time.Hour),
			[]analytics.Point{point(start, int64(i+1), int64(10*i)), point(start.Add(time.Minute), int64(i+100), 0)})
		ms, err := e.s.Marks(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 1 || ms[0].Key != k || ms[0].ID != uint64(i) {
			t.Errorf("Marks(%q) = %+v, want its one mark", k, ms)
		}
	}
	checkPoints(t, e.s, e.key("b"), time.Minute, start.Add(-time.Hour), start.Add(time.Hour), nil)
}

// testEmptyBuckets reads a range with gaps: the gaps are left out or zero
// (points drops zeros, so only the written buckets may remain).
func testEmptyBuckets(t *testing.T, e *env) {
	k := e.key("a")
	s0 := rollup.Align(e.base(), 5*time.Minute).Add(-time.Hour)
	write(t, e.s, analytics.Batch{At: e.at(), Counts: []analytics.Count{
		count(k, 5*time.Minute, s0, 1, 0),
		count(k, 5*time.Minute, s0.Add(30*time.Minute), 0, 2),
	}})
	got, err := e.s.Points(context.Background(), k, 5*time.Minute, s0.Add(-time.Hour), s0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(got); n != 2 && n != 24 {
		t.Errorf("Points returned %d points for 2 written buckets in 24, want 2 (empty left out) or 24 (as zeros)", n)
	}
	checkPoints(t, e.s, k, 5*time.Minute, s0.Add(-time.Hour), s0.Add(time.Hour),
		[]analytics.Point{point(s0, 1, 0), point(s0.Add(30*time.Minute), 0, 2)})
}

func testUnknownKey(t *testing.T, e *env) {
	k := e.key("never-written")
	write(t, e.s, analytics.Batch{At: e.at(), Counts: []analytics.Count{count(e.key("other"), rollup.Day, e.base(), 1, 1)}})
	for _, tr := range rollup.DefaultTiers() {
		checkPoints(t, e.s, k, tr.Step, e.base().Add(-30*rollup.Day), e.base().Add(rollup.Day), nil)
	}
	if ms, err := e.s.Marks(context.Background(), k); err != nil || len(ms) != 0 {
		t.Errorf("Marks of an unknown key = %v, %v; want none", ms, err)
	}
}

func testBatchesAddUp(t *testing.T, e *env) {
	k := e.key("a")
	minute := rollup.Align(e.base(), time.Minute).Add(-time.Minute)
	day := rollup.Align(e.base(), rollup.Day)
	for range 10 {
		write(t, e.s, analytics.Batch{At: e.at(),
			Counts: []analytics.Count{count(k, time.Minute, minute, 1, 2), count(k, rollup.Day, day, 3, 4)},
		})
	}
	checkPoints(t, e.s, k, time.Minute, minute, minute.Add(time.Minute), []analytics.Point{point(minute, 10, 20)})
	checkPoints(t, e.s, k, rollup.Day, day, day.Add(rollup.Day), []analytics.Point{point(day, 30, 40)})
}

// testFailedWriteResent follows the flusher: a Write fails (its context is
// canceled) and the same batch, same identity and counts, is sent again;
// later it is sent once more (a replay of the journal after a crash, by
// the store reopened when the backend can). Every batch counts once; a
// batch without an identity counts each time.
func testFailedWriteResent(t *testing.T, e *env) {
	k := e.key("a")
	writer := e.key("writer")
	minute := rollup.Align(e.base(), time.Minute).Add(-2 * time.Minute)
	hour := rollup.Align(e.base(), time.Hour)
	write(t, e.s, analytics.Batch{Writer: writer, Seq: 1, At: e.at(), Counts: []analytics.Count{count(k, time.Minute, minute, 1, 0)}})

	failed := analytics.Batch{Writer: writer, Seq: 2, At: e.at(),
		Counts: []analytics.Count{count(k, time.Minute, minute, 2, 1), count(k, time.Hour, hour, 2, 1)},
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.s.Write(ctx, failed); err == nil {
		t.Fatal("Write with a canceled context returned nil")
	}
	write(t, e.s, failed)
	write(t, e.s, failed)
	later := analytics.Batch{Writer: writer, Seq: 3, At: e.at(), Counts: []analytics.Count{count(k, time.Minute, minute.Add(time.Minute), 5, 0)}}
	write(t, e.s, later)
	if e.h.Reopen != nil {
		e.s = e.h.Reopen()
	}
	for _, b := range []analytics.Batch{failed, later} { // the replay
		write(t, e.s, b)
	}
	checkPoints(t, e.s, k, time.Minute, minute, minute.Add(2*time.Minute),
		[]analytics.Point{point(minute, 1+2, 1), point(minute.Add(time.Minute), 5, 0)})
	checkPoints(t, e.s, k, time.Hour, hour, hour.Add(time.Hour), []analytics.Point{point(hour, 2, 1)})
	anon := analytics.Batch{At: e.at(), Counts: []analytics.Count{count(k, time.Hour, hour, 10, 0)}}
	write(t, e.s, anon)
	write(t, e.s, anon)
	checkPoints(t, e.s, k, time.Hour, hour, hour.Add(time.Hour), []analytics.Point{point(hour, 22, 1)})
	// Another writer's Seq 1 is not the first writer's.
	write(t, e.s, analytics.Batch{Writer: e.key("other"), Seq: 1, At: e.at(), Counts: []analytics.Count{count(k, time.Hour, hour, 100, 0)}})
	checkPoints(t, e.s, k, time.Hour, hour, hour.Add(time.Hour), []analytics.Point{point(hour, 122, 1)})
}

// testReplay follows a journal replayed after a crash: a writer's
// batches, one of them folding three intervals (First..Seq), were all
// applied; then every one of them is sent again, in order and in any
// order, also through a reopened store when the backend can. Nothing
// changes: every identity counts once. A later batch of the writer still
// counts.
func testReplay(t *testing.T, e *env) {
	k := e.key("a")
	writer := e.key("writer")
	minute := rollup.Align(e.base(), time.Minute).Add(-3 * time.Minute)
	hour := rollup.Align(e.base(), time.Hour)
	var sent []analytics.Batch
	for seq := uint64(1); seq <= 4; seq++ {
		b := analytics.Batch{Writer: writer, Seq: seq, At: e.at(),
			Counts: []analytics.Count{count(k, time.Minute, minute.Add(time.Duration(seq%2)*time.Minute), int64(seq), 1)}}
		sent = append(sent, b)
	}
	// Seqs 5 to 7 folded into the hour at the journal's cap.
	sent = append(sent, analytics.Batch{Writer: writer, First: 5, Seq: 7, At: e.at(),
		Counts: []analytics.Count{count(k, time.Hour, hour, 100, 10)}})
	sent = append(sent, analytics.Batch{Writer: writer, Seq: 8, At: e.at(),
		Counts: []analytics.Count{count(k, time.Minute, minute, 1000, 0)}})
	for _, b := range sent {
		write(t, e.s, b)
	}
	check := func(when string) {
		t.Helper()
		// Minutes: seqs 2, 4 and 8 in the first (2+4+1000), 1 and 3 in
		// the second (1+3); a bot each but 8.
		got := points(t, e.s, k, time.Minute, minute, minute.Add(2*time.Minute))
		want := []analytics.Point{point(minute, 1006, 2), point(minute.Add(time.Minute), 4, 2)}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: minutes (-want +got):\n%s", when, diff)
		}
		checkPoints(t, e.s, k, time.Hour, hour, hour.Add(time.Hour), []analytics.Point{point(hour, 100, 10)})
	}
	check("written once")
	for _, b := range sent {
		write(t, e.s, b)
	}
	check("replayed in order")
	if e.h.Reopen != nil {
		e.s = e.h.Reopen()
	}
	for _, i := range []int{4, 0, 5, 2, 1, 3} {
		write(t, e.s, sent[i])
	}
	check("replayed out of order by another process")
	write(t, e.s, analytics.Batch{Writer: writer, Seq: 9, At: e.at(),
		Counts: []analytics.Count{count(k, time.Hour, hour, 1, 0)}})
	checkPoints(t, e.s, k, time.Hour, hour, hour.Add(time.Hour), []analytics.Point{point(hour, 101, 10)})
}

func testContextCanceled(t *testing.T, e *env) {
	k := e.key("a")
	day := e.base()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := e.s.Write(ctx, analytics.Batch{At: e.at(), Counts: []analytics.Count{count(k, rollup.Day, day, 1, 1)}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Write with a canceled context: %v, want context.Canceled", err)
	}
	if _, err := e.s.Points(ctx, k, rollup.Day, day, day.Add(rollup.Day)); !errors.Is(err, context.Canceled) {
		t.Errorf("Points with a canceled context: %v, want context.Canceled", err)
	}
	if _, err := e.s.Marks(ctx, k); !errors.Is(err, context.Canceled) {
		t.Errorf("Marks with a canceled context: %v, want context.Canceled", err)
	}
	if _, err := e.s.Progress(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Progress with a canceled context: %v, want context.Canceled", err)
	}
	if _, err := e.s.Active(ctx, 5*time.Minute, day, "", 10); !errors.Is(err, context.Canceled) {
		t.Errorf("Active with a canceled context: %v, want context.Canceled", err)
	}
	if err := e.s.Apply(ctx, rollup.Update{Rows: []rollup.Row{{Key: k, Step: rollup.Day, Start: day, Visits: analytics.Visits{Human: 1}}}}); !errors.Is(err, context.Canceled) {
		t.Errorf("Apply with a canceled context: %v, want context.Canceled", err)
	}
	if err := e.s.Advance(ctx, rollup.Day, day); !errors.Is(err, context.Canceled) {
		t.Errorf("Advance with a canceled context: %v, want context.Canceled", err)
	}
	checkPoints(t, e.s, k, rollup.Day, day, day.Add(rollup.Day), nil)
}

func testWeeks(t *testing.T, e *env) {
	k := e.key("a")
	monday := rollup.Align(e.base(), rollup.Week)
	if monday.Weekday() != time.Monday {
		t.Fatalf("rollup.Align(%v, week) = %v, a %v", e.base(), monday, monday.Weekday())
	}
	var b analytics.Batch
	b.At = e.at()
	var want []analytics.Point
	for i := 3; i >= 0; i-- {
		start := monday.Add(-time.Duration(i) * rollup.Week)
		b.Counts = append(b.Counts, count(k, rollup.Week, start, int64(i+1), 1))
		want = append(want, point(start, int64(i+1), 1))
	}
	write(t, e.s, b)
	got := points(t, e.s, k, rollup.Week, monday.Add(-10*rollup.Week), monday.Add(rollup.Week))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("week points (-want +got):\n%s", diff)
	}
	for _, p := range got {
		if p.Start.Weekday() != time.Monday || p.Start.Hour() != 0 || p.Start.Minute() != 0 {
			t.Errorf("week bucket %v does not start on Monday 00:00 UTC", p.Start)
		}
	}
	// A range starting mid-week leaves that week out: its start is before from.
	checkPoints(t, e.s, k, rollup.Week, monday.Add(-rollup.Week+rollup.Day), monday.Add(rollup.Week), want[3:])
}

// testLongRange reads a year and a week of days, and a day of minutes.
func testLongRange(t *testing.T, e *env) {
	k := e.key("a")
	day0 := e.base().Add(-369 * rollup.Day)
	b := analytics.Batch{At: e.at()}
	var days []analytics.Point
	for i := range 370 {
		start := day0.Add(time.Duration(i) * rollup.Day)
		b.Counts = append(b.Counts, count(k, rollup.Day, start, int64(i+1), int64(i%2)))
		days = append(days, point(start, int64(i+1), int64(i%2)))
	}
	// The last whole day of minutes before this hour: all of it within
	// the finest tier's retention (2 days) whatever the time of day.
	min0 := rollup.Align(e.now, time.Hour).Add(-rollup.Day)
	var minutes []analytics.Point
	for i := range 1440 {
		if i%7 == 3 {
			continue
		}
		start := min0.Add(time.Duration(i) * time.Minute)
		b.Counts = append(b.Counts, count(k, time.Minute, start, 1, int64(i%3)))
		minutes = append(minutes, point(start, 1, int64(i%3)))
	}
	write(t, e.s, b)
	checkPoints(t, e.s, k, rollup.Day, e.base().Add(-400*rollup.Day), e.base().Add(rollup.Day), days)
	checkPoints(t, e.s, k, rollup.Day, day0.Add(100*rollup.Day), day0.Add(200*rollup.Day), days[100:200])
	checkPoints(t, e.s, k, time.Minute, min0, min0.Add(rollup.Day), minutes)
}

// testReadWhileWriting reads while another goroutine writes: what is read
// never goes down, and the end is exact.
func testReadWhileWriting(t *testing.T, e *env) {
	k := e.key("a")
	hour := rollup.Align(e.base(), time.Hour)
	const n = 30
	done := make(chan error, 1)
	go func() {
		for range n {
			err := e.s.Write(context.Background(), analytics.Batch{At: e.at(),
				Counts: []analytics.Count{count(k, time.Hour, hour, 1, 0)}})
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var last int64
	for finished := false; !finished; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			finished = true
		default:
		}
		v := sum(t, e.s, k, time.Hour, hour, hour.Add(time.Hour))
		if v.Human < last || v.Human > n {
			t.Fatalf("the bucket went from %d to %d visits while %d were written", last, v.Human, n)
		}
		last = v.Human
	}
	checkPoints(t, e.s, k, time.Hour, hour, hour.Add(time.Hour), []analytics.Point{point(hour, n, 0)})
}

// testConcurrentWriters writes through two stores on the same data at once,
// as two gateway processes do.
func testConcurrentWriters(t *testing.T, e *env) {
	if e.h.Another == nil {
		t.Skip("the backend allows one store per data (Harness.Another is nil)")
	}
	other := e.h.Another()
	k := e.key("a")
	minute := rollup.Align(e.base(), time.Minute).Add(-time.Minute)
	day := e.base()
	const n = 25
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i, s := range []Store{e.s, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				err := s.Write(context.Background(), analytics.Batch{At: e.at(),
					Counts: []analytics.Count{count(k, time.Minute, minute, 1, int64(i)), count(k, rollup.Day, day, 1, int64(i))}})
				if err != nil {
					errs <- fmt.Errorf("store %d: %w", i, err)
					return
				}
			}
		}()
	}
	testkit.Await(t, wg.Wait, 5*time.Minute, "the writers of both stores")
	close(errs)
	for err := range errs {
		t.Fatalf("Write: %v", err)
	}
	for i, s := range []Store{e.s, other} {
		t.Logf("reading through store %d", i)
		checkPoints(t, s, k, time.Minute, minute, minute.Add(time.Minute), []analytics.Point{point(minute, 2*n, n)})
		checkPoints(t, s, k, rollup.Day, day, day.Add(rollup.Day), []analytics.Point{point(day, 2*n, n)})
	}
}

// testDurability writes, reopens, reads, writes more and reopens again.
func testDurability(t *testing.T, e *env) {
	if e.h.Reopen == nil {
		t.Skip("the backend cannot reopen a store (Harness.Reopen is nil)")
	}
	k := e.key("a")
	minute := rollup.Align(e.base(), time.Minute).Add(-10 * time.Minute)
	week := rollup.Align(e.base(), rollup.Week)
	batch := func(h int64) analytics.Batch {
		return analytics.Batch{At: e.at(),
			Counts: []analytics.Count{count(k, time.Minute, minute, h, 1), count(k, rollup.Week, week, h, 1)}}
	}
	write(t, e.s, batch(3))
	e.s = e.h.Reopen()
	checkPoints(t, e.s, k, time.Minute, minute, minute.Add(time.Minute), []analytics.Point{point(minute, 3, 1)})
	write(t, e.s, batch(4))
	e.s = e.h.Reopen()
	checkPoints(t, e.s, k, time.Minute, minute, minute.Add(time.Minute), []analytics.Point{point(minute, 7, 2)})
	checkPoints(t, e.s, k, rollup.Week, week, week.Add(rollup.Week), []analytics.Point{point(week, 7, 2)})
}

// testLargeBatch writes 100,000 counts (10,000 under -short) in one batch:
// 20,000 links in every tier.
func testLargeBatch(t *testing.T, e *env) {
	links := 20_000
	if testing.Short() {
		links = 2_000
	}
	tiers := rollup.DefaultTiers()
	b := analytics.Batch{At: e.at()}
	for i := range links {
		k := e.key(fmt.Sprint(i))
		for j, tr := range tiers {
			b.Counts = append(b.Counts, count(k, tr.Step, rollup.Align(e.base(), tr.Step), int64(i+j+1), int64(i%5)))
		}
		b.Active = append(b.Active, rollup.Active{Step: 5 * time.Minute, Period: rollup.Align(e.base(), time.Hour), Key: k})
	}
	t.Logf("writing %d counts and %d Active entries in one batch", len(b.Counts), len(b.Active))
	write(t, e.s, b)
	for _, i := range []int{0, 1, links / 3, links / 2, links - 1} {
		k := e.key(fmt.Sprint(i))
		for j, tr := range tiers {
			s := rollup.Align(e.base(), tr.Step)
			checkPoints(t, e.s, k, tr.Step, s, s.Add(tr.Step), []analytics.Point{point(s, int64(i+j+1), int64(i%5))})
		}
	}
	keys, err := e.s.Active(context.Background(), 5*time.Minute, rollup.Align(e.base(), time.Hour), "", 2*links)
	if err != nil || len(keys) != links {
		t.Errorf("Active listed %d keys, %v; want %d", len(keys), err, links)
	}
}

// expiresByTTL runs byTTL in place of an expiry test on a backend that
// expires by a TTL (Harness.TTL set, no Harness.Expire), and skips it on
// one that expires by itself and gives neither; it reports whether the
// test is done.
func expiresByTTL(t *testing.T, e *env, byTTL func(*testing.T, *env)) bool {
	if e.h.Expire != nil {
		return false
	}
	if e.h.TTL > 0 {
		byTTL(t, e)
		return true
	}
	t.Skip("the backend expires by itself and gives no TTL (Harness.Expire and Harness.TTL unset)")
	return true
}

// testExpiry moves the clock past each tier's retention in turn: that tier
// loses its old buckets and keeps those still within retention, coarser
// tiers keep theirs, and the all-time tier is never expired.
func testExpiry(t *testing.T, e *env) {
	if expiresByTTL(t, e, testExpiryByTTL) {
		return
	}
	k := e.key("a")
	tiers := rollup.DefaultTiers()
	old := make([]time.Time, len(tiers))   // three hours back
	young := make([]time.Time, len(tiers)) // one step short of the retention ahead
	total, err := rollup.TotalTier(tiers)
	if err != nil {
		t.Fatal(err)
	}
	allTime := rollup.Align(e.now.Add(-3*time.Hour), total.Step)
	b := analytics.Batch{At: e.at(), Counts: []analytics.Count{count(k, total.Step, allTime, 9, 9)}}
	for i, tr := range tiers {
		old[i] = rollup.Align(e.now.Add(-3*time.Hour), tr.Step)
		young[i] = rollup.Align(e.now.Add(tr.Retention-tr.Step), tr.Step)
		b.Counts = append(b.Counts, count(k, tr.Step, old[i], 1, 0), count(k, tr.Step, young[i], 2, 0))
	}
	write(t, e.s, b)
	// check checks what is left once the clock has passed the retention of
	// tiers[:stage+1] by a step and an hour: those tiers lost their old
	// bucket, the finer of them their young bucket as well (for the default
	// tiers, each retention is more than twice the one before).
	check := func(when string, stage int) {
		t.Helper()
		for i, tr := range tiers {
			var want []analytics.Point
			if i > stage {
				want = append(want, point(old[i], 1, 0))
			}
			if i >= stage {
				want = append(want, point(young[i], 2, 0))
			}
			t.Logf("%s: tier %v", when, tr)
			checkPoints(t, e.s, k, tr.Step, old[i], young[i].Add(tr.Step), want)
		}
		checkPoints(t, e.s, k, total.Step, allTime, allTime.Add(total.Step), []analytics.Point{point(allTime, 9, 9)})
	}
	if err := e.h.Expire(e.now); err != nil {
		t.Fatalf("Expire(now): %v", err)
	}
	check("now", -1)
	for i, tr := range tiers {
		d := tr.Retention + tr.Step + time.Hour
		if err := e.h.Expire(e.now.Add(d)); err != nil {
			t.Fatalf("Expire(now + %v): %v", d, err)
		}
		check("now + "+rollup.FormatDuration(d), i)
	}
}

// testExpiryByTTL is testExpiry on a store that expires by itself: in
// each tier, the oldest bucket still kept, written with an At that leaves
// it Harness.TTL, goes once the TTL ends; the current bucket, written
// now, stays; so does an all-time bucket written with the first, which
// never expires.
func testExpiryByTTL(t *testing.T, e *env) {
	k := e.key("a")
	tiers := rollup.DefaultTiers()
	total, err := rollup.TotalTier(tiers)
	if err != nil {
		t.Fatal(err)
	}
	allTime := rollup.Align(e.now.Add(-3*time.Hour), total.Step)
	old := make([]time.Time, len(tiers))
	young := make([]time.Time, len(tiers))
	now := analytics.Batch{At: e.at()}
	for i, tr := range tiers {
		old[i] = rollup.Align(e.now.Add(-tr.Retention), tr.Step)
		young[i] = rollup.Align(e.now, tr.Step)
		b := analytics.Batch{At: old[i].Add(tr.Step + tr.Retention - e.h.TTL), Counts: []analytics.Count{count(k, tr.Step, old[i], 1, 0)}}
		if i == 0 {
			b.Counts = append(b.Counts, count(k, total.Step, allTime, 9, 9))
		}
		write(t, e.s, b)
		now.Counts = append(now.Counts, count(k, tr.Step, young[i], 2, 0))
	}
	write(t, e.s, now)
	written := time.Now()
	there := func(i int, start time.Time) bool {
		return len(points(t, e.s, k, tiers[i].Step, start, start.Add(tiers[i].Step))) == 1
	}
	untilExpired(t, e, written, func() (all, gone bool) {
		all, gone = true, true
		for i := range tiers {
			o := there(i, old[i])
			all = all && o && there(i, young[i])
			gone = gone && !o
		}
		return all, gone
	})
	for i, tr := range tiers {
		checkPoints(t, e.s, k, tr.Step, old[i], young[i].Add(tr.Step), []analytics.Point{point(young[i], 2, 0)})
	}
	checkPoints(t, e.s, k, total.Step, allTime, allTime.Add(total.Step), []analytics.Point{point(allTime, 9, 9)})
}

// untilExpired reads, through read, whether every row a TTL subtest wrote
// is there and whether those meant to expire have gone, until they have:
// it fails the test when a read that ended well within the TTL (5 s
// before its end) misses a row, or when the rows have not gone TTL and two
// minutes after written. A TTL ends on the store's clock, with nothing to
// wait on but reads.
func untilExpired(t *testing.T, e *env, written time.Time, read func() (all, gone bool)) {
	t.Helper()
	if all, _ := read(); time.Since(written) < e.h.TTL-5*time.Second {
		if !all {
			t.Fatalf("read within the TTL of %v: rows missing", e.h.TTL)
		}
	} else {
		t.Logf("the first read ended %v after the writes: too late to check the rows before their TTL of %v", time.Since(written), e.h.TTL)
	}
	deadline := written.Add(e.h.TTL + 2*time.Minute)
	for {
		if _, gone := read(); gone {
			t.Logf("expired %v after the writes (TTL %v)", time.Since(written).Round(time.Second), e.h.TTL)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after writes with a TTL of %v, the rows meant to expire are still there", time.Since(written).Round(time.Second), e.h.TTL)
		}
		time.Sleep(time.Second)
	}
}
