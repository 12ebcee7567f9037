package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/linkgate/linkgate/internal/testkit"
)

// TestShareTokens: POST /admin/share makes a token (JSON or form) that
// opens its link's page, JSON and CSV without the stats token, and nothing
// else; bad requests are 400s naming the parameter, and without a key the
// endpoint says sharing is off (409). A restart with a new key (a rotation)
// refuses every token of the old one.
func TestShareTokens(t *testing.T) {
	t.Parallel()
	setenv(t, "LG_TEST_SHARE_STATS", "stats-s3cret")
	setenv(t, "LG_TEST_SHARE_KEY", "first-key-0123456789abcdef")
	up := tinyURL(t)
	dir := t.TempDir()
	cfg := withStats(analyticsConfig(up.URL, embeddedStore(dir), "10s"),
		"  token_env: LG_TEST_SHARE_STATS\n  share: {key_env: LG_TEST_SHARE_KEY, max_ttl: 720h}\n  embed: {frame_ancestors: [\"https://blog.example\"]}\n") +
		"admin:\n  token_env: LG_TEST_ADMIN_TOKEN\n"
	cfg = strings.Replace(cfg, "admin:\n  listen: 127.0.0.1:0\n", "", 1)
	cfg = strings.Replace(cfg, "admin:\n  token_env", "admin:\n  listen: 127.0.0.1:0\n  token_env", 1)
	gw := start(t, cfg)
	admin := []string{"Authorization", "Bearer " + testkit.AdminToken}
	for range 3 {
		testkit.Do(t, "GET", gw.url("/go"), nil)
	}

	type shared struct {
		Token    string `json:"token"`
		ShortKey string `json:"short_key"`
		Page     string `json:"page"`
		Embed    string `json:"embed"`
		Data     string `json:"data"`
	}
	share := func(g *running, body, ctype string) (*http.Response, shared, string) {
		t.Helper()
		resp, b := testkit.Do(t, "POST", g.admin("/admin/share"), strings.NewReader(body), append([]string{"Content-Type", ctype}, admin...)...)
		var s shared
		if resp.StatusCode == 200 {
			if err := json.Unmarshal([]byte(b), &s); err != nil {
				t.Fatalf("POST /admin/share: %v in %s", err, b)
			}
		}
		return resp, s, b
	}
	resp, sh, b := share(gw, `{"short_key":"go","ttl":"7d"}`, "application/json")
	if resp.StatusCode != 200 || sh.ShortKey != "go" || !strings.HasPrefix(sh.Page, "/stats/go?share=lgs1.") {
		t.Fatalf("POST /admin/share: %d %s", resp.StatusCode, b)
	}
	if r, b := testkit.Do(t, "GET", gw.url(sh.Data+"&last=1h"), nil); r.StatusCode != 200 || !strings.Contains(b, `"total":3`) {
		t.Errorf("GET %s: %d %s, want the link's JSON with its 3 visits", sh.Data, r.StatusCode, b)
	}
	if r, b := testkit.Do(t, "GET", gw.url(sh.Page+"&format=csv"), nil); r.StatusCode != 200 || !strings.HasPrefix(b, "unix_seconds,count,bot_count,class_bot,") {
		t.Errorf("CSV with the share token: %d %s", r.StatusCode, b)
	}
	if r, b := testkit.Do(t, "GET", gw.url(sh.Page), nil, "Accept", "text/html"); r.StatusCode != 200 || !strings.Contains(b, "<html") {
		t.Errorf("the page with the share token: %d", r.StatusCode)
	}
	if r, _ := testkit.Do(t, "GET", gw.url(sh.Embed), nil); r.StatusCode != 200 || !strings.HasSuffix(r.Header.Get("Content-Security-Policy"), "frame-ancestors https://blog.example") {
		t.Errorf("the embed view: %d, CSP %q; want it framed by https://blog.example only", r.StatusCode, r.Header.Get("Content-Security-Policy"))
	}
	if r, _ := testkit.Do(t, "GET", gw.url(sh.Page), nil, "Accept", "text/html"); !strings.HasSuffix(r.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("the page's CSP %q: it may be framed", r.Header.Get("Content-Security-Policy"))
	}
	if r, b := testkit.Do(t, "GET", gw.url("/stats/gh?share="+sh.Token), nil); r.StatusCode != 403 {
		t.Errorf("another link with go's token: %d %s, want 403", r.StatusCode, b)
	}
	if r, _ := testkit.Do(t, "GET", gw.url("/stats/go"), nil); r.StatusCode != 401 {
		t.Errorf("the link without a token: %d, want 401", r.StatusCode)
	}
	if resp, all, b := share(gw, "all=true&ttl=24h", "application/x-www-form-urlencoded"); resp.StatusCode != 200 || !strings.HasPrefix(all.Page, "/stats?share=") {
		t.Errorf("a form for all links: %d %s", resp.StatusCode, b)
	} else if r, b := testkit.Do(t, "GET", gw.url("/stats/gh?format=json&share="+all.Token), nil); r.StatusCode != 200 {
		t.Errorf("a link with the all-links token: %d %s", r.StatusCode, b)
	}
	for _, c := range []struct{ body, param string }{
		{`{"short_key":"go","ttl":"60d"}`, "ttl"},      // over max_ttl
		{`{"short_key":"go","ttl":"soon"}`, "ttl"},     // not a duration
		{`{"ttl":"1h"}`, "short_key"},                  // for nothing
		{`{"short_key":"go","all":true}`, "short_key"}, // for both
		{`{"short_key":"go","color":"red"}`, "body"},
	} {
		resp, _, b := share(gw, c.body, "application/json")
		if testkit.Problem(t, resp, b, 400); !strings.Contains(b, `"name":"`+c.param+`"`) {
			t.Errorf("POST %s: %s, want a problem naming %s", c.body, b, c.param)
		}
	}
	if resp, _ := testkit.Do(t, "POST", gw.admin("/admin/share"), strings.NewReader(`{"short_key":"go"}`), "Content-Type", "application/json"); resp.StatusCode != 401 {
		t.Errorf("POST /admin/share without the admin token: %d, want 401", resp.StatusCode)
	}

	// Rotation: the same file, a new key in the variable, a restart.
	if err := gw.shutdown(); err != nil {
		t.Fatal(err)
	}
	setenv(t, "LG_TEST_SHARE_KEY", "second-key-0123456789abcdef")
	gw2 := startFile(t, gw.path, false)
	if r, b := testkit.Do(t, "GET", gw2.url(sh.Data), nil); r.StatusCode != 401 || !strings.Contains(b, "signature") {
		t.Errorf("the old token after the key rotated: %d %s, want 401 saying the signature does not match", r.StatusCode, b)
	}

	// Without a key, sharing is off.
	setenv(t, "LG_TEST_SHARE_KEY", "")
	gw3 := start(t, strings.Replace(cfg, embeddedStore(dir), embeddedStore(t.TempDir()), 1))
	resp, _, b = share(gw3, `{"short_key":"go"}`, "application/json")
	testkit.Problem(t, resp, b, http.StatusConflict)
}
