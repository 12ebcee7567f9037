package cassandra

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
)

// TestClassesMigrationOnNode opens a store on tables an earlier release
// made, without the class columns, holding a row of then: Open adds the
// columns, the old row reads as it did (its bots declared), a row split
// by class reads back split, and a second Open (the columns there) starts
// as well.
func TestClassesMigrationOnNode(t *testing.T) {
	hs := testkit.CassandraHosts(t)
	const ks = "linkgate_migrate"
	sess := testkit.CassandraSession(t, hs...)
	oldSchema(t, sess, ks, func(q string) string {
		if strings.Contains(q, "_by_shard (") {
			return "" // made by a later release
		}
		for _, c := range classColumns {
			q = strings.Replace(q, "\n    "+c+strings.Repeat(" ", 10-len(c))+"bigint,", "", 1)
		}
		return q
	})
	if n := columns(t, sess, ks, "points_1m"); n != 6 {
		t.Fatalf("the old points_1m has %d columns, want 6", n)
	}
	now := time.Now().UTC()
	m0 := rollup.Align(now.Add(-time.Hour), time.Minute)
	day := rollup.Align(m0, rollup.Day)
	if err := sess.Query("INSERT INTO "+ks+".points_1m (short_key, bucket, start, writer, human, bot) VALUES ('k', ?, ?, uuid(), 3, 2)", day, m0).Exec(); err != nil {
		t.Fatal(err)
	}

	cfg := analytics.Cassandra{Hosts: hs, Keyspace: ks, Consistency: "ONE", ReplicationFactor: 1}
	for round := range 2 {
		s := OpenConnected(t, cfg, analyticstest.DefaultPlan)
		if round == 0 {
			split := analytics.Visits{Human: 1, Bot: 4, Other: [rollup.NumOther]int64{1, 2, 0, 1}}
			err := s.Write(context.Background(), analytics.Batch{At: now, Counts: []analytics.Count{
				{Key: "k", Step: time.Minute, Start: m0.Add(time.Minute), Visits: split},
			}})
			if err != nil {
				s.Close()
				t.Fatal(err)
			}
		}
		ps, err := s.Points(context.Background(), "k", time.Minute, m0, m0.Add(2*time.Minute))
		s.Close()
		want := []analytics.Point{
			{Start: m0, Visits: analytics.Visits{Human: 3, Bot: 2}},
			{Start: m0.Add(time.Minute), Visits: analytics.Visits{Human: 1, Bot: 4, Other: [rollup.NumOther]int64{1, 2, 0, 1}}},
		}
		if err != nil || len(ps) != 2 || ps[0] != want[0] || ps[1] != want[1] {
			t.Fatalf("open %d: points %+v, %v; want %+v", round+1, ps, err, want)
		}
		if d := ps[0].Declared(); d != 2 {
			t.Errorf("the old row's declared bots: %d, want 2", d)
		}
	}
	if n := columns(t, sess, ks, "points_total"); n != 10 {
		t.Errorf("points_total has %d columns, want 10", n)
	}
}

// oldSchema makes keyspace ks anew with the tables an earlier release
// made: schema's statements as edit leaves them ("": none).
func oldSchema(t *testing.T, sess *gocql.Session, ks string, edit func(string) string) {
	t.Helper()
	if err := sess.Query("DROP KEYSPACE IF EXISTS " + ks).Exec(); err != nil {
		t.Fatal(err)
	}
	for _, q := range schema(ks, 1, analyticstest.DefaultPlan.Retention()) {
		if q = edit(q); q == "" {
			continue
		}
		if err := sess.Query(q).Exec(); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// columns returns how many columns table has in keyspace ks.
func columns(t *testing.T, sess *gocql.Session, ks, table string) int {
	t.Helper()
	var n int
	if err := sess.Query("SELECT count(*) FROM system_schema.columns WHERE keyspace_name = ? AND table_name = ?", ks, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLinkVisitsMigrationOnNode opens a store on a link_days an earlier
// release made, without visits, beside a top_days row of then: Open adds
// the column, a flush writes a link's visits into its link_days row and
// none to top_days, and the top counts add both. (Rows are written to
// link_days_by_shard since: TestShardMigrationOnNode.)
func TestLinkVisitsMigrationOnNode(t *testing.T) {
	hs := testkit.CassandraHosts(t)
	const ks = "linkgate_migrate_visits"
	sess := testkit.CassandraSession(t, hs...)
	oldSchema(t, sess, ks, func(q string) string {
		return strings.Replace(q, "\n    visits    bigint,\n    PRIMARY KEY ((short_key, bucket), day, writer)", "\n    PRIMARY KEY ((short_key, bucket), day, writer)", 1)
	})
	if n := columns(t, sess, ks, "link_days"); n != 6 {
		t.Fatalf("the old link_days has %d columns, want 6", n)
	}
	now := time.Now().UTC()
	day := rollup.Align(now, rollup.Day)
	if err := sess.Query("INSERT INTO "+ks+".top_days (day, shard, short_key, writer, visits) VALUES (?, ?, 'gh', uuid(), 4) USING TTL 3600", day, shardOf("gh")).Exec(); err != nil {
		t.Fatal(err)
	}
	cfg := analytics.Cassandra{Hosts: hs, Keyspace: ks, Consistency: "ONE", ReplicationFactor: 1}
	s := OpenConnected(t, cfg, analyticstest.DefaultPlan)
	defer s.Close()
	b := analytics.Batch{Writer: "w", Seq: 1, At: now, Dims: []analytics.DimCount{
		{Key: analytics.AllLinks, Day: day, Dim: analytics.DimLink, Value: "gh", N: 3, Cum: 3},
		{Key: analytics.AllLinks, Day: day, Dim: analytics.DimLink, Value: "go", N: 2, Cum: 2},
	}}
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	counts, err := s.TopCounts(context.Background(), []string{"gh", "go"}, day, day.Add(rollup.Day))
	if err != nil || counts["gh"] != 7 || counts["go"] != 2 {
		t.Errorf("TopCounts = %v, %v; want gh 4 + 3, go 2", counts, err)
	}
	var rows int
	if err := sess.Query("SELECT count(*) FROM "+ks+".top_days WHERE day = ? AND shard = ? AND short_key = 'go'", day, shardOf("go")).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("top_days holds %d rows of go (%v), want none", rows, err)
	}
	if n := columns(t, sess, ks, "link_days"); n != 7 {
		t.Errorf("link_days has %d columns, want 7", n)
	}
}

// TestActiveMigrationOnNode opens a store on a rollup_active an earlier
// release made, without listed, holding an Active entry it inserted: Open
// adds the column, a flush's entries of the same period (written with an
// UPDATE of listed) list beside the old one, in key order, each once, and
// carry a TTL.
func TestActiveMigrationOnNode(t *testing.T) {
	hs := testkit.CassandraHosts(t)
	const ks = "linkgate_migrate_active"
	sess := testkit.CassandraSession(t, hs...)
	oldSchema(t, sess, ks, func(q string) string { return strings.Replace(q, "\n    listed    boolean,", "", 1) })
	if n := columns(t, sess, ks, "rollup_active"); n != 4 {
		t.Fatalf("the old rollup_active has %d columns, want 4", n)
	}
	now := time.Now().UTC()
	period := rollup.Align(now, time.Hour)
	// Keys of one shard, so that one page lists them in key order.
	var keys []string
	for i := 0; len(keys) < 3; i++ {
		if k := fmt.Sprint("k", i); shardOf(k) == 0 {
			keys = append(keys, k)
		}
	}
	if err := sess.Query("INSERT INTO "+ks+".rollup_active (step, period, shard, short_key) VALUES (300, ?, 0, ?) USING TTL 3600", period, keys[1]).Exec(); err != nil {
		t.Fatal(err)
	}
	cfg := analytics.Cassandra{Hosts: hs, Keyspace: ks, Consistency: "ONE", ReplicationFactor: 1}
	s := OpenConnected(t, cfg, analyticstest.DefaultPlan)
	defer s.Close()
	if n := columns(t, sess, ks, "rollup_active"); n != 5 {
		t.Errorf("rollup_active has %d columns after Open, want 5", n)
	}
	var as []rollup.Active
	for _, k := range keys {
		as = append(as, rollup.Active{Step: 5 * time.Minute, Period: period, Key: k})
	}
	if err := s.Write(context.Background(), analytics.Batch{At: now, Active: as}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Active(context.Background(), 5*time.Minute, period, "", 10)
	if err != nil || !slices.Equal(got, keys) {
		t.Errorf("Active = %q, %v; want %q", got, err, keys)
	}
	var ttl int
	if err := sess.Query("SELECT TTL(listed) FROM "+ks+".rollup_active WHERE step = 300 AND period = ? AND shard = 0 AND short_key = ?", period, keys[0]).Scan(&ttl); err != nil || ttl <= 0 {
		t.Errorf("the listed cell's TTL: %d, %v; want one", ttl, err)
	}
}

// TestShardMigrationOnNode opens a store on a node holding what an earlier
// release wrote to points_1m and link_days, before the sharded tables: a
// batch's count, a writer generation's breakdown, visits and register.
// The same batch replayed by this release (a journal written before an
// upgrade) goes to the sharded tables: every read counts it once. A newer
// batch adds to it; an erasure deletes the link's rows of both.
func TestShardMigrationOnNode(t *testing.T) {
	hs := testkit.CassandraHosts(t)
	ks := testkit.CassandraKeyspace(t, hs, "linkgate_migrate_shards")
	sess := testkit.CassandraSession(t, hs...)
	cfg := analytics.Cassandra{Hosts: hs, Keyspace: ks, Consistency: "ONE", ReplicationFactor: 1}
	s := OpenConnected(t, cfg, analyticstest.DefaultPlan)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC()
	m0 := rollup.Align(now.Add(-time.Hour), time.Minute)
	day := rollup.Align(now, rollup.Day)
	first := analytics.Batch{Writer: "w", Seq: 1, At: now.Add(-time.Minute),
		Counts:  []analytics.Count{{Key: "k", Step: time.Minute, Start: m0, Visits: analytics.Visits{Human: 3, Bot: 1}}},
		Dims:    []analytics.DimCount{{Key: "k", Day: day, Dim: visitor.Country, Value: "DE", N: 3, Cum: 3}, {Key: analytics.AllLinks, Day: day, Dim: analytics.DimLink, Value: "k", N: 3, Cum: 3}},
		Uniques: []analytics.UniqueSketch{{Key: "k", Day: day, Sketch: sketchOf(1, 2)}},
	}
	// What the earlier release wrote of first: its rows in points_1m and
	// link_days.
	w, gen := batchWriter("w", 1, 1), dimWriter("w", 0)
	var regs []int
	var sk hll.Sketch
	if err := sk.MergeBinary(first.Uniques[0].Sketch); err != nil {
		t.Fatal(err)
	}
	sk.Each(func(reg uint16, rho uint8) { regs = append(regs, int(reg)<<8|int(rho)) })
	ts := first.At.UnixMicro()
	for _, q := range []struct {
		stmt string
		args []any
	}{
		{"INSERT INTO " + ks + ".points_1m (short_key, bucket, start, writer, human, bot) VALUES ('k', ?, ?, ?, 3, 1) USING TTL 86400 AND TIMESTAMP ?", []any{rollup.Align(m0, rollup.Day), m0, w, ts}},
		{"UPDATE " + ks + ".link_days USING TTL 86400 AND TIMESTAMP ? SET dims = dims + ?, regs = regs + ?, visits = 3 WHERE short_key = 'k' AND bucket = ? AND day = ? AND writer = ?",
			[]any{ts, map[string]int64{dimKey(int(visitor.Country), "DE"): 3}, regs, partitionOf(day, dimSpan), day, gen}},
	} {
		if err := sess.Query(q.stmt, q.args...).Exec(); err != nil {
			t.Fatal(err)
		}
	}
	read := func(when string, visits, de, top, uniques int64) {
		t.Helper()
		ps, err := s.Points(ctx, "k", time.Minute, m0.Add(-time.Hour), now.Add(time.Minute))
		var sum int64
		for _, p := range ps {
			sum += p.Human + p.Bot
		}
		if err != nil || sum != visits {
			t.Errorf("%s: points %v, %v: %d visits, want %d", when, ps, err, sum, visits)
		}
		dv, err := s.Dims(ctx, "k", visitor.Country, day, day.Add(rollup.Day))
		if err != nil || len(dv) != 1 || dv[0].Count != de {
			t.Errorf("%s: countries %v, %v; want DE %d", when, dv, err, de)
		}
		counts, err := s.TopCounts(ctx, []string{"k"}, day, day.Add(rollup.Day))
		if err != nil || counts["k"] != top {
			t.Errorf("%s: top counts %v, %v; want k %d", when, counts, err, top)
		}
		u, err := s.Uniques(ctx, "k", day, day.Add(rollup.Day))
		if err != nil || u.Estimate() != uniques {
			t.Errorf("%s: uniques %v, %v; want %d", when, u, err, uniques)
		}
	}
	read("the earlier release's rows", 4, 3, 3, 2)
	if err := s.Write(ctx, first); err != nil {
		t.Fatal(err)
	}
	read("the same batch replayed into the sharded tables", 4, 3, 3, 2)
	second := analytics.Batch{Writer: "w", Seq: 2, At: now,
		Counts:  []analytics.Count{{Key: "k", Step: time.Minute, Start: m0, Visits: analytics.Visits{Human: 2}}},
		Dims:    []analytics.DimCount{{Key: "k", Day: day, Dim: visitor.Country, Value: "DE", N: 2, Cum: 5}, {Key: analytics.AllLinks, Day: day, Dim: analytics.DimLink, Value: "k", N: 2, Cum: 5}},
		Uniques: []analytics.UniqueSketch{{Key: "k", Day: day, Sketch: sketchOf(3)}},
	}
	if err := s.Write(ctx, second); err != nil {
		t.Fatal(err)
	}
	read("a newer batch", 6, 5, 5, 3)
	var rows int
	if err := sess.Query("SELECT count(*) FROM "+ks+".points_1m_by_shard WHERE shard = ? AND bucket = ? AND short_key = 'k'", linkShard("k"), rollup.Align(m0, time.Hour)).Scan(&rows); err != nil || rows != 2 {
		t.Errorf("points_1m_by_shard holds %d rows of k (%v), want the two batches'", rows, err)
	}
	if err := s.Erase(ctx, analytics.Erasure{Key: "k", At: now.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		table string
		args  []any
	}{
		{"points_1m_by_shard WHERE shard = ? AND bucket = ? AND short_key = 'k'", []any{linkShard("k"), rollup.Align(m0, time.Hour)}},
		{"link_days_by_shard WHERE shard = ? AND bucket = ? AND short_key = 'k'", []any{linkShard("k"), partitionOf(day, linkDaysShardSpan)}},
		{"points_1m WHERE short_key = 'k' AND bucket = ?", []any{rollup.Align(m0, rollup.Day)}},
		{"link_days WHERE short_key = 'k' AND bucket = ?", []any{partitionOf(day, dimSpan)}},
	} {
		if err := sess.Query("SELECT count(*) FROM "+ks+"."+q.table, q.args...).Scan(&rows); err != nil || rows != 0 {
			t.Errorf("%s: %d rows after the erasure (%v), want none", q.table, rows, err)
		}
	}
}

// sketchOf is the sketch of visitors with the hashes of ids.
func sketchOf(ids ...uint64) []byte {
	var sk hll.Sketch
	for _, id := range ids {
		sk.Add(id * 0x9E3779B97F4A7C15)
	}
	return sk.AppendBinary(nil)
}
