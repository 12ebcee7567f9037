package edge_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/linkgate/linkgate/edge"
	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// These tests take the edge's decisions through real handshakes on its
// Listener, with certificates from Debian's pebble (edgetest.StartPebble).
// Each names hosts of its own: certmagic coordinates the loading of a
// name's certificate across the process.

// fromPebble is a server.tls section ordering from p, storing in a folder
// of the test's.
func fromPebble(t *testing.T, p *edgetest.Pebble) edge.Config {
	c := paced()
	c.ACME.CA, c.ACME.CARoot, c.ACME.Email = p.Directory, p.CARootFile, "ops@example.com"
	c.Storage.Path = t.TempDir()
	return c
}

// serve starts the edge of c with opts on a loopback listener, the port
// that answers TLS-ALPN-01 challenges, and returns it with the address.
func serve(t *testing.T, c edge.Config, opts edge.Options) (*edge.Edge, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts.ListenHost, opts.TLSPort = "127.0.0.1", ln.Addr().(*net.TCPAddr).Port
	e, _ := newEdge(t, c, opts, nil)
	closeEach(t, e.Listen(ln, nil))
	return e, ln.Addr().String()
}

// closeEach closes every connection l accepts, until the test ends.
func closeEach(t testing.TB, l *edge.Listener) {
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// handshake connects to addr naming name, trusting roots, and waits for
// the handshake as long as the edge's handshake_timeout (paced) allows.
func handshake(addr, name string, p *edgetest.Pebble) (*tls.ConnectionState, error) {
	d := &net.Dialer{Timeout: min(testkit.Slack(30*time.Second), 5*time.Minute) + 5*time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{RootCAs: p.Roots, ServerName: name})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	s := c.ConnectionState()
	return &s, nil
}

// storedFor returns the certificate files of name under dir, the file
// storage's folder.
func storedFor(t *testing.T, dir, name string) []string {
	t.Helper()
	var found []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == name+".crt" {
			found = append(found, path)
		}
		return nil
	})
	return found
}

// TestOnDemandFromPebble: a name the ask endpoint allows gets a
// certificate from the CA at its first handshake, kept in the file storage
// at storage.path (no storage given), and listed; a denied name fails its
// handshake and orders nothing.
func TestOnDemandFromPebble(t *testing.T) {
	t.Parallel()
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{})
	ask := newAsk(t)
	c := fromPebble(t, p)
	c.OnDemand.Ask = ask.URL
	e, addr := serve(t, c, edge.Options{})

	st, err := handshake(addr, "first.ok.test", p)
	if err != nil {
		t.Fatalf("handshake for an allowed name: %v", err)
	}
	leaf := st.PeerCertificates[0]
	if leaf.VerifyHostname("first.ok.test") != nil || !strings.Contains(leaf.Issuer.CommonName, "Pebble") {
		t.Errorf("served %v from %q, want first.ok.test from pebble", leaf.DNSNames, leaf.Issuer.CommonName)
	}
	if files := storedFor(t, c.Storage.Path, "first.ok.test"); len(files) != 1 {
		t.Errorf("the file storage at %s holds %v, want first.ok.test's certificate", c.Storage.Path, files)
	}
	if _, err := handshake(addr, "nope.no.test", p); err == nil {
		t.Errorf("the handshake for a denied name succeeded")
	}
	if got := p.Orders(); got != 1 {
		t.Errorf("pebble took %d orders, want 1", got)
	}
	certs := e.Certificates()
	if len(certs) != 1 || certs[0].Source != "acme" || certs[0].Serial != leaf.SerialNumber.Text(16) {
		t.Errorf("Certificates: %+v, want first.ok.test's from pebble", certs)
	}
}

// TestOrdersPerHourFromPebble: past orders_per_hour new orders in an hour,
// a name the ask endpoint allows fails its handshake without an order, and
// the refusal is counted and listed.
func TestOrdersPerHourFromPebble(t *testing.T) {
	t.Parallel()
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{})
	ask := newAsk(t)
	c := fromPebble(t, p)
	c.OnDemand.Ask = ask.URL
	c.OnDemand.OrdersPerHour = 1
	e, addr := serve(t, c, edge.Options{})
	if _, err := handshake(addr, "one.ok.test", p); err != nil {
		t.Fatalf("the hour's first order: %v", err)
	}
	if _, err := handshake(addr, "two.ok.test", p); err == nil {
		t.Errorf("the hour's second order was served")
	}
	if got := p.Orders(); got != 1 {
		t.Errorf("pebble took %d orders, want 1", got)
	}
	var listed bool
	for _, ci := range e.Certificates() {
		listed = listed || len(ci.Names) == 1 && ci.Names[0] == "two.ok.test" && strings.Contains(ci.LastError, "orders_per_hour")
	}
	if !listed {
		t.Errorf("Certificates do not list two.ok.test with the cap as its last error: %+v", e.Certificates())
	}
}

// TestOrderCap: orders_per_hour counts the new orders started in the last
// hour, not the renewals; an order refused is not counted, and an hour
// after an order its place is free again.
func TestOrderCap(t *testing.T) {
	clk := testkit.NewClock(time.Date(2026, 3, 28, 10, 0, 0, 0, time.UTC))
	c := onDemand(t, "http://127.0.0.1:1/never-asked")
	c.OnDemand.OrdersPerHour = 2
	e, reg := newEdge(t, c, edge.Options{}, clk)
	ctx := context.Background()
	obtaining := func(name string, renewal bool) error {
		return e.OnEvent(ctx, "cert_obtaining", map[string]any{"identifier": name, "renewal": renewal})
	}
	if obtaining("a.test", false) != nil || obtaining("r.test", true) != nil {
		t.Fatal("the first order, or a renewal, refused")
	}
	clk.Advance(30 * time.Minute)
	if err := obtaining("b.test", false); err != nil {
		t.Fatalf("the second order in the hour: %v", err)
	}
	for _, renewal := range []bool{false, true} {
		err := obtaining("c.test", renewal)
		var noRetry certmagic.ErrNoRetry
		if renewal != (err == nil) || !renewal && !errors.As(err, &noRetry) {
			t.Errorf("a third order in the hour (renewal %v): %v, want refused for good unless a renewal", renewal, err)
		}
	}
	clk.Advance(30 * time.Minute) // an hour after a.test's order
	if err := obtaining("c.test", false); err != nil {
		t.Errorf("an order an hour after the first: %v", err)
	}
	if err := obtaining("d.test", false); err == nil {
		t.Errorf("a fourth order, with b.test's and c.test's in the hour, passed")
	}
	if got := testkit.Metric(t, reg, "linkgate_tls_issuance_total", "kind", "obtain", "result", "capped"); got != 2 {
		t.Errorf("%v orders counted as capped, want 2", got)
	}
}

// TestACMEDomains: the names of acme.domains are obtained at start, and a
// handshake for one is decided without an ask; without on_demand.ask any
// other name is denied without a request to anyone.
func TestACMEDomains(t *testing.T) {
	t.Parallel()
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{})
	c := fromPebble(t, p)
	c.ACME.Domains = []string{"fixed.test"}
	e, addr := serve(t, c, edge.Options{})
	testkit.Eventually(t, 60*time.Second, "fixed.test obtained at start", func() bool {
		return len(storedFor(t, c.Storage.Path, "fixed.test")) == 1
	})
	if _, err := handshake(addr, "fixed.test", p); err != nil {
		t.Errorf("handshake for a name of acme.domains: %v", err)
	}
	if err := e.Decide(context.Background(), "fixed.test"); err != nil {
		t.Errorf("decision for a name of acme.domains: %v", err)
	}
	if err := e.Decide(context.Background(), "other.test"); err == nil || !strings.Contains(err.Error(), "on_demand.ask is not set") {
		t.Errorf("decision for another name without an ask endpoint: %v, want denied", err)
	}
	if got := p.Orders(); got != 1 {
		t.Errorf("pebble took %d orders, want 1", got)
	}
}

// connectingStorage is the file storage behind a connection that is made
// when the test says so: the state a storage that connects in the
// background (edge/cassandra, whose own tests and the gateway's drive it)
// is in until its cluster answers.
type connectingStorage struct {
	*certmagic.FileStorage
	connected chan struct{}
	closed    atomic.Bool
}

func (s *connectingStorage) Ready() error {
	select {
	case <-s.connected:
		return nil
	default:
		return errors.New("not connected yet")
	}
}

func (s *connectingStorage) Connected() <-chan struct{} { return s.connected }
func (s *connectingStorage) Close()                     { s.closed.Store(true) }

var _ edge.Connecting = (*connectingStorage)(nil)

// TestStorageNotConnectedYet: with a storage that connects in the
// background, the edge serves while it is not connected, fails a handshake
// for a name it holds no certificate for at once, without asking, and
// obtains the names of acme.domains once it is; it asks again from then
// on, and Close closes the storage.
func TestStorageNotConnectedYet(t *testing.T) {
	t.Parallel()
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{})
	ask := newAsk(t)
	c := fromPebble(t, p)
	c.ACME.Domains = []string{"late.test"}
	c.OnDemand.Ask = ask.URL
	st := &connectingStorage{FileStorage: &certmagic.FileStorage{Path: c.Storage.Path}, connected: make(chan struct{})}
	t.Cleanup(func() { // after the edge's Close, a cleanup of serve's
		if !st.closed.Load() {
			t.Errorf("Close did not close the storage")
		}
	})
	e, addr := serve(t, c, edge.Options{Storage: st})
	if state, err := e.StorageState(); state != edge.StorageConnecting || err == nil {
		t.Errorf("StorageState before the storage connected: %s, %v; want %s with an error", state, err, edge.StorageConnecting)
	}
	if err := e.Decide(context.Background(), "early.ok.test"); err == nil || !strings.Contains(err.Error(), "not connected yet") {
		t.Errorf("decision before the storage connected: %v, want refused for the storage", err)
	}
	if _, err := handshake(addr, "early2.ok.test", p); err == nil {
		t.Errorf("a handshake for a name without a certificate succeeded before the storage connected")
	}
	if n := ask.asked("early.ok.test") + ask.asked("early2.ok.test"); n != 0 {
		t.Errorf("the ask endpoint was asked %d times before the storage connected", n)
	}
	close(st.connected)
	testkit.Eventually(t, 60*time.Second, "late.test obtained once the storage connected", func() bool {
		return len(storedFor(t, c.Storage.Path, "late.test")) == 1
	})
	if err := e.Decide(context.Background(), "early.ok.test"); err != nil || ask.asked("early.ok.test") != 1 {
		t.Errorf("decision once the storage connected: %v, asked %d times; want allowed by an ask", err, ask.asked("early.ok.test"))
	}
}

// TestStaticOnly: a static certificate alone keeps no storage: nothing is
// written at storage.path, and every handshake gets the certificate.
func TestStaticOnly(t *testing.T) {
	ca := edgetest.NewCA(t)
	c := edge.DefaultConfig()
	c.Storage.Path = filepath.Join(t.TempDir(), "certs")
	var written *big.Int
	c.CertFile, c.KeyFile, written = ca.WritePair(t, t.TempDir(), "static.test")
	e, addr := serve(t, c, edge.Options{})
	if state, err := e.StorageState(); e.Managed() || state != edge.StorageOK || err != nil {
		t.Errorf("a static certificate alone: Managed %v, StorageState %s, %v; want no storage", e.Managed(), state, err)
	}
	for _, name := range []string{"static.test", "other.test", ""} {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: testkit.Slack(10 * time.Second)}, "tcp", addr, &tls.Config{RootCAs: ca.Pool(), ServerName: name, InsecureSkipVerify: name != "static.test"})
		if err != nil {
			t.Fatalf("handshake naming %q: %v", name, err)
		}
		got := conn.ConnectionState().PeerCertificates[0].SerialNumber
		conn.Close()
		if got.Cmp(written) != 0 {
			t.Errorf("naming %q served serial %x, want the static %x", name, got, written)
		}
	}
	if _, err := os.Stat(c.Storage.Path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("storage.path %s: %v, want nothing there", c.Storage.Path, err)
	}
}
