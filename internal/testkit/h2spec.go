package testkit

import (
	"encoding/xml"
	"fmt"
	"html"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// H2SpecCase is one case of an h2spec run: its id (the section and the
// case's number in it, as h2spec numbers them: "http2/8.1.2.2/1"), what it
// checks, its result (pass, fail, skip) and a failure's text.
type H2SpecCase struct {
	ID, Desc, Result, Why string
}

// H2Spec runs h2spec, the HTTP/2 conformance suite, in the version go.mod
// pins as a tool (go tool builds it from the module cache, or the module
// proxy the first time), against addr, over TLS or h2c, with env as the
// command's environment (nil: this process's), and returns its cases.
// Each case waits 5 s, stretched by the machine's pace (up to a minute),
// for a connection, a handshake or the answer it expects: a case that
// fails waits it out, one that passes does not, and a loaded machine's
// late answer is not a wrong one.
func H2Spec(t *testing.T, addr string, overTLS bool, env []string) []H2SpecCase {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	report := filepath.Join(t.TempDir(), "h2spec.xml")
	wait := min(int(Slack(5*time.Second)/time.Second), 60)
	args := []string{"tool", "h2spec", "-h", host, "-p", port, "-P", "/", "-o", strconv.Itoa(wait), "-j", report}
	if overTLS {
		args = append(args, "-t", "-k")
	}
	cmd := exec.Command("go", args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
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
				Skipped *struct{} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(data, &junit); err != nil {
		t.Fatalf("h2spec's report: %v", err)
	}
	var cases []H2SpecCase
	for _, s := range junit.Suites {
		for i, c := range s.Cases {
			r, why := "pass", ""
			switch {
			case c.Failure != nil:
				r, why = "fail", c.Failure.Text
			case c.Error != nil:
				r, why = "fail", c.Error.Text
			case c.Skipped != nil:
				r = "skip"
			}
			cases = append(cases, H2SpecCase{ID: fmt.Sprintf("%s/%d", s.Package, i+1), Desc: c.Desc, Result: r, Why: html.UnescapeString(strings.TrimSpace(why))})
		}
	}
	if len(cases) < 100 {
		t.Fatalf("h2spec ran %d cases: %v\n%s", len(cases), err, out)
	}
	return cases
}
