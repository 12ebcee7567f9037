package testkit

import (
	"bytes"
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

// CassandraCluster is a real Cassandra cluster a test started with the
// scripts of ../shared/cassandra (CASSANDRA_SCRIPTS names their folder):
// its nodes on loopback addresses of their own, from 127.0.0.10, apart
// from the node of CASSANDRA_HOSTS. Its methods are for one goroutine.
type CassandraCluster struct {
	Hosts []string // host:port of each node, node 1 first

	t       testing.TB
	scripts string
	dir     string
	args    []string // the flags of start: the cluster's shape
}

// cassandraClusterAddr is the first node's address, cassandraClusterJMX
// its JMX port (node N's is 100 more per node): neither clashes with a
// single node started with the defaults. CASSANDRA_CLUSTER_ADDR and
// CASSANDRA_CLUSTER_JMX change them, for two clusters on one machine.
const (
	cassandraClusterAddr = "127.0.0.10"
	cassandraClusterJMX  = "7300"
)

// StartCassandraCluster starts a cluster of nodes and waits until each
// answers CQL; it is stopped and its data removed when the test ends.
// Without CASSANDRA_SCRIPTS the test is skipped, loudly (the CI lane sets
// it when ../shared/cassandra is there).
func StartCassandraCluster(t testing.TB, nodes int) *CassandraCluster {
	t.Helper()
	scripts := os.Getenv("CASSANDRA_SCRIPTS")
	if scripts == "" {
		t.Skip("*** SKIPPED: CASSANDRA_SCRIPTS is not set: NOT tested on a real Cassandra cluster (CASSANDRA_SCRIPTS=../shared/cassandra; .ci/run sets it) ***")
	}
	dir, err := os.MkdirTemp("", "linkgate-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	addr, jmx := cmp.Or(os.Getenv("CASSANDRA_CLUSTER_ADDR"), cassandraClusterAddr), cmp.Or(os.Getenv("CASSANDRA_CLUSTER_JMX"), cassandraClusterJMX)
	first, err := netip.ParseAddr(addr)
	if err != nil || !first.Is4() || !first.IsLoopback() {
		t.Fatalf("CASSANDRA_CLUSTER_ADDR=%q: want an IPv4 loopback address", addr)
	}
	c := &CassandraCluster{t: t, scripts: scripts, dir: dir,
		args: []string{"-n", strconv.Itoa(nodes), "-a", addr, "-j", jmx}}
	t.Cleanup(c.stop)
	t0 := time.Now()
	c.run("start", append(c.args, dir)...)
	for range nodes {
		c.Hosts = append(c.Hosts, netip.AddrPortFrom(first, 9042).String())
		first = first.Next()
	}
	t.Logf("a Cassandra cluster of %d nodes answers after %v: %v", nodes, time.Since(t0).Round(time.Second), c.Hosts)
	return c
}

// run runs one of the scripts, failing the test when it fails.
func (c *CassandraCluster) run(script string, args ...string) string {
	c.t.Helper()
	cmd := exec.Command(filepath.Join(c.scripts, script), args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("%s %s: %v\n%s", script, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// Kill kills node n (from 1) with SIGKILL and returns once it is gone: a
// node failure.
func (c *CassandraCluster) Kill(n int) {
	c.t.Helper()
	pid := c.PID(n)
	syscall.Kill(pid, syscall.SIGKILL)
	for deadline := time.Now().Add(30 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			c.t.Fatalf("node %d (pid %d) still runs 30 s after SIGKILL", n, pid)
		}
	}
}

// PID returns the process id of node n (from 1).
func (c *CassandraCluster) PID(n int) int {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("n%d", n), "pid"))
	if err != nil {
		c.t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		c.t.Fatal(err)
	}
	return pid
}

// Start starts node n again and waits until it answers CQL (start waits
// for every node; another may still be down).
func (c *CassandraCluster) Start(n int) {
	c.t.Helper()
	if err := c.start(n); err != nil {
		c.t.Fatal(err)
	}
}

// StartInBackground starts node n again and returns at once; the channel
// gets nil once the node answers CQL, or why it does not.
func (c *CassandraCluster) StartInBackground(n int) <-chan error {
	done := make(chan error, 1)
	go func() { done <- c.start(n) }()
	return done
}

func (c *CassandraCluster) start(n int) error {
	cmd := exec.Command(filepath.Join(c.scripts, "start"), append(append([]string{"-only", strconv.Itoa(n)}, c.args...), c.dir)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill() // the script, waiting for the other nodes; the node runs on
		<-exited
	}()
	for deadline := time.Now().Add(5 * time.Minute); ; {
		if conn, err := net.DialTimeout("tcp", c.Hosts[n-1], time.Second); err == nil {
			conn.Close()
			return nil
		}
		select {
		case err := <-exited:
			exited <- err
			if err != nil {
				return fmt.Errorf("start node %d: %v\n%s", n, err, out.String())
			}
		case <-time.After(500 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %d does not answer 5 minutes after start:\n%s", n, out.String())
		}
	}
}

// Nodetool runs nodetool against node n.
func (c *CassandraCluster) Nodetool(n int, args ...string) string {
	c.t.Helper()
	return c.run("nodetool", append([]string{c.dir, strconv.Itoa(n)}, args...)...)
}

func (c *CassandraCluster) stop() {
	cmd := exec.Command(filepath.Join(c.scripts, "stop"), c.dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Logf("stop %s: %v\n%s", c.dir, err, out)
	}
	os.RemoveAll(c.dir)
}
