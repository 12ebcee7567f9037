package memcached_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// mcServer is a real memcached the test started on a loopback port.
type mcServer struct {
	t    testing.TB
	bin  string
	Addr string // 127.0.0.1:port
	mu   sync.Mutex
	cmd  *exec.Cmd
}

// startMemcached starts memcached on a free loopback port and kills it when
// the test ends. It skips the test, loudly, if memcached is not installed.
func startMemcached(t testing.TB) *mcServer {
	t.Helper()
	bin, err := exec.LookPath("memcached")
	if err != nil {
		t.Skip("!!! SKIPPED: memcached not installed: run apt-get install -y memcached (CI must have it) !!!")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &mcServer{t: t, bin: bin, Addr: addr}
	s.Start()
	t.Cleanup(s.Kill)
	return s
}

// Start starts memcached on s.Addr and waits until it accepts connections.
func (s *mcServer) Start() {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	s.mu.Lock()
	defer s.mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for {
		args := []string{"-l", "127.0.0.1", "-p", port, "-U", "0", "-m", "64", "-t", "1"}
		if os.Geteuid() == 0 {
			args = append(args, "-u", "nobody") // memcached refuses to run as root
		}
		cmd := exec.Command(s.bin, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			s.t.Fatalf("start memcached: %v", err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		for {
			c, err := net.DialTimeout("tcp", s.Addr, 100*time.Millisecond)
			if err == nil {
				c.Close()
				s.cmd = cmd
				return
			}
			select {
			case <-exited: // port still held by a dying process: try again
			case <-time.After(10 * time.Millisecond):
				continue
			}
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("memcached on %s did not start: %s", s.Addr, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Pid returns the process id of the running memcached.
func (s *mcServer) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.Process.Pid
}

// Kill stops memcached (SIGKILL) and waits for it to exit.
func (s *mcServer) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	for range 100 { // wait until the port no longer accepts
		c, err := net.DialTimeout("tcp", s.Addr, 50*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		time.Sleep(10 * time.Millisecond)
	}
	s.cmd = nil
}

// proxy is a TCP proxy in front of a memcached that counts the commands
// clients send, by verb ("get", "gets", "incr", "add", ...), and the keys of
// get commands.
type proxy struct {
	Addr    string
	mu      sync.Mutex
	verbs   map[string]int
	getKeys atomic.Int64
	hold    atomic.Pointer[chan struct{}] // when set, get commands wait for it to close
}

// HoldGets makes get commands wait (counted, not yet passed on) until the
// returned function is called.
func (p *proxy) HoldGets() (release func()) {
	ch := make(chan struct{})
	p.hold.Store(&ch)
	var once sync.Once
	return func() { once.Do(func() { p.hold.Store(nil); close(ch) }) }
}

func startProxy(t testing.TB, backend string) *proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{Addr: l.Addr().String(), verbs: map[string]int{}}
	var wg sync.WaitGroup
	var conns sync.Map
	t.Cleanup(func() {
		l.Close()
		conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", backend)
			if err != nil {
				c.Close()
				continue
			}
			conns.Store(c, true)
			conns.Store(b, true)
			wg.Go(func() { io.Copy(c, b); c.Close() })
			wg.Go(func() { p.pipe(b, c); b.Close() })
		}
	})
	return p
}

// pipe copies client lines to the backend, counting commands. Data blocks
// of storage commands are counts, which never start with a verb.
func (p *proxy) pipe(dst io.Writer, src io.Reader) {
	r := bufio.NewReader(src)
	for {
		line, err := r.ReadString('\n')
		if line != "" {
			fields := strings.Fields(line)
			if len(fields) > 0 {
				p.mu.Lock()
				p.verbs[fields[0]]++
				p.mu.Unlock()
				if fields[0] == "get" || fields[0] == "gets" {
					p.getKeys.Add(int64(len(fields) - 1))
					if h := p.hold.Load(); h != nil {
						<-*h
					}
				}
			}
			if _, werr := io.WriteString(dst, line); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Count returns how many commands with the given verbs the proxy passed.
func (p *proxy) Count(verbs ...string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, v := range verbs {
		n += p.verbs[v]
	}
	return n
}

func (p *proxy) Reset() {
	p.mu.Lock()
	clear(p.verbs)
	p.mu.Unlock()
	p.getKeys.Store(0)
}

func (p *proxy) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprint(p.verbs)
}
