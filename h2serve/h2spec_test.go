package h2serve_test

import (
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/linkgate/linkgate/internal/testkit"
)

// h2specFails lists the h2spec cases the server fails, with why; the
// test fails on any other failure, and on a case listed that passes.
var h2specFails = map[string]string{}

// TestH2Spec runs h2spec, the HTTP/2 conformance suite, against the
// server over h2c and over TLS.
func TestH2Spec(t *testing.T) {
	if testing.Short() {
		t.Skip("h2spec takes a while")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("h2spec runs with go tool: %v", err)
	}
	body := strings.Repeat("h2spec wants a body of some length. ", 40)
	// The handler reads the body before it answers. One that answers
	// without reading it, as the gateway's redirects do, may end the
	// stream (RST_STREAM NO_ERROR, RFC 9113 section 8.1) before the client
	// is done sending: the DATA of the 8.1.2.6 cases is still checked
	// against the declared length then (conn.cutShort), but 6.9.1/3 fails
	// about once in 16 runs, as x/net/http2 does: its WINDOW_UPDATEs
	// arrive for a stream already reset with NO_ERROR, the RST_STREAM
	// h2spec sees first.
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.Write([]byte(body))
	})
	both(t, func(t *testing.T, overTLS bool) {
		t.Parallel()
		ts := start(t, overTLS, h)
		cases := testkit.H2Spec(t, ts.addr, overTLS, nil)
		passed := 0
		for _, c := range cases {
			why, listed := h2specFails[c.ID]
			switch {
			case c.Result == "pass":
				passed++
				if listed {
					t.Errorf("%s (%s) passes, but is listed as failing: %s", c.ID, c.Desc, why)
				}
			case !listed:
				t.Errorf("%s (%s): %s:\n%s", c.ID, c.Desc, c.Result, c.Why)
			}
		}
		t.Logf("h2spec: %d of %d cases pass", passed, len(cases))
	})
}
