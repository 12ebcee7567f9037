// Package edgetest holds what the TLS edge's end-to-end tests share: a
// test certificate authority that writes certificate files, and Debian's
// pebble (letsencrypt's ACME test server) run on loopback, with its issued
// certificates' root and its order count. It is imported by tests only.
package edgetest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// HandshakeTimeout is a server.tls.handshake_timeout for the tests whose
// handshakes wait for an order from pebble: the default 30 s stretched by
// the machine's pace, within the field's bound of 5 minutes, taken once
// per binary.
var HandshakeTimeout = sync.OnceValue(func() time.Duration { return min(testkit.Slack(30*time.Second), 5*time.Minute) })

// CA is a certificate authority for tests.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	PEM  []byte
}

// NewCA makes a CA.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "linkgate test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Pool returns a pool trusting the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Client is a client that trusts the CA, names serverName in its
// handshakes (the URL's host when empty), offers HTTP/2 by ALPN when h2
// (HTTP/1.1 alone otherwise), does not follow redirects, and ends an
// exchange after 20 s stretched by the machine's pace.
func (ca *CA) Client(serverName string, h2 bool) *http.Client {
	cfg := &tls.Config{RootCAs: ca.Pool(), ServerName: serverName}
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		cfg.NextProtos = []string{"http/1.1"}
	}
	return &http.Client{Transport: tr, Timeout: testkit.Slack(20 * time.Second),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// GetOverBoth gets url over HTTP/1.1, then over HTTP/2, each on a new
// connection of Client, and fails the test unless each answers status
// over the protocol asked.
func (ca *CA) GetOverBoth(t testing.TB, url string, status int) {
	t.Helper()
	for _, h2 := range []bool{false, true} {
		c := ca.Client("", h2)
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		c.CloseIdleConnections()
		if want := map[bool]int{false: 1, true: 2}[h2]; resp.StatusCode != status || resp.ProtoMajor != want {
			t.Errorf("GET %s = %d over %s, want %d over HTTP/%d", url, resp.StatusCode, resp.Proto, status, want)
		}
	}
}

// Issue returns a certificate for names (DNS names or IP addresses), valid
// for a day, for servers and clients, and its key, PEM-encoded.
func (ca *CA) Issue(t testing.TB, names ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	return ca.IssueFor(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, names...)
}

// IssueFor is Issue for the uses usage alone.
func (ca *CA) IssueFor(t testing.TB, usage []x509.ExtKeyUsage, names ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usage,
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// WritePair issues a certificate for names and writes it and its key into
// dir as cert.pem and key.pem (replacing them by rename, as a renewal tool
// would), returning the paths and the certificate's serial.
func (ca *CA) WritePair(t testing.TB, dir string, names ...string) (certFile, keyFile string, serial *big.Int) {
	t.Helper()
	c, k := ca.Issue(t, names...)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for _, f := range []struct {
		path string
		data []byte
	}{{keyFile, k}, {certFile, c}} {
		if err := os.WriteFile(f.path+".tmp", f.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(f.path+".tmp", f.path); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := pem.Decode(c)
	leaf, _ := x509.ParseCertificate(b.Bytes)
	return certFile, keyFile, leaf.SerialNumber
}

// FreePort returns a loopback port nothing listens on at the time of the
// call.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Pebble is a running pebble.
type Pebble struct {
	// Directory is the ACME directory URL.
	Directory string
	// CARootFile is the PEM of the CA of pebble's own HTTPS (ca_root).
	CARootFile string
	// Roots trusts the certificates pebble issues.
	Roots *x509.CertPool
	// RootPEM is the PEM of the root of the certificates pebble issues.
	RootPEM []byte

	mu     sync.Mutex
	orders int
	issued []string // serials, in issuance order
	log    bytes.Buffer
}

// PebbleOptions change how pebble runs.
type PebbleOptions struct {
	// Validity is the lifetime of the certificates pebble issues; 0:
	// pebble's default (5 years).
	Validity time.Duration
	// Validate makes pebble validate the challenges for real: its DNS is
	// pebble-challtestsrv answering 127.0.0.1 for every name, and it
	// connects to HTTPPort (HTTP-01) and TLSPort (TLS-ALPN-01) on
	// 127.0.0.1, where the gateway under test listens.
	Validate          bool
	HTTPPort, TLSPort int
}

// StartPebble runs Debian's pebble on loopback until the test ends, with
// every challenge taken as valid (PEBBLE_VA_ALWAYS_VALID: no DNS, no
// connection back to the gateway), no artificial sleeps, and its DNS
// pointed at a dead address. The test is skipped when pebble is not
// installed and CI is not set (test.sh installs it); under CI it fails.
func StartPebble(t testing.TB, o PebbleOptions) *Pebble {
	t.Helper()
	bin, err := exec.LookPath("pebble")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("pebble is not installed (apt-get install pebble; test.sh does): %v", err)
		}
		t.Skipf("SKIPPED: pebble is not installed (apt-get install pebble; test.sh installs it): %v", err)
	}
	for attempt := 1; ; attempt++ {
		p, busy := startPebble(t, o, bin)
		if !busy {
			return p
		}
		if attempt == 3 {
			t.Fatalf("pebble could not bind its ports in 3 attempts:\n%s", p.Log())
		}
		// Another process took a port between FreePort and pebble's
		// bind (pebble generates its keys first): new ports.
	}
}

// startPebble is one attempt of StartPebble; busy: pebble exited because
// one of its ports was taken.
func startPebble(t testing.TB, o PebbleOptions, bin string) (p *Pebble, busy bool) {
	t.Helper()
	ca := NewCA(t)
	p = &Pebble{}
	cfgFile, acmePort, mgmtPort := p.writeConfig(t, o, ca)
	dns := fmt.Sprintf("127.0.0.1:%d", FreePort(t)) // a dead address, unless Validate
	env := []string{"PEBBLE_VA_NOSLEEP=1", "PEBBLE_AUTHZREUSE=0", "PEBBLE_WFE_NONCEREJECT=0"}
	if o.Validate {
		startDNS(t, dns)
	} else {
		env = append(env, "PEBBLE_VA_ALWAYS_VALID=1")
	}
	scanned := p.run(t, bin, env, "-config", cfgFile, "-dnsserver", dns)
	p.Directory = fmt.Sprintf("https://127.0.0.1:%d/dir", acmePort)
	return p, p.awaitRoot(t, ca, mgmtPort, scanned)
}

// writeConfig writes pebble's config, its TLS certificate (of ca) and
// ca's root file, and returns the config's path and the ports of
// pebble's ACME and management listeners.
func (p *Pebble) writeConfig(t testing.TB, o PebbleOptions, ca *CA) (cfgFile string, acmePort, mgmtPort int) {
	dir := t.TempDir()
	c, k := ca.Issue(t, "127.0.0.1", "localhost")
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p.CARootFile = write("ca.pem", ca.PEM)
	acmePort, mgmtPort = pebblePort(t), pebblePort(t)
	cfg := map[string]any{"pebble": map[string]any{
		"listenAddress":           fmt.Sprintf("127.0.0.1:%d", acmePort),
		"managementListenAddress": fmt.Sprintf("127.0.0.1:%d", mgmtPort),
		"certificate":             write("cert.pem", c),
		"privateKey":              write("key.pem", k),
		"httpPort":                o.port(o.HTTPPort, t),
		"tlsPort":                 o.port(o.TLSPort, t),
		"ocspResponderURL":        "",
	}}
	if o.Validity > 0 {
		cfg["pebble"].(map[string]any)["certificateValidityPeriod"] = int64(o.Validity / time.Second)
	}
	js, _ := json.Marshal(cfg)
	return write("pebble.json", js), acmePort, mgmtPort
}

// run starts pebble, stopped when the test ends, and reads its log into
// p (the orders it added, the serials it issued); scanned is closed when
// the log ends: pebble exited.
func (p *Pebble) run(t testing.TB, bin string, env []string, args ...string) (scanned chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	testkit.DiesWithTheBinary(cmd)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	scanned = make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.logLine(sc.Text())
		}
	}()
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
		<-scanned // the kill closed its output
		if t.Failed() {
			t.Logf("pebble's log:\n%s", p.Log())
		}
	})
	return scanned
}

func (p *Pebble) logLine(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log.WriteString(line + "\n")
	if strings.Contains(line, "Added order") {
		p.orders++
	}
	if i := strings.Index(line, "Issued certificate serial "); i >= 0 {
		f := strings.Fields(line[i+len("Issued certificate serial "):])
		if len(f) > 0 {
			p.issued = append(p.issued, f[0])
		}
	}
}

// awaitRoot waits until pebble answers on its management port and reads
// its issued certificates' root; busy: pebble exited because a port was
// taken.
func (p *Pebble) awaitRoot(t testing.TB, ca *CA, mgmtPort int, scanned chan struct{}) (busy bool) {
	client := &http.Client{Timeout: testkit.Slack(2 * time.Second), Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	// exited reports whether pebble has exited, and why, as busy when a
	// port was taken (it logs "Listening on" before it binds).
	exited := func() (bool, bool) {
		select {
		case <-scanned:
			return true, strings.Contains(p.Log(), "address already in use")
		default:
			return false, false
		}
	}
	deadline := time.Now().Add(testkit.Slack(30 * time.Second)) // key generation takes seconds on a loaded machine
	for {
		if dead, busy := exited(); dead {
			if busy {
				return true
			}
			t.Fatalf("pebble exited:\n%s", p.Log())
		}
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/roots/0", mgmtPort))
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				p.RootPEM = body
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pebble did not answer within 30s: %v\n%s", err, p.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The answer may have come from another process on a port pebble
	// failed to bind: it exits within a moment of that (the bind comes
	// before any answer it could give).
	time.Sleep(20 * time.Millisecond)
	if dead, busy := exited(); dead {
		if busy {
			return true
		}
		t.Fatalf("pebble exited:\n%s", p.Log())
	}
	p.Roots = x509.NewCertPool()
	if !p.Roots.AppendCertsFromPEM(p.RootPEM) {
		t.Fatalf("pebble's root is not PEM: %q", p.RootPEM)
	}
	return false
}

// pebblePort picks the ports pebble itself binds (a variable for the
// tests of StartPebble's retry).
var pebblePort = FreePort

func (o PebbleOptions) port(p int, t testing.TB) int {
	if p > 0 {
		return p
	}
	return FreePort(t)
}

// startDNS runs pebble-challtestsrv as a DNS server on addr answering
// 127.0.0.1 for every name (no AAAA), its other listeners off and its
// management interface on loopback.
func startDNS(t testing.TB, addr string) {
	t.Helper()
	bin, err := exec.LookPath("pebble-challtestsrv")
	if err != nil {
		t.Fatalf("pebble-challtestsrv (package pebble): %v", err)
	}
	cmd := exec.Command(bin, "-dns01", addr, "-http01", "", "-https01", "", "-tlsalpn01", "",
		"-management", fmt.Sprintf("127.0.0.1:%d", FreePort(t)), "-defaultIPv4", "127.0.0.1", "-defaultIPv6", "")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	testkit.DiesWithTheBinary(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("pebble-challtestsrv's log:\n%s", out.String())
		}
	})
	for range 100 {
		if c, err := net.Dial("udp", addr); err == nil {
			c.Close()
		}
		if strings.Contains(out.String(), "Starting") || strings.Contains(out.String(), "DNS") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer written by a process and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Orders returns how many orders pebble has taken.
func (p *Pebble) Orders() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.orders
}

// Issued returns the serials (hex) of the certificates pebble issued.
func (p *Pebble) Issued() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.issued...)
}

// Log returns what pebble printed.
func (p *Pebble) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}
