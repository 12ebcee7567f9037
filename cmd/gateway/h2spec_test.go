package main

import (
	"encoding/xml"
	"fmt"
	"html"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// h2specPage is the page whose "HTTP/2 conformance" section gives h2spec's
// result and lists the cases that fail, with why.
const h2specPage = "../../docs/tls-and-fleets.md"

// h2specCase is one case of an h2spec run: its id (the section's package
// and the case's number in it, as h2spec's own output numbers them:
// "http2/8.1.2.2/1") and its result.
type h2specCase struct {
	id, desc string
	result   string // pass, fail, skip
	why      string // a failure's or error's text, as h2spec wrote it
}

// runH2Spec runs h2spec, the version go.mod pins as a tool (go tool
// builds it from the module cache, or the module proxy the first time),
// against addr, over TLS or h2c, and returns its cases.
func runH2Spec(t *testing.T, addr string, overTLS bool) []h2specCase {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	report := filepath.Join(t.TempDir(), "h2spec.xml")
	// -o: how long a case waits for a connection, a handshake or the
	// answer it expects; a case that fails waits it out, one that passes
	// does not. 5 s, stretched by the machine's pace (up to a minute): a
	// loaded machine's late answer is not a wrong one.
	wait := min(int(testkit.Slack(5*time.Second)/time.Second), 60)
	args := []string{"tool", "h2spec", "-h", host, "-p", port, "-P", "/", "-o", strconv.Itoa(wait), "-j", report}
	if overTLS {
		args = append(args, "-t", "-k")
	}
	cmd := exec.Command("go", args...)
	cmd.Env = childEnv()
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
	var cases []h2specCase
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
			cases = append(cases, h2specCase{id: fmt.Sprintf("%s/%d", s.Package, i+1), desc: c.Desc, result: r, why: strings.TrimSpace(why)})
		}
	}
	if len(cases) < 100 {
		t.Fatalf("h2spec ran %d cases: %v\n%s", len(cases), err, out)
	}
	return cases
}

// h2specDocs reads the page's h2spec section: the pass counts it states
// for server.listen and server.internal_listen, the total, and the
// exceptions table (case → the listeners it fails on).
func h2specDocs(t *testing.T) (passTLS, passH2C, total int, exceptions map[string][]string) {
	t.Helper()
	data, err := os.ReadFile(h2specPage)
	if err != nil {
		t.Fatal(err)
	}
	page := string(data)
	m := regexp.MustCompile("passes (\\d+) of its (\\d+) cases on `server.listen` and (\\d+) on `server.internal_listen`").FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("%s states no h2spec result (\"passes N of its M cases on `server.listen` and K on `server.internal_listen`\")", h2specPage)
	}
	passTLS, _ = strconv.Atoi(m[1])
	total, _ = strconv.Atoi(m[2])
	passH2C, _ = strconv.Atoi(m[3])
	exceptions = map[string][]string{}
	in := false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "| h2spec case | fails on | why |") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(line, "|---") {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		id := strings.Trim(strings.TrimSpace(cells[0]), "`")
		for _, l := range []string{"server.listen", "server.internal_listen"} {
			if strings.Contains(cells[1], "`"+l+"`") {
				exceptions[id] = append(exceptions[id], l)
			}
		}
	}
	if len(exceptions) == 0 {
		t.Fatalf("%s: no h2spec exceptions table (\"| h2spec case | fails on | why |\")", h2specPage)
	}
	return passTLS, passH2C, total, exceptions
}

// TestH2Spec runs h2spec, the HTTP/2 conformance suite, against the
// gateway's TLS listener and its h2c internal listener: every case passes
// but those docs/tls-and-fleets.md lists as exceptions for that listener,
// each of those fails (an exception that passes is a stale page), and the
// counts are the page's.
func TestH2Spec(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("h2spec runs with go tool: %v", err)
	}
	passTLS, passH2C, total, exceptions := h2specDocs(t)
	g := startH2Gateway(t, "")
	for _, l := range []struct {
		field, addr string
		tls         bool
		pass        int
	}{{"server.listen", g.addr, true, passTLS}, {"server.internal_listen", g.h2c, false, passH2C}} {
		t.Run(l.field, func(t *testing.T) {
			cases := runH2Spec(t, l.addr, l.tls)
			passed := 0
			for _, c := range cases {
				listed := slices.Contains(exceptions[c.id], l.field)
				switch {
				case c.result == "pass":
					passed++
					if listed {
						t.Errorf("%s (%s) passes, but the page lists it as failing on %s", c.id, c.desc, l.field)
					}
				case !listed:
					t.Errorf("%s (%s): %s, and the page lists no exception for it on %s:\n%s", c.id, c.desc, c.result, l.field, html.UnescapeString(c.why))
				}
			}
			if passed != l.pass || len(cases) != total {
				t.Errorf("h2spec on %s: %d of %d cases pass; the page says %d of %d", l.field, passed, len(cases), l.pass, total)
			}
		})
	}
}
