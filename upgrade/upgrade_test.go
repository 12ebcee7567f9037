package upgrade_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/upgrade"
)

// The tests start the test binary itself as the new process: TestMain runs
// the role UPGRADE_TEST_ROLE names instead of the tests.
func TestMain(m *testing.M) {
	if role := os.Getenv("UPGRADE_TEST_ROLE"); role != "" {
		os.Exit(child(role))
	}
	os.Exit(m.Run())
}

// child is the new process of the tests: "serve" takes the inherited
// sockets of server.listen (at UPGRADE_TEST_ADDR) and server.listen/udp,
// answers "child" on TCP, says it is ready, echoes datagrams once the
// packets are released and answers /done with whether its predecessor is
// done; "fail" says why it fails and exits 1; "crash" exits 2 without a
// word; "hang" never says anything.
func child(role string) int {
	p, err := upgrade.New(upgrade.Command{}, os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	switch role {
	case "fail":
		p.Fail(errors.New("server.listen: config says no"))
		return 1
	case "crash":
		return 2
	case "hang":
		time.Sleep(time.Hour)
		return 0
	}
	addr := os.Getenv("UPGRADE_TEST_ADDR")
	ln, err := p.Listen("server.listen", addr)
	if err != nil {
		p.Fail(err)
		return 1
	}
	pc, err := p.ListenPacket("server.listen/udp", addr)
	if err != nil {
		p.Fail(err)
		return 1
	}
	go func() {
		<-p.PacketsReleased()
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(append([]byte("child:"), buf[:n]...), from)
		}
	}()
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/done" {
			select {
			case <-p.PredecessorDone():
				io.WriteString(w, "done")
			default:
				io.WriteString(w, "not done")
			}
			return
		}
		io.WriteString(w, "child")
	}))
	if f := p.Inherit("relay"); f != nil {
		f.Close()
		p.TakesPackets()
	}
	if err := p.Ready(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	time.Sleep(time.Hour) // the test kills it
	return 0
}

// parent is the running process of a test: a TCP listener answering
// "parent" and a UDP socket on the same port.
type parent struct {
	p   *upgrade.Process
	ln  *net.TCPListener
	pc  *net.UDPConn
	srv *http.Server
}

func newParent(t *testing.T, role string, env ...string) *parent {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", ln.Addr().String())
	if err != nil {
		t.Skipf("UDP port of %s taken: %v", ln.Addr(), err)
	}
	env = append(append(os.Environ(), "UPGRADE_TEST_ROLE="+role, "UPGRADE_TEST_ADDR=127.0.0.1:0"), env...)
	p, err := upgrade.New(upgrade.Command{Path: exe, Args: []string{exe}, Env: env}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "parent") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close(); pc.Close() })
	return &parent{p: p, ln: ln.(*net.TCPListener), pc: pc.(*net.UDPConn), srv: srv}
}

func (pa *parent) sockets(t *testing.T) []upgrade.Socket {
	t.Helper()
	ls, err := upgrade.SocketOf("server.listen", pa.ln)
	if err != nil {
		t.Fatal(err)
	}
	us, err := upgrade.SocketOf("server.listen/udp", pa.pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ls.File.Close(); us.File.Close() })
	return []upgrade.Socket{ls, us}
}

func (pa *parent) start(t *testing.T, timeout time.Duration, more ...upgrade.Socket) (*upgrade.Successor, error) {
	t.Helper()
	s, err := pa.p.Start(context.Background(), append(pa.sockets(t), more...), timeout)
	if s != nil {
		t.Cleanup(func() {
			if pr, err := os.FindProcess(s.Pid); err == nil {
				pr.Kill()
				pr.Wait()
			}
		})
	}
	return s, err
}

func get(url string) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestHandOver: with new connections arriving all the time, the new
// process takes the socket over and none is refused; a datagram sent
// while neither reads waits in the socket for the new process; the new
// process learns when the old one is done.
func TestHandOver(t *testing.T) {
	pa := newParent(t, "serve")
	url := "http://" + pa.ln.Addr().String()
	var served, failed atomic.Int64
	var lastErr atomic.Value
	stop := make(chan struct{})
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := get(url + "/"); err != nil {
				failed.Add(1)
				lastErr.Store(err)
			} else {
				served.Add(1)
			}
		}
	}()
	s, err := pa.start(t, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if s.TakesPackets {
		t.Error("the new process takes packets, without a relay")
	}
	// Handing the socket on left it non-blocking: a blocking accept would
	// hold a thread that closing the listener cannot wake.
	rc, _ := pa.ln.SyscallConn()
	rc.Control(func(fd uintptr) {
		if fl, err := unix.FcntlInt(fd, unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK == 0 {
			t.Errorf("the listener's flags after Start: %#x, %v; want O_NONBLOCK", fl, err)
		}
	})
	// The old process stops accepting once the new one serves (and serves
	// what it accepted: its server runs on).
	if err := pa.ln.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if body, err := get(url + "/"); err != nil || body != "child" {
			t.Fatalf("after the old process stopped: %q, %v; want child", body, err)
		}
	}
	close(stop)
	testkit.Recv(t, loadDone, time.Minute, "the load stopping")
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d requests failed during the hand-over, the last: %v", n, n+served.Load(), lastErr.Load())
	}

	// A datagram sent while neither process reads the UDP socket is read
	// by the new one once the old one releases it.
	c, err := net.Dial("udp", pa.pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if got, _ := get(url + "/done"); got != "not done" {
		t.Errorf("/done before Close: %q, want not done", got)
	}
	if err := s.ReleasePackets(); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 100)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "child:hello" {
		t.Errorf("echo: %q, %v; want child:hello", buf[:n], err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for got, _ := get(url + "/done"); got != "done"; got, _ = get(url + "/done") {
		if time.Now().After(deadline) {
			t.Fatalf("/done after Close: %q, want done", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTakesPackets: a new process that inherits a relay and says it takes
// the old one's packets is said to by Start.
func TestTakesPackets(t *testing.T) {
	pa := newParent(t, "serve")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s, err := pa.start(t, time.Minute, upgrade.Socket{Name: "relay", File: w})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !s.TakesPackets {
		t.Error("the new process inherited a relay and said so, yet Start says it does not take packets")
	}
}

// TestFailedStartKeepsServing: a new process that fails, says why or not,
// or never says it is ready, leaves the old one serving, and the error
// says why.
func TestFailedStartKeepsServing(t *testing.T) {
	for _, tc := range []struct {
		role, want string
		timeout    time.Duration
	}{
		{"fail", "server.listen: config says no (exit status 1)", time.Minute},
		{"crash", "it ended before it said it was ready (exit status 2)", time.Minute},
		{"hang", "it did not say it was ready within 1s, so it was killed (signal: killed)", time.Second},
	} {
		t.Run(tc.role, func(t *testing.T) {
			pa := newParent(t, tc.role)
			s, err := pa.start(t, tc.timeout)
			if err == nil || s != nil {
				t.Fatalf("Start: %v, %v; want an error", s, err)
			}
			if !strings.HasSuffix(err.Error(), tc.want) {
				t.Errorf("error: %v\nwant it to end with %q", err, tc.want)
			}
			if body, err := get("http://" + pa.ln.Addr().String() + "/"); body != "parent" {
				t.Errorf("after the failed upgrade: %q, %v; want parent", body, err)
			}
		})
	}
}

// TestMissingBinary: a binary that is not there is said so.
func TestMissingBinary(t *testing.T) {
	p, err := upgrade.New(upgrade.Command{Path: "/nonexistent/gateway", Args: []string{"gateway"}}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Start(context.Background(), nil, time.Minute); err == nil || !strings.Contains(err.Error(), "/nonexistent/gateway") {
		t.Errorf("Start: %v; want an error naming the path", err)
	}
}

// TestMovedListener: a new process whose config moved the listener binds
// a new socket, and closes the inherited one it did not take.
func TestMovedListener(t *testing.T) {
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	moved := free.Addr().String()
	free.Close()
	pa := newParent(t, "serve", "UPGRADE_TEST_ADDR="+moved)
	if _, err := pa.start(t, time.Minute); err != nil {
		t.Fatal(err)
	}
	if body, err := get("http://" + moved + "/"); body != "child" {
		t.Errorf("at the new address: %q, %v; want child", body, err)
	}
	// The old address is the old process's alone now.
	if body, err := get("http://" + pa.ln.Addr().String() + "/"); body != "parent" {
		t.Errorf("at the old address: %q, %v; want parent", body, err)
	}
}

// TestNotify: a process says READY=1 with its PID on systemd's socket.
func TestNotify(t *testing.T) {
	sock := t.TempDir() + "/notify"
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pa := newParent(t, "serve", upgrade.NotifyEnvVar+"="+sock)
	s, err := pa.start(t, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if want := fmt.Sprintf("READY=1\nMAINPID=%d", s.Pid); err != nil || string(buf[:n]) != want {
		t.Errorf("notified %q, %v; want %q", buf[:n], err, want)
	}
}

// TestBadInheritance: a value of the variable that does not name the
// pipes, or repeats a descriptor, keeps the process from starting.
func TestBadInheritance(t *testing.T) {
	for _, spec := range []string{
		"server.listen=5",
		"ready=3,gone=3",
		"ready=3,gone=4,server.listen=2",
		"ready=3,gone=4,server.listen",
		"ready=3,gone=4,ready=5",
	} {
		_, err := upgrade.New(upgrade.Command{}, func(k string) string {
			if k == upgrade.EnvVar {
				return spec
			}
			return ""
		})
		if err == nil {
			t.Errorf("%q: no error", spec)
		}
	}
}
