package gateway_test

import (
	"net/http"
	"testing"

	"github.com/linkgate/linkgate/internal/testkit"
)

// TestStatsPrefixSplit: the stats prefix and what is under it are the
// gateway's, everything else (a longer name, the prefix escaped) is
// proxied, and a method no router knows is refused, as a chi router with
// the patterns /stats, /stats/* and /* routed them.
func TestStatsPrefixSplit(t *testing.T) {
	a := testkit.Named(t, "A")
	gw := start(t, testkit.BaseConfig(a.URL))
	for _, tc := range []struct {
		method, path string
		status       int
		upstream     bool
	}{
		{"GET", "/stats", 404, false},
		{"GET", "/stats/", 404, false},
		{"GET", "/stats/abc?last=1d", 404, false},
		{"POST", "/stats/abc", 404, false},
		{"GET", "/statsx", 200, true},
		{"GET", "/x/stats", 200, true},
		{"GET", "/stats%2Fabc", 200, true},
		{"GET", "/abc", 200, true},
		{"PROPFIND", "/abc", 405, false},
		{"FOO", "/stats", 405, false},
	} {
		resp, body := testkit.Do(t, tc.method, gw.url(tc.path), nil)
		if resp.StatusCode != tc.status || (body == "A") != tc.upstream {
			t.Errorf("%s %s = %d %q, want %d (from the upstream: %v)", tc.method, tc.path, resp.StatusCode, body, tc.status, tc.upstream)
		}
		if tc.status == http.StatusNotFound && resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s %s: %q, want the gateway's problem", tc.method, tc.path, resp.Header.Get("Content-Type"))
		}
	}
}
