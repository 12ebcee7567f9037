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

	"github.com/linkgate/linkgate/internal/testkit"
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
	cutIncr atomic.Int32                  // incr commands still to cut: each closes its connection, not passed on
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
	p := &proxy{verbs: map[string]int{}}
	p.Addr = testkit.ServeTCP(t, func(_ int, c net.Conn) {
		defer c.Close()
		b, err := net.Dial("tcp", backend)
		if err != nil {
			return
		}
		var answers sync.WaitGroup
		answers.Go(func() { io.Copy(c, b); c.Close() })
		p.pipe(b, c)
		b.Close()
		answers.Wait()
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
				if fields[0] == "incr" && p.cutIncr.Add(-1) >= 0 {
					return
				}
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
