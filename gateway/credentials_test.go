package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/linkgate/linkgate/internal/testkit"
)

// authEcho is an upstream that answers the Authorization fields it got.
func authEcho(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("auth=" + strings.Join(r.Header.Values("Authorization"), "|")))
	}))
	t.Cleanup(s.Close)
	return s
}

// getHost sends GET url for host with the header pairs hdr.
func getHost(t *testing.T, url, host string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return testkit.Send(t, req)
}

// TestGatewayTokensNotForwarded: an Authorization field holding the stats
// token or the admin token, as a bearer token in any case or as the whole
// field, is removed from a request before it is proxied, on any path (the
// stats prefix too, on a host that is not stats.host), and the request is
// served; any other credentials reach the upstream untouched.
func TestGatewayTokensNotForwarded(t *testing.T) {
	t.Parallel()
	setenv(t, "LG_TEST_WITHHOLD_STATS", "stats-s3cret-token")
	up := authEcho(t)
	gw := start(t, testkit.BaseConfig(up.URL)+"stats:\n  token_env: LG_TEST_WITHHOLD_STATS\n  host: stats.example\n")
	for _, c := range []struct{ name, host, path, auth, want string }{
		{"stats token on a link", "sho.rt", "/go", "Bearer stats-s3cret-token", "auth="},
		{"stats token under the prefix on another host", "sho.rt", "/stats/go", "Bearer stats-s3cret-token", "auth="},
		{"stats token, scheme in lower case", "sho.rt", "/api/x", "bearer   stats-s3cret-token ", "auth="},
		{"stats token as the whole field", "sho.rt", "/x", "stats-s3cret-token", "auth="},
		{"stats token after another scheme", "sho.rt", "/x", "Token stats-s3cret-token", "auth="},
		{"admin token", "sho.rt", "/x", "Bearer " + testkit.AdminToken, "auth="},
		{"a user's token", "sho.rt", "/api/x", "Bearer user-token-123", "auth=Bearer user-token-123"},
		{"the stats token as part of another", "sho.rt", "/x", "Bearer stats-s3cret-token-2", "auth=Bearer stats-s3cret-token-2"},
		{"basic credentials", "sho.rt", "/x", "Basic dXNlcjpwYXNz", "auth=Basic dXNlcjpwYXNz"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, body := getHost(t, gw.url(c.path), c.host, "Authorization", c.auth)
			if resp.StatusCode != 200 || body != c.want {
				t.Errorf("%s %s with Authorization %q: %d %q, want 200 %q", c.host, c.path, c.auth, resp.StatusCode, body, c.want)
			}
		})
	}
	if !gw.logs.Logged("an Authorization field holding the stats token was removed before proxying: the gateway's tokens never go upstream", nil) {
		t.Errorf("no log line for the stats token removed")
	}
	// On stats.host the stats API has it, and nothing is proxied.
	resp, body := getHost(t, gw.url("/stats/go"), "stats.example", "Authorization", "Bearer stats-s3cret-token")
	if strings.HasPrefix(body, "auth=") {
		t.Errorf("a stats request on stats.host was proxied: %d %q", resp.StatusCode, body)
	}
}

// TestTwoAuthorizationFields: a request with two Authorization fields is a
// 400 problem on the client listener (proxied or not) and on the admin
// listener, whichever of them holds the right token: never "the first one
// wins" for the gateway and another for the upstream.
func TestTwoAuthorizationFields(t *testing.T) {
	t.Parallel()
	up := authEcho(t)
	gw := start(t, testkit.BaseConfig(up.URL))
	two := func(url, first, second string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Add("Authorization", first)
		req.Header.Add("Authorization", second)
		resp, body := testkit.Send(t, req)
		if p := testkit.Problem(t, resp, body, http.StatusBadRequest); !strings.Contains(p["detail"].(string), "Authorization") {
			t.Errorf("GET %s with two Authorization fields: %v, want a detail naming Authorization", url, p)
		}
		if strings.Contains(body, "auth=") {
			t.Errorf("GET %s with two Authorization fields was proxied: %s", url, body)
		}
	}
	two(gw.url("/api/x"), "Bearer a", "Bearer b")
	two(gw.url("/stats/go"), "Bearer a", "Bearer b")
	two(gw.admin("/admin/config"), "Bearer "+testkit.AdminToken, "Bearer wrong")
	two(gw.admin("/admin/config"), "Bearer wrong", "Bearer "+testkit.AdminToken)
	if resp, body := testkit.Do(t, "GET", gw.admin("/admin/config"), nil, "Authorization", "Bearer "+testkit.AdminToken); resp.StatusCode != 200 {
		t.Errorf("one Authorization field: %d %s", resp.StatusCode, body)
	}
	if resp, body := testkit.Do(t, "GET", gw.url("/api/x"), nil, "Authorization", "Bearer a"); resp.StatusCode != 200 || body != "auth=Bearer a" {
		t.Errorf("one Authorization field, proxied: %d %q", resp.StatusCode, body)
	}
}
