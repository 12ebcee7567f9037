package cassandra

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/analytics/cassandra/cqlmodel"
	"github.com/linkgate/linkgate/internal/cqlwire"
	"github.com/linkgate/linkgate/rollup"
)

// TestRefusalsAsCassandra runs the analytics store's statements, with the
// values Cassandra refuses and with values it takes, singly and in the
// batches the store sends, on a real node (CASSANDRA_HOSTS) and on the CQL
// model, and compares the answers: the model must refuse what Cassandra
// refuses, with the same error. (The model keeps no data: rows are not
// compared.) The node's keyspace is one of its own: the statements write
// the rollup's progress at today, which would make the other tests' reads
// of earlier buckets look rolled up.
func TestRefusalsAsCassandra(t *testing.T) {
	const ks = "linkgate_refusals"
	tiers := rollup.DefaultTiers()
	real, model := cqlwire.Sessions(t, cqlmodel.New(t).Addr(), schema(ks, 1, tiers))
	q := newCQL(nil, ks, tiers, gocql.LocalQuorum, gocql.LocalSerial)
	b := make([]byte, 6)
	rand.Read(b)
	run := "refusals-" + hex.EncodeToString(b)
	now := time.Now().UTC().Truncate(time.Millisecond)
	day := rollup.Align(now, rollup.Day)
	w := gocql.MustRandomUUID()
	point := q.insertPoint["points_1m"]
	long := func(n int) string { return run + strings.Repeat("k", n-len(run)) }
	pointArgs := func(key string, bucket, start any, writer any, ttl int, ts any) []any {
		return []any{key, bucket, start, writer, 1, 0, ttl, ts}
	}
	ts := now.UnixMicro()
	hour := rollup.Align(now, time.Hour)
	cases := []cqlwire.Case{
		{Name: "a point", Q: point, Args: pointArgs(run, day, now, w, 60, ts)},
		{Name: "a point of an empty key: one part of the partition key", Q: point, Args: pointArgs("", day, now, w, 60, ts)},
		{Name: "a point of a null bucket", Q: point, Args: pointArgs(run, nil, now, w, 60, ts), Refused: true},
		{Name: "a point of a null start", Q: point, Args: pointArgs(run, day, nil, w, 60, ts), Refused: true},
		{Name: "a point of an unset writer", Q: point, Args: pointArgs(run, day, now, gocql.UnsetValue, 60, ts), Refused: true},
		{Name: "a point of a key of 65,536 bytes", Q: point, Args: pointArgs(long(65536), day, now, w, 60, ts), Refused: true},
		{Name: "a point of a key of 65,530 bytes: the partition key over 65,535", Q: point, Args: pointArgs(long(65530), day, now, w, 60, ts), Refused: true},
		{Name: "a point without a TTL", Q: point, Args: pointArgs(run, day, now, w, 0, ts)},
		{Name: "a point of a negative TTL", Q: point, Args: pointArgs(run, day, now, w, -1, ts), Refused: true},
		{Name: "a point of a TTL over 20 years", Q: point, Args: pointArgs(run, day, now, w, 630720001, ts), Refused: true},
		{Name: "a point of 20 years: past 2038", Q: point, Args: pointArgs(run, day, now, w, 630720000, ts), Refused: true},
		{Name: "a point of a null timestamp", Q: point, Args: pointArgs(run, day, now, w, 60, nil), Refused: true},
		{Name: "a point of the smallest timestamp", Q: point, Args: pointArgs(run, day, now, w, 60, int64(-1<<63)), Refused: true},
		{Name: "points read", Q: q.selectPoints["points_1m"], Args: []any{run, day, day, now}},
		{Name: "points read without a lower bound", Q: q.selectPoints["points_1m"], Args: []any{run, day, nil, now}},
		{Name: "points of a null bucket read", Q: q.selectPoints["points_1m"], Args: []any{run, nil, day, now}, Refused: true},
		{Name: "an Active entry", Q: q.updateActive, Args: []any{60, 300, day, 3, []string{run}}},
		{Name: "Active entries, one of them twice", Q: q.updateActive, Args: []any{60, 300, day, 3, []string{run, run + "b", run}}},
		{Name: "no Active entries", Q: q.updateActive, Args: []any{60, 300, day, 3, []string{}}},
		{Name: "an Active entry of an empty key", Q: q.updateActive, Args: []any{60, 300, day, 3, []string{""}}},
		{Name: "an Active entry of a null key", Q: q.updateActive, Args: []any{60, 300, day, 3, []*string{nil}}, Refused: true},
		{Name: "an Active entry of a key of 65,536 bytes", Q: q.updateActive, Args: []any{60, 300, day, 3, []string{long(65536)}}, Refused: true},
		{Name: "Active entries of a null list", Q: q.updateActive, Args: []any{60, 300, day, 3, nil}, Refused: true},
		{Name: "Active entries of an unset list", Q: q.updateActive, Args: []any{60, 300, day, 3, gocql.UnsetValue}, Refused: true},
		{Name: "Active entries of a null shard", Q: q.updateActive, Args: []any{60, 300, day, nil, []string{run}}, Refused: true},
		{Name: "Active entries of a TTL past 2038", Q: q.updateActive, Args: []any{630720000, 300, day, 3, []string{run}}, Refused: true},
		{Name: "Active entries read", Q: q.selectActive, Args: []any{300, day, 3, "", 10}},
		{Name: "Active entries read with LIMIT 0", Q: q.selectActive, Args: []any{300, day, 3, "", 0}, Refused: true},
		{Name: "a mark", Q: q.insertMark, Args: []any{run, 300, day, int64(1), ts, 60, ts}},
		{Name: "a mark deleted", Q: q.delMark, Args: []any{ts, run, 300, day, int64(1)}},
		{Name: "a mark deleted with a null timestamp", Q: q.delMark, Args: []any{nil, run, 300, day, int64(1)}, Refused: true},
		{Name: "a mark deleted with a null start", Q: q.delMark, Args: []any{ts, run, 300, nil, int64(1)}, Refused: true},
		{Name: "marks of an empty key read", Q: q.selectMarks, Args: []any{""}, Refused: true},
		{Name: "progress", Q: q.insertProgress, Args: []any{300, day, day.UnixMicro()}},
		{Name: "progress of a null step", Q: q.insertProgress, Args: []any{nil, day, day.UnixMicro()}, Refused: true},
		{Name: "progress read", Q: q.selectProgress},
		{Name: "a lease of a TTL past 2038", Q: q.takeLease, Args: []any{w, 630720000}, Refused: true},
		{Name: "a lease of a negative TTL", Q: q.takeLease, Args: []any{w, -1}, Refused: true},
		{Name: "a link day", Q: q.updateLinkDay, Args: []any{60, ts, map[string]int64{"0:example.org": 3}, []int{7<<8 | 3}, run, day, day, w}},
		{Name: "a link day of an empty value", Q: q.updateLinkDay, Args: []any{60, ts, map[string]int64{"0:": 3}, []int{}, run, day, day, w}},
		{Name: "a link day of nothing", Q: q.updateLinkDay, Args: []any{60, ts, map[string]int64{}, []int{}, run, day, day, w}},
		{Name: "a link day of a null day", Q: q.updateLinkDay, Args: []any{60, ts, map[string]int64{"0:x": 3}, []int{}, run, day, nil, w}, Refused: true},
		{Name: "a link day of a null writer", Q: q.updateLinkDay, Args: []any{60, ts, map[string]int64{"0:x": 3}, []int{}, run, day, day, nil}, Refused: true},
		{Name: "a link day of a TTL past 2038", Q: q.updateLinkDay, Args: []any{630720000, ts, map[string]int64{"0:x": 3}, []int{}, run, day, day, w}, Refused: true},
		{Name: "a link day with its visits", Q: q.updateLinkVisits, Args: []any{60, ts, map[string]int64{"0:x": 3}, []int{}, int64(5), run, day, day, w}},
		{Name: "a link day with its visits of nothing else", Q: q.updateLinkVisits, Args: []any{60, ts, map[string]int64{}, []int{}, int64(5), run, day, day, w}},
		{Name: "a link day with its visits of a null key", Q: q.updateLinkVisits, Args: []any{60, ts, map[string]int64{}, []int{}, int64(5), nil, day, day, w}, Refused: true},
		{Name: "links' visits read by key", Q: q.selectLinkVisits, Args: []any{[]string{run, ""}, day, day, day.Add(rollup.Day)}},
		{Name: "links' visits of a null bucket read", Q: q.selectLinkVisits, Args: []any{[]string{run}, nil, day, day.Add(rollup.Day)}, Refused: true},
		{Name: "link days' breakdowns read", Q: q.selectLinkDims, Args: []any{run, day, day, day.Add(rollup.Day)}},
		{Name: "link days' registers read", Q: q.selectLinkRegs, Args: []any{run, day, day, day.Add(rollup.Day)}},
		{Name: "breakdowns read", Q: q.selectDims, Args: []any{run, day, 0, day, day.Add(rollup.Day)}},
		{Name: "breakdowns of a null dimension read", Q: q.selectDims, Args: []any{run, day, nil, day, day.Add(rollup.Day)}},
		{Name: "registers read", Q: q.selectUniqs, Args: []any{run, day, day, day.Add(rollup.Day)}},
		{Name: "top rows read by key", Q: q.selectTopKeys, Args: []any{day, 3, []string{run, ""}}},
		{Name: "top rows of a null shard read", Q: q.selectTopKeys, Args: []any{day, nil, []string{run}}, Refused: true},
		{Name: "a leader", Q: q.insertLeader, Args: []any{day, w, 1, run, int64(5), 60, ts}},
		{Name: "leaders read", Q: q.selectLeaders, Args: []any{day}},
		{Name: "leaders of a null day read", Q: q.selectLeaders, Args: []any{nil}, Refused: true},
		{Name: "an erasure", Q: q.insertErasure, Args: []any{run + "/go", ts, now.UnixNano(), ts}},
		{Name: "an erasure of an empty name", Q: q.insertErasure, Args: []any{"", ts, now.UnixNano(), ts}},
		{Name: "an erasure of a null name", Q: q.insertErasure, Args: []any{nil, ts, now.UnixNano(), ts}, Refused: true},
		{Name: "an erasure of a null timestamp", Q: q.insertErasure, Args: []any{run + "/go", ts, now.UnixNano(), nil}, Refused: true},
		{Name: "an erasure of the smallest timestamp", Q: q.insertErasure, Args: []any{run + "/go", ts, now.UnixNano(), int64(-1 << 63)}, Refused: true},
		{Name: "an erasure of a name of 65,536 bytes", Q: q.insertErasure, Args: []any{long(65536), ts, now.UnixNano(), ts}, Refused: true},
		{Name: "erasures read", Q: q.selectErasures},
		{Name: "a link's points deleted", Q: q.deletePartitions["points_1m"], Args: []any{"#1.2/" + run, day}},
		{Name: "a link's all-time points deleted", Q: q.deletePartitions["points_total"], Args: []any{"#1.2/" + run, time.Unix(0, 0)}},
		{Name: "points of a null bucket deleted", Q: q.deletePartitions["points_1m"], Args: []any{run, nil}, Refused: true},
		{Name: "a link's days deleted", Q: q.deletePartitions["link_days"], Args: []any{"#1.2/" + run, day}},
		{Name: "a link's marks deleted", Q: q.deletePartitions["rollup_marks"], Args: []any{"#1.2/" + run}},
		{Name: "a sharded point", Q: q.insertShardPoint, Args: []any{linkShard(run), hour, run, now, w, 1, 0, 60, ts}},
		{Name: "a sharded point of a null shard", Q: q.insertShardPoint, Args: []any{nil, hour, run, now, w, 1, 0, 60, ts}, Refused: true},
		{Name: "a sharded point of a null key", Q: q.insertShardPoint, Args: []any{linkShard(run), hour, nil, now, w, 1, 0, 60, ts}, Refused: true},
		{Name: "a sharded point of an empty key: a clustering value", Q: q.insertShardPoint, Args: []any{linkShard(run), hour, "", now, w, 1, 0, 60, ts}},
		{Name: "a sharded point of a key of 65,536 bytes", Q: q.insertShardPoint, Args: []any{linkShard(run), hour, long(65536), now, w, 1, 0, 60, ts}, Refused: true},
		{Name: "sharded points read, partitions of a day", Q: q.selectShardPoints, Args: []any{linkShard(run), shardBuckets(day, day.Add(rollup.Day), time.Hour), run, day, day.Add(rollup.Day)}},
		{Name: "sharded points read of no partition", Q: q.selectShardPoints, Args: []any{linkShard(run), []time.Time{}, run, day, now}},
		{Name: "a link's sharded points deleted", Q: q.deletePartitions["points_1m_by_shard"], Args: []any{linkShard(run), shardBuckets(day, day.Add(rollup.Day), time.Hour), "#1.2/" + run}},
		{Name: "a link's sharded days deleted", Q: q.deletePartitions["link_days_by_shard"], Args: []any{linkShard(run), shardBuckets(day, day.Add(dimSpan), linkDaysShardSpan), "#1.2/" + run}},
		{Name: "sharded breakdowns read", Q: q.selectShardDims, Args: []any{linkShard(run), shardBuckets(day, day.Add(dimSpan), linkDaysShardSpan), run, day, now}},
		{Name: "sharded links' visits read", Q: q.selectShardVisits, Args: []any{linkShard(run),
			shardBuckets(day.Add(-rollup.Day), day.Add(rollup.Day), linkDaysShardSpan), []string{run, run + "b"}, day.Add(-rollup.Day), day.Add(rollup.Day)}},
		{Name: "marks of an empty key deleted", Q: q.deletePartitions["rollup_marks"], Args: []any{""}, Refused: true},
	}
	// Batches: of one partition, never measured (one mutation); across
	// partitions, refused over 50 KB.
	entries := func(n int, f func(i int) cqlwire.Entry) []cqlwire.Entry {
		var es []cqlwire.Entry
		for i := range n {
			es = append(es, f(i))
		}
		return es
	}
	activeKeys := func(n, keyLen int) []string {
		var ks []string
		for i := range n {
			ks = append(ks, long(keyLen)+fmt.Sprint(i))
		}
		return ks
	}
	// A link day of a value of 1,000 bytes, each on a day of its own, in
	// the partition of shard.
	link := func(key string, shard int) func(int) cqlwire.Entry {
		return func(i int) cqlwire.Entry {
			return cqlwire.Entry{Q: q.updateLinkDay, Args: []any{60, ts, map[string]int64{"0:" + long(1000) + fmt.Sprint(i): 1}, []int{i<<8 | 3},
				shard, partitionOf(day, linkDaysShardSpan), key, day.Add(time.Duration(i) * rollup.Day), w}}
		}
	}
	// A count of key in the sharded table, 450 of them 32 KB.
	shardPoint := func(key string) func(int) cqlwire.Entry {
		return func(i int) cqlwire.Entry {
			return cqlwire.Entry{Q: q.insertShardPoint, Args: []any{linkShard(key), hour, key, now, gocql.MustRandomUUID(), 1, 0, 60, ts}}
		}
	}
	cases = append(cases,
		cqlwire.Case{Name: "Active entries of one partition, 60 KB: one statement, never measured", Q: q.updateActive, Args: []any{60, 300, day, 1, activeKeys(60, 1000)}},
		cqlwire.Case{Name: "a link's breakdowns and registers, 60 KB: one partition", Type: gocql.UnloggedBatch, Batch: entries(60, link(run, 1))},
		cqlwire.Case{Name: "two links' breakdowns and registers in one shard, 60 KB: one partition", Type: gocql.UnloggedBatch,
			Batch: append(entries(30, link(run, 1)), entries(30, link(run+"b", 1))...)},
		cqlwire.Case{Name: "two links' breakdowns and registers in two shards, 60 KB", Type: gocql.UnloggedBatch, Refused: true,
			Batch: append(entries(30, link(run, 1)), entries(30, link(run+"b", 2))...)},
		cqlwire.Case{Name: "450 counts of a shard's partition", Type: gocql.UnloggedBatch, Batch: entries(450, shardPoint(run))},
		cqlwire.Case{Name: "a batch with a null start", Type: gocql.UnloggedBatch, Refused: true, Batch: []cqlwire.Entry{
			{Q: point, Args: pointArgs(run, day, now, w, 60, ts)},
			{Q: point, Args: pointArgs(run, day, nil, w, 60, ts)},
		}},
		cqlwire.Case{Name: "a lease in a batch with a point", Type: gocql.LoggedBatch, Refused: true, Batch: []cqlwire.Entry{
			{Q: q.takeLease, Args: []any{w, 60}},
			{Q: point, Args: pointArgs(run, day, now, w, 60, ts)},
		}},
	)
	cqlwire.Compare(t, real, model, cases)
}
