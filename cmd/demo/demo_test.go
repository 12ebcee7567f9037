package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/browser"
	"github.com/linkgate/linkgate/internal/testkit"
)

func TestMain(m *testing.M) { os.Exit(browser.Run(m)) }

// demoWithin bounds demo.sh's start: a build that finds the packages the
// tests compiled in the build cache, then the gateway and the visits. A
// cold build on a loaded 2-core machine takes minutes.
const demoWithin = 15 * time.Minute

// TestDemo runs demo.sh as a person would, on free ports and in a folder
// of its own, and checks what it prints: the link page, the all-links page
// and the share link answer, and they show countries, unique visitors,
// bots and the three demo links, in the API's answers and, with Chromium,
// on the pages as a browser draws them. SIGTERM then stops everything
// demo.sh started.
func TestDemo(t *testing.T) {
	dir := t.TempDir()
	gw, admin, upstream := testkit.FreeAddr(t), testkit.FreeAddr(t), testkit.FreeAddr(t)
	cmd := exec.Command("bash", "../../demo.sh")
	cmd.Env = append(os.Environ(),
		"DEMO_DIR="+filepath.Join(dir, "data"), "DEMO_BIN="+filepath.Join(dir, "bin"),
		"DEMO_LISTEN="+gw, "DEMO_ADMIN_LISTEN="+admin, "DEMO_UPSTREAM_LISTEN="+upstream,
		"DEMO_SEED_FOR=0s", "LINKGATE_ADMIN_TOKEN=demo-test-token",
		"LINKGATE_UNIQUES_SECRET=", "LINKGATE_SHARE_KEY=", // demo.sh makes them
		"GOFLAGS="+goflags(t), "CGO_ENABLED="+goEnv(t, "CGO_ENABLED"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr testkit.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the script and all it started
		}
		go func() {
			for range lines { // until the processes' stdout is closed
			}
		}()
	})

	// What demo.sh prints, up to the share link.
	printed := map[string]string{}
	var said []string
	deadline := time.After(demoWithin)
	for printed["share link"] == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("demo.sh ended before printing its share link: %v\nstdout:\n%s\nstderr:\n%s", <-exited, strings.Join(said, "\n"), stderr.String())
			}
			said = append(said, l)
			t.Log(l)
			for _, what := range []string{"link page", "all links", "share link"} {
				if rest, ok := strings.CutPrefix(l, "demo: "+what); ok {
					printed[what] = rest[strings.LastIndex(rest, " ")+1:]
				}
			}
		case <-deadline:
			t.Fatalf("no share link printed within %v:\n%s\nstderr:\n%s", demoWithin, strings.Join(said, "\n"), stderr.String())
		}
	}
	base := "http://" + gw
	if want := base + "/stats/go"; printed["link page"] != want {
		t.Errorf("link page %q, want %q", printed["link page"], want)
	}
	if want := base + "/stats"; printed["all links"] != want {
		t.Errorf("all links %q, want %q", printed["all links"], want)
	}
	for _, s := range []string{"LINKGATE_UNIQUES_SECRET=", "LINKGATE_SHARE_KEY="} {
		if !slices.ContainsFunc(said, func(l string) bool { i := strings.Index(l, s); return i >= 0 && len(l) >= i+len(s)+64 }) {
			t.Errorf("demo.sh did not print the %s it made (64 hex digits)", strings.TrimSuffix(s, "="))
		}
	}

	checkPages(t, printed)
	t.Run("in a browser", func(t *testing.T) { checkPagesInBrowser(t, printed) })

	// SIGTERM to the script: it stops the gateway and the service, and
	// exits as a script stopped by SIGTERM does.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 143 {
			t.Errorf("demo.sh after SIGTERM: %v, want exit status 143", err)
		}
	case <-time.After(testkit.Slack(2 * time.Minute)):
		t.Fatal("demo.sh did not end within 2 minutes of SIGTERM")
	}
	stopped = true
	if strings.Contains(stderr.String(), "WARNING: DATA RACE") {
		t.Errorf("a process demo.sh started reported a data race:\n%s", stderr.String())
	}
	if err := syscall.Kill(-cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Errorf("processes demo.sh started outlived it (kill -0 of its group: %v)", err)
	}
}

// goflags returns the go command's flags for demo.sh's build: the tests'
// own, and the race detector when they run with it, so that the build
// takes the packages the tests compiled from the build cache (with cgo as
// the tests have it, CGO_ENABLED beside).
func goflags(t *testing.T) string {
	flags := goEnv(t, "GOFLAGS")
	if testkit.Race {
		flags = strings.TrimSpace(flags + " -race")
	}
	return flags
}

// goEnv returns the go command's setting of name.
func goEnv(t *testing.T, name string) string {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// answer is the part of a /stats JSON answer the demo is checked by.
type answer struct {
	BotRangeTotal int `json:"bot_range_total"`
	Uniques       *struct {
		Count int `json:"count"`
	} `json:"uniques"`
	Breakdown map[string][]valueCount `json:"breakdown"`
	Top       []struct {
		ShortKey string `json:"short_key"`
	} `json:"top"`
}

// valueCount is a row of a breakdown.
type valueCount struct {
	Value string `json:"value"`
	Count int    `json:"count"`
}

// getJSON reads a /stats answer in JSON.
func getJSON(t *testing.T, url string) answer {
	t.Helper()
	resp, body := testkit.Do(t, http.MethodGet, url, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s", url, resp.Status, body)
	}
	var a answer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, body)
	}
	return a
}

// checkPages checks the printed URLs over HTTP: each is a chart page, and
// the JSON behind it has what the demo seeded.
func checkPages(t *testing.T, printed map[string]string) {
	for what, u := range printed {
		resp, _ := testkit.Do(t, http.MethodGet, u, nil, "Accept", "text/html")
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			t.Errorf("%s %s: %s %s, want the chart page", what, u, resp.Status, resp.Header.Get("Content-Type"))
		}
	}
	link := getJSON(t, printed["link page"]+"?format=json&last=1h&by=country,referrer,device")
	var countries []string
	for _, v := range link.Breakdown["country"] {
		if v.Value != "unknown" && v.Value != "other" {
			countries = append(countries, v.Value)
		}
	}
	if len(countries) < 5 || !slices.Contains(countries, "US") {
		t.Errorf("countries of go: %v, want at least 5 with US among them", link.Breakdown["country"])
	}
	if link.Uniques == nil || link.Uniques.Count < 20 {
		t.Errorf("unique visitors of go: %+v, want at least 20", link.Uniques)
	}
	if link.BotRangeTotal == 0 {
		t.Error("no bot visits to go")
	}
	for dim, want := range map[string][]string{"referrer": {"direct", "news.ycombinator.com"}, "device": {"desktop", "mobile", "tablet", "bot"}} {
		for _, w := range want {
			if !slices.ContainsFunc(link.Breakdown[dim], func(v valueCount) bool { return v.Value == w }) {
				t.Errorf("%s of go: %v, want %s among them", dim, link.Breakdown[dim], w)
			}
		}
	}

	all := getJSON(t, printed["all links"]+"?format=json&last=1h&top=10")
	var top []string
	for _, l := range all.Top {
		top = append(top, l.ShortKey)
	}
	for _, k := range []string{"go", "gh", "ex"} {
		if !slices.Contains(top, k) {
			t.Errorf("top links %v, want %s among them", top, k)
		}
	}
	if all.Uniques == nil || all.Uniques.Count < 20 {
		t.Errorf("unique visitors of all links: %+v, want at least 20", all.Uniques)
	}

	// The share link's token is checked: as printed it reads the link,
	// altered it is refused.
	share := printed["share link"]
	if a := getJSON(t, share+"&format=json&by=country"); len(a.Breakdown["country"]) == 0 {
		t.Errorf("the share link's JSON has no countries: %+v", a)
	}
	// The signature's first character: all six of its bits are the
	// signature's (the last character's are not all).
	i := strings.LastIndex(share, ".") + 1
	swap := "A"
	if share[i] == 'A' {
		swap = "B"
	}
	bad := share[:i] + swap + share[i+1:]
	resp, body := testkit.Do(t, http.MethodGet, bad+"&format=json", nil)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the share link with its signature altered: %s %s, want 401", resp.Status, body)
	}
}

// checkPagesInBrowser opens the printed pages in headless Chromium and
// waits for what a person would look for: the countries table and the
// unique visitors on the link's page and on the share link's, the demo
// links at the top of the all-links page.
func checkPagesInBrowser(t *testing.T, printed map[string]string) {
	b := browser.Shared(t)
	for _, what := range []string{"link page", "share link"} {
		p := b.NewPage(t, browser.Options{Width: 1280, Height: 800})
		p.Navigate(printed[what])
		p.WaitFor(time.Minute, what+": countries", `document.querySelectorAll("#dim-country tbody tr[data-value]").length >= 5 && document.querySelector('#dim-country tr[data-value="US"]')`)
		p.WaitFor(time.Minute, what+": unique visitors", `!document.getElementById("uniques-card").hidden && parseInt(document.getElementById("uniques").textContent.replace(/\D/g, "")) > 0`)
		if errs := p.Errors(); len(errs) > 0 {
			t.Errorf("%s: page errors %q", what, errs)
		}
	}
	p := b.NewPage(t, browser.Options{Width: 1280, Height: 800})
	p.Navigate(printed["all links"])
	p.WaitFor(time.Minute, "all links: the demo links on top", `["go", "gh", "ex"].every(k => [...document.querySelectorAll("#top tbody tr")].some(tr => tr.textContent.includes(k)))`)
}
