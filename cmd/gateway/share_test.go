package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/stats"
)

// TestShareCommand: "gateway share" signs with the key the config names, as
// the gateway checks it: the token it prints verifies for its link (or all
// links, or a tenant's link) and its ttl; without a key, with both a key and -all, or with a
// ttl over max_ttl it fails saying why.
func TestShareCommand(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gw.yaml")
	testkit.WriteFile(t, path, testkit.BaseConfig("http://127.0.0.1:1")+"stats:\n  share: {key_env: LG_SHARE, max_ttl: 1440h}\n")
	key := "cli-key-0123456789abcdef"
	env := func(k string) string {
		if k == "LG_SHARE" {
			return key
		}
		return ""
	}
	share := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(t.Context(), append([]string{"gateway", "share", "-config", path}, args...), &out, env)
		return out.String(), err
	}
	out, err := share("-ttl", "48h", "go")
	if err != nil {
		t.Fatalf("gateway share go: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`(?m)^token +(\S+)$`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "page    /stats/go?share=lgs1.") {
		t.Fatalf("gateway share go printed:\n%s", out)
	}
	g, err := stats.VerifyShare([]byte(key), m[1], time.Now(), 0)
	if err != nil || g.Key != "go" || g.Expires.Sub(g.Issued) != 48*time.Hour {
		t.Errorf("the printed token: %+v, %v; want go for 48h", g, err)
	}
	out, err = share("-all")
	if m := regexp.MustCompile(`(?m)^token +(\S+)$`).FindStringSubmatch(out); err != nil || m == nil {
		t.Errorf("gateway share -all: %v\n%s", err, out)
	} else if g, err := stats.VerifyShare([]byte(key), m[1], time.Now(), 0); err != nil || !g.All() || g.Expires.Sub(g.Issued) != 30*24*time.Hour {
		t.Errorf("gateway share -all: %+v, %v; want all links for 30 days", g, err)
	}
	out, err = share("-tenant", "acme", "go")
	if m := regexp.MustCompile(`(?m)^token +(\S+)$`).FindStringSubmatch(out); err != nil || m == nil || !strings.Contains(out, "for     link go of tenant acme") {
		t.Errorf("gateway share -tenant acme go: %v\n%s", err, out)
	} else if g, err := stats.VerifyShare([]byte(key), m[1], time.Now(), 0); err != nil || g.Key != "acme/go" || g.Tenant() != "acme" {
		t.Errorf("gateway share -tenant acme go: %+v, %v; want acme's go", g, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-tenant", "Acme", "go"}, "tenant"},
		{[]string{"-all", "go"}, "usage"},
		{nil, "usage"},
		{[]string{"-ttl", "90d", "go"}, "max_ttl"},
		{[]string{"-ttl", "later", "go"}, "-ttl"},
	} {
		if out, err := share(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("gateway share %q: %v %s; want an error with %q", c.args, err, out, c.want)
		}
	}
	key = ""
	if _, err := share("go"); err == nil || !strings.Contains(err.Error(), "key_env") {
		t.Errorf("gateway share without a key: %v, want an error naming stats.share.key_env", err)
	}
}
