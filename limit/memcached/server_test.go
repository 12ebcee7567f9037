package memcached_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

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
