package h2serve_test

import (
	"encoding/xml"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// h2specFails lists the h2spec cases the server fails, with why; the
// test fails on any other failure, and on a case listed that passes.
var h2specFails = map[string]string{}

// h2specCase is one case of an h2spec run: its id (the section and the
// case's number in it, as h2spec numbers them: "http2/8.1.2.2/1"), what
// it checks, and why it failed ("" when it passed or was skipped).
type h2specCase struct {
	id, desc, failure string
}

// runH2Spec runs h2spec, the version go.mod pins as a tool, against
// addr, over TLS or h2c, and returns its cases.
func runH2Spec(t *testing.T, addr string, overTLS bool) []h2specCase {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	report := filepath.Join(t.TempDir(), "h2spec.xml")
	args := []string{"tool", "h2spec", "-h", host, "-p", port, "-P", "/", "-o", "5", "-j", report}
	if overTLS {
		args = append(args, "-t", "-k")
	}
	out, err := exec.Command("go", args...).CombinedOutput()
	data, rerr := os.ReadFile(report)
	if rerr != nil {
		t.Fatalf("h2spec wrote no report (%v): %v\n%s", err, rerr, out)
	}
	var junit struct {
		Suites []struct {
			Package string `xml:"package,attr"`
			Cases   []struct {
				Desc    string `xml:"classname,attr"`
				Failure *struct {
					Text string `xml:",innerxml"`
				} `xml:"failure"`
				Error *struct {
					Text string `xml:",innerxml"`
				} `xml:"error"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &junit); err != nil {
		t.Fatalf("h2spec's report: %v", err)
	}
	var cases []h2specCase
	for _, s := range junit.Suites {
		for i, c := range s.Cases {
			why := ""
			switch {
			case c.Failure != nil:
				why = c.Failure.Text
			case c.Error != nil:
				why = c.Error.Text
			}
			cases = append(cases, h2specCase{fmt.Sprintf("%s/%d", s.Package, i+1), c.Desc, html.UnescapeString(strings.TrimSpace(why))})
		}
	}
	if len(cases) < 100 {
		t.Fatalf("h2spec ran %d cases: %v\n%s", len(cases), err, out)
	}
	return cases
}

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
		cases := runH2Spec(t, ts.addr, overTLS)
		passed := 0
		for _, c := range cases {
			why, listed := h2specFails[c.id]
			switch {
			case c.failure == "":
				passed++
				if listed {
					t.Errorf("%s (%s) passes, but is listed as failing: %s", c.id, c.desc, why)
				}
			case !listed:
				t.Errorf("%s (%s) fails:\n%s", c.id, c.desc, c.failure)
			}
		}
		t.Logf("h2spec: %d of %d cases pass", passed, len(cases))
	})
}
