package testkit

import (
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocql/gocql"
)

// CassandraHosts returns the contact points of the real Cassandra that
// CASSANDRA_HOSTS names ("127.0.0.1:9042"; ../shared/cassandra/start or
// docker compose up -d cassandra). Without it the test is skipped, loudly:
// a Cassandra test that did not run must not pass unnoticed.
func CassandraHosts(t testing.TB) []string {
	t.Helper()
	v := os.Getenv("CASSANDRA_HOSTS")
	if v == "" {
		cassandraSkipOnce.Do(func() {
			os.Stderr.WriteString("\n*** CASSANDRA_HOSTS is not set: Cassandra integration tests SKIPPED ***\n\n")
		})
		t.Skip("*** SKIPPED: CASSANDRA_HOSTS is not set: NOT tested on a real Cassandra (CASSANDRA_HOSTS=127.0.0.1:9042 after ../shared/cassandra/start DIR, or docker compose up -d cassandra) ***")
	}
	return strings.Split(v, ",")
}

var cassandraSkipOnce sync.Once

// CassandraSession returns a session on hosts (protocol v4, timeouts long
// enough for schema changes on a loaded machine), closed when the test
// ends.
func CassandraSession(t testing.TB, hosts ...string) *gocql.Session {
	t.Helper()
	c := gocql.NewCluster(hosts...)
	c.ProtoVersion = 4
	c.Timeout = time.Minute
	c.ConnectTimeout = 10 * time.Second
	s, err := c.CreateSession()
	if err != nil {
		t.Fatalf("testkit: connect to Cassandra at %v: %v", hosts, err)
	}
	t.Cleanup(s.Close)
	return s
}

var keyspaceChars = regexp.MustCompile(`[^a-z0-9_]+`)

// CassandraKeyspace returns the keyspace name (in lower case, characters
// other than letters, digits and _ made _, cut to 48), with no rows in it:
// when an earlier run left it on the node, its tables are truncated;
// otherwise it does not exist yet, and the store the test opens creates
// it. Tests that need a keyspace of their own use it instead of a new name
// per run (a node kept between runs then holds a bounded set of keyspaces)
// and instead of dropping it afterwards (a DROP takes longer than a CREATE
// and a TRUNCATE together on a loaded node). Two runs of one test against
// one node at once would share it.
func CassandraKeyspace(t testing.TB, hosts []string, name string) string {
	t.Helper()
	ks := strings.Trim(keyspaceChars.ReplaceAllString(strings.ToLower(name), "_"), "_")
	if len(ks) > 48 {
		ks = ks[:48]
	}
	s := CassandraSession(t, hosts...)
	it := s.Query("SELECT table_name FROM system_schema.tables WHERE keyspace_name = ?", ks).Iter()
	var tables []string
	var tb string
	for it.Scan(&tb) {
		tables = append(tables, tb)
	}
	if err := it.Close(); err != nil {
		t.Fatalf("testkit: tables of %s: %v", ks, err)
	}
	for _, tb := range tables {
		if err := s.Query("TRUNCATE " + ks + "." + tb).Exec(); err != nil {
			t.Fatalf("testkit: truncate %s.%s: %v", ks, tb, err)
		}
	}
	return ks
}
