package configs_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/cassandra"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/rollup"
)

// TestSchemaFileOnNode runs configs/cassandra.cql, as an operator who
// manages the schema does, on a real node (CASSANDRA_HOSTS), in a keyspace
// of its own: every statement is taken, the tables are those the gateway
// creates itself, and a store on the keyspace writes and reads visits.
func TestSchemaFileOnNode(t *testing.T) {
	hosts := testkit.CassandraHosts(t)
	ks := testkit.CassandraKeyspace(t, hosts, "linkgate_schema_file")
	b, err := os.ReadFile("cassandra.cql")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "--") {
			lines = append(lines, l)
		}
	}
	script := regexp.MustCompile(`\blinkgate([\s.])`).ReplaceAllString(strings.Join(lines, "\n"), ks+"$1")
	s := testkit.CassandraSession(t, hosts...)
	var n int
	for _, st := range strings.Split(script, ";\n") {
		if st = strings.TrimSpace(st); st == "" {
			continue
		}
		if err := s.Query(st).Exec(); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
		n++
	}
	it := s.Query("SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?", ks).Iter()
	var tables []string
	for tb := ""; it.Scan(&tb); {
		tables = append(tables, tb)
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(tables)
	want := []string{"dims", "erasures", "link_days", "link_days_by_shard", "points_1d", "points_1h", "points_1m", "points_1m_by_shard", "points_1w", "points_5m", "points_total",
		"rollup_active", "rollup_lease", "rollup_marks", "rollup_progress", "tenant_leaders", "top_days", "top_leaders", "uniques"}
	if !slices.Equal(tables, want) {
		t.Errorf("%d statements made the tables %q, want %q", n, tables, want)
	}

	st, err := cassandra.Open(context.Background(), nil, analytics.Cassandra{Hosts: hosts, Keyspace: ks, Consistency: "LOCAL_QUORUM", ReplicationFactor: 1}, analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	testkit.Eventually(t, time.Minute, "the store connected", func() bool { return st.Ready() == nil })
	start := rollup.Align(time.Now().UTC(), time.Minute)
	if err := st.Write(context.Background(), analytics.Batch{At: time.Now(), Counts: []analytics.Count{
		{Key: "schema-file", Step: time.Minute, Start: start, Visits: analytics.Visits{Human: 3, Bot: 1}}}}); err != nil {
		t.Fatal(err)
	}
	ps, err := st.Points(context.Background(), "schema-file", time.Minute, start, start.Add(time.Minute))
	if err != nil || len(ps) != 1 || ps[0].Visits != (analytics.Visits{Human: 3, Bot: 1}) {
		t.Errorf("Points = %v, %v; want the visits written", ps, err)
	}
}
