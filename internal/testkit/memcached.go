package testkit

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// Memcached is a real memcached server a test started on a loopback port.
// Kill stops it and Start brings it back on the same address, so that a
// test can make an outage. Its methods are safe for concurrent use.
type Memcached struct {
	Addr string // 127.0.0.1:port

	t      testing.TB
	bin    string
	mu     sync.Mutex
	cmd    *exec.Cmd     // nil while stopped
	exited chan struct{} // closed when cmd has exited
}

// StartMemcached starts memcached on a free loopback port, waits until it
// accepts connections and kills it when the test ends. It installs
// nothing: the binary is looked up on PATH (./test.sh installs it), and
// without it the test is skipped, loudly.
func StartMemcached(t testing.TB) *Memcached {
	t.Helper()
	bin, err := exec.LookPath("memcached")
	if err != nil {
		t.Skip("*** SKIPPED: memcached is not installed (./test.sh installs it; CI must have it) ***")
	}
	m := &Memcached{t: t, bin: bin, Addr: FreeAddr(t)}
	m.Start()
	t.Cleanup(m.Kill)
	return m
}

// Start starts memcached on m.Addr and waits until it accepts connections.
// It fails the test if memcached does not answer within 5 s, stretched by
// the machine's pace.
func (m *Memcached) Start() {
	m.t.Helper()
	host, port, _ := net.SplitHostPort(m.Addr)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		return
	}
	within := Slack(5 * time.Second)
	deadline := time.Now().Add(within)
	for {
		// One worker thread and a small cache: the tests' load is light,
		// the machine is shared.
		args := []string{"-l", host, "-p", port, "-U", "0", "-m", "64", "-t", "1"}
		if os.Geteuid() == 0 {
			args = append(args, "-u", "nobody") // memcached refuses to run as root
		}
		cmd := exec.Command(m.bin, args...)
		DiesWithTheBinary(cmd)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			m.t.Fatalf("start memcached: %v", err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		for {
			c, err := net.DialTimeout("tcp", m.Addr, 100*time.Millisecond)
			if err == nil {
				c.Close()
				m.cmd, m.exited = cmd, exited
				return
			}
			select {
			case <-exited: // the port still held by the server just killed: try again
			case <-time.After(5 * time.Millisecond):
				if time.Now().Before(deadline) {
					continue
				}
				cmd.Process.Kill()
				<-exited
			}
			break
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("memcached on %s did not start within %v: %s", m.Addr, within, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pid returns the process id of the running memcached, 0 when stopped.
func (m *Memcached) Pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// Kill stops memcached with SIGKILL and returns once it has exited: its
// port refuses connections. Killing a stopped server does nothing.
func (m *Memcached) Kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil {
		return
	}
	m.cmd.Process.Kill()
	<-m.exited
	m.cmd, m.exited = nil, nil
}
