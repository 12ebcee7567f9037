package main

import (
	"net"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// TestFailedStartStartsNothing: a start that cannot listen (its admin port
// held by another process) exits 1 naming the field and the reason, having
// started nothing: no line of the analytics pipeline, which once started,
// was stopped at once and logged a spurious "flush failed ... context
// canceled" before the real error.
func TestFailedStartStartsNothing(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	dir := t.TempDir()
	cfg := strings.Replace(testkit.BaseConfig("http://127.0.0.1:1"), "admin:\n  listen: 127.0.0.1:0", "admin:\n  listen: "+held.Addr().String(), 1)
	cfg = strings.Replace(cfg, "  enabled: false\n", "  enabled: true\n  embedded: {path: "+dir+"/analytics}\n", 1)
	path := filepath.Join(dir, "gateway.yaml")
	testkit.WriteFile(t, path, cfg)
	if out, err := exec.Command(bin.gateway, "check-config", path).CombinedOutput(); err != nil {
		t.Fatalf("check-config: %v %s (a port in use is the machine's state, not the file's)", err, out)
	}
	cmd := exec.Command(bin.gateway, "-config", path, "-log-format", "json")
	var stdout, stderr testkit.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("start with the admin port in use: %v, want exit status 1\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if e := stderr.String(); !strings.Contains(e, "admin.listen") || !strings.Contains(e, "address already in use") {
		t.Errorf("stderr %q does not name admin.listen and why", e)
	}
	if out := stdout.String(); out != "" {
		t.Errorf("the failed start logged, so it had started something:\n%s", out)
	}
}

// TestCheckConfigRefusesUnbindable: check-config, run as a process as an
// operator runs it, refuses the listen addresses that once passed it and
// then failed the start, naming the field and its line.
func TestCheckConfigRefusesUnbindable(t *testing.T) {
	base := testkit.BaseConfig("http://127.0.0.1:1")
	dir := t.TempDir()
	if l, err := net.Listen("tcp", "198.51.100.7:0"); err == nil {
		l.Close()
		t.Skip("198.51.100.7 is an address of this machine")
	}
	for i, tc := range []struct{ yaml, want string }{
		{strings.Replace(base, "listen: 127.0.0.1:0\n  trusted", "listen: 198.51.100.7:8080\n  trusted", 1), ".yaml:2: server.listen:"},
		{strings.Replace(base, "admin:\n  listen: 127.0.0.1:0", "admin:\n  listen: 527.0.0.1:9090", 1), ".yaml:6: admin.listen:"},
	} {
		path := filepath.Join(dir, "gw"+string(rune('a'+i))+".yaml")
		testkit.WriteFile(t, path, tc.yaml)
		out, err := exec.Command(bin.gateway, "check-config", path).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("check-config: %v %s; want exit 1 naming %q", err, out, tc.want)
		}
	}
}

// TestVersion: "gateway version", the real binary, prints the module, its
// version, the revision (or says why it is unknown) and the toolchain: not
// only "dev".
func TestVersion(t *testing.T) {
	out, err := exec.Command(bin.gateway, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("version: %v %s", err, out)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("version printed %d lines, want 4:\n%s", len(lines), out)
	}
	for i, want := range []string{"linkgate ", "module   github.com/linkgate/linkgate ", "revision ", "go       " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d %q, want it to start with %q", i+1, lines[i], want)
		}
	}
	if strings.Contains(lines[0], "dev ") || lines[0] == "linkgate dev" {
		t.Errorf("version %q", lines[0])
	}
	// The log line at start carries the same version.
	p, _ := startGateway(t, testkit.BaseConfig("http://127.0.0.1:1"))
	want := strings.TrimPrefix(lines[0], "linkgate ")
	if rev, ok := strings.CutPrefix(lines[2], "revision "); ok && !strings.HasPrefix(rev, "unknown") {
		want += " (" + rev[:min(12, len(rev))]
	}
	if n := p.logs.Count("listening", map[string]string{"server": "gateway"}); n != 1 || !strings.Contains(p.logs.String(), `"version":"`+want) {
		t.Errorf("the listening line does not carry the version %q:\n%s", want, p.logs.String())
	}
}

// TestAccessLogJSON: with -log-format json the access line is a JSON
// object like every other line, with its fields as keys.
func TestAccessLogJSON(t *testing.T) {
	cfg := strings.Replace(testkit.BaseConfig("http://127.0.0.1:1"), "  shutdown_timeout: 10s\n", "  shutdown_timeout: 10s\n  access_log: true\n", 1)
	p, _ := startGateway(t, cfg)
	testkit.Do(t, "GET", p.url("gateway", "/x"), nil, "User-Agent", "probe/1", "X-Forwarded-For", "198.51.100.20")
	testkit.Eventually(t, 5*time.Second, "a JSON access line", func() bool {
		return p.logs.Logged("access", map[string]string{
			"method": "GET", "path": "/x", "status": "502", "client": "198.51.100.20", "user_agent": "probe/1",
		})
	})
}
