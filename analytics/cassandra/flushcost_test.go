package cassandra

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/visitor"
)

// TestMeasureFlushCost measures what flushing 100,000 links with every
// feature on costs a real Cassandra: each link visited once in each
// interval with a referrer, a source, a country, a device, a browser and
// an OS and its visitor's sketch, through the real Recorder and Flusher
// into the Store, five flushes: the first of a day (and of the process),
// two steady ones, the first of an hour, a steady one. For each it logs the
// statements sent, the bytes each way (counted on the client's connections
// to the nodes) and the flush's duration against the default interval
// (10 s). On the node of CASSANDRA_HOSTS (RF 1) and on a cluster of three
// (RF 3, LOCAL_QUORUM) it starts with CASSANDRA_SCRIPTS. A measurement,
// not a check (minutes of a loaded machine): it runs only with
// LINKGATE_MEASURE_FLUSH=1 (LINKGATE_MEASURE_LINKS to change the count,
// LINKGATE_MEASURE_FLUSHES the flushes, from 4). With
// LINKGATE_MEASURE_NODE_PID, the process id of the node, it also logs the
// CPU time the node (on the cluster, its three nodes) and this process
// took in each flush: on a shared machine the flush's duration follows
// the load, its CPU time much less.
//
//	LINKGATE_MEASURE_FLUSH=1 CASSANDRA_HOSTS=127.0.0.1:9042 go test ./analytics/cassandra -run TestMeasureFlushCost -v -timeout 1h
func TestMeasureFlushCost(t *testing.T) {
	if os.Getenv("LINKGATE_MEASURE_FLUSH") == "" {
		t.Skip("a measurement of minutes: set LINKGATE_MEASURE_FLUSH=1 (and CASSANDRA_HOSTS, CASSANDRA_SCRIPTS)")
	}
	links, flushes := 100_000, 5
	if v := os.Getenv("LINKGATE_MEASURE_LINKS"); v != "" {
		fmt.Sscan(v, &links)
	}
	if v := os.Getenv("LINKGATE_MEASURE_FLUSHES"); v != "" {
		fmt.Sscan(v, &flushes)
	}
	t.Run("node", func(t *testing.T) {
		measureFlush(t, testkit.CassandraHosts(t), 1, gocql.LocalQuorum, links, flushes, []string{os.Getenv("LINKGATE_MEASURE_NODE_PID")})
	})
	t.Run("cluster", func(t *testing.T) {
		c := testkit.StartCassandraCluster(t, 3)
		pids := []string{fmt.Sprint(c.PID(1)), fmt.Sprint(c.PID(2)), fmt.Sprint(c.PID(3))}
		measureFlush(t, c.Hosts, 3, gocql.LocalQuorum, links, flushes, pids)
	})
}

// measureFlush logs the cost of flushes of links on hosts; nodes are
// the process ids of the nodes ("": not known).
func measureFlush(t *testing.T, hosts []string, rf int, cons gocql.Consistency, links, flushes int, nodes []string) {
	// The collector as the gateway runs it (runtime.gogc's default), not
	// Go's 100: at 100 it ran through every flush of this process.
	defer debug.SetGCPercent(debug.SetGCPercent(config.DefaultGOGC))
	ks := testkit.CassandraKeyspace(t, hosts, "linkgate_flush_cost")
	var up, down atomic.Int64
	cc := gocql.NewCluster(hosts...)
	cc.ProtoVersion = 4
	cc.Timeout = time.Minute
	cc.ConnectTimeout = 10 * time.Second
	cc.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(gocql.RoundRobinHostPolicy())
	cc.Dialer = &countingDialer{up: &up, down: &down}
	sess, err := cc.CreateSession()
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	for _, q := range schema(ks, rf, analyticstest.DefaultPlan.Retention()) {
		if err := sess.Query(q).Exec(); err != nil {
			t.Fatal(err)
		}
	}
	// The tables of an earlier run may be an earlier release's: brought
	// to schema's as Open does.
	for _, q := range migrations(ks, analyticstest.DefaultPlan.Retention()) {
		if err := sess.Query(q).Exec(); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
	}
	s := newStore(analyticstest.DefaultPlan, nil)
	s.be = newCQL(sess, ks, analyticstest.DefaultPlan.Tiers(), cons, gocql.LocalSerial)
	rec := analytics.NewRecorder(2*links, nil)
	rec.SetMaxValues(100)
	rec.SetMaxBytes(1 << 30)
	// Three flushes before an hour's start, the first of them the first of
	// a day (every link and breakdown value new to the flusher, every link
	// announced to the rollup), then the first flush of the hour (every
	// link announced again, the breakdowns' state warm), then steady ones.
	// Not the hour of midnight, whose first flush is the first of a day.
	hour := time.Now().UTC().Truncate(time.Hour)
	if hour.Hour() == 0 {
		hour = hour.Add(time.Hour)
	}
	at := hour.Add(-25 * time.Second)
	f := analytics.NewFlusher(rec, s, analyticstest.DefaultPlan,
		analytics.FlusherOptions{Now: func() time.Time { return at }, WriteTimeout: time.Hour}, nil, nil)
	u := visitor.NewUniques([]byte("a-secret-of-32-bytes-for-testing"))
	rnd := rand.New(rand.NewPCG(1, 2))
	refs := []string{"news.example", "direct", "t.co"}
	nodeCPU := func() float64 {
		sum := 0.0
		for _, pid := range nodes {
			n := cpuSeconds(pid)
			if n < 0 {
				return -1
			}
			sum += n
		}
		return sum
	}
	for round := range max(flushes, 4) {
		for i := range links {
			key := fmt.Sprint("link", i)
			fe := visitor.Features{refs[i%3], refs[i%3], "DE", "mobile", "Safari", "iOS"}
			addr := netip.AddrFrom4([4]byte{203, 0, 113, byte(rnd.IntN(256))})
			rec.RecordVisit(key, at, false, &fe, u.Hash(at, addr, "ua", key))
		}
		before, up0, down0 := s.Statements(), up.Load(), down.Load()
		node0, self0 := nodeCPU(), cpuSeconds("self")
		t0 := time.Now()
		if err := f.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		took := time.Since(t0)
		if node0 >= 0 {
			t.Logf("flush %d: the nodes took %.1f s of CPU, this process %.1f s", round+1, nodeCPU()-node0, cpuSeconds("self")-self0)
		}
		st := s.Statements()
		kind := "steady"
		switch round {
		case 0:
			kind = "first of a day and of the process"
		case 3:
			kind = "first of an hour"
		}
		t.Logf("%d nodes, flush %d (%s) of %d links with breakdowns and uniques: %d write statements (%d counts, %d Active entries in %d, %d breakdown counts and %d registers in %d link_days rows in %d, %d links' visits, %d top-list slots in %d); %.1f MB sent, %.1f MB received; %v, %.2f of the 10 s interval",
			len(hosts), round+1, kind, links, st.Writes()-before.Writes(), st.Points-before.Points, st.Active-before.Active, st.ActiveSent-before.ActiveSent,
			st.Dims-before.Dims, st.Uniques-before.Uniques, st.LinkRows-before.LinkRows, st.LinkSent-before.LinkSent, st.Top-before.Top,
			st.Leaders-before.Leaders, st.LeadersSent-before.LeadersSent,
			float64(up.Load()-up0)/1e6, float64(down.Load()-down0)/1e6, took.Round(10*time.Millisecond), took.Seconds()/10)
		at = at.Add(10 * time.Second)
	}
}

// cpuSeconds returns the user and system CPU time process pid ("self":
// this one) has taken, in seconds; -1 when it cannot be read.
func cpuSeconds(pid string) float64 {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if pid == "" || err != nil {
		return -1
	}
	// The fields after the command's closing parenthesis: state is the
	// first, utime the 12th, stime the 13th (clock ticks, 100 a second).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return -1
	}
	var user, sys float64
	fmt.Sscan(f[11], &user)
	fmt.Sscan(f[12], &sys)
	return (user + sys) / 100
}

// countingDialer dials the nodes and counts the bytes each connection
// sends (up) and receives (down), without a hop of its own in between.
type countingDialer struct {
	net.Dialer
	up, down *atomic.Int64
}

func (d *countingDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := d.Dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, d: d}, nil
}

type countingConn struct {
	net.Conn
	d *countingDialer
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.d.down.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.d.up.Add(int64(n))
	return n, err
}
