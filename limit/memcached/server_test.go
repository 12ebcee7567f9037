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
	writes  map[string]int // client writes (reads of the proxy that found nothing buffered), by their first verb
	getKeys atomic.Int64
	hold    atomic.Pointer[chan struct{}] // when set, get commands wait for it to close
	holdAns atomic.Pointer[chan struct{}] // when set, the answers to get commands wait for it to close
	held    atomic.Int32                  // answers to get commands waiting now
	cutIncr atomic.Int32                  // incr commands still to cut: each closes its connection, not passed on
	// beforeAdd, when set, is called with the key of each add command
	// before the command is passed on (another gateway adding it first).
	beforeAdd atomic.Pointer[func(key string)]
}

// HoldGets makes get commands wait (counted, not yet passed on) until the
// returned function is called.
func (p *proxy) HoldGets() (release func()) {
	ch := make(chan struct{})
	p.hold.Store(&ch)
	var once sync.Once
	return func() { once.Do(func() { p.hold.Store(nil); close(ch) }) }
}

// HoldGetAnswers makes the answers to get commands wait (memcached has
// answered, the client has not the answer yet) until the returned
// function is called. Other commands' answers pass.
func (p *proxy) HoldGetAnswers() (release func()) {
	ch := make(chan struct{})
	p.holdAns.Store(&ch)
	var once sync.Once
	return func() { once.Do(func() { p.holdAns.Store(nil); close(ch) }) }
}

// Held returns how many answers to get commands HoldGetAnswers holds now.
func (p *proxy) Held() int { return int(p.held.Load()) }

func startProxy(t testing.TB, backend string) *proxy {
	t.Helper()
	p := &proxy{verbs: map[string]int{}, writes: map[string]int{}}
	p.Addr = testkit.ServeTCP(t, func(_ int, c net.Conn) {
		defer c.Close()
		b, err := net.Dial("tcp", backend)
		if err != nil {
			return
		}
		var getting atomic.Bool // the connection's last command is a get (a get is never pipelined with other commands)
		var answers sync.WaitGroup
		answers.Go(func() { io.Copy(answerWriter{p, c, &getting}, b); c.Close() })
		p.pipe(b, c, &getting)
		b.Close()
		answers.Wait()
	})
	return p
}

// answerWriter passes a connection's answers on, holding those to a get
// while HoldGetAnswers holds.
type answerWriter struct {
	p       *proxy
	w       io.Writer
	getting *atomic.Bool
}

func (a answerWriter) Write(b []byte) (int, error) {
	if h := a.p.holdAns.Load(); h != nil && a.getting.Load() {
		a.p.held.Add(1)
		<-*h
		a.p.held.Add(-1)
	}
	return a.w.Write(b)
}

// pipe copies client lines to the backend, counting commands and noting
// in getting whether the last was a get. Data blocks of storage commands
// are counts, which never start with a verb.
func (p *proxy) pipe(dst io.Writer, src io.Reader, getting *atomic.Bool) {
	r := bufio.NewReader(src)
	for {
		fresh := r.Buffered() == 0 // the line starts a read of what the client wrote
		line, err := r.ReadString('\n')
		if line != "" {
			fields := strings.Fields(line)
			if len(fields) > 0 {
				p.mu.Lock()
				p.verbs[fields[0]]++
				if fresh {
					p.writes[fields[0]]++
				}
				p.mu.Unlock()
				if fields[0] == "incr" && p.cutIncr.Add(-1) >= 0 {
					return
				}
				if f := p.beforeAdd.Load(); f != nil && fields[0] == "add" && len(fields) > 1 {
					(*f)(fields[1])
				}
				getting.Store(fields[0] == "get" || fields[0] == "gets")
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

// Writes returns how many times the client wrote commands starting
// with verb: one per round trip of pipelined commands (a write of a few
// hundred bytes on loopback reaches the proxy in one read).
func (p *proxy) Writes(verb string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.writes[verb]
}

func (p *proxy) Reset() {
	p.mu.Lock()
	clear(p.verbs)
	clear(p.writes)
	p.mu.Unlock()
	p.getKeys.Store(0)
}

func (p *proxy) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprint(p.verbs)
}
