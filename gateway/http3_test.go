package gateway_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// h3Client is a quic-go HTTP/3 client trusting roots and naming
// serverName in its handshakes, keeping its TLS sessions in cache.
func h3Client(t *testing.T, roots *x509.CertPool, serverName string, cache tls.ClientSessionCache) *http.Client {
	// The handshake may wait for an on-demand certificate: on a loaded
	// machine longer than quic-go's 5 s of silence.
	wait := testkit.Slack(20 * time.Second)
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: serverName, ClientSessionCache: cache},
		QUICConfig: &quic.Config{HandshakeIdleTimeout: wait}}
	t.Cleanup(func() { tr.Close() })
	return &http.Client{Transport: tr, Timeout: wait,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// withH3 adds HTTP/3 beside TLS over TCP to cfg's server, with a
// certificate of ca for short.test.
func withH3(t *testing.T, ca *edgetest.CA, cfg string) string {
	certFile, keyFile, _ := ca.WritePair(t, t.TempDir(), "short.test")
	return within(cfg, "server", fmt.Sprintf("  http3: true\n  tls: {cert_file: %s, key_file: %s}\n", certFile, keyFile))
}

// TestHTTP3: a short link over HTTP/3 (quic-go's client over loopback) is
// redirected and its visit counted, the limiter's rule counts HTTP/3 and
// HTTP/2 requests of one client address together, the stats API answers
// over HTTP/3, HTTP/2 and HTTP/1.1 answers advertise h3 on the port with
// Alt-Svc, and a resumed connection's 0-RTT is refused.
func TestHTTP3(t *testing.T) {
	t.Parallel()
	ca := edgetest.NewCA(t)
	cfg := analyticsConfig(tinyURL(t).URL, embeddedStore(filepath.Join(t.TempDir(), "analytics")), "10s") +
		"rules:\n  - {name: visits, match: {path: /go}, key: ip, limits: [5/m]}\n"
	gw := start(t, withH3(t, ca, cfg))
	addr := gw.g.Addr().String()
	base := "https://" + addr
	cache := tls.NewLRUClientSessionCache(8)
	c3 := h3Client(t, ca.Pool(), "short.test", cache)

	var codes []int
	for range 4 {
		resp, _ := get(t, c3, base+"/go")
		if resp.ProtoMajor != 3 {
			t.Fatalf("GET /go: %s, want HTTP/3", resp.Proto)
		}
		if loc := resp.Header.Get("Location"); resp.StatusCode == http.StatusFound && loc != "https://go.dev" {
			t.Errorf("GET /go over HTTP/3: Location %q, want https://go.dev", loc)
		}
		codes = append(codes, resp.StatusCode)
	}
	// The fifth request of the minute from 127.0.0.1 over HTTP/2, the
	// sixth over HTTP/3 again: one client address, one count.
	c2 := ca.Client("short.test", true)
	resp, _ := get(t, c2, base+"/go")
	if resp.ProtoMajor != 2 {
		t.Fatalf("GET /go: %s, want HTTP/2", resp.Proto)
	}
	codes = append(codes, resp.StatusCode)
	if got, want := resp.Header.Get("Alt-Svc"), fmt.Sprintf(`h3=":%s"; ma=86400`, addr[strings.LastIndex(addr, ":")+1:]); got != want {
		t.Errorf("Alt-Svc over HTTP/2: %q, want %q", got, want)
	}
	resp, body := get(t, c3, base+"/go")
	codes = append(codes, resp.StatusCode)
	if fmt.Sprint(codes) != "[302 302 302 302 302 429]" {
		t.Errorf("6 visits over HTTP/3 and HTTP/2 with a limit of 5/m: %v, want the sixth 429", codes)
	}
	if resp.StatusCode == http.StatusTooManyRequests && !strings.Contains(resp.Header.Get("Content-Type"), "problem+json") {
		t.Errorf("the 429 over HTTP/3: %s %q, want a problem body", resp.Header.Get("Content-Type"), body)
	}
	if got := resp.Header.Get("Alt-Svc"); got != "" {
		t.Errorf("Alt-Svc over HTTP/3 itself: %q, want none", got)
	}
	c1 := ca.Client("short.test", false)
	if resp, _ := get(t, c1, base+"/x"); resp.ProtoMajor != 1 || resp.Header.Get("Alt-Svc") == "" {
		t.Errorf("HTTP/1.1 over TLS: %s, Alt-Svc %q, want it advertised", resp.Proto, resp.Header.Get("Alt-Svc"))
	}

	// The five visits answered 302 counted, the one limited not.
	resp, body = get(t, c3, base+"/stats/go?last=1h", "Accept", "application/json")
	var st statsAnswer
	if err := json.Unmarshal([]byte(body), &st); resp.StatusCode != 200 || err != nil || st.Total != 5 {
		t.Errorf("/stats/go over HTTP/3: %d %s (%v), want total 5", resp.StatusCode, body, err)
	}

	// A resumed connection may not send requests in 0-RTT: a visit must not
	// be replayed.
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Slack(20*time.Second))
	defer cancel()
	conn, err := quic.DialAddrEarly(ctx, addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "short.test", NextProtos: []string{http3.NextProtoH3}, ClientSessionCache: cache}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	select {
	case <-conn.HandshakeComplete():
	case <-ctx.Done():
		t.Fatal("no handshake within 20s")
	}
	if cs := conn.ConnectionState(); !cs.TLS.DidResume || cs.Used0RTT {
		t.Errorf("a resumed connection: resumed %v, 0-RTT used %v, want resumed without 0-RTT", cs.TLS.DidResume, cs.Used0RTT)
	}
}

// TestHTTP3OnDemand: a name allowed on demand gets its certificate from
// pebble at its first QUIC handshake, and its short link is served over
// HTTP/3; a denied name's handshake fails.
func TestHTTP3OnDemand(t *testing.T) {
	t.Parallel()
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{})
	ask := newAsk(t)
	up := echoProto(t)
	gw := start(t, strings.Replace(acmeConfig(up.URL, p, ask.URL, t.TempDir()), "  tls:\n", "  http3: true\n  tls:\n", 1))
	base := "https://" + gw.g.Addr().String()
	req, _ := http.NewRequest("GET", base+"/go", nil)
	req.Host = "h3.ok.test"
	resp, err := h3Client(t, p.Roots, "h3.ok.test", nil).Do(req)
	if err != nil {
		t.Fatalf("GET https://h3.ok.test/go over HTTP/3: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 3 || resp.StatusCode != http.StatusFound || resp.TLS == nil || resp.TLS.PeerCertificates[0].VerifyHostname("h3.ok.test") != nil {
		t.Errorf("GET https://h3.ok.test/go: %s %d, want HTTP/3 302 with h3.ok.test's certificate", resp.Proto, resp.StatusCode)
	}
	if got := p.Orders(); got != 1 {
		t.Errorf("pebble took %d orders, want 1", got)
	}
	req, _ = http.NewRequest("GET", base+"/go", nil)
	if resp, err := h3Client(t, p.Roots, "junk.example", nil).Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("a QUIC handshake for a denied name succeeded: %s", resp.Status)
	}
}

// TestHTTP3Handshakes: QUIC handshakes are counted in
// linkgate_tls_handshakes_total as TLS ones over TCP are: one ok per
// connection however many requests it carries, and failed for a client
// that offers no protocol the server speaks and for one that refuses the
// server's certificate.
func TestHTTP3Handshakes(t *testing.T) {
	t.Parallel()
	ca := edgetest.NewCA(t)
	gw := start(t, withH3(t, ca, testkit.BaseConfig(tinyURL(t).URL)))
	addr := gw.g.Addr().String()
	count := func(result string) float64 {
		return testkit.Metric(t, gw.g.Registry(), "linkgate_tls_handshakes_total", "result", result)
	}
	c3 := h3Client(t, ca.Pool(), "short.test", nil)
	for range 3 {
		if resp, _ := get(t, c3, "https://"+addr+"/go"); resp.ProtoMajor != 3 || resp.StatusCode != http.StatusFound {
			t.Fatalf("GET /go: %s %d, want an HTTP/3 302", resp.Proto, resp.StatusCode)
		}
	}
	if ok, failed := count("ok"), count("failed"); ok != 1 || failed != 0 {
		t.Errorf("after 3 requests on one HTTP/3 connection: %v ok, %v failed handshakes, want 1 ok", ok, failed)
	}

	dial := func(cfg *tls.Config) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), testkit.Slack(20*time.Second))
		defer cancel()
		if conn, err := quic.DialAddr(ctx, addr, cfg, nil); err == nil {
			conn.CloseWithError(0, "")
			t.Fatalf("a handshake with %v succeeded", cfg.NextProtos)
		}
	}
	dial(&tls.Config{RootCAs: ca.Pool(), ServerName: "short.test", NextProtos: []string{"h2"}})          // no protocol in common
	dial(&tls.Config{RootCAs: x509.NewCertPool(), ServerName: "short.test", NextProtos: []string{"h3"}}) // the certificate refused
	testkit.Eventually(t, 20*time.Second, "2 failed handshakes counted", func() bool { return count("failed") == 2 })
	if ok := count("ok"); ok != 1 {
		t.Errorf("%v ok handshakes, want still 1", ok)
	}
}
