package gateway_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// tenantsConfig is a gateway on TLS (a certificate for the tenants'
// names and 127.0.0.1) with two tenants, a stats token, a share key and an
// embedded store in dir.
func tenantsConfig(t *testing.T, upstream, dir string, ca *edgetest.CA, env string) string {
	// Variables of each test's own: a test run in parallel removes its
	// own when it ends.
	setenv(t, env+"_STATS", "tenant-stats-s3cret")
	setenv(t, env+"_KEY", "tenant-key-0123456789abcdef")
	certFile, keyFile, _ := ca.WritePair(t, t.TempDir(), "go.acme.test", "x.acme.test", "go.other.test", "127.0.0.1")
	cfg := withAdmin(analyticsConfig(upstream, embeddedStore(dir), "1h"))
	cfg = within(cfg, "server", "  tls: {cert_file: "+certFile+", key_file: "+keyFile+"}\n")
	return withStats(cfg, "  token_env: "+env+"_STATS\n  share: {key_env: "+env+"_KEY, max_ttl: 720h}\n") + `tenants:
  - {name: acme, hosts: [go.acme.test, "*.acme.test"]}
  - {name: other, hosts: [go.other.test]}
`
}

// TestTenants: with two tenants over real HTTP/2 and HTTP/1.1 on TLS, the
// same short key on two tenants' hosts is two links, and within a tenant
// one link on all its hosts; hosts in no tenant count as before. A tenant
// token made by POST /admin/tokens reads its tenant's links, all links
// (its own total), top links, breakdowns, live stream and Graphite tree,
// whatever host the request names (Host, :authority, an absolute-form
// target), and gets 403 for every path to the other tenant's (tenant=,
// a share token it made, the Graphite API) or 401 for a token of the wrong
// kind. The stats token reads any tenant with tenant=. A restart reads the
// same counts back.
func TestTenants(t *testing.T) {
	t.Parallel()
	ca := edgetest.NewCA(t)
	up := tinyURL(t)
	dir := t.TempDir()
	gw := start(t, tenantsConfig(t, up.URL, dir, ca, "LG_TEST_TENANT"))
	base := "https://" + gw.g.Addr().String()
	h2 := ca.Client("go.acme.test", true)
	h1 := ca.Client("go.acme.test", false)
	visit := func(c *http.Client, host, path string, n int) {
		t.Helper()
		for range n {
			if resp, _ := get(t, c, base+path, "Host", host); resp.StatusCode != 302 {
				t.Fatalf("GET %s%s: %d", host, path, resp.StatusCode)
			}
		}
	}
	visit(h2, "go.acme.test", "/go", 3)
	visit(h1, "x.acme.test", "/go", 1) // another host of acme: the same link
	visit(h2, "go.acme.test", "/gh", 2)
	visit(h2, "go.other.test", "/go", 5) // the same key on other's host: another link
	visit(h1, "127.0.0.1", "/go", 7)     // a host in no tenant: the default tenant

	operator := []string{"Authorization", "Bearer tenant-stats-s3cret", "Accept", "application/json"}
	total := func(c *http.Client, path string, hdr ...string) int64 {
		t.Helper()
		return getJSON[statsAnswer](t, c, base+path, hdr...).Total
	}
	for _, c := range []struct {
		path string
		want int64
	}{
		{"/stats/go?last=1h", 7},
		{"/stats/go?last=1h&tenant=acme", 4},
		{"/stats/go?last=1h&tenant=other", 5},
		{"/stats/gh?last=1h&tenant=acme", 2},
		{"/stats?last=1h&tenant=acme", 6},
		{"/stats?last=1h&tenant=other", 5},
		{"/stats?last=1h", 18}, // the default tenant's all links: every visit
	} {
		if got := total(h2, c.path, operator...); got != c.want {
			t.Errorf("stats token: GET %s: total %d, want %d", c.path, got, c.want)
		}
	}

	// POST /admin/tokens.
	admin := []string{"Authorization", "Bearer " + testkit.AdminToken, "Content-Type", "application/json"}
	makeToken := func(body string) (int, string, string) {
		t.Helper()
		resp, b := testkit.Do(t, "POST", gw.admin("/admin/tokens"), strings.NewReader(body), admin...)
		var tt struct{ Token, Tenant string }
		json.Unmarshal([]byte(b), &tt)
		return resp.StatusCode, tt.Token, b
	}
	status, acme, b := makeToken(`{"tenant": "acme", "ttl": "24h"}`)
	if status != 200 || !strings.HasPrefix(acme, "lgt1.") {
		t.Fatalf("POST /admin/tokens: %d %s", status, b)
	}
	for _, c := range []struct{ body, param string }{
		{`{"tenant": "Acme"}`, "tenant"},
		{`{"tenant": ""}`, "tenant"},
		{`{"tenant": "acme", "ttl": "60d"}`, "ttl"},
		{`{"tenant": "acme", "ttl": "soon"}`, "ttl"},
		{`{"tenant": "acme", "color": "red"}`, "body"},
	} {
		if status, _, b := makeToken(c.body); status != 400 || !strings.Contains(b, `"name":"`+c.param+`"`) {
			t.Errorf("POST /admin/tokens %s: %d %s, want 400 naming %s", c.body, status, b, c.param)
		}
	}
	if resp, _ := testkit.Do(t, "POST", gw.admin("/admin/tokens"), strings.NewReader(`{"tenant":"acme"}`)); resp.StatusCode != 401 {
		t.Errorf("POST /admin/tokens without the admin token: %d, want 401", resp.StatusCode)
	}

	// acme's token reads acme, whatever host the request names.
	bearer := []string{"Authorization", "Bearer " + acme, "Accept", "application/json"}
	for _, c := range []struct {
		c    *http.Client
		host string
	}{{h2, "go.acme.test"}, {h2, "go.other.test"}, {h1, "go.other.test"}, {h1, "127.0.0.1"}} {
		hdr := append([]string{"Host", c.host}, bearer...)
		if got := total(c.c, "/stats/go?last=1h", hdr...); got != 4 {
			t.Errorf("acme's token, Host %s: /stats/go total %d, want acme's 4", c.host, got)
		}
		if got := total(c.c, "/stats?last=1h", hdr...); got != 6 {
			t.Errorf("acme's token, Host %s: /stats total %d, want acme's 6", c.host, got)
		}
	}
	// An absolute-form target naming other's host.
	if status, b := rawTLS(t, ca, gw, "GET https://go.other.test/stats/go?last=1h&format=json HTTP/1.1\r\nHost: go.other.test\r\nAuthorization: Bearer "+acme+"\r\nConnection: close\r\n\r\n"); status != 200 || !strings.Contains(b, `"total":4`) {
		t.Errorf("absolute-form target on other's host with acme's token: %d %.300s, want acme's total 4", status, b)
	}

	// Top links and breakdowns: acme's own.
	resp, b := get(t, h2, base+"/stats?last=1h&top=10", bearer...)
	var top struct {
		Tenant string `json:"tenant"`
		Top    []struct {
			ShortKey string `json:"short_key"`
			Tenant   string `json:"tenant"`
			Total    int64  `json:"total"`
		} `json:"top"`
	}
	if resp.StatusCode != 200 || json.Unmarshal([]byte(b), &top) != nil {
		t.Fatalf("top with acme's token: %d %s", resp.StatusCode, b)
	}
	if got := fmt.Sprint(top.Top); top.Tenant != "acme" || got != "[{go  4} {gh  2}]" {
		t.Errorf("acme's top links: tenant %q, %s; want acme's go 4 and gh 2 alone", top.Tenant, got)
	}
	resp, b = get(t, h2, base+"/stats?last=1h&top=10", operator...)
	if resp.StatusCode != 200 || !strings.Contains(b, `"short_key":"go","tenant":"other","total":5`) || !strings.Contains(b, `"short_key":"go","total":7`) {
		t.Errorf("the operator's top links: %d %.600s; want every tenant's, other's go named with its tenant", resp.StatusCode, b)
	}
	resp, b = get(t, h2, base+"/stats?last=1h&by=device", bearer...)
	var bd breakdownAnswer
	if resp.StatusCode != 200 || json.Unmarshal([]byte(b), &bd) != nil || bd.Total != 6 || sumValues(bd, "device") != 6 {
		t.Errorf("acme's breakdown: %d %.300s; want acme's 6 visits by device", resp.StatusCode, b)
	}

	// Every path to other's links is refused.
	sh := makeShare(t, h2, base, acme, `{"short_key":"go","ttl":"1h"}`, 200)
	makeShare(t, h2, base, acme, `{"tenant":"other","short_key":"go"}`, 403)
	otherShare := makeShare(t, h2, base, "tenant-stats-s3cret", `{"tenant":"other","all":true}`, 200)
	for _, c := range []struct {
		path   string
		hdr    []string
		status int
	}{
		{"/stats/go?last=1h&tenant=other", bearer, 403},
		{"/stats?last=1h&tenant=other", bearer, 403},
		{"/stats?last=1h&top=5&tenant=other", bearer, 403},
		{"/stats/go?last=1h&format=csv&tenant=other", bearer, 403},
		{"/stats/go?by=country&last=1h&tenant=other", bearer, 403},
		{"/stats/go?format=events&tenant=other", bearer, 403},
		{"/stats/go?last=1h&tenant=Other", bearer, 400},
		{"/stats/%2Fgo?last=1h", bearer, 404},
		{"/stats/other%2Fgo?last=1h", bearer, 404},
		{"/stats/other/go?last=1h", bearer, 404},
		{"/stats/go?last=1h&share=" + acme, nil, 401},            // a tenant token is no share token
		{"/stats/gh?last=1h&share=" + sh, nil, 403},              // acme's share token of go: not gh
		{"/stats/go?last=1h&tenant=other&share=" + sh, nil, 403}, // nor other's go
		{"/stats/go?last=1h&share=" + otherShare, bearer, 200},   // other's all-links token reads other's go, not acme's (checked below)
		{"/stats/graphite/metrics/find?query=linkgate.links.*&tenant=other", bearer, 403},
		{"/stats/graphite/render?target=linkgate.links.go.visits&tenant=other", bearer, 403},
		{"/stats/graphite/render?target=linkgate.links.go.visits&share=" + otherShare, nil, 401},
	} {
		resp, b := get(t, h2, base+c.path, c.hdr...)
		if resp.StatusCode != c.status {
			t.Errorf("GET %s: %d %.300s, want %d", c.path, resp.StatusCode, b, c.status)
		}
		if c.status == 200 && !strings.Contains(b, `"total":5`) {
			t.Errorf("GET %s: %.300s, want other's go (5): the share token, not the bearer, decides", c.path, b)
		}
	}
	if got := total(h2, "/stats/go?last=1h&share="+sh); got != 4 {
		t.Errorf("acme's share token of go made with acme's token: total %d, want 4", got)
	}

	// Graphite: acme's tree, whatever the target names.
	find := func(q string) string {
		t.Helper()
		resp, b := get(t, h2, base+"/stats/graphite/metrics/find?query="+url.QueryEscape(q), bearer...)
		if resp.StatusCode != 200 {
			t.Fatalf("find %s: %d %s", q, resp.StatusCode, b)
		}
		return b
	}
	if b := find("linkgate.links.*"); !strings.Contains(b, `"text":"go"`) || !strings.Contains(b, `"text":"gh"`) || strings.Count(b, `"text"`) != 2 {
		t.Errorf("acme's Graphite links: %s, want go and gh alone", b)
	}
	render := func(target string) float64 {
		t.Helper()
		series := getJSON[[]struct {
			Datapoints [][2]*float64 `json:"datapoints"`
		}](t, h2, base+"/stats/graphite/render?format=json&from=-1h&target="+url.QueryEscape(target), bearer...)
		var sum float64
		for _, s := range series {
			for _, p := range s.Datapoints {
				if p[0] != nil {
					sum += *p[0]
				}
			}
		}
		return sum
	}
	for target, want := range map[string]float64{
		"linkgate.links.go.visits":         4,
		"linkgate.all.visits":              6,
		"linkgate.links.*.visits":          6,
		"linkgate.links.other%2Fgo.visits": 0, // another tenant's key spelled in a node
		"linkgate.links.{go,gh}.visits":    6,
	} {
		if got := render(target); got != want {
			t.Errorf("acme's render %s: %v, want %v", target, got, want)
		}
	}

	// The live stream: acme's go alone.
	s := openLiveWith(t, h2, base+"/stats/go?format=events", "Authorization", "Bearer "+acme)
	if s.resp.StatusCode != 200 {
		t.Fatalf("acme's live stream: %d", s.resp.StatusCode)
	}
	s.next(t, testkit.Slack(10*time.Second), "acme's 4 visits to go", func(e liveEvent) bool { return e.RangeTotal == 4 })
	visit(h2, "go.other.test", "/go", 1)
	visit(h2, "go.acme.test", "/go", 1)
	s.next(t, testkit.Slack(10*time.Second), "acme's 5th visit to go", func(e liveEvent) bool { return e.RangeTotal == 5 })
	s.cancel()

	// A restart reads the same counts back from the store.
	if err := gw.shutdown(); err != nil {
		t.Fatal(err)
	}
	gw2 := startFile(t, gw.path, false)
	base = "https://" + gw2.g.Addr().String()
	for path, want := range map[string]int64{"/stats/go?last=1h": 7, "/stats/go?last=1h&tenant=acme": 5, "/stats/go?last=1h&tenant=other": 6, "/stats?last=1h": 20} {
		if got := total(h2, path, operator...); got != want {
			t.Errorf("after a restart: GET %s: total %d, want %d", path, got, want)
		}
	}
	resp, b = get(t, h2, base+"/stats?last=1h&top=10&tenant=acme", operator...)
	if resp.StatusCode != 200 || json.Unmarshal([]byte(b), &top) != nil || fmt.Sprint(top.Top) != "[{go  5} {gh  2}]" {
		t.Errorf("after a restart: acme's top links %d %.300s, want go 5 and gh 2 alone", resp.StatusCode, b)
	}
}

// sumValues adds up the counts of a breakdown's values of dim.
func sumValues(a breakdownAnswer, dim string) int64 {
	var n int64
	for _, v := range a.Breakdown[dim] {
		if c, ok := v["count"].(float64); ok {
			n += int64(c)
		}
	}
	return n
}

// makeShare posts body to <prefix>/tokens/share with the bearer token tok
// and returns the share token made, checking the status.
func makeShare(t *testing.T, c *http.Client, base, tok, body string, status int) string {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/stats/tokens/share", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var sh struct{ Token string }
	json.Unmarshal(b, &sh)
	if resp.StatusCode != status {
		t.Errorf("POST /stats/tokens/share %s: %d %s, want %d", body, resp.StatusCode, b, status)
	}
	return sh.Token
}

// rawTLS writes req as it stands on a TLS connection to gw (SNI
// go.acme.test) and returns the answer's status and body.
func rawTLS(t *testing.T, ca *edgetest.CA, gw *running, req string) (int, string) {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: testkit.Slack(10 * time.Second)}, "tcp", gw.g.Addr().String(),
		&tls.Config{RootCAs: ca.Pool(), ServerName: "go.acme.test", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(testkit.Slack(10 * time.Second)))
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestOnDemandTenantLearned: a name the ask endpoint allows with a
// Linkgate-Tenant header is its tenant's from its first visit: the visit
// made over the first handshake counts as the tenant's link, not the
// default tenant's; a name allowed without the header stays in the
// default tenant.
func TestOnDemandTenantLearned(t *testing.T) {
	t.Parallel()
	p := edgetest.StartPebble(t, edgetest.PebbleOptions{})
	ask := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch d := r.URL.Query().Get("domain"); {
		case strings.HasSuffix(d, ".shop.test"):
			w.Header().Set("Linkgate-Tenant", "shop")
		case strings.HasSuffix(d, ".plain.test"):
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(ask.Close)
	cfg := acmeConfig(tinyURL(t).URL, p, ask.URL, t.TempDir())
	cfg = strings.Replace(cfg, "analytics:\n  enabled: false\n", "analytics:\n  flush_interval: 1h\n"+embeddedStore(t.TempDir())+"\n", 1)
	gw := start(t, cfg)
	client := &http.Client{Transport: &http.Transport{ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: p.Roots}, DialContext: func(ctx context.Context, n, a string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", gw.g.Addr().String())
	}}, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, u := range []string{"https://links.shop.test/go", "https://links.plain.test/go", "https://links.plain.test/go"} {
		if resp, b := get(t, client, u); resp.StatusCode != http.StatusFound {
			t.Fatalf("GET %s: %d %s", u, resp.StatusCode, b)
		}
	}
	for path, want := range map[string]int64{"/stats/go?last=1h&tenant=shop": 1, "/stats/go?last=1h": 2, "/stats?last=1h&tenant=shop": 1} {
		resp, b := get(t, client, "https://links.plain.test"+path, "Accept", "application/json")
		var a statsAnswer
		if resp.StatusCode != 200 || json.Unmarshal([]byte(b), &a) != nil || a.Total != want {
			t.Errorf("GET %s: %d %s, want total %d", path, resp.StatusCode, b, want)
		}
	}
}
