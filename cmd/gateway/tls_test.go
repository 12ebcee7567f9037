package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// tlsGatewayConfig is a gateway in front of upstream, ordering from pebble
// on demand after asking ask, keeping certificates in the folder storage.
func tlsGatewayConfig(upstream string, p *edgetest.Pebble, ask, storage, extra string) string {
	return tlsGatewayStorage(upstream, p, ask, "{path: "+storage+"}", extra)
}

// tlsGatewayStorage is tlsGatewayConfig with server.tls.storage given as
// YAML, with edgetest.HandshakeTimeout: a handshake that waits for an
// order from pebble takes a busy machine's time.
func tlsGatewayStorage(upstream string, p *edgetest.Pebble, ask, storage, extra string) string {
	return fmt.Sprintf(`server:
  listen: 127.0.0.1:0
  shutdown_timeout: 5s
  tls:
    handshake_timeout: %v
    acme: {ca: %s, ca_root: %s}
    on_demand: {ask: %s}
    storage: %s
%sadmin:
  listen: 127.0.0.1:0
upstream:
  targets: [%s]
  health_check: {path: /healthz, interval: 1s}
analytics:
  enabled: false
`, edgetest.HandshakeTimeout(), p.Directory, p.CARootFile, ask, storage, extra, upstream)
}

func allowAll(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(s.Close)
	return s
}

// TestFleetObtainsOneCertificate: two gateway processes sharing their
// certificate storage (a folder) that see the same new name at once obtain
// exactly one certificate between them, and both serve it.
func TestFleetObtainsOneCertificate(t *testing.T) {
	fleetObtainsOneCertificate(t, "{path: "+t.TempDir()+"}", false)
}

// TestFleetObtainsOneCertificateOnNode: the same with the storage on a
// real Cassandra node (CASSANDRA_HOSTS): the lock is a lightweight
// transaction, the certificate is read from the node by the gateway that
// did not order it, and no test file of a storage check is left behind.
func TestFleetObtainsOneCertificateOnNode(t *testing.T) {
	hosts := testkit.CassandraHosts(t)
	ks := testkit.CassandraKeyspace(t, hosts, "linkgate_certs_fleet")
	fleetObtainsOneCertificate(t, fmt.Sprintf("{cassandra: {hosts: [%s], keyspace: %s, consistency: QUORUM}}", strings.Join(hosts, ", "), ks), true)
	s := testkit.CassandraSession(t, hosts...)
	it := s.Query("SELECT key FROM " + ks + ".certmagic_kv").Iter()
	var keys []string
	for k := ""; it.Scan(&k); {
		keys = append(keys, k)
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	var certs int
	for _, k := range keys {
		switch {
		case strings.HasSuffix(k, "/fleet.example.crt"):
			certs++
		case strings.HasPrefix(k, "rw_test_"), strings.HasPrefix(k, "linkgate_storage_check"):
			t.Errorf("a storage check left %q on the node", k)
		}
	}
	if certs != 1 {
		t.Errorf("the node holds %d certificates of fleet.example in %q, want 1", certs, keys)
	}
}

func fleetObtainsOneCertificate(t *testing.T, storage string, connecting bool) {
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{})
	up := testkit.Named(t, "up")
	ask := allowAll(t)
	cfg := tlsGatewayStorage(up.URL, p, ask.URL, storage, "")
	a, _ := startGateway(t, cfg)
	b, _ := startGateway(t, cfg)
	if connecting {
		// The storage connects in the background: until then a new name's
		// handshake fails at once.
		for _, gw := range []*process{a, b} {
			testkit.Eventually(t, 2*time.Minute, "the certificate storage connected", func() bool {
				return gw.logs.Logged("certificate storage connected to cassandra", nil)
			})
		}
	}

	var wg sync.WaitGroup
	serials := make(chan string, 8)
	for i := range 8 {
		gw := a
		if i%2 == 1 {
			gw = b
		}
		wg.Go(func() {
			addr := strings.TrimPrefix(gw.url("gateway", ""), "http://")
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 30 * time.Second}, "tcp", addr, &tls.Config{RootCAs: p.Roots, ServerName: "fleet.example"})
			if err != nil {
				t.Errorf("handshake with %s: %v", addr, err)
				return
			}
			serials <- c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
			c.Close()
		})
	}
	testkit.Await(t, wg.Wait, 5*time.Minute, "the concurrent handshakes")
	close(serials)
	seen := map[string]int{}
	for s := range serials {
		seen[s]++
	}
	if issued := p.Issued(); len(issued) != 1 || len(seen) != 1 {
		t.Errorf("pebble issued %v (orders %d); the gateways served %v; want one certificate served by both", issued, p.Orders(), seen)
	}
}

// TestChromiumOverTLS: headless Chromium, trusting pebble's root, reaches a
// short link over TLS on an on-demand certificate, follows its redirect
// and negotiates HTTP/2; the visit is counted.
func TestChromiumOverTLS(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skipf("SKIPPED: no chromium on PATH (apt-get install chromium): %v", err)
	}
	certutil, err := exec.LookPath("certutil")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("certutil (libnss3-tools) is not installed: %v", err)
		}
		t.Skipf("SKIPPED: certutil (libnss3-tools: test.sh installs it) is needed to trust pebble's root in Chromium: %v", err)
	}
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{})
	var port int
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
		case "/ab12cd":
			http.Redirect(w, r, fmt.Sprintf("https://brand.example:%d/landing", port), http.StatusFound)
		case "/landing":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<!doctype html><title>landing</title><p id=proto></p>
<script>document.getElementById('proto').textContent = 'proto=' + performance.getEntriesByType('navigation')[0].nextHopProtocol + ' https=' + (location.protocol == 'https:')</script>`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer up.Close()
	ask := allowAll(t)
	cfg := strings.Replace(tlsGatewayConfig(up.URL, p, ask.URL, t.TempDir(), ""), "analytics:\n  enabled: false\n",
		"analytics:\n  enabled: true\n  flush_interval: 100ms\n  embedded: {path: "+filepath.Join(t.TempDir(), "analytics")+"}\n", 1)
	gw, _ := startGateway(t, cfg)
	addr := strings.TrimPrefix(gw.url("gateway", ""), "http://")
	_, ps, _ := net.SplitHostPort(addr)
	fmt.Sscan(ps, &port)

	home := t.TempDir()
	nssdb := filepath.Join(home, ".pki", "nssdb")
	os.MkdirAll(nssdb, 0o700)
	root := filepath.Join(home, "pebble-root.pem")
	os.WriteFile(root, p.RootPEM, 0o600)
	for _, args := range [][]string{
		{"-N", "-d", "sql:" + nssdb, "--empty-password"},
		{"-A", "-d", "sql:" + nssdb, "-t", "C,,", "-n", "pebble", "-i", root},
	} {
		if out, err := exec.Command(certutil, args...).CombinedOutput(); err != nil {
			t.Fatalf("certutil %v: %v\n%s", args, err, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Slack(60*time.Second))
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic", "--disable-dev-shm-usage",
		"--user-data-dir="+t.TempDir(), "--host-resolver-rules=MAP brand.example 127.0.0.1", "--virtual-time-budget=5000",
		"--dump-dom", fmt.Sprintf("https://brand.example:%d/ab12cd", port))
	cmd.Env = append(os.Environ(), "HOME="+home)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "proto=h2 https=true") {
		t.Errorf("chromium's page: %s\nwant the landing page over h2 and https", out)
	}
	testkit.Eventually(t, 5*time.Second, "the visit counted", func() bool {
		return strings.Contains(testkit.Body(t, gw.url("admin", "/metrics")), `linkgate_visits_recorded_total{kind="human"} 1`)
	})
}

// TestSessionResumesAcrossTheFleet: two gateway processes given the same
// session_tickets secret: a client that made its first handshake with one
// resumes its session on the other, over HTTP/1.1 and HTTP/2, without a
// full handshake. check-config refuses the file when the variable is
// unset or the secret too short, naming the field.
func TestSessionResumesAcrossTheFleet(t *testing.T) {
	t.Parallel()
	ca := edgetest.NewCA(t)
	certFile, keyFile, _ := ca.WritePair(t, t.TempDir(), "short.test", "127.0.0.1")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(up.Close)
	cfg := strings.Replace(testkit.BaseConfig(up.URL), "  shutdown_timeout: 10s\n", fmt.Sprintf(`  shutdown_timeout: 10s
  tls:
    cert_file: %s
    key_file: %s
    session_tickets: {secret_env: LG_TEST_TICKETS, rotate: 1h, lifetime: 2h}
`, certFile, keyFile), 1)
	const secret = "LG_TEST_TICKETS=a fleet's secret, 32 bytes at least"
	a, path := startGateway(t, cfg, tokenEnv, secret)
	b, _ := startGateway(t, cfg, tokenEnv, secret)
	for _, h2 := range []bool{false, true} {
		cache := tls.NewLRUClientSessionCache(4)
		get := func(p *process) *tls.ConnectionState {
			t.Helper()
			// A transport per request: a new connection, the cache shared.
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: "short.test", ClientSessionCache: cache}, ForceAttemptHTTP2: h2}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr, Timeout: testkit.Slack(30 * time.Second)}).Get(strings.Replace(p.url("gateway", "/go"), "http://", "https://", 1))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body) // the TLS 1.3 ticket comes after the handshake
			resp.Body.Close()
			if want := map[bool]int{false: 1, true: 2}[h2]; resp.ProtoMajor != want {
				t.Errorf("HTTP/%d, want HTTP/%d", resp.ProtoMajor, want)
			}
			return resp.TLS
		}
		if get(a).DidResume {
			t.Errorf("h2 %v: the first handshake resumed", h2)
		}
		if !get(b).DidResume {
			t.Errorf("h2 %v: the session begun with gateway A did not resume on gateway B", h2)
		}
		if !get(a).DidResume {
			t.Errorf("h2 %v: the session given by gateway B did not resume on gateway A", h2)
		}
	}
	for env, want := range map[string]string{"": "is not set or empty", "LG_TEST_TICKETS=short": "is 5 bytes, fewer than 32"} {
		cmd := exec.Command(bin.gateway, "check-config", path)
		cmd.Env = childEnv(env)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "server.tls.session_tickets.secret_env") || !strings.Contains(string(out), want) {
			t.Errorf("check-config with %q: %v %s; want it refused naming server.tls.session_tickets.secret_env, %q", env, err, out, want)
		}
	}
}
