package gateway_test

import (
	"net/http"
	"testing"

	"github.com/linkgate/linkgate/internal/testkit"
)

// TestStatsOneVary: a stats answer through the gateway carries one Vary
// header, naming both request headers it depends on, whatever the format
// and whether it was compressed. Two Vary lines are legal HTTP, but caches
// and CDNs that read only the first one would serve a gzipped answer to a
// client that cannot read it.
func TestStatsOneVary(t *testing.T) {
	up := tinyURL(t)
	gw := start(t, analyticsConfig(up.URL, embeddedStore(t.TempDir()), "10s"))
	for _, tc := range []struct{ path, accept, encoding string }{
		{"/stats/go?last=1h", "application/json", ""},
		{"/stats/go?last=1y&stitch=true", "application/json", "gzip"}, // large enough to be gzipped
		{"/stats/go?last=1h&format=csv", "", ""},
		{"/stats/go", "text/html", ""},
	} {
		req, err := http.NewRequest("GET", gw.url(tc.path), nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.accept != "" {
			req.Header.Set("Accept", tc.accept)
		}
		if tc.encoding != "" {
			req.Header.Set("Accept-Encoding", tc.encoding)
		}
		resp, err := testkit.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", tc.path, resp.StatusCode)
		}
		if tc.encoding == "gzip" && resp.Header.Get("Content-Encoding") != "gzip" {
			t.Errorf("GET %s: not gzipped (Content-Encoding %q): the case meant to be compressed is not", tc.path, resp.Header.Get("Content-Encoding"))
		}
		if vary := resp.Header.Values("Vary"); len(vary) != 1 || vary[0] != "Accept, Accept-Encoding" {
			t.Errorf("GET %s: Vary %q, want one header: Accept, Accept-Encoding", tc.path, vary)
		}
	}
}
