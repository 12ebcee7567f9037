package gateway_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/linkgate/linkgate/internal/testkit"
)

// TestUnparseableForwardedClient: from a trusted proxy, an
// X-Forwarded-For whose entry where the client's address should be is not
// an address ("unknown", garbage), or an X-Real-IP that is not one, is a
// 400 problem naming the field, never proxied, and never counted under the
// proxy's own address: the proxy's own requests are still served after
// such requests passed an IP rule's limit. Garbage to the left of the
// client's entry is the client's to forge and is not read.
func TestUnparseableForwardedClient(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]string{"xff": r.Header.Get("X-Forwarded-For"), "real": r.Header.Get("X-Real-Ip")})
	}))
	t.Cleanup(up.Close)
	// The test's client, 127.0.0.1, is the trusted proxy.
	gw := start(t, testkit.BaseConfig(up.URL)+"rules:\n  - {name: per_ip, match: {path: /x}, key: ip, limits: [2/m]}\n")
	for _, c := range []struct{ field, value string }{
		{"X-Forwarded-For", "unknown"},
		{"X-Forwarded-For", "198.51.100.1, not-an-address"},
		{"X-Forwarded-For", "203.0.113.9:80:80"},
		{"X-Real-IP", "nope"},
	} {
		resp, body := testkit.Do(t, "GET", gw.url("/x"), nil, c.field, c.value)
		p := testkit.Problem(t, resp, body, http.StatusBadRequest)
		params, _ := p["invalid-params"].([]any)
		if len(params) != 1 || params[0].(map[string]any)["name"] != c.field {
			t.Errorf("%s: %s: %v, want a 400 naming %s", c.field, c.value, p, c.field)
		}
	}
	// None of them was counted under the proxy's address: its own two
	// requests pass the rule of two a minute.
	for i := range 2 {
		if resp, body := testkit.Do(t, "GET", gw.url("/x"), nil); resp.StatusCode != 200 {
			t.Errorf("the proxy's own request %d: %d %s, want 200", i, resp.StatusCode, body)
		}
	}
	resp, body := testkit.Do(t, "GET", gw.url("/x"), nil, "X-Forwarded-For", "junk, 203.0.113.5")
	var got map[string]string
	json.Unmarshal([]byte(body), &got)
	if resp.StatusCode != 200 || got["real"] != "203.0.113.5" || got["xff"] != "junk, 203.0.113.5, 127.0.0.1" {
		t.Errorf("garbage left of the client: %d %s, want it served for 203.0.113.5", resp.StatusCode, body)
	}
}
