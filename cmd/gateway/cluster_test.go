package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// The tests here run gateway processes against a real Cassandra cluster of
// three nodes (replication factor 3, LOCAL_QUORUM) that they start
// themselves (testkit.StartCassandraCluster: CASSANDRA_SCRIPTS, which the
// CI lane sets), and kill nodes under them.

// clusterGateway is a gateway writing to the keyspace ks of the cluster
// at hosts, journaling in journal, flushing every durableInterval.
func clusterGateway(up string, hosts []string, ks, journal string) string {
	return analyticsGateway(up, fmt.Sprintf(`  store: cassandra
  cassandra: {hosts: [%s], keyspace: %s, replication_factor: 3, consistency: LOCAL_QUORUM}
  journal: {path: %s}
`, strings.Join(hosts, ", "), ks, journal))
}

// analyticsHealth is /admin/health's analytics member.
type analyticsHealth struct {
	State         string
	Reason        string
	JournalBytes  int64      `json:"journal_bytes"`
	OldestUnsaved *time.Time `json:"oldest_unsaved"`
}

func healthOf(t *testing.T, gw *process) analyticsHealth {
	t.Helper()
	_, b := testkit.Do(t, "GET", gw.url("admin", "/admin/health"), nil, "Authorization", "Bearer "+testkit.AdminToken)
	var d struct{ Analytics analyticsHealth }
	json.Unmarshal([]byte(b), &d)
	return d.Analytics
}

// drained says whether gw has written everything it counted: its store
// takes writes and nothing waits in its journal or memory.
func drained(t *testing.T, gw *process) bool {
	h := healthOf(t, gw)
	return h.State == "ok" && h.JournalBytes == 0 && h.OldestUnsaved == nil
}

const flushFailed = "analytics: flush failed; counts kept for a retry"

// TestNodeFailuresOnCluster: two gateways write to one keyspace of a
// three-node cluster (RF 3, LOCAL_QUORUM) under a steady load, through:
//
//  1. one node killed: no flush fails, and every visit is counted once;
//  2. a second node killed (no quorum: writes refused, journaled), then
//     one gateway killed -9 and started again on its journal: it loses at
//     most its last interval and the spill bound;
//  3. the nodes back: both journals drain, and every visit sent is
//     counted once, but those the killed gateway lost.
//
// The drain time after the outage is logged. One function for the three
// phases: they share the cluster (minutes to start) and the visits sent.
func TestNodeFailuresOnCluster(t *testing.T) {
	c := testkit.StartCassandraCluster(t, 3)
	up := redirector(t)
	const ks = "linkgate_failures"
	journalA, journalB := t.TempDir(), t.TempDir()
	a, _ := startGateway(t, clusterGateway(up.URL, c.Hosts, ks, journalA), tokenEnv)
	b, _ := startGateway(t, clusterGateway(up.URL, c.Hosts, ks, journalB), tokenEnv)
	for _, gw := range []*process{a, b} {
		testkit.Eventually(t, 3*time.Minute, "the store connected, its schema created", func() bool {
			return healthOf(t, gw).State == "ok"
		})
	}
	for name, gw := range map[string]*process{"a": a, "b": b} {
		for _, r := range gw.logs.Records("cassandra schema ready", map[string]string{"store": "analytics"}) {
			t.Logf("gateway %s: the analytics schema in place on the fresh cluster after %s (visits are journaled meanwhile)", name, r["took"])
		}
	}

	// 1. One node killed under load.
	va, vb := visit(a.url("gateway", "")), visit(b.url("gateway", ""))
	time.Sleep(3 * durableInterval)
	c.Kill(3)
	killed := time.Now()
	time.Sleep(8 * durableInterval)
	va.halt()
	vb.halt()
	sent1 := sentAll(va) + sentAll(vb)
	counted := settle(t, a, sent1)
	t.Logf("one node down: sent %d, counted %d; flushes failed: %d and %d", sent1, counted, a.logs.Count(flushFailed, nil), b.logs.Count(flushFailed, nil))
	if counted != sent1 {
		t.Errorf("one node down: %d visits counted, %d sent", counted, sent1)
	}
	for name, gw := range map[string]*process{"a": a, "b": b} {
		if n := gw.logs.Count(flushFailed, nil); n != 0 {
			t.Errorf("gateway %s: %d flushes failed with one node of three down (LOCAL_QUORUM holds)", name, n)
		}
	}
	t.Logf("the node was killed %v before the check", time.Since(killed).Round(time.Second))

	// 2. A second node killed: no quorum. Then gateway a killed -9 and
	// started again on its journal.
	va, vb = visit(a.url("gateway", "")), visit(b.url("gateway", ""))
	time.Sleep(2 * durableInterval)
	c.Kill(2)
	outage := time.Now()
	testkit.Eventually(t, 30*time.Second, "gateway a failing to flush", func() bool {
		return a.logs.Logged(flushFailed, nil) && b.logs.Logged(flushFailed, nil)
	})
	time.Sleep(5 * durableInterval)
	killedA := a.kill9()
	va.halt()
	sentA, lastA := va.sent(killedA.Add(-durableInterval - spillAfter - 300*time.Millisecond))
	a2, _ := startGateway(t, clusterGateway(up.URL, c.Hosts, ks, journalA), tokenEnv)
	va2 := visit(a2.url("gateway", ""))
	time.Sleep(3 * durableInterval)

	// 3. The nodes back: the quorum with the first, the drain measured
	// from there while the second starts.
	c.Start(3)
	quorum := time.Now()
	intervals := int(quorum.Sub(outage) / durableInterval)
	second := c.StartInBackground(2)
	va2.halt()
	vb.halt()
	for name, gw := range map[string]*process{"a": a2, "b": b} {
		testkit.Eventually(t, 5*time.Minute, "gateway "+name+"'s journal drained", func() bool { return drained(t, gw) })
	}
	drain := time.Since(quorum)
	if err := testkit.Recv(t, second, 10*time.Minute, "the second Cassandra node starting"); err != nil {
		t.Fatal(err)
	}
	sent := sent1 + sentA + sentAll(va2) + sentAll(vb)
	counted = settle(t, a2, sent-lastA)
	lost := sent - counted
	t.Logf("outage of %d intervals (two nodes down): sent %d, counted %d, lost %d (gateway a's last interval and spill bound before its kill held %d); journals drained %v after the quorum was back",
		intervals, sent, counted, lost, lastA, drain.Round(100*time.Millisecond))
	if counted > sent {
		t.Errorf("%d visits counted, %d sent: %d counted twice", counted, sent, counted-sent)
	}
	if lost > lastA {
		t.Errorf("%d visits lost, more than the %d of gateway a's last interval and spill bound before its kill", lost, lastA)
	}
	checkBreakdown(t, "after the outage", a2, counted)
	if got := settle(t, b, counted); got != counted {
		t.Errorf("the other gateway reads %d, want %d", got, counted)
	}
}

// spillAfter is the flusher's SpillAfter at durableInterval: half of it.
const spillAfter = durableInterval / 2

// sentAll returns the visits v sent.
func sentAll(v *visitor) int {
	n, _ := v.sent(time.Time{})
	return n
}
