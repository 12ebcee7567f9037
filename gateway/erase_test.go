package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// TestEraseAdmin: POST /admin/erase over real TLS, on the embedded store,
// with the visits still in the recorder (the flush interval is an hour):
// erasing acme's go leaves acme's gh, other's go and the default tenant's
// go as they were, and takes acme's go out of its top list; erasing the
// tenant other reads 0 for its links and its all-links total. A restart
// reads the same. Bad requests get 400 naming the field.
func TestEraseAdmin(t *testing.T) {
	t.Parallel()
	ca := edgetest.NewCA(t)
	up := tinyURL(t)
	cfg := tenantsConfig(t, up.URL, t.TempDir(), ca, "LG_TEST_ERASE")
	gw := start(t, cfg)
	base := "https://" + gw.g.Addr().String()
	c := ca.Client("go.acme.test", true)
	visit := func(host, path string, n int) {
		t.Helper()
		for range n {
			if resp, _ := get(t, c, base+path, "Host", host); resp.StatusCode != 302 {
				t.Fatalf("GET %s%s: %d", host, path, resp.StatusCode)
			}
		}
	}
	visit("go.acme.test", "/go", 3)
	visit("go.acme.test", "/gh", 2)
	visit("go.other.test", "/go", 5)
	visit("127.0.0.1", "/go", 7)

	operator := []string{"Authorization", "Bearer tenant-stats-s3cret", "Accept", "application/json"}
	check := func(when string, want map[string]int64) {
		t.Helper()
		for path, n := range want {
			resp, b := get(t, c, base+path, operator...)
			var a statsAnswer
			if resp.StatusCode != 200 || json.Unmarshal([]byte(b), &a) != nil {
				t.Fatalf("%s: GET %s: %d %s", when, path, resp.StatusCode, b)
			}
			if a.Total != n {
				t.Errorf("%s: GET %s: total %d, want %d", when, path, a.Total, n)
			}
		}
	}
	admin := []string{"Authorization", "Bearer " + testkit.AdminToken, "Content-Type", "application/json"}
	erase := func(body string) (int, string) {
		t.Helper()
		resp, b := testkit.Do(t, "POST", gw.admin("/admin/erase"), strings.NewReader(body), admin...)
		return resp.StatusCode, b
	}
	for _, c := range []struct{ body, param string }{
		{`{}`, "short_key"},
		{`{"tenant": "Acme", "short_key": "go"}`, "tenant"},
		{`{"tenant": "acme", "short_key": "a/b"}`, "short_key"},
		{`{"tenant": "acme", "key": "go"}`, "body"},
	} {
		if status, b := erase(c.body); status != 400 || !strings.Contains(b, `"name":"`+c.param+`"`) {
			t.Errorf("POST /admin/erase %s: %d %s, want 400 naming %s", c.body, status, b, c.param)
		}
	}
	if resp, _ := testkit.Do(t, "POST", gw.admin("/admin/erase"), strings.NewReader(`{"tenant":"acme"}`)); resp.StatusCode != 401 {
		t.Errorf("POST /admin/erase without the admin token: %d, want 401", resp.StatusCode)
	}

	if status, b := erase(`{"tenant": "acme", "short_key": "go"}`); status != 200 || !strings.Contains(b, `"short_key":"go"`) || !strings.Contains(b, `"erased_at"`) {
		t.Fatalf("POST /admin/erase acme's go: %d %s", status, b)
	}
	visit("go.other.test", "/go", 1)
	afterLink := map[string]int64{
		"/stats/go?last=1h&tenant=acme":  0,
		"/stats/gh?last=1h&tenant=acme":  2,
		"/stats/go?last=1h&tenant=other": 6,
		"/stats/go?last=1h":              7,
	}
	check("after erasing acme's go", afterLink)
	resp, b := get(t, c, base+"/stats?last=1h&top=10&tenant=acme", operator...)
	if resp.StatusCode != http.StatusOK || strings.Contains(b, `"short_key":"go"`) || !strings.Contains(b, `"short_key":"gh"`) {
		t.Errorf("acme's top links after erasing its go: %d %.400s", resp.StatusCode, b)
	}

	if status, b := erase(`{"tenant": "other"}`); status != 200 || !strings.Contains(b, `"tenant":"other"`) {
		t.Fatalf("POST /admin/erase other: %d %s", status, b)
	}
	afterTenant := map[string]int64{
		"/stats/go?last=1h&tenant=acme":  0,
		"/stats/gh?last=1h&tenant=acme":  2,
		"/stats/go?last=1h&tenant=other": 0,
		"/stats?last=1h&tenant=other":    0,
		"/stats/go?last=1h":              7,
	}
	check("after erasing other", afterTenant)

	if err := gw.shutdown(); err != nil {
		t.Fatal(err)
	}
	gw2 := startFile(t, gw.path, false)
	base = "https://" + gw2.g.Addr().String()
	check("after a restart", afterTenant)
}
