package gateway_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/linkgate/linkgate/internal/testkit"
)

// TestVisitRulesCountHead: in the example and quick-start configs, a HEAD
// of a short link, which analytics counts as a visit (match: [GET, HEAD]),
// passes through the rule that watches visits (redirect_ip, written for
// GET: a rule for GET covers HEAD, which servers answer with their GET
// handler), so that HEAD is no way around it; a HEAD a rule does not list
// (POST /login) stays outside it.
func TestVisitRulesCountHead(t *testing.T) {
	t.Parallel()
	up := tinyURL(t)
	for _, file := range []string{"../configs/gateway.example.yaml", "../configs/gateway.quickstart.yaml", "../configs/gateway.compose.yaml"} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			// On free ports, in front of the test's upstream, with the stores
			// in memory and in the test's folder.
			cfg := strings.NewReplacer(
				"127.0.0.1:8080", "127.0.0.1:0", "127.0.0.1:9090", "127.0.0.1:0", "0.0.0.0:8080", "127.0.0.1:0", "0.0.0.0:9090", "127.0.0.1:0",
				"http://127.0.0.1:8081", up.URL, "http://tinyurl:8081", up.URL,
				"./data/analytics", filepath.Join(t.TempDir(), "analytics"), "/data/analytics", filepath.Join(t.TempDir(), "analytics"),
				"store: memcached", "store: memory", "store: cassandra", "store: embedded\n  embedded: {path: "+filepath.Join(t.TempDir(), "analytics")+"}",
			).Replace(string(data))
			gw := start(t, cfg)
			for range 2 {
				if resp, _ := testkit.Do(t, "HEAD", gw.url("/go"), nil); resp.StatusCode != 302 {
					t.Fatalf("HEAD /go: %d", resp.StatusCode)
				}
			}
			if got := testkit.Metric(t, gw.g.Registry(), "linkgate_limit_decisions_total", "rule", "redirect_ip"); got != 2 {
				t.Errorf("redirect_ip decided on %v requests, want the 2 HEADs of /go", got)
			}
			testkit.Do(t, "HEAD", gw.url("/login"), nil)
			if got := testkit.Metric(t, gw.g.Registry(), "linkgate_limit_decisions_total", "rule", "login_ip"); got != 0 {
				t.Errorf("login_ip (POST) decided on %v requests, want none for a HEAD", got)
			}
		})
	}
}
