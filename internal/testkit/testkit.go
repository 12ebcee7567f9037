// Package testkit holds the one copy of each helper that the tests of
// several packages share: an HTTP client that shows redirects, RFC 9457
// problem answers, polling, small upstreams, addresses nothing listens on,
// config files written atomically, a gateway config on free ports, the log
// records a test matches, Prometheus series, a real memcached server, a real
// Cassandra node or cluster (../shared/cassandra), an h2spec run, tmpfs volumes for disk
// faults, and the machine's pace that stretches the few durations a test
// bounds (pace.go).
//
// It is imported by tests only, and imports no linkgate package, so that
// the tests of every package can import it.
package testkit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// AdminToken is the admin token of BaseConfig's gateway, read from the
// environment variable LG_TEST_ADMIN_TOKEN.
const AdminToken = "s3cret-admin"

// DialTimeout is the upstream.dial_timeout of BaseConfig's gateway, which
// is also its health checks' timeout: 2 s stretched by the machine's pace
// (a check a loaded machine answers late would take a live target out),
// within the field's bound of a minute. It is taken once per test binary,
// at its first use: the same config written twice must read the same, or
// a reload would see the upstream changed.
var DialTimeout = sync.OnceValue(func() time.Duration { return min(Slack(2*time.Second), time.Minute) })

// BaseConfig is a gateway on free ports in front of targets, with the
// limiter and analytics at rest.
func BaseConfig(targets ...string) string {
	return fmt.Sprintf(`server:
  listen: 127.0.0.1:0
  trusted_proxies: [127.0.0.1/32]
  shutdown_timeout: 10s
admin:
  listen: 127.0.0.1:0
  token_env: LG_TEST_ADMIN_TOKEN
upstream:
  targets: [%s]
  dial_timeout: %v
  response_header_timeout: 10s # the machine's load must not turn a slow answer into a 504
  health_check: {path: /healthz, interval: 100ms}
analytics:
  enabled: false
`, strings.Join(targets, ", "), DialTimeout())
}

// WriteFile replaces path with s atomically (a temporary file renamed), as
// a careful operator or a config tool would.
func WriteFile(t testing.TB, path, s string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Client does not follow redirects: the tests look at them. An exchange,
// its body included, fails after 20 s stretched by the machine's pace: a
// server that never answers fails the test, a slow machine does not.
var Client = &http.Client{
	Transport:     paced{20 * time.Second, http.DefaultTransport},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// paced is a RoundTripper whose exchanges end after Slack(d), the
// response's body included, as http.Client.Timeout ends them after a
// fixed time.
type paced struct {
	d    time.Duration
	next http.RoundTripper
}

func (p paced) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(req.Context(), Slack(p.d))
	resp, err := p.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = OnClose(resp.Body, cancel)
	return resp, nil
}

// OnClose is rc that also calls then once closed: a response body that
// ends its exchange's context or its own transport.
func OnClose(rc io.ReadCloser, then func()) io.ReadCloser { return onClose{rc, then} }

type onClose struct {
	io.ReadCloser
	then func()
}

func (b onClose) Close() error {
	err := b.ReadCloser.Close()
	b.then()
	return err
}

// Do sends a request with the header pairs hdr (name, value, ...) with
// Client and returns the answer with its whole body; a transport error
// fails t.
func Do(t testing.TB, method, url string, body io.Reader, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return Send(t, req)
}

// Navigation returns the header pairs of a browser's navigation with the
// User-Agent ua, for Do: what a person's click sends besides it
// (Accept-Language, an Accept naming text/html, Sec-Fetch-Mode navigate),
// so that the analytics class the visit as human (package visitclass).
func Navigation(ua string) []string {
	return []string{"User-Agent", ua, "Accept", "text/html,application/xhtml+xml,*/*;q=0.8",
		"Accept-Language", "en-US,en;q=0.9", "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document"}
}

// Send sends req with Client and returns the answer with its body; an
// error sending it fails t. The body is what arrived before an error
// reading it: a server may reset the connection after its answer (a 431
// to a client still sending its headers), and the callers check what the
// body holds.
func Send(t testing.TB, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// Problem checks that resp, whose body is body, is an RFC 9457 problem
// with the given status: Content-Type application/problem+json and a JSON
// object whose status member is status and whose title is not empty. It
// returns the object's members for the caller's own checks; a mismatch
// fails t at once.
func Problem(t testing.TB, resp *http.Response, body string, status int) map[string]any {
	t.Helper()
	if resp.StatusCode != status || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("got %d %q %q, want %d application/problem+json", resp.StatusCode, resp.Header.Get("Content-Type"), body, status)
	}
	var p map[string]any
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("problem body %q: %v", body, err)
	}
	if p["status"] != float64(status) || p["title"] == nil || p["title"] == "" {
		t.Fatalf("problem body %q: want the status %d and a title", body, status)
	}
	return p
}

// DeadAddr returns a loopback address (host:port) that refuses
// connections until the test ends: a socket holds the port, bound but not
// listening, so that no other server of a test running meanwhile can be
// given it.
func DeadAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

// FreeAddr returns a loopback address (host:port) for a server the test
// starts later: a port that was free a moment ago, on an address of
// 127.0.0.0/8 picked at random, not 127.0.0.1. Connections to loopback
// servers leave from 127.0.0.1, from ports the kernel hands out again at
// any time, so on 127.0.0.1 one of them could take the port before the
// server binds it (TestDemo lost its admin port so, while demo.sh built
// the binaries, on a machine running every package's tests at once); on
// another address only a server bound to all addresses could.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ip := netip.AddrFrom4([4]byte{127, byte(1 + rand.IntN(254)), byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
	l, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// ServeTCP listens on a free loopback port until the test ends and runs
// handle on a goroutine of its own for each connection it accepts, the
// first numbered 0. At the end it closes the listener and the connections
// and waits for the handlers. It returns the address.
func ServeTCP(t testing.TB, handle func(id int, c net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var conns sync.Map
	t.Cleanup(func() {
		l.Close()
		conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		wg.Wait()
	})
	wg.Go(func() {
		for id := 0; ; id++ {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			wg.Go(func() { handle(id, c) })
		}
	})
	return l.Addr().String()
}

// Counts tallies strings, such as an upstream's requests by path. It is
// safe for concurrent use; its zero value is ready.
type Counts struct {
	mu sync.Mutex
	n  map[string]int
}

// Add counts k once more.
func (c *Counts) Add(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[k]++
}

// Count is how many times k was added.
func (c *Counts) Count(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

// Serve runs serve on a free loopback port until the test ends, as
// ServeOn does, and returns the address.
func Serve(t testing.TB, serve func(net.Listener) error, stop func() error) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ServeOn(t, l, serve, stop)
	return l.Addr().String()
}

// ServeOn runs serve(l) (a server's Serve) until the test ends, then calls
// stop (its Close), closes l and waits, with a deadline, for serve to
// return.
func ServeOn(t testing.TB, l net.Listener, serve func(net.Listener) error, stop func() error) {
	done := make(chan struct{})
	go func() { serve(l); close(done) }()
	t.Cleanup(func() {
		stop()
		l.Close()
		Recv(t, done, 10*time.Second, "the server's Serve returning after its Close")
	})
}

// AcceptLoop is the Serve, for Serve and ServeOn, of a server that takes
// its connections one by one (h2serve's ServeConn): it hands each
// connection l accepts to serve on a goroutine of its own, until Accept
// fails.
func AcceptLoop(serve func(net.Conn)) func(net.Listener) error {
	return func(l net.Listener) error {
		for {
			nc, err := l.Accept()
			if err != nil {
				return err
			}
			go serve(nc)
		}
	}
}

// StartCommand runs a command's run function (run(ctx, args, stdout), as
// cmd/tinyurl and the bench programs have it) with args on a goroutine and
// waits for its first line of output, "ARGS[0] listening on ADDR". It
// returns ADDR, the scanner of the rest of the output, and the channel
// run's error arrives on, once the output is closed. Cancel ctx to stop
// the command; a first line that is not the address fails t.
func StartCommand(t testing.TB, ctx context.Context, run func(context.Context, []string, io.Writer) error, args ...string) (addr string, rest *bufio.Scanner, done <-chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, args, pw)
		pw.Close()
	}()
	lines := bufio.NewScanner(pr)
	if !lines.Scan() {
		t.Fatalf("%s: no output: %v", args[0], <-errc)
	}
	addr, ok := strings.CutPrefix(lines.Text(), args[0]+" listening on ")
	if !ok {
		t.Fatalf("%s: first line %q, want the address", args[0], lines.Text())
	}
	return addr, lines, errc
}

// RawHTTP serves HTTP/1.1 on a free loopback port until the test ends,
// reading each request with http.ReadRequest and letting serve write
// whatever bytes it likes as the answer; serve returns false to close the
// connection. Health checks (GET /healthz) are answered 200 apart. It
// returns the address and the count of connections accepted.
func RawHTTP(t testing.TB, serve func(c net.Conn, br *bufio.Reader, req *http.Request) bool) (string, *atomic.Int64) {
	t.Helper()
	conns := new(atomic.Int64)
	addr := ServeTCP(t, func(_ int, c net.Conn) {
		conns.Add(1)
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if req.URL.Path == "/healthz" {
				io.Copy(io.Discard, req.Body)
				io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
				continue
			}
			if !serve(c, br, req) {
				return
			}
		}
	})
	return addr, conns
}

// Body GETs url and returns the answer's body.
func Body(t testing.TB, url string) string {
	t.Helper()
	_, b := Do(t, "GET", url, nil)
	return b
}

// Result is the answer to a request sent by InFlight.
type Result struct {
	Status int
	Body   string
	Err    error
}

// InFlight sends GET url in the background; its answer arrives on the
// channel.
func InFlight(url string) <-chan Result {
	res := make(chan Result, 1)
	go func() {
		resp, err := Client.Get(url)
		if err != nil {
			res <- Result{Err: err}
			return
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- Result{resp.StatusCode, string(b), err}
	}()
	return res
}

// Eventually polls cond until it holds, and fails t naming what was
// awaited if it does not hold within Slack(within): within is the time an
// idle machine needs at most. It polls every millisecond at first, then
// less often, up to every 20 ms: a short wait costs little, a long one
// does not spin.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	pause := time.Millisecond
	for !cond() {
		if waited := time.Since(start); waited > within && waited > Slack(within) {
			t.Fatalf("not within %v (pace %.1f): %s", waited.Round(time.Millisecond), Pace(), what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// Named is an upstream that answers "name" on every path, healthz
// included; it stops at the end of the test.
func Named(t testing.TB, name string) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(name))
	}))
	t.Cleanup(s.Close)
	return s
}

// Dialed is an upstream running h that counts the connections it
// accepts; it stops at the end of the test.
func Dialed(t testing.TB, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	var conns atomic.Int64
	s := httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s, &conns
}

// Runs writes the list as with each run of equal items once, counted, as
// "401(upstream)×5 200(upstream)×1": what a test logs of many answers.
func Runs(as []string) string {
	var out []string
	for i := 0; i < len(as); {
		j := i
		for j < len(as) && as[j] == as[i] {
			j++
		}
		out = append(out, fmt.Sprintf("%s×%d", as[i], j-i))
		i = j
	}
	return strings.Join(out, " ")
}
