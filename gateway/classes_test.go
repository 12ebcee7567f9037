package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/browser"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/visitor/visitortest"
)

// TestClassesOverTLS sends visits over TLS as the clients that make them
// do: a person in headless Chromium, a link unfurler, a browser's
// prefetch, scanners (a browser's User-Agent and headers from curl's and
// Go's TLS stacks, and a real browser's headers from an e-mail security
// vendor's network: 127.0.0.2 in a test ASN database, the connection's
// peer), and a declared crawler. The gateway classes each one (the
// classes' metric names each class and the signal that decided it), and
// /stats counts the person alone in range_total, every other visit in
// bot_range_total.
func TestClassesOverTLS(t *testing.T) {
	t.Parallel()
	bin := browser.Find()
	if bin == "" {
		t.Skip("SKIPPED: no chromium on PATH: the person's visit was NOT made in a browser (apt-get install -y chromium; test.sh installs it)")
	}
	ca := edgetest.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile, _ := ca.WritePair(t, dir, "short.test", "127.0.0.1")
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	// The links land on the upstream itself, so that the browser's
	// navigation ends on a page that loads.
	var landing string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
		case "/go":
			http.Redirect(w, r, landing, http.StatusFound)
		case "/landing":
			fmt.Fprint(w, "<!doctype html><title>landed</title><p>landed")
		default:
			http.NotFound(w, r)
		}
	}))
	defer up.Close()
	landing = up.URL + "/landing"
	asn := visitortest.ASNDB(t, map[string]visitortest.AS{"127.0.0.2/32": {Number: 64496, Org: "PROOFPOINT-TEST"}})
	cfg := analyticsConfig(up.URL, embeddedStore(filepath.Join(dir, "analytics")), "200ms") +
		"  asn: {path: " + asn + "}\n"
	cfg = strings.Replace(cfg, "server:\n  listen: 127.0.0.1:0\n",
		fmt.Sprintf("server:\n  listen: 127.0.0.1:0\n  tls: {cert_file: %s, key_file: %s}\n", certFile, keyFile), 1)
	gw := start(t, cfg)
	port := gw.g.Addr().(*net.TCPAddr).Port
	base := fmt.Sprintf("https://short.test:%d", port)

	const chrome = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
	nav := testkit.Navigation(chrome)
	// client is Go's TLS client dialing short.test at the gateway from
	// the local address from.
	client := func(from string, h2 bool) *http.Client {
		c := ca.Client("short.test", h2)
		tr := c.Transport.(*http.Transport)
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, fmt.Sprintf("127.0.0.1:%d", port))
		}
		return c
	}
	visit := func(c *http.Client, hdr ...string) {
		t.Helper()
		if resp, body := get(t, c, base+"/go", hdr...); resp.StatusCode != http.StatusFound {
			t.Fatalf("GET /go: %d %s", resp.StatusCode, body)
		}
	}

	// A person: headless Chromium, navigating to the link.
	b, err := browser.Start(bin, "--ignore-certificate-errors", "--host-resolver-rules=MAP short.test 127.0.0.1")
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	defer b.Close()
	page := b.NewPage(t, browser.Options{Width: 1280, Height: 800})
	page.Navigate(base + "/go")
	page.WaitFor(30*time.Second, "the landing page", `document.title === "landed"`)

	// The machines connect from 127.0.0.2 (the scanner network) and
	// 127.0.0.3: 127.0.0.1 is a trusted proxy (server.trusted_proxies),
	// whose TLS stack says nothing of its clients.
	visit(client("127.0.0.3", true), "User-Agent", "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)")
	visit(client("127.0.0.3", true), append(nav, "Sec-Purpose", "prefetch;prerender")...)
	visit(client("127.0.0.2", true), nav...)  // a scanner's network
	visit(client("127.0.0.3", true), nav...)  // Go's TLS stack, HTTP/2
	visit(client("127.0.0.3", false), nav...) // Go's TLS stack, HTTP/1.1
	visit(client("127.0.0.3", true), "User-Agent", "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)")
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatalf("curl: %v", err)
	}
	args := []string{"-sS", "--interface", "127.0.0.3", "--cacert", caFile, "--resolve", fmt.Sprintf("short.test:%d:127.0.0.1", port), "-o", "/dev/null", "-w", "%{http_code}"}
	for i := 0; i+1 < len(nav); i += 2 {
		args = append(args, "-H", nav[i]+": "+nav[i+1])
	}
	if out, err := exec.Command(curl, append(args, base+"/go")...).CombinedOutput(); err != nil || string(out) != "302" {
		t.Fatalf("curl: %q (%v)", out, err)
	}

	classified := func(class, reason string) float64 {
		return metric(t, gw, fmt.Sprintf(`linkgate_analytics_visits_classified_total{class=%q,reason=%q}`, class, reason))
	}
	for _, w := range []struct {
		class, reason string
		n             float64
	}{
		{"human", "none", 1}, {"preview", "preview-ua", 1}, {"prefetch", "prefetch-header", 1},
		{"scanner", "scanner-network", 1}, {"scanner", "tls-stack", 3}, {"bot", "bot-ua", 1},
	} {
		if got := classified(w.class, w.reason); got != w.n {
			t.Errorf("%s visits by %s: %v, want %v", w.class, w.reason, got, w.n)
		}
	}

	stats := client("127.0.0.1", true)
	var a statsAnswer
	testkit.Eventually(t, 30*time.Second, "the visits flushed and on /stats", func() bool {
		resp, body := get(t, stats, base+"/stats/go?last=1h", "Accept", "application/json")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/stats/go: %d %s", resp.StatusCode, body)
		}
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			t.Fatalf("/stats/go: %v in %s", err, body)
		}
		return a.RangeTotal+a.BotRangeTotal >= 8
	})
	if a.RangeTotal != 1 || a.BotRangeTotal != 7 {
		t.Errorf("/stats/go: range_total %d, bot_range_total %d; want the person alone (1) and the 7 others apart", a.RangeTotal, a.BotRangeTotal)
	}
}
