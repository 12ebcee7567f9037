package edge_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/edge"
	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

const ticketSecret = "0123456789abcdef0123456789abcdef-fleet"

// ticketEdge serves a static certificate with session tickets from secret
// ("": the process's own), on clk, and returns its address.
func ticketEdge(t testing.TB, certFile, keyFile, secret string, clk *testkit.Clock) (*edge.Edge, string) {
	t.Helper()
	c := edge.DefaultConfig()
	c.CertFile, c.KeyFile = certFile, keyFile
	if secret != "" {
		c.SessionTickets.SecretEnv = "TICKETS"
	}
	p, err := edge.CompileEnv(c, func(string) string { return secret })
	if err != nil {
		t.Fatal(err)
	}
	e, err := edge.New(p, edge.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	e.SetClock(clk.Now)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closeEach(t, e.Listen(ln, nil))
	return e, ln.Addr().String()
}

// resumes handshakes with addr using cache (its tickets, and the new
// one the server gives) and reports whether the session was resumed.
// The client keeps the machine's clock: the certificate is valid for a
// day of it, the servers' clocks run days on.
func resumes(t *testing.T, roots *x509.CertPool, addr string, cache tls.ClientSessionCache) bool {
	t.Helper()
	cfg := &tls.Config{ServerName: "tickets.test", RootCAs: roots, ClientSessionCache: cache}
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: testkit.Slack(30 * time.Second)}, "tcp", addr, cfg)
	if err != nil {
		t.Fatalf("handshake with %s: %v", addr, err)
	}
	defer c.Close()
	// The TLS 1.3 ticket comes after the handshake: read it, up to the
	// server's close.
	c.SetReadDeadline(time.Now().Add(testkit.Slack(30 * time.Second)))
	if _, err := io.Copy(io.Discard, c); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("reading from %s: %v", addr, err)
	}
	return c.ConnectionState().DidResume
}

// TestSessionTicketsAcrossAFleet: gateways given the same secret resume
// each other's sessions; one with another secret, or with a secret of its
// own, makes a full handshake; a ticket resumes for its lifetime and no
// longer; the key turns every rotate, the previous ones still taken.
func TestSessionTicketsAcrossAFleet(t *testing.T) {
	ca := edgetest.NewCA(t)
	certFile, keyFile, _ := ca.WritePair(t, t.TempDir(), "tickets.test")
	roots := ca.Pool()
	// The middle of a rotation period (12h by default), so that an hour
	// either way stays in it.
	t0 := time.Now().Truncate(12 * time.Hour).Add(6 * time.Hour)
	clkA, clkB := testkit.NewClock(t0), testkit.NewClock(t0)
	_, a := ticketEdge(t, certFile, keyFile, ticketSecret, clkA)
	eb, b := ticketEdge(t, certFile, keyFile, ticketSecret, clkB)
	_, other := ticketEdge(t, certFile, keyFile, strings.Repeat("x", 40), clkB)
	_, own := ticketEdge(t, certFile, keyFile, "", clkB)

	fresh := func() tls.ClientSessionCache { return tls.NewLRUClientSessionCache(4) }
	for _, v := range []tls.ClientSessionCache{fresh(), fresh()} {
		if resumes(t, roots, a, v) {
			t.Fatal("a first handshake resumed")
		}
	}
	cache := fresh()
	resumes(t, roots, a, cache)
	if !resumes(t, roots, b, cache) {
		t.Error("a ticket of gateway A did not resume on gateway B, given the same secret")
	}
	for name, addr := range map[string]string{"another secret": other, "a secret of its own": own} {
		c := fresh()
		resumes(t, roots, a, c)
		if resumes(t, roots, addr, c) {
			t.Errorf("a ticket of gateway A resumed on a gateway with %s", name)
		}
	}
	if c := fresh(); resumes(t, roots, own, c) || !resumes(t, roots, own, c) {
		t.Error("a gateway with a secret of its own did not resume its own sessions, or resumed a first one")
	}

	// t0+13h, the next period on B: a ticket A gave at t0 resumes on B,
	// whose key turned since (the previous key is kept).
	old := fresh()
	resumes(t, roots, a, old)
	clkB.Advance(13 * time.Hour)
	if !resumes(t, roots, b, old) {
		t.Error("a ticket of the previous key, within its lifetime (24h), did not resume")
	}
	// A ticket B gives now, with the new key, resumes on A, its clock
	// still at t0 (the next key is kept: a clock behind by less than
	// rotate), but not on a gateway two periods behind B: the key turned.
	newer := fresh()
	resumes(t, roots, b, newer)
	if !resumes(t, roots, a, newer) {
		t.Error("a ticket of the next period's key did not resume on a gateway a period behind")
	}
	behind := testkit.NewClock(t0.Add(-12 * time.Hour))
	_, c := ticketEdge(t, certFile, keyFile, ticketSecret, behind)
	newer = fresh()
	resumes(t, roots, b, newer)
	if resumes(t, roots, c, newer) {
		t.Error("a gateway two periods behind resumed a ticket of a key it does not have")
	}
	// t0+23h on B, two periods on: the ticket of t0 still resumes (its
	// key is kept for the lifetime of its tickets).
	older := fresh()
	resumes(t, roots, a, older)
	clkB.Advance(10 * time.Hour)
	if !resumes(t, roots, b, older) {
		t.Error("a ticket of two keys before, within its lifetime (24h), did not resume")
	}
	// The lifetime: a ticket of t0 taken at t0+24h1m makes a full
	// handshake.
	expired := fresh()
	resumes(t, roots, a, expired)
	clkA.Advance(24*time.Hour + time.Minute)
	if resumes(t, roots, a, expired) {
		t.Error("a ticket older than its lifetime (24h) resumed")
	}
	// A reload with another secret ends the tickets of the old one.
	reload := fresh()
	resumes(t, roots, b, reload)
	cfg := edge.DefaultConfig()
	cfg.CertFile, cfg.KeyFile = certFile, keyFile
	cfg.SessionTickets.SecretEnv = "TICKETS"
	p, err := edge.CompileEnv(cfg, func(string) string { return strings.Repeat("y", 32) })
	if err != nil {
		t.Fatal(err)
	}
	eb.Apply(p)
	if resumes(t, roots, b, reload) {
		t.Error("a ticket of the secret before a reload resumed")
	}
	if !resumes(t, roots, b, reload) {
		t.Error("a ticket of the reloaded secret did not resume")
	}
}

// TestSessionTicketSecretRefused: secret_env naming an unset variable or
// a short secret is refused by the compile step, naming the field.
func TestSessionTicketSecretRefused(t *testing.T) {
	for _, secret := range []string{"", "short"} {
		c := edge.DefaultConfig()
		c.SessionTickets.SecretEnv = "TICKETS"
		_, err := edge.CompileEnv(c, func(string) string { return secret })
		if err == nil || !strings.HasPrefix(err.Error(), "server.tls.session_tickets.secret_env: ") {
			t.Errorf("secret %q: %v; want server.tls.session_tickets.secret_env refused", secret, err)
		}
	}
}
