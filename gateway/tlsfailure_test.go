package gateway_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/edge/cassandra/cqlmodel"
	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// handshakeFailed is the line of a handshake that failed for a name the
// gateway would serve.
const handshakeFailed = "TLS handshake failed for an allowed name"

// TestHandshakeFailuresLogged: a handshake that fails for a name the
// gateway would serve is logged at WARN with its reason, whatever the
// reason: the ask endpoint failing, the CA not answering, orders_per_hour
// reached. A handshake refused for a name not allowed is not logged. The
// lines of one reason are throttled: 20 failed handshakes within 10 s log
// one. (A handshake waiting for a CA that does not answer fails slowly,
// in seconds: one of them.)
func TestHandshakeFailuresLogged(t *testing.T) {
	t.Parallel()
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{})
	up := echoProto(t)
	askDown := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(askDown.Close)
	ask := newAsk(t)
	conf := func(ca, askURL, extra string) string {
		return tlsConfig(up.URL, fmt.Sprintf(`  tls:
    handshake_timeout: %v
    acme: {ca: %s, ca_root: %s}
    on_demand: {ask: %s%s}
    storage: {path: %s}
`, handshakeTimeout(), ca, p.CARootFile, askURL, extra, t.TempDir()))
	}
	for _, c := range []struct {
		name, cfg, reason string
		ok                []string // names obtained first
		fail              string   // the name whose handshakes fail
		tries             int
	}{
		{"ask", conf(p.Directory, askDown.URL, ""), "ask", nil, "asked.ok.test", 20},
		{"ca", conf("https://"+testkit.DeadAddr(t)+"/dir", ask.URL, ""), "ca", nil, "ca.ok.test", 1},
		{"cap", conf(p.Directory, ask.URL, ", orders_per_hour: 1"), "cap", []string{"first.ok.test"}, "second.ok.test", 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			gw := start(t, c.cfg)
			for _, n := range c.ok {
				conn, err := handshake(gw.g.Addr(), p, n)
				if err != nil {
					t.Fatalf("%s: %v", n, err)
				}
				conn.Close()
			}
			t0 := time.Now()
			for range c.tries {
				if conn, err := handshake(gw.g.Addr(), p, c.fail); err == nil {
					conn.Close()
					t.Fatalf("a handshake for %s succeeded", c.fail)
				}
			}
			if conn, err := handshake(gw.g.Addr(), p, "denied.example"); err == nil {
				conn.Close()
				t.Fatal("a handshake for a denied name succeeded")
			}
			// The gateway logs a failure when its side of the handshake
			// ends, which for a CA that does not answer is its
			// handshake_timeout, after the client gave up.
			testkit.Eventually(t, handshakeTimeout()+10*time.Second, "the failure logged", func() bool {
				return gw.logs.Logged(handshakeFailed, map[string]string{"level": "WARN", "reason": c.reason, "name": c.fail})
			})
			if n, took := gw.logs.Count(handshakeFailed, nil), time.Since(t0); n != 1 && took < 10*time.Second {
				t.Errorf("%d lines for %d failed handshakes in %v, want 1 (throttled):\n%s", n, c.tries, took, gw.logs)
			}
			if gw.logs.Logged(handshakeFailed, map[string]string{"name": "denied.example"}) {
				t.Errorf("a handshake for a denied name was logged:\n%s", gw.logs)
			}
		})
	}
}

// TestCertStorageTakesNoWrite: a certificate storage that answers but
// takes no write (every statement answered Unavailable, as a keyspace of
// replication_factor 3 on one node answers at QUORUM) is reported failing
// by /admin/health, with the reason; a handshake for an allowed name fails
// and is logged at WARN with reason storage; once the storage takes writes
// again, the health says ok, the name is served, and no test file is left
// behind. On the CQL model here; on a real node in
// TestCertStorageTakesNoWriteOnNode.
func TestCertStorageTakesNoWrite(t *testing.T) {
	t.Parallel()
	m := cqlmodel.New(t)
	certStorageTakesNoWrite(t, m.Addr(), "linkgate", "stuck.ok.test", m.SetUnavailable, func() []string { return m.Keys() })
}

// TestCertStorageTakesNoWriteOnNode is TestCertStorageTakesNoWrite on a
// real node (CASSANDRA_HOSTS): the keyspace's replication factor is raised
// to 3, more replicas than the node has, and set back to 1.
func TestCertStorageTakesNoWriteOnNode(t *testing.T) {
	t.Parallel()
	hosts := testkit.CassandraHosts(t)
	ks := testkit.CassandraKeyspace(t, hosts, "linkgate_certs_nowrite")
	s := testkit.CassandraSession(t, hosts...)
	fail := func(on bool) {
		rf := 1
		if on {
			rf = 3
		}
		if err := s.Query(fmt.Sprintf("ALTER KEYSPACE %s WITH replication = {'class': 'SimpleStrategy', 'replication_factor': %d}", ks, rf)).Exec(); err != nil {
			t.Fatal(err)
		}
	}
	keys := func() []string {
		it := s.Query("SELECT key FROM " + ks + ".certmagic_kv").Iter()
		var out []string
		var k string
		for it.Scan(&k) {
			out = append(out, k)
		}
		if err := it.Close(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	certStorageTakesNoWrite(t, strings.Join(hosts, ", "), ks, "stuck-node.ok.test", fail, keys)
}

// certStorageTakesNoWrite runs the test on the storage of keyspace on
// hosts, which fail makes fail and recover, naming name (tests that run at
// once name hosts of their own: see acmeConfig).
func certStorageTakesNoWrite(t *testing.T, hosts, keyspace, name string, fail func(bool), keys func() []string) {
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{})
	ask := newAsk(t)
	gw := start(t, tlsConfig(echoProto(t).URL, fmt.Sprintf(`  tls:
    handshake_timeout: %v
    acme: {ca: %s, ca_root: %s}
    on_demand: {ask: %s}
    storage: {cassandra: {hosts: [%s], keyspace: %s, consistency: QUORUM, timeout: 5s}}
`, handshakeTimeout(), p.Directory, p.CARootFile, ask.URL, hosts, keyspace)))
	testkit.Eventually(t, 2*time.Minute, "the storage connected and checked", func() bool {
		return tlsStorage(t, gw).State == "ok" && gw.logs.Logged("certificate storage connected to cassandra", nil)
	})
	fail(true)
	if conn, err := handshake(gw.g.Addr(), p, name); err == nil {
		conn.Close()
		t.Fatal("a handshake succeeded with a storage that takes no write")
	}
	testkit.Eventually(t, 30*time.Second, "the storage reported failing", func() bool {
		h := tlsStorage(t, gw)
		return h.State == "failing" && strings.Contains(h.Reason, "Cannot achieve consistency level")
	})
	if !gw.logs.Logged(handshakeFailed, map[string]string{"level": "WARN", "reason": "storage", "name": name}) {
		t.Errorf("the failed handshake was not logged with reason storage:\n%s", gw.logs)
	}
	fail(false)
	testkit.Eventually(t, time.Minute, "the storage reported ok again", func() bool {
		return tlsStorage(t, gw).State == "ok"
	})
	conn, err := handshake(gw.g.Addr(), p, name)
	if err != nil {
		t.Fatalf("once the storage takes writes again: %v", err)
	}
	conn.Close()
	for _, k := range keys() {
		if strings.HasPrefix(k, "rw_test_") || strings.HasPrefix(k, "linkgate_storage_check") {
			t.Errorf("a storage check left %q behind", k)
		}
	}
}
