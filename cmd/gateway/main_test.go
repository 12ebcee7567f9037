package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// These tests run the real binary as a process, so that signals are real
// signals and nothing is shared with the test. TestMain builds it once
// (with -race when the tests run with it).
var bin struct{ gateway string }

// childEnv is the environment of every process the tests start: the test's
// own, with the race detector's exit pause off unless GORACE sets it. A
// binary built with -race sleeps a second at exit (GORACE atexit_sleep_ms,
// 1000 by default) to let other goroutines report; a race found while the
// process ran is reported at once all the same, and checkRaces fails the
// test on it.
func childEnv(extra ...string) []string {
	gorace := "atexit_sleep_ms=0"
	if v := os.Getenv("GORACE"); v != "" {
		gorace += " " + v // the later setting wins
	}
	return append(append(os.Environ(), "GORACE="+gorace), extra...)
}

// command is exec.Command with childEnv.
func command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = childEnv()
	return cmd
}

// checkRaces fails t if a child built with -race reported a data race on
// stderr: its exit status says so too, but not every test looks at it.
func checkRaces(t *testing.T, what, stderr string) {
	t.Helper()
	if strings.Contains(stderr, "WARNING: DATA RACE") {
		t.Errorf("%s reported a data race:\n%s", what, stderr)
	}
}

func TestMain(m *testing.M) {
	testkit.SetParallel(4) // the tests wait on child processes and flush intervals
	dir, err := os.MkdirTemp("", "linkgate-bin")
	if err != nil {
		panic(err)
	}
	bin.gateway = filepath.Join(dir, "gateway")
	args := []string{"build"}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "-o", bin.gateway, ".")...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the gateway:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// process is a running binary whose stdout is JSON log lines.
type process struct {
	t    *testing.T
	cmd  *exec.Cmd
	logs testkit.Logs
	mu   sync.Mutex
	addr map[string]string // "gateway", "admin" → host:port from the "listening" lines
	done chan struct{}
	err  error

	errOut testkit.Buffer // stderr
}

// stderrText returns what the process wrote to stderr.
func (p *process) stderrText() string { return p.errOut.String() }

// startProcess runs a binary and waits until it has logged a listening
// address for every name in wait.
func startProcess(t *testing.T, env []string, wait []string, name string, args ...string) *process {
	t.Helper()
	p := &process{t: t, cmd: exec.Command(name, args...), addr: map[string]string{}, done: make(chan struct{})}
	p.cmd.Env = childEnv(env...)
	testkit.DiesWithTheBinary(p.cmd)
	p.cmd.Stderr = io.MultiWriter(testWriter{t}, &p.errOut)
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		signalled := false
		for sc.Scan() {
			var line map[string]any
			p.mu.Lock()
			if json.Unmarshal(sc.Bytes(), &line) == nil {
				p.logs.Add(textOf(line))
				if line["msg"] == "listening" {
					p.addr[fmt.Sprint(line["server"])] = fmt.Sprint(line["addr"])
				}
			} else {
				t.Logf("%s: %s", filepath.Base(name), sc.Text())
				// The demo service announces itself in plain text.
				if server, addr, ok := strings.Cut(sc.Text(), " listening on http://"); ok {
					p.addr[server] = addr
				}
			}
			all := true
			for _, w := range wait {
				all = all && p.addr[w] != ""
			}
			p.mu.Unlock()
			if all && !signalled {
				signalled = true
				close(ready)
			}
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	select {
	case <-ready:
	case <-p.done:
		t.Fatalf("%s exited before listening: %v\n%s", name, p.err, p.logs.String())
	case <-time.After(testkit.Slack(60 * time.Second)):
		p.cmd.Process.Kill()
		t.Fatalf("%s did not start listening\n%s", name, p.logs.String())
	}
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(testkit.Slack(30 * time.Second)):
			p.cmd.Process.Kill()
			<-p.done
		}
		checkRaces(t, filepath.Base(name), p.errOut.String())
	})
	return p
}

func (p *process) url(name, path string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return "http://" + p.addr[name] + path
}

// textOf is a JSON log line with its values as text, as the in-process
// tests see them.
func textOf(line map[string]any) map[string]string {
	m := make(map[string]string, len(line))
	for k, v := range line {
		m[k] = fmt.Sprint(v)
	}
	return m
}

// stop sends SIGTERM and waits for the exit.
func (p *process) stop() error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(testkit.Slack(30 * time.Second)):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("did not exit within %v of SIGTERM", testkit.Slack(30*time.Second))
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Logf("stderr: %s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// startGateway writes cfg (YAML, listeners on port 0 are added when absent)
// to a file and runs the gateway on it.
func startGateway(t *testing.T, cfg string, env ...string) (*process, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	testkit.WriteFile(t, path, cfg)
	p := startProcess(t, env, []string{"gateway", "admin"}, bin.gateway, "-config", path, "-log-format", "json")
	return p, path
}
