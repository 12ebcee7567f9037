package proxy_test

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/proxy"
)

// mtlsUpstream is an HTTPS upstream on loopback whose certificate, from
// serverCA, names only backend.internal (not 127.0.0.1), and which
// requires a client certificate from clientCA. It answers with the
// protocol and the client certificate's name. It offers HTTP/2 when h2
// is set, else HTTP/1.1 alone.
func mtlsUpstream(t *testing.T, serverCA, clientCA *edgetest.CA, h2 bool) *httptest.Server {
	t.Helper()
	certPEM, keyPEM := serverCA.Issue(t, "backend.internal")
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Proto", r.Proto)
		if len(r.TLS.PeerCertificates) > 0 {
			w.Header().Set("X-Client", r.TLS.PeerCertificates[0].Subject.CommonName)
		}
		w.Header().Set("X-SNI", r.TLS.ServerName)
	}))
	s.TLS = &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCA.Pool(),
	}
	s.EnableHTTP2 = h2
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// writeFile writes data into a file of dir and returns its path.
func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// upstreamTLS is the upstream.tls that reaches an mtlsUpstream of
// serverCA and clientCA: serverCA's bundle (dir/ca.pem), the name
// backend.internal, and a client certificate of clientCA for linkgate
// (dir/client.pem and dir/client.key).
func upstreamTLS(t *testing.T, dir string, serverCA, clientCA *edgetest.CA) proxy.TLS {
	t.Helper()
	c, k := clientCA.Issue(t, "linkgate")
	return proxy.TLS{CAFile: writeFile(t, dir, "ca.pem", serverCA.PEM), ServerName: "backend.internal",
		CertFile: writeFile(t, dir, "client.pem", c), KeyFile: writeFile(t, dir, "client.key", k)}
}

// TestUpstreamTLS: a pool reaches an HTTPS target that requires a client
// certificate, whose own certificate is from a private CA and names
// neither its address nor the system's roots, with upstream.tls's CA
// bundle, server name and client certificate: over HTTP/2 (through
// http.Transport) when the target offers it, else over HTTP/1.1 through
// the own client, which keeps the connection; leaving out any of them
// makes the request fail with 502 and the target unhealthy.
func TestUpstreamTLS(t *testing.T) {
	for _, h2 := range []bool{true, false} {
		proto := map[bool]string{true: "HTTP/2.0", false: "HTTP/1.1"}[h2]
		t.Run(proto, func(t *testing.T) { testUpstreamTLS(t, h2, proto) })
	}
}

func testUpstreamTLS(t *testing.T, h2 bool, proto string) {
	serverCA, clientCA, otherCA := edgetest.NewCA(t), edgetest.NewCA(t), edgetest.NewCA(t)
	up := mtlsUpstream(t, serverCA, clientCA, h2)
	dir := t.TempDir()
	full := upstreamTLS(t, dir, serverCA, clientCA)
	otherCAFile := writeFile(t, dir, "other-ca.pem", otherCA.PEM)
	c, k := otherCA.Issue(t, "linkgate")
	strangerCert, strangerKey := writeFile(t, dir, "stranger.pem", c), writeFile(t, dir, "stranger.key", k)

	for _, tc := range []struct {
		name string
		tls  func(*proxy.TLS)
		ok   bool
	}{
		{"ca, server name and client certificate", func(*proxy.TLS) {}, true},
		{"no client certificate", func(c *proxy.TLS) { c.CertFile, c.KeyFile = "", "" }, false},
		{"a client certificate the target does not trust", func(c *proxy.TLS) { c.CertFile, c.KeyFile = strangerCert, strangerKey }, false},
		{"the system's roots", func(c *proxy.TLS) { c.CAFile = "" }, false},
		{"another CA", func(c *proxy.TLS) { c.CAFile = otherCAFile }, false},
		{"the target's address as the name", func(c *proxy.TLS) { c.ServerName = "" }, false},
		{"a name the certificate does not hold", func(c *proxy.TLS) { c.ServerName = "other.internal" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(up.URL)
			cfg.TLS = full
			tc.tls(&cfg.TLS)
			// The dial, the handshake and the system's roots loaded
			// first: seconds on a busy machine, which must not turn a
			// refused certificate into a 504.
			// The health check is bounded by dial_timeout: its mutual
			// TLS handshake on a fresh connection takes as long.
			cfg.ResponseHeaderTimeout = testkit.Slack(cfg.ResponseHeaderTimeout)
			cfg.DialTimeout = testkit.Slack(cfg.DialTimeout)
			f := start(t, cfg)
			resp, body := f.get(t, "/k")
			if !tc.ok {
				wantProblem(t, resp, body, http.StatusBadGateway)
				testkit.Eventually(t, 5*time.Second, "the target out of the pool", func() bool { return !f.p.Ready() })
				return
			}
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Client") != "linkgate" || resp.Header.Get("X-SNI") != "backend.internal" {
				t.Fatalf("%d %q: client %q, SNI %q; want 200 to linkgate's certificate naming backend.internal", resp.StatusCode, body, resp.Header.Get("X-Client"), resp.Header.Get("X-SNI"))
			}
			if p := resp.Header.Get("X-Proto"); p != proto {
				t.Errorf("the upstream was reached over %s, want %s", p, proto)
			}
			// The own client keeps HTTP/1.1 connections (the request's,
			// and the first health check's when it dialed apart); an
			// HTTP/2 one is http.Transport's.
			if idle := f.p.IdleConns(); len(idle) != 1 || h2 != (idle[0] == 0) {
				t.Errorf("the own client keeps %v idle connections, want none for HTTP/2, some for HTTP/1.1", idle)
			}
			if f.healthy(t, up.URL) != 1 {
				t.Error("the target's health check failed over mutual TLS")
			}
		})
	}
}

// TestUpstreamTLSCompile: the files of upstream.tls are read by the
// compile step, and every way they cannot be used is refused there,
// naming the field under the pool's own path.
func TestUpstreamTLSCompile(t *testing.T) {
	ca := edgetest.NewCA(t)
	dir := t.TempDir()
	all := upstreamTLS(t, dir, ca, ca)
	caFile, cert, key := all.CAFile, all.CertFile, all.KeyFile
	_, k2 := ca.Issue(t, "other")
	otherKey := writeFile(t, dir, "other.key", k2)
	serverOnly, serverOnlyKey := serverOnlyCert(t, dir)
	notPEM := writeFile(t, dir, "not.pem", []byte("not a certificate"))
	for _, tc := range []struct {
		name    string
		targets []string
		tls     proxy.TLS
		err     string // "": accepted
	}{
		{"all set", []string{"https://127.0.0.1:1"}, proxy.TLS{CAFile: caFile, ServerName: "backend.internal", CertFile: cert, KeyFile: key}, ""},
		{"an IP address as the name", []string{"https://127.0.0.1:1"}, proxy.TLS{ServerName: "10.0.0.7"}, ""},
		{"mixed targets", []string{"http://127.0.0.1:1", "https://127.0.0.1:2"}, proxy.TLS{CAFile: caFile}, ""},
		{"no https target", []string{"http://127.0.0.1:1"}, proxy.TLS{ServerName: "backend.internal"}, "routes[1].upstream.tls.server_name: set, but no target"},
		{"missing CA file", []string{"https://127.0.0.1:1"}, proxy.TLS{CAFile: filepath.Join(dir, "nope.pem")}, "routes[1].upstream.tls.ca_file: open"},
		{"CA file without PEM", []string{"https://127.0.0.1:1"}, proxy.TLS{CAFile: notPEM}, "routes[1].upstream.tls.ca_file: " + notPEM + " holds no PEM certificate"},
		{"wildcard name", []string{"https://127.0.0.1:1"}, proxy.TLS{ServerName: "*.internal"}, "routes[1].upstream.tls.server_name:"},
		{"name with a port", []string{"https://127.0.0.1:1"}, proxy.TLS{ServerName: "backend.internal:443"}, "routes[1].upstream.tls.server_name:"},
		{"certificate without key", []string{"https://127.0.0.1:1"}, proxy.TLS{CertFile: cert}, "routes[1].upstream.tls.cert_file: cert_file and key_file go together"},
		{"key without certificate", []string{"https://127.0.0.1:1"}, proxy.TLS{KeyFile: key}, "routes[1].upstream.tls.cert_file: cert_file and key_file go together"},
		{"key of another certificate", []string{"https://127.0.0.1:1"}, proxy.TLS{CertFile: cert, KeyFile: otherKey}, "routes[1].upstream.tls.cert_file:"},
		{"missing key file", []string{"https://127.0.0.1:1"}, proxy.TLS{CertFile: cert, KeyFile: filepath.Join(dir, "nope.key")}, "routes[1].upstream.tls.key_file: open"},
		{"a server-only certificate", []string{"https://127.0.0.1:1"}, proxy.TLS{CertFile: serverOnly, KeyFile: serverOnlyKey}, "routes[1].upstream.tls.cert_file: " + serverOnly + " is not for client authentication"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config(tc.targets...)
			cfg.TLS = tc.tls
			_, err := proxy.CompileAt("routes[1].upstream", cfg, nil, forwarded.Policy{})
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.err)):
				t.Errorf("error %v, want one starting with %q", err, tc.err)
			}
		})
	}
}

// serverOnlyCert writes a certificate for server authentication only,
// and its key.
func serverOnlyCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	c, k := edgetest.NewCA(t).IssueFor(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, "server only")
	return writeFile(t, dir, "server-only.pem", c), writeFile(t, dir, "server-only.key", k)
}

// TestUpstreamTLSFilesChangeThePlan: a plan compiled again after the CA
// or the client certificate changed on disk is not Equal to the running
// one, so a reload builds a Proxy with the new files.
func TestUpstreamTLSFilesChangeThePlan(t *testing.T) {
	ca := edgetest.NewCA(t)
	dir := t.TempDir()
	cfg := config("https://127.0.0.1:1")
	cfg.TLS = upstreamTLS(t, dir, ca, ca)
	a, b := plan(t, cfg), plan(t, cfg)
	if !a.Equal(b) {
		t.Fatal("two plans of the same files differ")
	}
	c, k := ca.Issue(t, "linkgate")
	writeFile(t, dir, "client.pem", c)
	writeFile(t, dir, "client.key", k)
	if a.Equal(plan(t, cfg)) {
		t.Error("a new client certificate left the plan Equal")
	}
	writeFile(t, dir, "ca.pem", edgetest.NewCA(t).PEM)
	if b.Equal(plan(t, cfg)) {
		t.Error("a new CA bundle left the plan Equal")
	}
}

// TestUpstreamTLSHTTPTarget: a plain target beside an https one in a pool
// with TLS settings is still reached, through the own client while the
// https one is reached over HTTP/2.
func TestUpstreamTLSHTTPTarget(t *testing.T) {
	serverCA, clientCA := edgetest.NewCA(t), edgetest.NewCA(t)
	secure := mtlsUpstream(t, serverCA, clientCA, true)
	plain := newUpstream(t, "plain", nil)
	cfg := config(secure.URL, plain.URL)
	cfg.TLS = upstreamTLS(t, t.TempDir(), serverCA, clientCA)
	reg := prometheus.NewRegistry()
	p := proxy.New(plan(t, cfg), proxy.NewMetrics(reg), nil)
	defer p.Close()
	f := &fixture{p: p, reg: reg, front: httptest.NewServer(p)}
	defer f.front.Close()
	var secureHits, plainHits int
	for range 4 {
		resp, body := f.get(t, "/k")
		switch {
		case resp.StatusCode != http.StatusOK:
			t.Fatalf("%d %s", resp.StatusCode, body)
		case resp.Header.Get("X-Client") == "linkgate":
			secureHits++
		case resp.Header.Get("X-Upstream") == "plain":
			plainHits++
		}
	}
	if secureHits != 2 || plainHits != 2 {
		t.Errorf("https target served %d, plain %d; want 2 each", secureHits, plainHits)
	}
}

// TestRenewTLS: an https:// target keeps its connections through a
// reload that leaves its TLS settings and their files as they were; a new
// client certificate makes new connections, which present it.
func TestRenewTLS(t *testing.T) {
	serverCA, clientCA := edgetest.NewCA(t), edgetest.NewCA(t)
	up := mtlsUpstream(t, serverCA, clientCA, false)
	dir := t.TempDir()
	cfg := config(up.URL)
	cfg.TLS = upstreamTLS(t, dir, serverCA, clientCA)
	m := proxy.NewMetrics(prometheus.NewRegistry())
	old := proxy.New(plan(t, cfg), m, nil)
	defer old.Close()
	var h atomic.Pointer[proxy.Proxy]
	h.Store(old)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.Load().ServeHTTP(w, r) }))
	defer front.Close()
	f := &fixture{p: old, front: front}
	get := func() string {
		t.Helper()
		resp, body := f.get(t, "/k")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		return resp.Header.Get("X-Client")
	}
	get()
	testkit.Eventually(t, 10*time.Second, "an idle connection, the first check done", func() bool {
		return old.IdleConns()[0] > 0 && old.CheckRounds() > 0
	})

	same := proxy.Renew([]*proxy.Proxy{old}, plan(t, cfg), m, nil)
	defer same.Close()
	testkit.Eventually(t, 10*time.Second, "the renewed proxy's first check", func() bool { return same.CheckRounds() > 0 })
	opened := same.ConnectionsOpened()
	h.Store(same)
	get()
	if n := same.ConnectionsOpened() - opened; n != 0 {
		t.Errorf("the same TLS settings: %d connections opened after the reload, want 0", n)
	}

	c, k := clientCA.Issue(t, "linkgate-2")
	writeFile(t, dir, "client.pem", c)
	writeFile(t, dir, "client.key", k)
	renewed := proxy.Renew([]*proxy.Proxy{same}, plan(t, cfg), m, nil)
	defer renewed.Close()
	h.Store(renewed)
	if who := get(); who != "linkgate-2" {
		t.Errorf("after the certificate changed the upstream saw %q, want linkgate-2", who)
	}
}
