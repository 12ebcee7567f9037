package config_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/rollup"
)

func TestLoadExample(t *testing.T) {
	for _, path := range []string{"../../shared/gateway.example.yaml", "../configs/gateway.example.yaml"} {
		if _, err := os.Stat(path); err != nil {
			t.Logf("skipping %s: %v", path, err)
			continue
		}
		c, err := config.Load(path)
		if err != nil {
			t.Fatalf("Load(%s): %v", path, err)
		}
		if got, want := len(c.Rules), 4; got != want {
			t.Fatalf("%s: %d rules, want %d", path, got, want)
		}
		login := c.Rules[1]
		want := []limit.Limit{{N: 2, Window: time.Second}, {N: 5, Window: time.Minute}, {N: 10, Window: time.Hour}, {N: 100, Window: 24 * time.Hour}}
		if len(login.Limits) != len(want) {
			t.Fatalf("login_ip limits = %v, want %v", login.Limits, want)
		}
		for i := range want {
			if login.Limits[i] != want[i] {
				t.Errorf("login_ip limits[%d] = %v, want %v", i, login.Limits[i], want[i])
			}
		}
		if !c.Rules[3].Shadow || c.Rules[0].CountStatus[1] != 403 {
			t.Errorf("shadow/count_status not read: %+v", c.Rules)
		}
		if got := c.Analytics.Retention[4]; got != (rollup.Tier{Step: rollup.Week, Retention: 5 * rollup.Year}) {
			t.Errorf("retention[4] = %v", got)
		}
		if c.Upstream.HealthCheck.Interval != 5*time.Second || c.Limiter.Memcached.Timeout != 100*time.Millisecond {
			t.Errorf("durations not read: %+v %+v", c.Upstream.HealthCheck, c.Limiter.Memcached)
		}
	}
}

func TestDefaults(t *testing.T) {
	c, err := config.Parse([]byte("upstream: {targets: [http://127.0.0.1:9999]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.Listen != "127.0.0.1:8080" || c.Analytics.FlushInterval != 10*time.Second || c.Stats.Prefix != "/stats" ||
		c.Upstream.HealthCheck.Path != "/healthz" || c.Identity.IPv6Prefix != 64 || c.Limiter.Store != "memory" {
		t.Errorf("defaults not applied: %+v", c)
	}
	if got := c.Upstream.Targets; len(got) != 1 || got[0] != "http://127.0.0.1:9999" {
		t.Errorf("targets = %v", got)
	}
}

// TestEmptyFile: a file truncated to nothing, or holding only comments,
// must never load as a config of defaults.
func TestEmptyFile(t *testing.T) {
	for _, data := range []string{"", "\n\n", "# just a comment\n", "---\n", "~\n", "null\n"} {
		if c, err := config.Parse([]byte(data)); !errors.Is(err, config.ErrEmpty) {
			t.Errorf("Parse(%q) = %v, %v; want ErrEmpty", data, c, err)
		}
	}
}

// TestLocate: compile errors name a field path; Locate adds the file and
// the line of the deepest part of it in the file.
func TestLocate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	data := "upstream:\n  targets: [http://127.0.0.1:1]\nrules:\n  - name: a\n    match: {path: /x}\n    key: ip\n    limits: [1/s]\n    allow:\n      - 10.0.0.0/8\n      - 10.0.0.0/33\n"
	os.WriteFile(path, []byte(data), 0o644)
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	base := errors.New("base")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("rules[0].allow[1]: %q is bad: %w", "10.0.0.0/33", base), "config: " + path + `:10: rules[0].allow[1]: "10.0.0.0/33" is bad: base`},
		{errors.New("rules[0].strict: no"), "config: " + path + ":4: rules[0].strict: no"}, // not in the file: the rule's line
		{errors.New("limiter.precision: fuzzy"), "config: " + path + ": limiter.precision: fuzzy"},
		{errors.New("no path here"), "no path here"},
	} {
		got := c.Locate(tc.err)
		if got.Error() != tc.want {
			t.Errorf("Locate(%q) = %q, want %q", tc.err, got, tc.want)
		}
		if !errors.Is(got, tc.err) && !errors.Is(got, base) {
			t.Errorf("Locate(%q) does not unwrap to the original", tc.err)
		}
	}
}

// TestBadLimitMessage is the example of check-config that
// docs/configuration.md gives: the file, the line and the field, then the
// limit's own error.
func TestBadLimitMessage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	data := "upstream:\n  targets: [http://127.0.0.1:1]\nrules:\n  - name: login_ip\n    match: {methods: [POST], path: /login}\n    key: ip\n    limits: [2/s, 5/fortnight]\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(path)
	want := "config: " + path + `:7: rules[0].limits: limit "5/fortnight": unit "fortnight" is not s, m, h or d, with an optional multiplier like 15m`
	if err == nil || err.Error() != want {
		t.Errorf("Load error\n%v\nwant\n%s", err, want)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // substrings of the message
	}{
		{"unknown field", "server:\n  listen: 127.0.0.1:1\n  lisen: x\n", []string{":3: server.lisen: unknown field (did you mean listen?); server has listen, read_header_timeout,"}},
		{"unknown section", "servr: {}\n", []string{":1: servr: unknown field (did you mean server?); the file's top level has server, admin, upstream,"}},
		{"unknown field in a list item", "rules:\n  - name: a\n    match: {path: /x, methds: [GET]}\n", []string{":3: rules[0].match.methds: unknown field (did you mean methods?); rules[0].match has methods, path"}},
		{"unknown field far from any", "analytics:\n  cassandra:\n    replicas: 3\n", []string{":3: analytics.cassandra.replicas: unknown field; analytics.cassandra has hosts, keyspace,"}},
		{"two unknown fields", "servr: {}\nadmin:\n  tokn_env: X\n", []string{":1: servr: unknown field (did you mean server?)", "; line 3: admin.tokn_env: unknown field (did you mean token_env?); admin has listen, token_env"}},
		{"a second document", "upstream:\n  targets: [http://127.0.0.1:1]\n---\nrules: []\n", []string{":3: a second YAML document starts here"}},
		{"bad limit unit", "rules:\n  - name: a\n    match: {path: /x}\n    key: ip\n    limits: [5/x]\n", []string{":5: rules[0].limits:", `"5/x"`, "unit"}},
		{"bad limit count", "rules:\n  - name: a\n    match: {path: /x}\n    key: ip\n    limits: [0/m]\n", []string{":5: rules[0].limits:", "count"}},
		{"not yaml", "server: [\n", []string{":1:", "did not find"}},
		{"wrong type", "server:\n  max_header_bytes: lots\n", []string{":2: server.max_header_bytes:", "lots"}},
		{"bad duration", "upstream:\n  dial_timeout: fast\n", []string{":2: upstream.dial_timeout:", "fast"}},
		{"bad retention", "analytics:\n  retention: [1m:2x]\n", []string{":2: analytics.retention:", "1m:2x"}},
		{"bad limit in a block list", "rules:\n  - name: a\n    match: {path: /x}\n    key: ip\n    limits:\n      - 5/m\n      - 5/x\n",
			[]string{":7: rules[0].limits[1]: limit \"5/x\""}},
		{"limit as a map", "rules:\n  - name: a\n    match: {path: /x}\n    key: ip\n    limits:\n      - {n: 5, window: 60000000000}\n",
			[]string{":6: rules[0].limits[0]:", "want N/unit"}},
		{"every bad value with its line", "rules:\n  - name: a\n    match: {path: /x}\n    key: ip\n    limits:\n      - 5/x\n      - 5/m\n      - 5/x\nanalytics:\n  retention: [1m:2x]\n  max_keys: many\n",
			[]string{":6: rules[0].limits[0]: limit \"5/x\"", "; line 8: limit \"5/x\"", "; line 10: rollup: tier \"1m:2x\"", "; line 11: cannot unmarshal"}},
		{"bad limit through an alias", "x: &l [5/x]\nrules:\n  - name: a\n    match: {path: /x}\n    key: ip\n    limits: *l\n",
			[]string{":1: x:", "; line 6: limit \"5/x\""}}, // where it is a limit
		{"list for a map", "server: [1, 2]\n", []string{":1: server:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "gw.yaml")
			os.WriteFile(path, []byte(tt.yaml), 0o644)
			_, err := config.Load(path)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// TestLocateFieldWithDigits: a field whose name holds a digit
// (identity.ipv6_prefix) is located like any other; its errors once named
// no file and no line.
func TestLocateFieldWithDigits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	os.WriteFile(path, []byte("upstream:\n  targets: [http://127.0.0.1:1]\nidentity:\n  ipv6_prefix: 200\n"), 0o644)
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	got := c.Locate(errors.New("identity.ipv6_prefix: 200 is not between 1 and 128")).Error()
	if want := "config: " + path + ":4: identity.ipv6_prefix: 200 is not between 1 and 128"; got != want {
		t.Errorf("Locate = %q, want %q", got, want)
	}
}

// TestOneDocument: a file that ends with "---" and nothing else (or only
// comments) is one document; one with a second document after "---" is an
// error naming its line, never a file whose second half is ignored.
func TestOneDocument(t *testing.T) {
	for _, data := range []string{
		"upstream: {targets: [http://127.0.0.1:1]}\n---\n",
		"upstream: {targets: [http://127.0.0.1:1]}\n--- # end\n# nothing more\n",
		"---\nupstream: {targets: [http://127.0.0.1:1]}\n...\n",
	} {
		if _, err := config.Parse([]byte(data)); err != nil {
			t.Errorf("Parse(%q): %v", data, err)
		}
	}
	_, err := config.Parse([]byte("upstream: {targets: [http://127.0.0.1:1]}\n---\nrules:\n  - {name: a, match: {path: /x}, key: ip, limits: [1/s]}\n"))
	var ce *config.Error
	if !errors.Is(err, config.ErrSecondDocument) || !errors.As(err, &ce) || ce.Line != 2 {
		t.Errorf("a second document: %v, want ErrSecondDocument at line 2", err)
	}
}
