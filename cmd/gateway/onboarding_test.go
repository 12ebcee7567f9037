package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/linkgate/linkgate/internal/testkit"
)

// TestOnboarding runs the five commands of docs/onboarding.md as they are
// written, in bash, on a running gateway whose config ends with its
// tenants list: afterwards the new tenant's visits count as its own, and
// the token the fourth command made reads them (the fifth command's
// answer) and no one else's.
func TestOnboarding(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "onboarding.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```sh\n(.*?)```").FindSubmatch(page)
	if m == nil {
		t.Fatal("docs/onboarding.md has no sh block")
	}
	script := string(m[1])
	if n := strings.Count(strings.TrimSpace(script), "\n") + 1; n != 5 {
		t.Fatalf("docs/onboarding.md shows %d commands, not five:\n%s", n, script)
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://example.com"+r.URL.Path, http.StatusFound)
	}))
	defer up.Close()
	dir := t.TempDir()
	cfg := strings.Replace(testkit.BaseConfig(up.URL), "  enabled: false\n", "  enabled: true\n  flush_interval: 1h\n  embedded: {path: "+dir+"/analytics}\n", 1) +
		"stats:\n  token_env: LG_ONBOARD_STATS\n  share: {key_env: LG_ONBOARD_SHARE}\n" +
		"tenants:\n  - {name: first, hosts: [go.first.example]}\n"
	env := []string{tokenEnv, "LG_ONBOARD_STATS=onboard-stats-s3cret", "LG_ONBOARD_SHARE=onboard-share-key-0123456789"}
	gw, path := startGateway(t, cfg, env...)
	// get sends a GET to the gateway as a request for host.
	get := func(host, path string, hdr ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", gw.url("gateway", path), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := testkit.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	visit := func(host string, n int) {
		t.Helper()
		for range n {
			if status, _ := get(host, "/go"); status != http.StatusFound {
				t.Fatalf("GET %s/go: %d", host, status)
			}
		}
	}
	visit("go.acme.example", 2) // before: the default tenant's
	visit("go.first.example", 3)

	cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", script+`echo "TOKEN=$TOKEN"`)
	// The operator's shell has the gateway's environment: check-config
	// checks its variables.
	cmd.Env = childEnv(append(env, "CONFIG="+path, "ADMIN="+strings.TrimPrefix(gw.url("admin", ""), "http://"),
		"ADMIN_TOKEN="+testkit.AdminToken, "STATS="+gw.url("gateway", ""),
		"PATH="+filepath.Dir(bin.gateway)+string(os.PathListSeparator)+os.Getenv("PATH"))...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the five commands: %v\n%s", err, out)
	}
	tok := regexp.MustCompile(`(?m)^TOKEN=(lgt1\.\S+)$`).FindSubmatch(out)
	if tok == nil || !strings.Contains(string(out), `"restart_required"`) || !strings.Contains(string(out), `"tenant":"acme"`) {
		t.Fatalf("the five commands printed no reload answer, tenant token or acme's stats:\n%s", out)
	}

	visit("go.acme.example", 4)
	visit("go.first.example", 1)
	for _, c := range []struct {
		host string
		want int64
	}{{"go.acme.example", 4}, {"go.first.example", 4}} {
		// The fifth command again, whatever host it names: acme's.
		_, b := get(c.host, "/stats?last=24h", "Authorization", "Bearer "+string(tok[1]), "Accept", "application/json")
		var a struct {
			Tenant string `json:"tenant"`
			Total  int64  `json:"total"`
		}
		if err := json.Unmarshal([]byte(b), &a); err != nil || a.Tenant != "acme" || a.Total != 4 {
			t.Errorf("acme's token, Host %s: %.300s; want acme's 4 visits since it was onboarded\n%s", c.host, b, out)
		}
	}
	if status, _ := get("go.acme.example", "/stats/go?last=24h&tenant=first", "Authorization", "Bearer "+string(tok[1]), "Accept", "application/json"); status != http.StatusForbidden {
		t.Errorf("acme's token on first's link: %d, want 403", status)
	}
}
