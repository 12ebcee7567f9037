package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/edge/cassandra/cqlmodel"
	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// TestCertStorageConnectsLate: a gateway whose certificate storage is a
// Cassandra that does not answer yet starts and listens at once; it serves
// its static certificate meanwhile; a handshake for a name it has no
// certificate for (on demand, or of acme.domains) fails fast, with a log
// line, no ask and no order; once the cluster (the CQL protocol model)
// comes up at the configured address the storage connects by itself, the
// name of acme.domains is obtained, and an on-demand name is allowed,
// obtained from pebble and stored in Cassandra.
func TestCertStorageConnectsLate(t *testing.T) {
	t.Parallel()
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{})
	ask := newAsk(t)
	ca := edgetest.NewCA(t)
	cert, key, _ := ca.WritePair(t, t.TempDir(), "static.test")
	cassandra := testkit.FreeAddr(t)
	cfg := tlsConfig(echoProto(t).URL, fmt.Sprintf(`  tls:
    handshake_timeout: %v
    cert_file: %s
    key_file: %s
    acme: {ca: %s, ca_root: %s, domains: [managed.ok.test]}
    on_demand: {ask: %s}
    storage: {cassandra: {hosts: [%s], timeout: %v}}
`, handshakeTimeout(), cert, key, p.Directory, p.CARootFile, ask.URL, cassandra, storageTimeout()))
	t0 := time.Now()
	gw := start(t, cfg)
	if took := time.Since(t0); took > testkit.Slack(5*time.Second) { // the storage connects in the background
		t.Errorf("the gateway took %v to listen with Cassandra down", took)
	}

	base := "https://" + gw.g.Addr().String()
	if resp, body := get(t, ca.Client("static.test", true), base+"/x", "Host", "static.test"); resp.StatusCode != 200 || !strings.Contains(body, "xfp=https") {
		t.Errorf("the static certificate's name with the storage down: %d %q", resp.StatusCode, body)
	}
	for _, name := range []string{"late.ok.test", "managed.ok.test"} {
		t0 := time.Now()
		if c, err := handshake(gw.g.Addr(), p, name); err == nil {
			c.Close()
			t.Errorf("a handshake for %s succeeded with the storage down", name)
		}
		if took := time.Since(t0); took > min(testkit.Slack(2*time.Second), 15*time.Second) { // handshake_timeout is 30 s or more
			t.Errorf("the handshake for %s took %v to fail with the storage down: want it at once, not at handshake_timeout", name, took)
		}
	}
	if !gw.logs.Logged("TLS handshake for a name without a certificate in memory refused: the certificate storage is not connected yet", nil) {
		t.Errorf("no log line says why the handshakes failed:\n%s", gw.logs)
	}
	if ask.calls.Load() != 0 || p.Orders() != 0 {
		t.Errorf("with the storage down: %d ask calls, %d orders; want none", ask.calls.Load(), p.Orders())
	}
	if m := metric(t, gw, `linkgate_tls_on_demand_decisions_total{decision="unavailable"}`); m < 2 {
		t.Errorf("decisions unavailable = %v, want the 2 refused handshakes", m)
	}
	if h := tlsStorage(t, gw); h.State != "connecting" || !strings.Contains(h.Reason, "not connected") {
		t.Errorf("/admin/health tls_storage = %+v, want connecting with the reason", h)
	}

	m := cqlmodel.NewAt(t, cassandra)
	testkit.Eventually(t, 20*time.Second, "the storage connected", func() bool {
		return gw.logs.Logged("certificate storage connected to cassandra", nil)
	})
	if h := tlsStorage(t, gw); h.State != "ok" {
		t.Errorf("/admin/health tls_storage = %+v once connected, want ok", h)
	}
	c, err := handshake(gw.g.Addr(), p, "late.ok.test")
	if err != nil {
		t.Fatalf("the on-demand name once the storage connected: %v", err)
	}
	c.Close()
	testkit.Eventually(t, 20*time.Second, "managed.ok.test obtained once the storage connected", func() bool {
		c, err := handshake(gw.g.Addr(), p, "managed.ok.test")
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	var stored []string
	for _, k := range m.Keys() {
		if strings.HasSuffix(k, ".crt") {
			stored = append(stored, k)
		}
	}
	if len(stored) != 2 || p.Orders() != 2 || ask.calls.Load() != 1 {
		t.Errorf("Cassandra holds the certificates %q, pebble took %d orders, %d ask calls; want both names, 2 orders, 1 ask", stored, p.Orders(), ask.calls.Load())
	}
}

// tlsStorage returns the tls_storage member of /admin/health.
func tlsStorage(t *testing.T, gw *running) (h struct{ State, Reason string }) {
	t.Helper()
	resp, body := testkit.Do(t, http.MethodGet, gw.admin("/admin/health"), nil, "Authorization", "Bearer "+testkit.AdminToken)
	var d struct {
		TLSStorage *struct{ State, Reason string } `json:"tls_storage"`
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &d) != nil || d.TLSStorage == nil {
		t.Fatalf("/admin/health: %d %s", resp.StatusCode, body)
	}
	return *d.TLSStorage
}
