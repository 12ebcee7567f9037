package main

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/linkgate/linkgate/internal/testkit"
)

// h2specPage is the page whose "HTTP/2 conformance" section gives h2spec's
// result and lists the cases that fail, with why.
const h2specPage = "../../docs/tls-and-fleets.md"

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
			cases := testkit.H2Spec(t, l.addr, l.tls, childEnv())
			passed := 0
			for _, c := range cases {
				listed := slices.Contains(exceptions[c.ID], l.field)
				switch {
				case c.Result == "pass":
					passed++
					if listed {
						t.Errorf("%s (%s) passes, but the page lists it as failing on %s", c.ID, c.Desc, l.field)
					}
				case !listed:
					t.Errorf("%s (%s): %s, and the page lists no exception for it on %s:\n%s", c.ID, c.Desc, c.Result, l.field, c.Why)
				}
			}
			if passed != l.pass || len(cases) != total {
				t.Errorf("h2spec on %s: %d of %d cases pass; the page says %d of %d", l.field, passed, len(cases), l.pass, total)
			}
		})
	}
}
