package cassandra

import (
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/rollup"
)

var update = flag.Bool("update", false, "rewrite configs/cassandra.cql")

func TestPartitionSpan(t *testing.T) {
	for _, c := range []struct {
		step, want time.Duration
	}{
		{time.Minute, rollup.Day},
		{5 * time.Minute, rollup.Week},
		{time.Hour, 30 * rollup.Day},
		{rollup.Day, 366 * rollup.Day},
		{rollup.Week, 521 * rollup.Week},
		{15 * time.Minute, rollup.Week},
		{2 * time.Hour, 30 * rollup.Day},
		{2 * time.Minute, rollup.Day},
		{4 * rollup.Week, 130 * 4 * rollup.Week},
	} {
		if got := partitionSpan(c.step); got != c.want {
			t.Errorf("partitionSpan(%v) = %v, want %v", rollup.FormatDuration(c.step), rollup.FormatDuration(got), rollup.FormatDuration(c.want))
		}
	}
}

// TestPartitions checks partitions against a brute-force reference for
// random ranges of every tier: the partitions listed are exactly those that
// hold a bucket starting in the range, every bucket lies in one partition,
// a partition holds at most maxRowsPerWriter buckets, and a year of days
// (365 or 366 days) reads at most two partitions.
func TestPartitions(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	base := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tr := range append(rollup.DefaultTiers(), rollup.Tier{Step: 15 * time.Minute, Retention: 30 * rollup.Day}, rollup.Tier{Step: 2 * rollup.Week, Retention: 10 * rollup.Year}) {
		span := partitionSpan(tr.Step)
		if span%tr.Step != 0 || span/tr.Step > maxRowsPerWriter {
			t.Fatalf("%v: span %v is not a whole number of at most %d steps", tr, span, maxRowsPerWriter)
		}
		for range 50 {
			from := rollup.Align(base.Add(time.Duration(rng.Int64N(int64(10*rollup.Year)))), tr.Step)
			from = from.Add(time.Duration(rng.IntN(3)) * time.Second) // sometimes between starts
			n := rng.IntN(2000)
			to := from.Add(time.Duration(n) * tr.Step)
			got := partitions(from, to, tr)
			// Reference: walk every bucket start in [from, to).
			var want []time.Time
			for b := rollup.Align(from, tr.Step); b.Before(to); b = b.Add(tr.Step) {
				if b.Before(from) {
					continue
				}
				var holders int
				for _, p := range got {
					if !b.Before(p) && b.Before(p.Add(span)) {
						holders++
					}
				}
				if holders != 1 {
					t.Fatalf("%v [%v, %v): bucket %v lies in %d listed partitions", tr, from, to, b, holders)
				}
				p := partitionOf(b, span)
				if len(want) == 0 || !want[len(want)-1].Equal(p) {
					want = append(want, p)
				}
			}
			if len(got) != len(want) || len(want) > 0 && !got[0].Equal(want[0]) {
				t.Fatalf("%v [%v, %v): partitions %v, want %v", tr, from, to, got, want)
			}
		}
	}
	for range 2000 {
		to := rollup.Align(base.Add(time.Duration(rng.Int64N(int64(20*rollup.Year)))), time.Second)
		for d, most := range map[time.Duration]int{365 * rollup.Day: 2, 366 * rollup.Day: 2, 400 * rollup.Day: 3} {
			if n := len(partitions(to.Add(-d), to, rollup.Tier{Step: rollup.Day, Retention: 400 * rollup.Day})); n > most {
				t.Fatalf("%v of days up to %v reads %d partitions, want at most %d", d, to, n, most)
			}
		}
	}
}

// TestPointsPartitionsRead reads a year of days and the longest ranges of
// every tier through a Store and counts the partitions it reads.
func TestPointsPartitionsRead(t *testing.T) {
	clock := time.Date(2026, 5, 4, 12, 0, 30, 0, time.UTC)
	db := newFakeDB(clock)
	s := onFake(t, db, &clock)
	read := func(step time.Duration, from, to time.Time) int {
		t.Helper()
		db.partitionsRead = 0
		if _, err := s.Points(t.Context(), "k", step, from, to); err != nil {
			t.Fatal(err)
		}
		return db.partitionsRead
	}
	if n := read(rollup.Day, clock.Add(-365*rollup.Day), clock); n > 2 {
		t.Errorf("a year of days read %d partitions, want at most 2", n)
	}
	total, _ := rollup.TotalTier(rollup.DefaultTiers())
	for _, tr := range append(rollup.DefaultTiers(), total) {
		if n := read(tr.Step, clock.Add(-100*rollup.Year), clock.Add(100*rollup.Year)); n > 6 {
			t.Errorf("%v: a 200-year range read %d partitions, want at most 6", tr, n)
		}
	}
	if n := read(total.Step, time.Unix(0, 0), clock.AddDate(1000, 0, 0)); n != 1 {
		t.Errorf("all time in the all-time tier read %d partitions, want 1", n)
	}
}

func TestCompactionWindow(t *testing.T) {
	for _, c := range []struct {
		tier rollup.Tier
		unit string
		size int
	}{
		{rollup.Tier{Step: time.Minute, Retention: 2 * rollup.Day}, "HOURS", 2},
		{rollup.Tier{Step: 5 * time.Minute, Retention: 8 * rollup.Day}, "HOURS", 8},
		{rollup.Tier{Step: time.Hour, Retention: 40 * rollup.Day}, "DAYS", 2},
		{rollup.Tier{Step: rollup.Day, Retention: 400 * rollup.Day}, "DAYS", 17},
		{rollup.Tier{Step: rollup.Week, Retention: 5 * rollup.Year}, "DAYS", 77},
		{rollup.Tier{Step: time.Minute, Retention: time.Hour}, "HOURS", 1},
	} {
		if unit, size := compactionWindow(c.tier); unit != c.unit || size != c.size {
			t.Errorf("compactionWindow(%v) = %d %s, want %d %s", c.tier, size, unit, c.size, c.unit)
		}
	}
}

// TestSchemaFile keeps configs/cassandra.cql in step with what Open runs.
// go test -run TestSchemaFile -update rewrites it.
func TestSchemaFile(t *testing.T) {
	const path = "../../configs/cassandra.cql"
	want := SchemaCQL("linkgate", 1, rollup.DefaultTiers())
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is out of date: run go test ./analytics/cassandra -run TestSchemaFile -update", path)
	}
	for _, s := range []string{"points_1m", "points_1w", "points_total", "TimeWindowCompactionStrategy", "rollup_active", "rollup_marks",
		"rollup_progress", "rollup_lease", "PRIMARY KEY ((short_key, bucket), start, writer)", "PRIMARY KEY ((step, period, shard), short_key)"} {
		if !strings.Contains(want, s) {
			t.Errorf("schema lacks %q", s)
		}
	}
}

// TestShardOf pins the shard function to 32-bit FNV-1a modulo 16: the
// shard of an Active entry is part of its primary key, so a change would
// lose the entries stored before.
func TestShardOf(t *testing.T) {
	seen := map[int]bool{}
	for i := range 1000 {
		key := fmt.Sprint("k", i, "ключ")
		h := fnv.New32a()
		h.Write([]byte(key))
		want := int(h.Sum32() % activeShards)
		if got := shardOf(key); got != want {
			t.Fatalf("shardOf(%q) = %d, want %d", key, got, want)
		}
		seen[want] = true
	}
	if len(seen) != activeShards {
		t.Errorf("1,000 keys fell in %d shards of %d", len(seen), activeShards)
	}
}
