package config_test

import (
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

// TestExampleIsTheContract: configs/gateway.example.yaml is the reference
// copy of the contract kept beside the brief, plus the fields added since
// ("fields not shown may be added"): every line of the contract must be in
// it, in order, and every line it adds must set a field with a comment.
func TestExampleIsTheContract(t *testing.T) {
	contract, err := os.ReadFile("../../shared/gateway.example.yaml")
	if err != nil {
		t.Skipf("the contract beside the brief is not here: %v", err)
	}
	copy, err := os.ReadFile("../configs/gateway.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(string(contract), "\n")
	i := 0
	for _, line := range strings.Split(string(copy), "\n") {
		if i < len(want) && line == want[i] {
			i++
			continue
		}
		if !strings.Contains(line, ": ") || !strings.Contains(line, " # ") {
			t.Errorf("configs/gateway.example.yaml adds %q, which is not a commented field", line)
		}
	}
	if i != len(want) {
		t.Errorf("configs/gateway.example.yaml lacks the contract's line %q: copy the contract again", want[i])
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
	empty, err := config.Parse(nil)
	if err != nil || empty.Server.Listen == "" {
		t.Errorf("empty file: %v, %+v", err, empty)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // substrings of the message
	}{
		{"unknown field", "server:\n  listen: 127.0.0.1:1\n  lisen: x\n", []string{":3: server.lisen:", "lisen not found"}},
		{"unknown section", "servr: {}\n", []string{":1: servr:", "not found"}},
		{"bad limit unit", "rules:\n  - name: a\n    match: {path: /x}\n    key: ip\n    limits: [5/x]\n", []string{":5: rules[0].limits:", `"5/x"`, "unit"}},
		{"bad limit count", "rules:\n  - name: a\n    match: {path: /x}\n    key: ip\n    limits: [0/m]\n", []string{":5: rules[0].limits:", "count"}},
		{"bad key", "rules:\n  - name: a\n    match: {path: /x}\n    key: mail\n    limits: [5/m]\n", []string{":4:", "rules[0]: key", "mail"}},
		{"duplicate rule", "rules:\n  - {name: a, match: {path: /x}, key: ip, limits: [1/s]}\n  - {name: a, match: {path: /y}, key: ip, limits: [1/s]}\n", []string{":3:", "rules[1]: name"}},
		{"bad path", "rules:\n  - {name: a, match: {path: x}, key: ip, limits: [1/s]}\n", []string{"rules[0]: match", "must start with /"}},
		{"bad retention", "analytics:\n  retention: [1m:2x]\n", []string{":2: analytics.retention:", "1m:2x"}},
		{"retention order", "analytics:\n  retention: [1h:2d, 1m:8d]\n", []string{"analytics: retention", "multiple"}},
		{"bad duration", "upstream:\n  dial_timeout: fast\n", []string{":2: upstream.dial_timeout:", "fast"}},
		{"bad store", "limiter:\n  store: redis\n", []string{":2:", "limiter: store", "redis"}},
		{"bad timeout", "limiter:\n  memcached:\n    timeout: -1s\n", []string{":3:", "memcached.timeout"}},
		{"bad target", "upstream:\n  targets: [127.0.0.1:8081]\n", []string{"upstream: targets[0]"}},
		{"bad trusted proxy", "server:\n  trusted_proxies: [10.0.0.0/33]\n", []string{"server: trusted_proxies[0]"}},
		{"bad listen", "server:\n  listen: 8080\n", []string{":2:", "server: listen"}},
		{"bad bots", "analytics:\n  bots: maybe\n", []string{"analytics: bots"}},
		{"bad stats prefix", "stats:\n  prefix: stats\n", []string{"stats: prefix"}},
		{"not yaml", "server: [\n", []string{":1:", "did not find"}},
		{"wrong type", "server:\n  max_header_bytes: lots\n", []string{":2: server.max_header_bytes:", "lots"}},
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
