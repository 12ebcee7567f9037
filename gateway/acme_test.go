package gateway_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/edge/cassandra/cqlmodel"
	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// askServer is the tiny-URL service's ask endpoint: 200 for names ending
// in .ok.test, 404 otherwise; it counts the calls.
type askServer struct {
	*httptest.Server
	calls atomic.Int64
}

func newAsk(t *testing.T) *askServer {
	a := &askServer{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.calls.Add(1)
		if strings.HasSuffix(r.URL.Query().Get("domain"), ".ok.test") {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(a.Close)
	return a
}

// storageTimeout is the certificate storage's Cassandra timeout in the
// tests that store certificates there: 2 s stretched by the machine's
// pace, within the field's bound of a minute, taken once per binary.
var storageTimeout = sync.OnceValue(func() time.Duration { return min(testkit.Slack(2*time.Second), time.Minute) })

// handshakeTimeout is the server.tls.handshake_timeout of acmeConfig.
var handshakeTimeout = edgetest.HandshakeTimeout

// acmeConfig is a gateway ordering from pebble on demand, asking ask.
// Tests that run at once name hosts of their own: certmagic coordinates
// the loading of a name's certificate process-wide, across gateways, so a
// handshake for a name another test's gateway is loading can be handed
// that gateway's certificate (from that test's pebble).
func acmeConfig(upstream string, p *edgetest.Pebble, ask, storage string) string {
	return tlsConfig(upstream, fmt.Sprintf(`  tls:
    handshake_timeout: %v
    acme: {ca: %s, ca_root: %s, email: ops@example.com}
    on_demand: {ask: %s}
    storage: {path: %s}
`, handshakeTimeout(), p.Directory, p.CARootFile, ask, storage))
}

// handshake dials the gateway naming name, trusting pebble's root.
func handshake(addr net.Addr, p *edgetest.Pebble, name string) (*tls.Conn, error) {
	d := &net.Dialer{Timeout: testkit.Slack(20 * time.Second)}
	return tls.DialWithDialer(d, "tcp", addr.String(), &tls.Config{RootCAs: p.Roots, ServerName: name, NextProtos: []string{"h2", "http/1.1"}})
}

func serialOf(c *tls.Conn) string {
	return c.ConnectionState().PeerCertificates[0].SerialNumber.Text(16)
}

// servedSerial is the serial of the certificate gw serves for name, in a
// handshake trusting pebble's roots; a failed handshake fails t.
func servedSerial(t *testing.T, gw *running, p *edgetest.Pebble, name string) string {
	t.Helper()
	c, err := handshake(gw.g.Addr(), p, name)
	if err != nil {
		t.Fatalf("a handshake for %s: %v", name, err)
	}
	defer c.Close()
	return serialOf(c)
}

// TestOnDemandAllowedAndDenied: an allowed name gets a certificate from
// pebble at its first handshake and is served, HTTP/2 over it reaches the
// upstream; a denied name fails its handshake with no order in pebble; the
// admin API lists the certificate with its issuer, and the metrics count
// the issuance.
func TestOnDemandAllowedAndDenied(t *testing.T) {
	t.Parallel()
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{})
	ask := newAsk(t)
	up := echoProto(t)
	gw := start(t, acmeConfig(up.URL, p, ask.URL, t.TempDir()))

	t0 := time.Now()
	c, err := handshake(gw.g.Addr(), p, "brand.ok.test")
	if err != nil {
		t.Fatalf("handshake for an allowed name: %v", err)
	}
	took := time.Since(t0)
	leaf := c.ConnectionState().PeerCertificates[0]
	c.Close()
	t.Logf("first handshake to a served certificate from pebble: %v", took)
	if leaf.VerifyHostname("brand.ok.test") != nil || !strings.Contains(leaf.Issuer.CommonName, "Pebble") {
		t.Errorf("served %v issued by %q, want brand.ok.test from pebble", leaf.DNSNames, leaf.Issuer.CommonName)
	}
	if got := p.Orders(); got != 1 {
		t.Errorf("pebble took %d orders, want 1", got)
	}
	client := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: p.Roots}, DialContext: func(ctx context.Context, n, a string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", gw.g.Addr().String())
	}}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, body := get(t, client, "https://brand.ok.test/go")
	if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusFound {
		t.Errorf("GET https://brand.ok.test/go: %s %d %q, want HTTP/2 302", resp.Proto, resp.StatusCode, body)
	}

	if c, err := handshake(gw.g.Addr(), p, "junk.example"); err == nil {
		c.Close()
		t.Errorf("a handshake for a denied name succeeded")
	}
	if got := p.Orders(); got != 1 {
		t.Errorf("after a denied name pebble took %d orders, want still 1", got)
	}

	_, body = testkit.Do(t, "GET", gw.admin("/admin/certificates"), nil, "Authorization", "Bearer "+testkit.AdminToken)
	var listed struct {
		Certificates []struct {
			Names    []string  `json:"names"`
			Issuer   string    `json:"issuer"`
			Serial   string    `json:"serial"`
			NotAfter time.Time `json:"not_after"`
		} `json:"certificates"`
	}
	json.Unmarshal([]byte(body), &listed)
	if len(listed.Certificates) != 1 || listed.Certificates[0].Serial != leaf.SerialNumber.Text(16) || !strings.Contains(listed.Certificates[0].Issuer, "Pebble") || !listed.Certificates[0].NotAfter.Equal(leaf.NotAfter) {
		t.Errorf("/admin/certificates: %s, want brand.ok.test's certificate from pebble", body)
	}
	metrics := testkit.Body(t, gw.admin("/metrics"))
	for _, want := range []string{
		`linkgate_tls_issuance_total{kind="obtain",result="ok"} 1`,
		`linkgate_tls_on_demand_decisions_total{decision="denied"} 1`,
		`linkgate_tls_certificate_expiry_timestamp_seconds{name="brand.ok.test",source="acme"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestOnDemandJunkNames: 1,000 handshakes with random names from one
// address make at most handshakes_per_client ask calls, and no order. The
// 5/m is counted in second buckets (the limit package's doc): a minute's
// five leave the window 59 to 60 s after the first of them, so the
// handshakes may ask five more for each 59 s they span, as a busy machine
// may stretch them past one.
func TestOnDemandJunkNames(t *testing.T) {
	t.Parallel()
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{})
	ask := newAsk(t)
	gw := start(t, acmeConfig(echoProto(t).URL, p, ask.URL, t.TempDir()))
	var failed atomic.Int64
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for range work {
				name := fmt.Sprintf("x%08x.junk.test", rand.Uint32())
				c, err := handshake(gw.g.Addr(), p, name)
				if err != nil {
					failed.Add(1)
					continue
				}
				c.Close()
			}
		})
	}
	began := time.Now()
	for i := range 1000 {
		work <- i
	}
	close(work)
	wg.Wait()
	spanned := time.Since(began)
	windows := int64(spanned/(59*time.Second)) + 1
	t.Logf("1000 handshakes with random names: %d failed, %d ask calls, %d orders", failed.Load(), ask.calls.Load(), p.Orders())
	if failed.Load() != 1000 {
		t.Errorf("%d of 1000 junk handshakes failed, want all", failed.Load())
	}
	asks := ask.calls.Load()
	if asks > 5*windows {
		t.Errorf("%d ask calls in %v, want at most 5 each 59 s (handshakes_per_client 5/m, counted in second buckets)", asks, spanned.Round(time.Millisecond))
	}
	if got := p.Orders(); got != 0 {
		t.Errorf("%d orders in pebble, want 0", got)
	}
	if got := metric(t, gw, `linkgate_tls_on_demand_decisions_total{decision="limited"}`); got != float64(1000-asks) {
		t.Errorf("%v handshakes counted as limited, want the %d that made no ask call:\n%s", got, 1000-asks, grepLines(testkit.Body(t, gw.admin("/metrics")), "linkgate_tls_"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestOnDemandAskDownServesStored: a gateway restarted on the same storage
// while the ask endpoint is down still serves the names it has stored
// (certmagic#272), and orders nothing for a new name.
func TestOnDemandAskDownServesStored(t *testing.T) {
	t.Parallel()
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{})
	ask := newAsk(t)
	storage := t.TempDir()
	up := echoProto(t)
	cfg := acmeConfig(up.URL, p, ask.URL, storage)
	gw := start(t, cfg)
	serial := servedSerial(t, gw, p, "kept.ok.test")
	if err := gw.shutdown(); err != nil {
		t.Fatal(err)
	}
	ask.Close()

	gw2 := start(t, cfg) // restarted with the ask endpoint down: a stored name is served
	if got := servedSerial(t, gw2, p, "kept.ok.test"); got != serial {
		t.Errorf("served serial %s, want the stored %s", got, serial)
	}
	if c, err := handshake(gw2.g.Addr(), p, "new.ok.test"); err == nil {
		c.Close()
		t.Errorf("a new name was served while the ask endpoint is down")
	}
	if got := p.Orders(); got != 1 {
		t.Errorf("pebble took %d orders, want 1", got)
	}
}

// TestOnDemandRenewal: a certificate whose lifetime is short is renewed
// while it is served; handshakes and requests never fail meanwhile, and a
// new serial is served.
func TestOnDemandRenewal(t *testing.T) {
	t.Parallel()
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{Validity: time.Minute})
	ask := newAsk(t)
	gw := start(t, acmeConfig(echoProto(t).URL, p, ask.URL, t.TempDir()))
	first := servedSerial(t, gw, p, "renew.ok.test")
	deadline := time.Now().Add(testkit.Slack(20 * time.Second))
	var n int
	for {
		n++
		c, err := tls.Dial("tcp", gw.g.Addr().String(), &tls.Config{RootCAs: p.Roots, ServerName: "renew.ok.test", NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatalf("handshake %d during renewal failed: %v", n, err)
		}
		c.Write([]byte("GET /x HTTP/1.1\r\nHost: renew.ok.test\r\n\r\n"))
		buf := make([]byte, 12)
		if _, err := c.Read(buf); err != nil || !strings.HasPrefix(string(buf), "HTTP/") {
			c.Close()
			t.Fatalf("request %d during renewal: %q %v", n, buf, err)
		}
		s := serialOf(c)
		c.Close()
		if s != first {
			t.Logf("renewed after %d handshakes: serial %s -> %s", n, first, s)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no new serial after %d handshakes in %v", n, testkit.Slack(20*time.Second))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(p.Issued()) < 2 {
		t.Errorf("pebble issued %v, want a renewal", p.Issued())
	}
}

// TestOnDemandCassandraStorage: with storage.cassandra, the certificate an
// on-demand handshake obtains is kept in Cassandra (here the CQL protocol
// model), and a second gateway on the same cluster, its ask endpoint down,
// serves it without an order.
func TestOnDemandCassandraStorage(t *testing.T) {
	t.Parallel()
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{})
	m := cqlmodel.New(t)
	ask := newAsk(t)
	up := echoProto(t)
	cfg := func(askURL string) string {
		return tlsConfig(up.URL, fmt.Sprintf(`  tls:
    handshake_timeout: %v
    acme: {ca: %s, ca_root: %s}
    on_demand: {ask: %s}
    storage: {cassandra: {hosts: [%s], timeout: %v}}
`, handshakeTimeout(), p.Directory, p.CARootFile, askURL, m.Addr(), storageTimeout()))
	}
	// The storage connects in the background (TestCertStorageConnectsLate):
	// wait for it, as a handshake before would fail at once.
	connected := func(gw *running) {
		testkit.Eventually(t, 10*time.Second, "the certificate storage connected", func() bool {
			return gw.logs.Logged("certificate storage connected to cassandra", nil)
		})
	}
	a := start(t, cfg(ask.URL))
	connected(a)
	serial := servedSerial(t, a, p, "fleet.ok.test")
	var stored bool
	for _, k := range m.Keys() {
		stored = stored || strings.HasSuffix(k, "/fleet.ok.test/fleet.ok.test.crt")
	}
	if !stored || m.LWT() == 0 {
		t.Fatalf("Cassandra holds %q after %d lightweight transactions; want fleet.ok.test's certificate, locked while obtained", m.Keys(), m.LWT())
	}
	b := start(t, cfg("http://"+testkit.DeadAddr(t)))
	connected(b)
	if got := servedSerial(t, b, p, "fleet.ok.test"); got != serial {
		t.Errorf("the second gateway served %s, want the stored %s", got, serial)
	}
	if got := p.Orders(); got != 1 {
		t.Errorf("%d orders, want 1", got)
	}
}

// TestACMEChallenges: with pebble validating for real (its DNS sends every
// name to 127.0.0.1), a name of acme.domains is obtained at start by
// answering HTTP-01 on server.http_listen, and another by TLS-ALPN-01 on
// server.listen (ALPN acme-tls/1), the challenge each config offers.
func TestACMEChallenges(t *testing.T) {
	t.Parallel()
	// pebble logs its HTTP-01 requests, not its TLS-ALPN-01 handshakes.
	for ch, validated := range map[string]string{"http-01": "validate w/ HTTP: http://site.example:", "tls-alpn-01": "set VALID by completed challenge"} {
		t.Run(ch, func(t *testing.T) {
			// The gateway's two ports are held while pebble starts (seconds
			// on a loaded machine, when another process could take them)
			// and let go just before the gateway binds them.
			tlsLn, httpLn := holdPort(t), holdPort(t)
			tlsPort, httpPort := tlsLn.Addr().(*net.TCPAddr).Port, httpLn.Addr().(*net.TCPAddr).Port
			p := edgetest.StartPebble(t, edgetest.PebbleOptions{Validate: true, HTTPPort: httpPort, TLSPort: tlsPort})
			up := echoProto(t)
			cfg := strings.Replace(tlsConfig(up.URL, fmt.Sprintf(`  http_listen: 127.0.0.1:%d
  tls:
    acme: {ca: %s, ca_root: %s, domains: [site.example], challenges: [%s]}
    storage: {path: %s}
`, httpPort, p.Directory, p.CARootFile, ch, t.TempDir())), "listen: 127.0.0.1:0\n  trusted", fmt.Sprintf("listen: 127.0.0.1:%d\n  trusted", tlsPort), 1)
			tlsLn.Close()
			httpLn.Close()
			gw := start(t, cfg)
			var c *tls.Conn
			testkit.Eventually(t, 20*time.Second, "site.example obtained by "+ch, func() bool {
				var err error
				c, err = handshake(gw.g.Addr(), p, "site.example")
				return err == nil
			})
			c.Close()
			if log := p.Log(); !strings.Contains(log, "Issued certificate serial") || !strings.Contains(log, validated) || ch == "tls-alpn-01" && strings.Contains(log, "validate w/ HTTP") || strings.Contains(log, "always returns valid") {
				t.Errorf("pebble did not issue after validating %s:\n%s", ch, log)
			}
		})
	}
}

// holdPort listens on a free loopback port until the test ends or the
// caller closes it, so that no other process takes the port meanwhile.
func holdPort(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// TestOnDemandOrdersPerClientAndDomain: strangers cannot spend the
// gateway's orders for the hour. Thirty addresses each asking for a new
// random name the ask endpoint allows, all under one registered domain,
// get orders_per_hour_per_domain certificates between them; a customer's
// new domain is still ordered at once; and one address is held to
// orders_per_hour_per_client whatever the names. A refused order never
// reaches pebble.
func TestOnDemandOrdersPerClientAndDomain(t *testing.T) {
	t.Parallel()
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{})
	ask := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := r.URL.Query().Get("domain"); strings.HasSuffix(d, ".ok.test") || strings.HasSuffix(d, ".customer.test") || strings.HasSuffix(d, ".other.test") {
			return // 200
		}
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(ask.Close)
	cfg := strings.Replace(acmeConfig(echoProto(t).URL, p, ask.URL, t.TempDir()), "on_demand: {ask: "+ask.URL+"}",
		"on_demand: {ask: "+ask.URL+", orders_per_hour: 6, orders_per_hour_per_client: 1, orders_per_hour_per_domain: 2}", 1)
	gw := start(t, cfg)
	from := func(local, name string) error {
		d := &net.Dialer{Timeout: testkit.Slack(20 * time.Second), LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
		c, err := tls.DialWithDialer(d, "tcp", gw.g.Addr().String(), &tls.Config{RootCAs: p.Roots, ServerName: name})
		if err == nil {
			c.Close()
		}
		return err
	}
	run := rand.Uint32()
	served := 0
	for i := range 30 {
		if from(fmt.Sprintf("127.0.0.%d", 10+i), fmt.Sprintf("r%d-%08x.ok.test", i, run)) == nil {
			served++
		}
	}
	if served != 2 || p.Orders() != 2 {
		t.Errorf("30 addresses asking for new names of one registered domain: %d served, %d orders in pebble; want 2 and 2 (orders_per_hour_per_domain)", served, p.Orders())
	}
	if err := from("127.0.0.60", fmt.Sprintf("go-%08x.customer.test", run)); err != nil {
		t.Errorf("a customer's new domain after the strangers' names: %v, want it ordered", err)
	}
	if err := from("127.0.0.10", fmt.Sprintf("x-%08x.other.test", run)); err == nil {
		t.Errorf("a second new name from an address that had one ordered this hour was served, want orders_per_hour_per_client to refuse it")
	}
	if got := p.Orders(); got != 3 {
		t.Errorf("%d orders in pebble, want 3: the refused ones never reach it", got)
	}
	if got := testkit.Metric(t, gw.g.Registry(), "linkgate_tls_issuance_total", "kind", "obtain", "result", "capped"); got != 29 {
		t.Errorf("%v orders counted capped, want 29", got)
	}
}
