package cassandra

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp/cmpopts"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// linkBatch is a batch of writer's DimLink counts of day: cum[k] is each
// link's cumulative count (generation 0), n[k] what the batch adds.
func linkBatch(writer string, seq uint64, at, day time.Time, keys []string, n, cum map[string]int64) analytics.Batch {
	b := analytics.Batch{Writer: writer, Seq: seq, At: at}
	for _, k := range keys {
		b.Dims = append(b.Dims, analytics.DimCount{Key: analytics.AllLinks, Day: day, Dim: analytics.DimLink, Value: k, N: n[k], Cum: cum[k]})
	}
	return b
}

// bruteTop is the n most visited of totals, ties by key.
func bruteTop(totals map[string]int64, n int) []analytics.TopLink {
	var out []analytics.TopLink
	for k, v := range totals {
		out = append(out, analytics.TopLink{Key: k, Visits: v})
	}
	slices.SortFunc(out, func(a, b analytics.TopLink) int {
		return cmp.Or(cmp.Compare(b.Visits, a.Visits), strings.Compare(a.Key, b.Key))
	})
	return out[:min(n, len(out))]
}

// TestTopReadsAt100000Links writes a day of 100,000 links from two
// gateways (skewed, each its own way) and checks that Top answers the
// brute-force top 10, 100 and 1,000 while reading the two writers' lists
// and the exact counts of a few links: a bounded number of rows, where
// reading every link's count of the day returned 200,000.
func TestTopReadsAt100000Links(t *testing.T) {
	const links = 100_000
	clock := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	day := rollup.Align(clock, rollup.Day)
	db := newFakeDB(clock)
	a, b := onFake(t, db, &clock), onFake(t, db, &clock)
	keys := make([]string, links)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
	}
	totals := map[string]int64{}
	for wi, s := range []*Store{a, b} {
		n := map[string]int64{}
		for i, k := range keys {
			c := 1 + int64(200_000/(i+1)) // writer a: k000000 first
			if wi == 1 {
				c = 1 + int64(150_000/((i*7919)%links+1)) // writer b: another order
			}
			n[k] = c
			totals[k] += c
		}
		if err := s.Write(context.Background(), linkBatch(fmt.Sprint("w", wi), 1, clock, day, keys, n, n)); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []int{10, 100, 1000} {
		before := a.Statements()
		got, err := a.Top(context.Background(), day, day.Add(rollup.Day), n)
		if err != nil {
			t.Fatal(err)
		}
		st := a.Statements()
		reads, rows := st.Reads-before.Reads, st.TopRows-before.TopRows
		t.Logf("top %d of %d links from 2 writers: %d reads returning %d rows", n, links, reads, rows)
		if diff := gocmp.Diff(bruteTop(totals, n), got); diff != "" {
			t.Errorf("Top(%d) (-want +got):\n%s", n, diff)
		}
		// One read of the day's lists, then the links that can make the
		// top n, at most 100 per read of their link_days partitions (their
		// two rows each) and per read of a (day, shard) of top_days, which
		// link_days replaced.
		if maxReads := int64(1 + activeShards + 2*(2*n/maxTopKeys+1)); reads > maxReads {
			t.Errorf("Top(%d) sent %d reads, want at most %d", n, reads, maxReads)
		}
		if maxRows := int64(2*topLeaders + 2*2*n); rows > maxRows {
			t.Errorf("Top(%d) read %d rows, want at most %d (the 2 lists and 2 rows per candidate)", n, rows, maxRows)
		}
	}
}

// TestTopListKeepsTheMostVisited writes a writer's batches of 5,000 links
// with random visits (so links enter and leave its list), one batch twice
// (a retry), then, from another Store (the process replaying a crashed
// one's journal), an old batch again and a new one. After each the
// stored list is the links with the 2,000 highest counts, each with its
// count, in distinct slots, and the replay changed nothing.
func TestTopListKeepsTheMostVisited(t *testing.T) {
	const links = 5000
	clock := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	day := rollup.Align(clock, rollup.Day)
	db := newFakeDB(clock)
	s := onFake(t, db, &clock)
	writer := dimWriter("w", 0)
	rng := rand.New(rand.NewPCG(3, 4))
	cum := map[string]int64{}
	var batches []analytics.Batch
	next := func() analytics.Batch {
		n := map[string]int64{}
		var keys []string
		for range 3000 {
			k := fmt.Sprintf("k%04d", rng.IntN(links))
			if n[k] == 0 {
				keys = append(keys, k)
			}
			n[k] += 1 + int64(rng.IntN(5))
		}
		slices.Sort(keys)
		c := map[string]int64{}
		for _, k := range keys {
			cum[k] += n[k]
			c[k] = cum[k]
		}
		clock = clock.Add(10 * time.Second)
		b := linkBatch("w", uint64(len(batches)+1), clock, day, keys, n, c)
		batches = append(batches, b)
		return b
	}
	stored := func() []leaderRow {
		rows, err := db.readLeader(context.Background(), "", day, writer)
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	check := func(when string) {
		t.Helper()
		rows := stored()
		listed := map[string]bool{}
		slots := map[int]bool{}
		least := int64(1 << 62)
		for _, r := range rows {
			if listed[r.key] || slots[r.slot] || r.count != cum[r.key] {
				t.Fatalf("%s: slot %d: %s %d: listed twice, a slot twice, or not its count %d", when, r.slot, r.key, r.count, cum[r.key])
			}
			listed[r.key], slots[r.slot] = true, true
			least = min(least, r.count)
		}
		if len(rows) != min(topLeaders, len(cum)) {
			t.Fatalf("%s: %d links listed, want %d", when, len(rows), min(topLeaders, len(cum)))
		}
		for k, c := range cum {
			if !listed[k] && c > least {
				t.Fatalf("%s: %s has %d visits and is not listed; the list's least has %d", when, k, c, least)
			}
		}
	}
	for i := range 4 {
		b := next()
		if err := s.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			before := stored()
			if err := s.Write(context.Background(), b); err != nil { // a retry after a lost answer
				t.Fatal(err)
			}
			if diff := gocmp.Diff(before, stored(), gocmp.AllowUnexported(leaderRow{})); diff != "" {
				t.Errorf("a batch written twice changed the list (-once +twice):\n%s", diff)
			}
		}
		check(fmt.Sprint("batch ", i+1))
	}
	// Another process replays the journal's last two batches, then goes
	// on: it reads the list back before writing to it.
	other := onFake(t, db, &clock)
	before := stored()
	for _, b := range batches[2:] {
		if err := other.Write(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	if diff := gocmp.Diff(before, stored(), gocmp.AllowUnexported(leaderRow{})); diff != "" {
		t.Errorf("replayed batches changed the list (-before +after):\n%s", diff)
	}
	if err := other.Write(context.Background(), next()); err != nil {
		t.Fatal(err)
	}
	check("a batch after the replay")
	got, err := s.Top(context.Background(), day, day.Add(rollup.Day), 1000)
	if err != nil {
		t.Fatal(err)
	}
	if diff := gocmp.Diff(bruteTop(cum, 1000), got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Top(1000) (-want +got):\n%s", diff)
	}
}

// TestTopReadsTheRowsOfBefore reads top lists over what a release before
// link_days held the links' visits left in top_days: a link counted there
// alone keeps its count, and a generation with a count in both (a journal
// written before the upgrade and replayed after it) counts its larger,
// newer one, once. Each link's visits are a cell of its link_days row
// now, none in top_days.
func TestTopReadsTheRowsOfBefore(t *testing.T) {
	clock := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	day := rollup.Align(clock, rollup.Day)
	db := newFakeDB(clock)
	s := onFake(t, db, &clock)
	old := func(writer string, key string, n int64) topRow {
		return topRow{day: day, shard: shardOf(key), key: key, writer: dimWriter(writer, 0), count: n, ttl: 3600, ts: clock.Add(-time.Minute).UnixMicro()}
	}
	for _, r := range []topRow{old("w", "go", 3), old("x", "gh", 4), old("x", "go", 2)} {
		if err := db.writeTop(context.Background(), []topRow{r}); err != nil {
			t.Fatal(err)
		}
	}
	// The old release's lists: x's, and w's, which the replayed batch
	// reads back.
	leaders := []leaderRow{
		{day: day, writer: dimWriter("x", 0), slot: 0, key: "gh", count: 4, ttl: 3600, ts: 1},
		{day: day, writer: dimWriter("x", 0), slot: 1, key: "go", count: 2, ttl: 3600, ts: 1},
		{day: day, writer: dimWriter("w", 0), slot: 0, key: "go", count: 3, ttl: 3600, ts: 1},
	}
	if err := db.writeLeaders(context.Background(), leaders); err != nil {
		t.Fatal(err)
	}
	// w's journal, replayed: go 3 → 5 in the same generation.
	b := linkBatch("w", 2, clock, day, []string{"go"}, map[string]int64{"go": 2}, map[string]int64{"go": 5})
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if n := len(db.top[fakeTopPart{day.UnixMicro(), shardOf("go")}]); n != 2 {
		t.Errorf("top_days holds %d rows of go's shard, want the 2 of before", n)
	}
	if st := s.Statements(); st.Top != 1 {
		t.Errorf("%d links' visits written, want 1", st.Top)
	}
	want := []analytics.TopLink{{Key: "go", Visits: 7}, {Key: "gh", Visits: 4}}
	got, err := s.Top(context.Background(), day, day.Add(rollup.Day), 5)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("Top = %v, %v; want %v: w's larger count of go (5, not 3 + 5) and x's 2, gh's 4 of before", got, err, want)
	}
	counts, err := s.TopCounts(context.Background(), []string{"go", "gh", "gl"}, day, day.Add(rollup.Day))
	if err != nil || counts["go"] != 7 || counts["gh"] != 4 || counts["gl"] != 0 {
		t.Errorf("TopCounts = %v, %v; want go 7, gh 4, gl 0", counts, err)
	}
}
