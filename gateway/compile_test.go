package gateway_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/gateway"
	"github.com/linkgate/linkgate/internal/testkit"
)

// badConfigs are configs check-config must refuse, each with the field
// path and line the error must name. Among them the four that once passed
// check-config and then killed the gateway at start and on reload (a rule
// name with a space, strict with count_status, a bad allow entry, a
// memcached server listed twice), a listener clash and a bad trusted proxy.
func badConfigs(target string) []struct{ name, yaml, want string } {
	base := testkit.BaseConfig(target)
	rule := func(fields string) string {
		return base + "rules:\n  - name: r\n    match: {path: /login}\n    key: ip\n    limits: [5/m]\n" + fields
	}
	nl := strings.Count(base, "\n") // rules: is on line nl+1, the rule's name on nl+2
	return []struct{ name, yaml, want string }{
		{"rule name with a space", base + "rules:\n  - name: login ip\n    match: {path: /login}\n    key: ip\n    limits: [5/m]\n",
			fmt.Sprintf(":%d: rules[0].name:", nl+2)},
		{"strict with count_status", rule("    strict: true\n    count_status: [401]\n"), fmt.Sprintf(":%d: rules[0].strict:", nl+6)},
		{"allow not a cidr", rule("    allow: [not-a-cidr]\n"), fmt.Sprintf(":%d: rules[0].allow[0]:", nl+6)},
		{"allow /33", rule("    allow:\n      - 10.0.0.0/8\n      - 10.0.0.0/33\n"), fmt.Sprintf(":%d: rules[0].allow[1]:", nl+8)},
		{"memcached listed twice", base + "limiter:\n  store: memcached\n  memcached:\n    servers: [127.0.0.1:11211, 127.0.0.1:11211]\n",
			fmt.Sprintf(":%d: limiter.memcached.servers[1]:", nl+4)},
		{"listener clash", strings.Replace(strings.Replace(base, "listen: 127.0.0.1:0\n  trusted", "listen: 127.0.0.1:9099\n  trusted", 1),
			"admin:\n  listen: 127.0.0.1:0", "admin:\n  listen: 127.0.0.1:9099", 1), ":6: admin.listen:"},
		{"listener clash with every interface", strings.Replace(strings.Replace(base, "listen: 127.0.0.1:0\n  trusted", "listen: 0.0.0.0:9099\n  trusted", 1),
			"admin:\n  listen: 127.0.0.1:0", "admin:\n  listen: localhost:9099", 1), ":6: admin.listen:"},
		{"bad trusted proxy", strings.Replace(base, "trusted_proxies: [127.0.0.1/32]", "trusted_proxies: [127.0.0.1/32, 10.0.0.0/33]", 1),
			":3: server.trusted_proxies[1]:"},
		{"ipv4-mapped prefix too short", strings.Replace(base, "trusted_proxies: [127.0.0.1/32]", `trusted_proxies: ["::ffff:0:0/90"]`, 1),
			":3: server.trusted_proxies[0]:"},
		{"listen port out of range", strings.Replace(base, "listen: 127.0.0.1:0\n  trusted", "listen: 127.0.0.1:99999\n  trusted", 1), ":2: server.listen:"},
		{"no upstream targets", strings.Replace(base, "  targets: ["+target+"]\n", "", 1), "upstream.targets:"},
		{"empty file", "", "empty"},
		{"comments only", "# nothing yet\n", "empty"},
		{"stats token variable unset", base + "stats:\n  token_env: LG_TEST_NOT_SET\n", fmt.Sprintf(":%d: stats.token_env:", nl+2)},
		{"user rule without header", base + "identity:\n  user_header: \"\"\nrules:\n  - {name: u, match: {path: /api/*}, key: user, limits: [1/s]}\n",
			fmt.Sprintf(":%d: rules[0].key:", nl+4)},
		{"duplicate rule name", base + "rules:\n  - {name: a, match: {path: /x}, key: ip, limits: [1/s]}\n  - {name: a, match: {path: /y}, key: ip, limits: [1/s]}\n",
			fmt.Sprintf(":%d: rules[1].name:", nl+3)},
		{"bad keyspace", strings.Replace(base, "  enabled: false\n", "  enabled: false\n  store: cassandra\n  cassandra: {keyspace: \"ks; DROP\"}\n", 1),
			"analytics.cassandra.keyspace:"},
		{"cassandra retention over its largest TTL", strings.Replace(base, "  enabled: false\n", "  enabled: false\n  store: cassandra\n  retention: [1m:2d, 1w:21y]\n", 1),
			"analytics.retention[1]: 1w:21y: Cassandra keeps a row at most 20y"},
		{"retention past time.Duration", strings.Replace(base, "  enabled: false\n", "  enabled: false\n  retention: [1m:2d, 1w:300y]\n", 1),
			"analytics.retention"},
		{"no country database", strings.Replace(base, "  enabled: false\n", "  enabled: false\n  geoip: {path: /nonexistent/countries.mmdb}\n", 1),
			fmt.Sprintf(":%d: analytics.geoip.path:", nl+1)},
		{"a country database that is not one", strings.Replace(base, "  enabled: false\n", "  enabled: false\n  geoip:\n    path: compile_test.go\n", 1),
			fmt.Sprintf(":%d: analytics.geoip.path:", nl+2)},
		{"negative max_values", strings.Replace(base, "  enabled: false\n", "  enabled: false\n  dimensions: {max_values: -1}\n", 1),
			fmt.Sprintf(":%d: analytics.dimensions.max_values:", nl+1)},
		{"bad source parameter", strings.Replace(base, "  enabled: false\n", "  enabled: false\n  dimensions:\n    source_params: [utm_source, \"a=b\"]\n", 1),
			"analytics.dimensions.source_params[1]:"},
		{"bad stats prefix", base + "stats:\n  prefix: stats\n", "stats.prefix:"},
		{"unknown field", base + "limiter:\n  stroe: memory\n", "limiter.stroe:"},
		{"route without hosts", base + "routes:\n  - upstream: {targets: [http://127.0.0.1:2]}\n", fmt.Sprintf(":%d: routes[0].hosts: none given", nl+2)},
		{"route host in two routes", base + "routes:\n  - hosts: [a.example]\n    upstream: {targets: [http://127.0.0.1:2]}\n  - hosts: [b.example, A.Example.]\n    upstream: {targets: [http://127.0.0.1:3]}\n",
			fmt.Sprintf(":%d: routes[1].hosts[1]:", nl+4)},
		{"route host not a name", base + "routes:\n  - hosts: [\"a.*.example\"]\n    upstream: {targets: [http://127.0.0.1:2]}\n", fmt.Sprintf(":%d: routes[0].hosts[0]:", nl+2)},
		{"route host with a path", base + "routes:\n  - hosts: [a.example/x]\n    upstream: {targets: [http://127.0.0.1:2]}\n", fmt.Sprintf(":%d: routes[0].hosts[0]:", nl+2)},
		{"route without targets", base + "routes:\n  - hosts: [a.example]\n    upstream: {dial_timeout: 1s}\n", fmt.Sprintf(":%d: routes[0].upstream.targets: none given", nl+3)},
		{"route target not a URL", base + "routes:\n  - hosts: [a.example]\n    upstream:\n      targets: [ftp://127.0.0.1:2]\n", fmt.Sprintf(":%d: routes[0].upstream.targets[0]:", nl+4)},
		{"unknown field in a route", base + "routes:\n  - hosts: [a.example]\n    upstrem: {targets: [http://127.0.0.1:2]}\n",
			fmt.Sprintf(":%d: routes[0].upstrem: unknown field (did you mean upstream?)", nl+3)},
		{"unknown field in a route's pool", base + "routes:\n  - hosts: [a.example]\n    upstream:\n      targets: [http://127.0.0.1:2]\n      dial_timeuot: 1s\n",
			fmt.Sprintf(":%d: routes[0].upstream.dial_timeuot: unknown field (did you mean dial_timeout?)", nl+5)},
		{"route tls without https", base + "routes:\n  - hosts: [a.example]\n    upstream:\n      targets: [http://127.0.0.1:2]\n      tls: {server_name: b.internal}\n",
			fmt.Sprintf(":%d: routes[0].upstream.tls.server_name: set, but no target", nl+5)},
		{"route CA file missing", base + "routes:\n  - hosts: [a.example]\n    upstream:\n      targets: [https://127.0.0.1:2]\n      tls: {ca_file: /nonexistent/ca.pem}\n",
			fmt.Sprintf(":%d: routes[0].upstream.tls.ca_file:", nl+5)},
		{"upstream tls without a default pool", strings.Replace(base, "  targets: ["+target+"]\n", "  tls: {server_name: b.internal}\n", 1) +
			"routes:\n  - hosts: [a.example]\n    upstream: {targets: [http://127.0.0.1:2]}\n", "upstream.tls: set, but upstream lists no targets"},
		{"http3 without tls", strings.Replace(base, "  shutdown_timeout: 10s\n", "  shutdown_timeout: 10s\n  http3: true\n", 1), ":5: server.http3: HTTP/3 is always encrypted"},
		{"stats host wildcard", base + "stats:\n  host: \"*.sho.rt\"\n", fmt.Sprintf(":%d: stats.host:", nl+2)},
		{"stats host with a port", base + "stats:\n  host: sho.rt:443\n", fmt.Sprintf(":%d: stats.host:", nl+2)},
		{"tenant retention longer than the service's", base + "tenants:\n  - {name: acme, hosts: [go.acme.example], retention: 6y}\n", fmt.Sprintf(":%d: tenants[0].retention: 6y is longer", nl+2)},
		{"unknown field in stats", base + "stats:\n  hots: sho.rt\n", fmt.Sprintf(":%d: stats.hots: unknown field (did you mean host?); stats has prefix, token_env, read_timeout, live, share, embed, host", nl+2)},
	}
}

func TestCheckConfigRefuses(t *testing.T) {
	for _, tc := range badConfigs("http://127.0.0.1:1") {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "gw.yaml")
			testkit.WriteFile(t, path, tc.yaml)
			_, err := gateway.Load(path, getenv)
			if err == nil {
				t.Fatalf("accepted:\n%s", tc.yaml)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "config: ") {
				t.Errorf("error %q does not name %q", err, tc.want)
			}
		})
	}
}

// goodConfigs are valid configs that stress the edges of what is accepted;
// every one must build and serve.
func goodConfigs(target, dir string) []struct{ name, yaml string } {
	base := testkit.BaseConfig(target)
	return []struct{ name, yaml string }{
		{"minimal", "upstream:\n  targets: [" + target + "]\nserver: {listen: 127.0.0.1:0}\nadmin: {listen: 127.0.0.1:0}\nanalytics: {embedded: {path: " + dir + "/a}}\n"},
		{"ipv4-mapped trusted prefix", strings.Replace(base, "trusted_proxies: [127.0.0.1/32]", `trusted_proxies: ["::ffff:127.0.0.0/104"]`, 1)},
		{"no trusted proxies", strings.Replace(base, "trusted_proxies: [127.0.0.1/32]", "trusted_proxies: []", 1)},
		{"no admin listener", strings.Replace(base, "admin:\n  listen: 127.0.0.1:0\n", "admin:\n  listen: \"\"\n", 1)},
		{"odd rule names and allow lists", base + `rules:
  - name: a.b:c-d_e
    match: {methods: [POST], path: /login}
    key: ip
    limits: [1/s, 100/15m, 1000/7d]
    allow: ["::ffff:10.0.0.0/104", 2001:db8::/32, 192.0.2.1, "::1"]
  - name: e
    match: {path: "/{short_key:[a-z]+}"}
    key: email
    limits: [5/m]
    count_status: [401]
    allow: [" Admin@Example.com "]
  - name: s
    match: {path: /api/*}
    key: user
    limits: [3/s]
    strict: true
    shadow: true
`},
		{"exact precision, memcached on a socket", base + "limiter:\n  store: memcached\n  precision: exact\n  on_store_error: deny\n  memcached: {servers: [" + dir + "/mc.sock, 127.0.0.1:1]}\n"},
		{"cassandra nobody listens on", strings.Replace(base, "  enabled: false\n", "  enabled: true\n  store: cassandra\n  cassandra: {hosts: [127.0.0.1:1]}\n  embedded: {path: "+dir+"/b}\n", 1)},
		{"embedded analytics, custom tiers and prefix", strings.Replace(base, "  enabled: false\n", "  enabled: true\n  embedded: {path: "+dir+"/c}\n  retention: [5m:1d, 1h:30d]\n  match: {path: \"/r/{short_key}\"}\n", 1) + "stats: {prefix: /s}\n"},
		{"a tenant's retention on Cassandra", strings.Replace(base, "  enabled: false\n", "  enabled: true\n  store: cassandra\n  cassandra: {hosts: [127.0.0.1:1]}\n  embedded: {path: "+dir+"/u}\n", 1) + "tenants:\n  - {name: acme, hosts: [go.acme.example], retention: 30d}\n"},
		{"a tenant's retention, one hour", strings.Replace(base, "  enabled: false\n", "  enabled: true\n  embedded: {path: "+dir+"/t}\n", 1) + "tenants:\n  - {name: acme, hosts: [go.acme.example], retention: 1h}\n"},
		{"every timeout zero", strings.Replace(base, "  shutdown_timeout: 10s\n", "  shutdown_timeout: 0s\n  read_timeout: 0s\n  write_timeout: 0s\n  idle_timeout: 0s\n", 1)},
		{"routes beside the default pool, a stats host", base + `routes:
  - hosts: [sho.rt, "*.sho.rt", 10.0.0.5, "[::1]", bücher.example]
    upstream: {targets: [` + target + `, https://127.0.0.1:2], dial_timeout: 10ms, health_check: {path: /up, interval: 1h}}
  - hosts: ["*.links.example"]
    upstream: {targets: [` + target + `]}
stats: {host: stats.sho.rt}
`},
		{"routes without a default pool", strings.Replace(base, "  targets: ["+target+"]\n", "", 1) + `routes:
  - hosts: [sho.rt, 127.0.0.1]
    upstream: {targets: [` + target + `, https://127.0.0.1:2], tls: {server_name: web.internal}, max_idle_conns_per_host: 1}
`},
	}
}

// TestAcceptedConfigsServe: what check-config accepts, the gateway runs.
func TestAcceptedConfigsServe(t *testing.T) {
	up := testkit.Named(t, "upstream")
	for _, tc := range goodConfigs(up.URL, t.TempDir()) {
		t.Run(tc.name, func(t *testing.T) {
			gw := start(t, tc.yaml)
			resp, b := testkit.Do(t, "GET", gw.url("/x"), nil)
			if resp.StatusCode != 200 || b != "upstream" {
				t.Errorf("GET /x = %d %q, want the upstream's answer", resp.StatusCode, b)
			}
		})
	}
}

// FuzzCompileBuild: any bytes, parsed and compiled, either are refused
// with an error or build a gateway: never a panic, and never a config that
// compiles but does not build. The analytics store is pointed at a fresh
// directory (or at a Cassandra address refused at once) so that the
// build does not touch the machine.
func FuzzCompileBuild(f *testing.F) {
	dir := f.TempDir()
	for _, p := range []string{"../configs/gateway.example.yaml", "../configs/gateway.quickstart.yaml", "../configs/gateway.compose.yaml"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, c := range badConfigs("http://127.0.0.1:1") {
		f.Add([]byte(c.yaml))
	}
	for _, c := range goodConfigs("http://127.0.0.1:1", dir) {
		f.Add([]byte(c.yaml))
	}
	n := 0
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := config.Parse(data)
		if err != nil {
			return
		}
		n++
		cfg.Analytics.Embedded.Path = filepath.Join(dir, fmt.Sprint(n))
		if len(cfg.Analytics.Cassandra.Hosts) > 0 {
			cfg.Analytics.Cassandra.Hosts = []string{"127.0.0.1:1"}
		}
		plan, err := gateway.Compile(cfg, getenv)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		g, err := gateway.New(plan, gateway.Options{})
		if err != nil {
			t.Fatalf("compiled but did not build: %v\n%s", err, data)
		}
		if err := g.Close(context.Background()); err != nil {
			t.Logf("close: %v", err)
		}
	})
}
