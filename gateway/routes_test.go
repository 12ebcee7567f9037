package gateway_test

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// hostGet sends GET path to gw's client listener naming host in the Host
// header.
func hostGet(t *testing.T, gw *running, host, path string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, gw.url(path), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	return testkit.Send(t, req)
}

// hostEcho is an upstream that answers its name and the Host it received.
func hostEcho(t *testing.T, name string) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s host=%s", name, r.Host)
	}))
	t.Cleanup(s.Close)
	return s
}

// routesConfig is BaseConfig with the default pool at def ("": none) and
// routes appended.
func routesConfig(def, routes string) string {
	cfg := testkit.BaseConfig(def)
	if def == "" {
		cfg = strings.Replace(cfg, "  targets: []\n", "", 1)
	}
	return cfg + "routes:\n" + routes
}

// route writes a routes entry for hosts to targets, with the timeouts of
// BaseConfig's default pool.
func route(hosts string, targets ...string) string {
	return fmt.Sprintf("  - hosts: [%s]\n    upstream: {targets: [%s], dial_timeout: %v, response_header_timeout: 10s, health_check: {interval: 100ms}}\n",
		hosts, strings.Join(targets, ", "), testkit.DialTimeout())
}

// TestRoutesByHost: a request goes to the pool of the route naming its
// host, exactly or by a one-label wildcard (the exact name first), port
// and case aside; a host no route names goes to the default pool; the
// upstream gets the Host as the client sent it.
func TestRoutesByHost(t *testing.T) {
	def, own, links, vip := hostEcho(t, "default"), hostEcho(t, "own"), hostEcho(t, "links"), hostEcho(t, "vip")
	gw := start(t, routesConfig(def.URL,
		route(`sho.rt, www.sho.rt`, own.URL)+
			route(`"*.links.example"`, links.URL)+
			route(`vip.links.example`, vip.URL)))
	for _, tc := range []struct{ host, want string }{
		{"sho.rt", "own host=sho.rt"},
		{"WWW.sho.rt:8080", "own host=WWW.sho.rt:8080"},
		{"sho.rt.", "own host=sho.rt."},
		{"a.links.example", "links host=a.links.example"},
		{"vip.links.example", "vip host=vip.links.example"},
		{"links.example", "default host=links.example"},
		{"a.b.links.example", "default host=a.b.links.example"},
		{"other.example", "default host=other.example"},
		{"127.0.0.1", "default host=127.0.0.1"},
	} {
		resp, body := hostGet(t, gw, tc.host, "/go")
		if resp.StatusCode != http.StatusOK || body != tc.want {
			t.Errorf("Host %s: %d %q, want %q", tc.host, resp.StatusCode, body, tc.want)
		}
	}
}

// TestRoutesWithoutDefaultPool: with routes and no upstream.targets, a
// host no route names is answered 421 Misdirected Request with a problem
// body, on plain HTTP and over TLS (HTTP/2 and HTTP/1.1: a connection
// made for a name the certificate covers, reused for another), and is
// neither proxied nor counted by the limiter; the stats API is still the
// gateway's.
func TestRoutesWithoutDefaultPool(t *testing.T) {
	t.Parallel()
	own := hostEcho(t, "own")
	ca := edgetest.NewCA(t)
	cert, key, _ := ca.WritePair(t, t.TempDir(), "sho.rt", "other.example")
	cfg := routesConfig("", route("sho.rt", own.URL)) + `rules:
  - {name: every_ip, match: {path: "/*"}, key: ip, limits: [1000/m]}
`
	plain := start(t, cfg)
	resp, body := hostGet(t, plain, "sho.rt", "/go")
	if resp.StatusCode != 200 || body != "own host=sho.rt" {
		t.Fatalf("a routed host: %d %q", resp.StatusCode, body)
	}
	resp, body = hostGet(t, plain, "other.example", "/go")
	p := testkit.Problem(t, resp, body, http.StatusMisdirectedRequest)
	if d, _ := p["detail"].(string); !strings.Contains(d, "routes") || strings.Contains(body, "other.example") {
		t.Errorf("421 problem %v: want a detail naming routes, without the host echoed", p)
	}
	if got := metric(t, plain, `linkgate_limit_decisions_total{outcome="allowed",rule="every_ip"}`); got != 1 {
		t.Errorf("limiter decisions %v, want 1: the misdirected request was checked by the limiter", got)
	}

	tlsCfg := tlsConfig("", fmt.Sprintf("  tls: {cert_file: %s, key_file: %s}\n", cert, key))
	tlsCfg = strings.Replace(tlsCfg, "  targets: []\n", "", 1) + "routes:\n" + route("sho.rt", own.URL)
	gw := start(t, tlsCfg)
	for _, h2 := range []bool{true, false} {
		c := ca.Client("sho.rt", h2)
		base := "https://" + gw.g.Addr().String()
		resp, body := get(t, c, base+"/go", "Host", "sho.rt")
		if resp.StatusCode != 200 || body != "own host=sho.rt" {
			t.Errorf("h2=%v: the routed host over TLS: %d %q", h2, resp.StatusCode, body)
		}
		resp, body = get(t, c, base+"/go", "Host", "other.example") // the same connection, another name
		testkit.Problem(t, resp, body, http.StatusMisdirectedRequest)
		if wantMajor := map[bool]int{true: 2, false: 1}[h2]; resp.ProtoMajor != wantMajor {
			t.Errorf("h2=%v: answered over %s", h2, resp.Proto)
		}
	}
}

// TestRoutesPoolHealth: each pool has its own health checks: when the
// targets of one pool fail theirs its hosts get what those targets answer
// (tried all the same: panic routing) while the other pools serve, /readyz stays ready, and /admin/health shows each pool.
func TestRoutesPoolHealth(t *testing.T) {
	def := hostEcho(t, "default")
	var down atomic.Bool
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "flaky")
	}))
	t.Cleanup(flaky.Close)
	gw := start(t, routesConfig(def.URL, route("flaky.example", flaky.URL)))
	if _, body := hostGet(t, gw, "flaky.example", "/x"); body != "flaky" {
		t.Fatalf("flaky.example answered %q", body)
	}
	down.Store(true)
	testkit.Eventually(t, 5*time.Second, "flaky.example's pool out of service", func() bool {
		_, body := testkit.Do(t, "GET", gw.admin("/admin/health"), nil, "Authorization", "Bearer "+testkit.AdminToken)
		return strings.Contains(body, `"pool":"routes[0]","hosts":["flaky.example"],"ready":false`)
	})
	// Its target out, the pool still tries it (panic routing): the
	// upstream's own 503 comes through.
	if resp, _ := hostGet(t, gw, "flaky.example", "/x"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("flaky.example with its pool out: %d, want the upstream's 503", resp.StatusCode)
	}
	if _, body := hostGet(t, gw, "other.example", "/x"); body != "default host=other.example" {
		t.Errorf("the default pool answered %q while another pool was down", body)
	}
	if resp, body := testkit.Do(t, "GET", gw.admin("/readyz"), nil); resp.StatusCode != 200 {
		t.Errorf("/readyz with one pool of two down: %d %s, want 200", resp.StatusCode, body)
	}
	_, body := testkit.Do(t, "GET", gw.admin("/admin/health"), nil, "Authorization", "Bearer "+testkit.AdminToken)
	var h struct {
		Ready bool `json:"ready"`
		Pools []struct {
			Pool  string   `json:"pool"`
			Hosts []string `json:"hosts"`
			Ready bool     `json:"ready"`
		} `json:"pools"`
	}
	if err := json.Unmarshal([]byte(body), &h); err != nil {
		t.Fatal(err)
	}
	if !h.Ready || len(h.Pools) != 2 || h.Pools[0].Pool != "upstream" || !h.Pools[0].Ready ||
		h.Pools[1].Pool != "routes[0]" || h.Pools[1].Ready || len(h.Pools[1].Hosts) != 1 || h.Pools[1].Hosts[0] != "flaky.example" {
		t.Errorf("/admin/health: %s", body)
	}
}

// TestRoutesReload: a reload that adds a route sends its hosts to the new
// pool at once, and one that removes it sends them back to the default
// pool; a target that moves from the default pool to a route keeps its
// kept-alive connections, and a pool whose section did not change keeps
// its proxy (its targets' health).
func TestRoutesReload(t *testing.T) {
	var checks, inflight atomic.Int64
	// While warming, a request waits for a second one to come in (or a
	// while), so that moving keeps at least two idle connections however
	// the machine schedules the requests sent at once below.
	var warming atomic.Bool
	two, twoOnce := make(chan struct{}), sync.Once{}
	moving, dials := testkit.Dialed(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			checks.Add(1)
		} else if warming.Load() {
			if inflight.Add(1) >= 2 {
				twoOnce.Do(func() { close(two) })
			}
			select {
			case <-two:
			case <-time.After(testkit.Slack(2 * time.Second)):
			}
		}
		fmt.Fprintf(w, "moving host=%s", r.Host)
	})
	def, own := hostEcho(t, "default"), hostEcho(t, "own")
	// Health checks once, at each pool's start, so that none takes the
	// kept connection while a request wants it.
	hourly := func(cfg string) string { return strings.ReplaceAll(cfg, "interval: 100ms", "interval: 1h") }
	gw := start(t, hourly(routesConfig(def.URL+", "+moving.URL, route("sho.rt", own.URL))))
	testkit.Eventually(t, 5*time.Second, "the first health check of moving", func() bool { return checks.Load() > 0 })
	// Requests at once, so that moving keeps several idle connections: the
	// new pool's first health check takes one while the requests below
	// take another.
	var wg sync.WaitGroup
	warming.Store(true)
	for range 8 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, gw.url("/x"), nil)
			req.Host = "new.example"
			resp, err := testkit.Client.Do(req)
			if err != nil {
				t.Errorf("new.example: %v", err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	wg.Wait()
	warming.Store(false)
	reload := func(cfg string) {
		t.Helper()
		testkit.WriteFile(t, gw.path, hourly(cfg))
		if resp, msg := reloadEndpoint(t, gw); resp.StatusCode != 200 {
			t.Fatalf("reload: %d %s", resp.StatusCode, msg)
		}
	}
	dialed, checked := dials.Load(), checks.Load()
	// moving leaves the default pool for new.example's route; sho.rt's route
	// stays as it was.
	reload(routesConfig(def.URL, route("sho.rt", own.URL)+route("new.example", moving.URL)))
	testkit.Eventually(t, 5*time.Second, "the new pool's first health check", func() bool { return checks.Load() > checked })
	for range 3 {
		if _, body := hostGet(t, gw, "new.example", "/x"); body != "moving host=new.example" {
			t.Fatalf("new.example after the reload that routes it: %q", body)
		}
	}
	if got := dials.Load() - dialed; got != 0 {
		t.Errorf("the target that moved to the new route was dialed %d times, want 0: its kept connections serve it", got)
	}
	if _, body := hostGet(t, gw, "sho.rt", "/x"); body != "own host=sho.rt" {
		t.Errorf("sho.rt after the reload: %q", body)
	}
	reload(routesConfig(def.URL, route("sho.rt", own.URL)))
	if _, body := hostGet(t, gw, "new.example", "/x"); body != "default host=new.example" {
		t.Errorf("new.example after the reload that removes its route: %q", body)
	}
}

// TestStatsHost: with stats.host, the stats API is the gateway's on that
// host only; on the others its prefix is proxied like any path. Visits
// count on every host and pool alike: a short key is a short key.
func TestStatsHost(t *testing.T) {
	own, brand := tinyURL(t), tinyURL(t)
	cfg := withStats(analyticsConfig(own.URL, embeddedStore(t.TempDir()), "10s"), "  host: Stats.Sho.RT\n") + `routes:
  - hosts: ["*.brand.example"]
    upstream: {targets: [` + brand.URL + `]}
`
	gw := start(t, cfg)
	for _, host := range []string{"sho.rt", "go.brand.example", "x.brand.example:8080"} {
		if resp, body := hostGet(t, gw, host, "/go"); resp.StatusCode != http.StatusFound {
			t.Fatalf("GET %s/go: %d %s", host, resp.StatusCode, body)
		}
	}
	for _, host := range []string{"stats.sho.rt", "STATS.sho.rt:443"} {
		resp, body := hostGet(t, gw, host, "/stats/go?last=1h")
		var a statsAnswer
		if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &a) != nil || a.Total != 3 {
			t.Errorf("GET %s/stats/go: %d %s; want the gateway's stats, 3 visits from both pools", host, resp.StatusCode, body)
		}
	}
	for _, host := range []string{"sho.rt", "go.brand.example"} {
		resp, body := hostGet(t, gw, host, "/stats/go")
		if resp.StatusCode != http.StatusNotFound || strings.Contains(body, "short_key") {
			t.Errorf("GET %s/stats/go: %d %s; want it proxied (the upstream's 404)", host, resp.StatusCode, body)
		}
	}
}

// TestRuleHostsThroughGateway: a rule whose match lists a route's hosts
// limits the requests for them, read from the file, and leaves the other
// hosts' alone.
func TestRuleHostsThroughGateway(t *testing.T) {
	def, own := hostEcho(t, "default"), hostEcho(t, "own")
	gw := start(t, routesConfig(def.URL, route("sho.rt, www.sho.rt", own.URL))+`rules:
  - name: own_login
    match: {methods: [GET], path: /login, hosts: [sho.rt, www.sho.rt]}
    key: ip
    limits: [1/m]
`)
	for i, tc := range []struct {
		host string
		want int
	}{{"sho.rt", 200}, {"www.sho.rt", 429}, {"other.example", 200}, {"other.example", 200}} {
		if resp, body := hostGet(t, gw, tc.host, "/login"); resp.StatusCode != tc.want {
			t.Errorf("request %d for %s: %d %s, want %d", i, tc.host, resp.StatusCode, body, tc.want)
		}
	}
}

// TestRouteUpstreamTLS: a route's pool reaches an HTTPS upstream that
// requires a client certificate, with the route's CA bundle, server name
// and client certificate read from the file's paths; a reload after the
// client certificate was replaced by one the upstream does not trust
// takes it up (the pool's requests then fail with 502), and one after the
// right certificate is back serves again.
func TestRouteUpstreamTLS(t *testing.T) {
	serverCA, clientCA, stranger := edgetest.NewCA(t), edgetest.NewCA(t), edgetest.NewCA(t)
	certPEM, keyPEM := serverCA.Issue(t, "web.internal")
	serverCert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "secure %s client=%s", r.Proto, r.TLS.PeerCertificates[0].Subject.CommonName)
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCA.Pool()}
	up.EnableHTTP2 = true
	up.Config.ErrorLog = log.New(io.Discard, "", 0)
	up.StartTLS()
	t.Cleanup(up.Close)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, serverCA.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	client := filepath.Join(dir, "client")
	os.Mkdir(client, 0o700)
	certFile, keyFile, _ := clientCA.WritePair(t, client, "gateway.internal")
	cfg := routesConfig(hostEcho(t, "default").URL, fmt.Sprintf(`  - hosts: [secure.example]
    upstream:
      targets: [%s]
      dial_timeout: %s
      health_check: {interval: 100ms}
      tls: {ca_file: %s, server_name: web.internal, cert_file: %s, key_file: %s}
`, up.URL, testkit.DialTimeout(), caFile, certFile, keyFile))
	gw := start(t, cfg)
	if resp, body := hostGet(t, gw, "secure.example", "/x"); resp.StatusCode != 200 || body != "secure HTTP/2.0 client=gateway.internal" {
		t.Fatalf("secure.example: %d %q", resp.StatusCode, body)
	}
	reload := func() {
		t.Helper()
		if resp, msg := reloadEndpoint(t, gw); resp.StatusCode != 200 {
			t.Fatalf("reload: %d %s", resp.StatusCode, msg)
		}
	}
	stranger.WritePair(t, client, "gateway.internal")
	reload()
	resp, body := hostGet(t, gw, "secure.example", "/x")
	testkit.Problem(t, resp, body, http.StatusBadGateway)
	clientCA.WritePair(t, client, "gateway.internal")
	reload()
	testkit.Eventually(t, 5*time.Second, "secure.example served with the trusted certificate back", func() bool {
		resp, _ := hostGet(t, gw, "secure.example", "/x")
		return resp.StatusCode == 200
	})
	if _, body := hostGet(t, gw, "other.example", "/x"); body != "default host=other.example" {
		t.Errorf("the default pool: %q", body)
	}
}
