package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/sys/unix"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// The tests here send SIGUSR2 to the real binary: a new process of the
// binary at the running one's path takes the listening sockets over
// (package upgrade). The gateway runs from a copy of the binary in a
// folder of the test's own, so that a test can put another binary there.

// upgradable is a gateway process started from a copy of the binary. Its
// standard output (a pipe that the processes it starts inherit, so that
// their lines come in the same stream) is read into logs; its stderr into
// errOut.
type upgradable struct {
	t      *testing.T
	exe    string // the copy of the binary it runs
	cmd    *exec.Cmd
	logs   testkit.Logs
	errOut testkit.Buffer
	exited chan struct{} // closed when the first process exited
	err    error         // its exit status, once exited is closed

	mu   sync.Mutex
	addr map[string]string // "gateway", "admin" → host:port, from the first "listening" lines
}

// subreaper makes the test process the parent of the processes orphaned
// below it: a gateway started by an upgrade outlives its parent, and the
// test reaps it (and learns its exit status) as its own child.
var subreaper = sync.OnceValue(func() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
})

// startUpgradable copies the binary to a folder of its own and runs it on
// the config file at path, waiting until it listens. With wrap, it runs
// wrap with the gateway's command line appended.
func startUpgradable(t *testing.T, path string, wrap []string, env ...string) *upgradable {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "gateway")
	copyFile(t, bin.gateway, exe, 0o755)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	u := &upgradable{t: t, exe: exe, addr: map[string]string{}, exited: make(chan struct{})}
	args := append(slices.Clone(wrap), exe, "-config", path, "-log-format", "json", "-watch=false")
	u.cmd = exec.Command(args[0], args[1:]...)
	u.cmd.Env = childEnv(append(env, "LG_TEST_ADMIN_TOKEN=upgrade-token")...)
	u.cmd.Stdout = w // a file, so that Wait returns when the process exits, not when every writer closed it
	u.cmd.Stderr = io.MultiWriter(testWriter{t}, &u.errOut)
	if err := u.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	go func() { u.err = u.cmd.Wait(); close(u.exited) }()
	go u.read(r)
	t.Cleanup(func() {
		for _, pid := range u.pids() {
			syscall.Kill(pid, syscall.SIGTERM)
		}
		u.reapAll()
		checkRaces(t, "gateway", u.errOut.String())
	})
	deadline := time.Now().Add(60 * time.Second)
	for u.url("admin", "") == "http://" {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway did not listen within 60s\n%s", u.logs.String())
		}
		select {
		case <-u.exited:
			t.Fatalf("the gateway exited before listening: %v\n%s", u.err, u.logs.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return u
}

func (u *upgradable) read(r io.ReadCloser) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			u.t.Logf("gateway: %s", sc.Text())
			continue
		}
		u.logs.Add(textOf(line))
		if line["msg"] == "listening" {
			u.mu.Lock()
			if name := fmt.Sprint(line["server"]); u.addr[name] == "" {
				u.addr[name] = fmt.Sprint(line["addr"])
			}
			u.mu.Unlock()
		}
	}
}

func (u *upgradable) url(name, path string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return "http://" + u.addr[name] + path
}

// successor returns the PID of the process the first one handed over to,
// from its log line, waiting for it up to a minute; 0 if none came.
func (u *upgradable) successor() int {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if rs := u.logs.Records("binary upgrade: the new process serves; this one stops accepting, drains and exits", nil); len(rs) > 0 {
			pid, _ := strconv.Atoi(rs[len(rs)-1]["pid"])
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0
}

// pids returns the PIDs of the gateway processes alive: the first one's
// and those of the processes it (or they) handed over to.
func (u *upgradable) pids() []int {
	var pids []int
	if u.cmd.ProcessState == nil {
		pids = append(pids, u.cmd.Process.Pid)
	}
	for _, r := range u.logs.Records("binary upgrade: the new process serves; this one stops accepting, drains and exits", nil) {
		if pid, err := strconv.Atoi(r["pid"]); err == nil && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(after, "Z")
}

// reap waits, up to 30 s, for pid (a process orphaned to the test, the
// subreaper) to exit and returns its status; -1 when it did not.
func reap(pid int) int {
	done := make(chan int, 1)
	go func() {
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
			done <- -2
			return
		}
		done <- ws.ExitStatus()
	}()
	select {
	case s := <-done:
		return s
	case <-time.After(testkit.Slack(30 * time.Second)):
		syscall.Kill(pid, syscall.SIGKILL)
		return -1
	}
}

// reapAll waits for every gateway process to exit.
func (u *upgradable) reapAll() {
	select {
	case <-u.exited:
	case <-time.After(testkit.Slack(30 * time.Second)):
		u.cmd.Process.Kill()
		<-u.exited
	}
	for _, r := range u.logs.Records("binary upgrade: the new process serves; this one stops accepting, drains and exits", nil) {
		if pid, err := strconv.Atoi(r["pid"]); err == nil {
			reap(pid)
		}
	}
}

// upgrade sends SIGUSR2 to the first process and returns the PID of the
// new one once the first one exited; the test fails when no new process
// serves, or the first one does not exit 0, within a minute.
func (u *upgradable) upgrade() int {
	u.t.Helper()
	u.cmd.Process.Signal(syscall.SIGUSR2)
	return u.awaitUpgrade()
}

// awaitUpgrade is upgrade after the signal.
func (u *upgradable) awaitUpgrade() int {
	t := u.t
	t.Helper()
	next := u.successor()
	if next == 0 {
		t.Fatalf("no new process serves after SIGUSR2\n%s", u.logs.String())
	}
	select {
	case <-u.exited:
	case <-time.After(time.Minute):
		t.Fatalf("the old process did not exit within a minute of handing over\n%s", u.logs.String())
	}
	if u.err != nil {
		t.Errorf("the old process exited with %v, want 0", u.err)
	}
	return next
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	// Written with syscall.ForkLock held, as Go's own fd creation does:
	// a child forked meanwhile by another test (os/exec takes the lock
	// to fork) would hold the file open for writing until its exec, and
	// an exec of the copy then fails with ETXTBSY ("text file busy",
	// seen under load: golang/go#22315).
	syscall.ForkLock.Lock()
	err = os.WriteFile(to+".tmp", b, mode)
	syscall.ForkLock.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(to+".tmp", to); err != nil {
		t.Fatal(err)
	}
}

// load sends visits from keep-alive clients and clients that open a new
// connection for each request until stopped, and keeps every outcome.
type load struct {
	mu      sync.Mutex
	results []result
	stop    chan struct{}
	wg      sync.WaitGroup
}

type result struct {
	at      time.Time // when the answer came
	took    time.Duration
	status  int
	err     error
	newConn bool
}

func startLoad(url string, keepAlive, fresh int) *load {
	return startLoadWith(url, keepAlive, fresh, tcpClient)
}

// tcpClient is an HTTP/1.1 client; keep: one that keeps its connection.
func tcpClient(keep bool) *http.Client {
	tr := &http.Transport{DisableKeepAlives: !keep, MaxIdleConnsPerHost: 1}
	if !keep {
		// A client on a real network sends its request a while after the
		// connection is made: the gateway may have accepted it when it
		// begins to stop, and must serve it all the same.
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err == nil {
				time.Sleep(20 * time.Millisecond)
			}
			return c, err
		}
	}
	return &http.Client{Timeout: 30 * time.Second, CheckRedirect: testkit.Client.CheckRedirect, Transport: tr}
}

// startLoadWith is startLoad with the clients client makes.
func startLoadWith(url string, keepAlive, fresh int, client func(keep bool) *http.Client) *load {
	l := &load{stop: make(chan struct{})}
	for i := range keepAlive + fresh {
		c := client(i < keepAlive)
		l.wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				start := time.Now()
				resp, err := c.Get(fmt.Sprintf("%s/link%02d", url, (i*7+n)%20))
				r := result{at: time.Now(), took: time.Since(start), err: err, newConn: i >= keepAlive}
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					r.status = resp.StatusCode
				}
				l.mu.Lock()
				l.results = append(l.results, r)
				l.mu.Unlock()
				time.Sleep(2 * time.Millisecond) // a steady load, light enough for tests running beside it
			}
		})
	}
	return l
}

func (l *load) halt() []result {
	close(l.stop)
	l.wg.Wait()
	return l.results
}

// served returns how many visits were answered 302 so far.
func (l *load) served() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.results {
		if r.err == nil && r.status == http.StatusFound {
			n++
		}
	}
	return n
}

// waitServed waits until n more visits than now were answered.
func (l *load) waitServed(t *testing.T, n int) {
	t.Helper()
	want := l.served() + n
	deadline := time.Now().Add(time.Minute)
	for l.served() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d visits answered within a minute, want %d", l.served(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestUpgradeUnderLoad: SIGUSR2 under load, from clients that keep their
// connections and clients that open one per request: no request fails, a
// new process serves, the old one exits 0, and every visit either served
// is counted once.
func TestUpgradeUnderLoad(t *testing.T) {
	if err := subreaper(); err != nil {
		t.Skipf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	t.Parallel()
	up := redirector(t)
	dir := t.TempDir()
	cfg := analyticsGateway(up.URL, fmt.Sprintf("  embedded: {path: %s}\n  journal: {path: %s}\n",
		filepath.Join(dir, "analytics"), filepath.Join(dir, "journal")))
	path := filepath.Join(dir, "gateway.yaml")
	testkit.WriteFile(t, path, cfg)
	gw := startUpgradable(t, path, nil)
	l := startLoad(gw.url("gateway", ""), 4, 4)
	l.waitServed(t, 300)

	signalled := time.Now()
	next := gw.upgrade()
	handedOver := time.Now()
	// The new process serves on: its own visits.
	l.waitServed(t, 300)
	results := l.halt()

	var failed []string
	var before, during time.Duration
	for _, r := range results {
		if r.err != nil || r.status != http.StatusFound {
			failed = append(failed, fmt.Sprintf("%v: status %d, %v (new connection: %v)", r.at.Format(time.StampMicro), r.status, r.err, r.newConn))
		}
		switch started := r.at.Add(-r.took); {
		case r.at.Before(signalled):
			before = max(before, r.took)
		case started.Before(handedOver):
			during = max(during, r.took)
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d requests failed:\n%s", len(failed), len(results), strings.Join(failed[:min(len(failed), 20)], "\n"))
	}
	t.Logf("%d requests; the longest took %v before SIGUSR2, %v from SIGUSR2 until the old process exited (%v after the signal)",
		len(results), before, during, handedOver.Sub(signalled).Round(time.Millisecond))

	// Every visit counted once: the new process's final flush, then a
	// gateway on the same store reads the total.
	syscall.Kill(next, syscall.SIGTERM)
	if s := reap(next); s != 0 {
		t.Errorf("the new process exited with status %d on SIGTERM, want 0", s)
	}
	served := 0
	for _, r := range results {
		if r.err == nil && r.status == http.StatusFound {
			served++
		}
	}
	gw3, _ := startGateway(t, cfg)
	if counted := settle(t, gw3, served); counted != served {
		t.Errorf("%d visits counted, want the %d answered 302", counted, served)
	}
}

// TestUpgradeFailureKeepsServing: a new process that cannot start (its
// config does not compile, or the binary put at the path fails) leaves the
// running one serving; the log says why and the metric counts it; a later
// SIGUSR2 with the fault mended upgrades.
func TestUpgradeFailureKeepsServing(t *testing.T) {
	if err := subreaper(); err != nil {
		t.Skipf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	t.Parallel()
	up := redirector(t)
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	cfg := testkit.BaseConfig(up.URL)
	testkit.WriteFile(t, path, cfg)
	gw := startUpgradable(t, path, nil)
	const failedLine = "binary upgrade failed: this process serves on"
	failOnce := func(want string) {
		t.Helper()
		n := gw.logs.Count(failedLine, nil)
		gw.cmd.Process.Signal(syscall.SIGUSR2)
		deadline := time.Now().Add(time.Minute)
		for gw.logs.Count(failedLine, nil) == n {
			if time.Now().After(deadline) {
				t.Fatalf("no failure logged within a minute\n%s", gw.logs.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		rs := gw.logs.Records(failedLine, nil)
		if got := rs[len(rs)-1]["err"]; !strings.Contains(got, want) {
			t.Errorf("the failure says %q, want it to say %q", got, want)
		}
		if resp, _ := testkit.Do(t, "GET", gw.url("gateway", "/k"), nil); resp.StatusCode != http.StatusFound {
			t.Errorf("after the failed upgrade: %d, want 302 from the process serving on", resp.StatusCode)
		}
		if alive := gw.pids(); len(alive) != 1 || alive[0] != gw.cmd.Process.Pid {
			t.Errorf("processes alive: %v, want the first one's alone", alive)
		}
	}

	// A config the new process cannot compile.
	bad := strings.Replace(cfg, "response_header_timeout: 10s", "response_header_timeout: soon", 1)
	if bad == cfg {
		t.Fatal("the base config has no response_header_timeout: 10s to break")
	}
	testkit.WriteFile(t, path, bad)
	failOnce("upstream.response_header_timeout")
	testkit.WriteFile(t, path, cfg)

	// A binary that fails at once, put where the running one was.
	script := filepath.Join(t.TempDir(), "gateway")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 'broken release' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, script, gw.exe, 0o755)
	failOnce("exit status 3")

	if got := metricValue(t, gw.url("admin", "/metrics"), `linkgate_upgrades_total{result="failed"}`); got != 2 {
		t.Errorf(`linkgate_upgrades_total{result="failed"} = %v, want 2`, got)
	}

	// Mended: the upgrade goes through.
	copyFile(t, bin.gateway, gw.exe, 0o755)
	gw.cmd.Process.Signal(syscall.SIGUSR2)
	if next := gw.successor(); next == 0 || slices.Contains([]int{gw.cmd.Process.Pid}, next) {
		t.Fatalf("no new process after the mended upgrade\n%s", gw.logs.String())
	}
	select {
	case <-gw.exited:
	case <-time.After(time.Minute):
		t.Fatal("the old process did not exit within a minute of handing over")
	}
	if resp, _ := testkit.Do(t, "GET", gw.url("gateway", "/k"), nil); resp.StatusCode != http.StatusFound {
		t.Errorf("from the new process: %d, want 302", resp.StatusCode)
	}
}

// metricValue reads one series' value from a /metrics page.
func metricValue(t *testing.T, url, series string) float64 {
	t.Helper()
	_, body := testkit.Do(t, "GET", url, nil)
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	t.Fatalf("no series %s in %s", series, url)
	return 0
}

// TestUpgradeTellsSystemd: under systemd (Type=notify, NotifyAccess=all)
// the gateway says READY=1 with its PID once it serves, the new process of
// an upgrade says so with its own, so that systemd follows it, the old one
// exits without STOPPING=1, and a stop says STOPPING=1. The notify socket
// is the test's own: systemd's protocol is one datagram per message.
func TestUpgradeTellsSystemd(t *testing.T) {
	if err := subreaper(); err != nil {
		t.Skipf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	said := func() string {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(time.Minute))
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("nothing said on the notify socket: %v", err)
		}
		return string(buf[:n])
	}
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	testkit.WriteFile(t, path, testkit.BaseConfig(redirector(t).URL))
	gw := startUpgradable(t, path, nil, "NOTIFY_SOCKET="+sock)
	if got, want := said(), fmt.Sprintf("READY=1\nMAINPID=%d", gw.cmd.Process.Pid); got != want {
		t.Errorf("at start: %q, want %q", got, want)
	}
	gw.cmd.Process.Signal(syscall.SIGUSR2)
	next := gw.successor()
	if got, want := said(), fmt.Sprintf("READY=1\nMAINPID=%d", next); got != want {
		t.Errorf("after SIGUSR2: %q, want %q", got, want)
	}
	testkit.Recv(t, gw.exited, time.Minute, "the old process exiting")
	syscall.Kill(next, syscall.SIGTERM)
	if got := said(); got != "STOPPING=1" {
		t.Errorf("on SIGTERM: %q, want STOPPING=1 (and nothing from the old process)", got)
	}
	reap(next)
}

// TestUpgradeRefusedAsPID1: in a container the gateway is PID 1, and the
// container ends with it: SIGUSR2 is refused, said and counted, and the
// gateway serves on (a new release there is a new container).
func TestUpgradeRefusedAsPID1(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("a PID namespace needs root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1)")
	}
	if err := subreaper(); err != nil {
		t.Skipf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	t.Parallel()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	testkit.WriteFile(t, path, testkit.BaseConfig(redirector(t).URL))
	gw := startUpgradable(t, path, []string{unshare, "--pid", "--fork", "--kill-child"})
	// The gateway is unshare's child, PID 1 in its namespace.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", gw.cmd.Process.Pid, gw.cmd.Process.Pid))
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid == 0 {
		t.Fatalf("the gateway's PID under unshare: %q, %v", b, err)
	}
	syscall.Kill(pid, syscall.SIGUSR2)
	deadline := time.Now().Add(time.Minute)
	for !gw.logs.Logged("binary upgrade failed: this process serves on", nil) {
		if time.Now().After(deadline) {
			t.Fatalf("no refusal logged\n%s", gw.logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if rs := gw.logs.Records("binary upgrade failed: this process serves on", nil); !strings.Contains(rs[0]["err"], "PID 1") {
		t.Errorf("the refusal says %q, want it to name PID 1", rs[0]["err"])
	}
	if resp, _ := testkit.Do(t, "GET", gw.url("gateway", "/k"), nil); resp.StatusCode != http.StatusFound {
		t.Errorf("after the refusal: %d, want 302", resp.StatusCode)
	}
	if got := metricValue(t, gw.url("admin", "/metrics"), `linkgate_upgrades_total{result="failed"}`); got != 1 {
		t.Errorf(`linkgate_upgrades_total{result="failed"} = %v, want 1`, got)
	}
}

// h3Clients returns HTTP/3 clients trusting roots and naming short.test:
// keep, one that keeps its QUIC connection; otherwise one that makes a
// new one for each request.
func h3Clients(roots *x509.CertPool) func(keep bool) *http.Client {
	cfg := &tls.Config{RootCAs: roots, ServerName: "short.test"}
	return func(keep bool) *http.Client {
		var rt http.RoundTripper = &http3.Transport{TLSClientConfig: cfg}
		if !keep {
			rt = freshH3{cfg}
		}
		return &http.Client{Timeout: 30 * time.Second, CheckRedirect: testkit.Client.CheckRedirect, Transport: rt}
	}
}

// freshH3 sends each request on a QUIC connection of its own.
type freshH3 struct{ cfg *tls.Config }

func (f freshH3) RoundTrip(r *http.Request) (*http.Response, error) {
	tr := &http3.Transport{TLSClientConfig: f.cfg}
	resp, err := tr.RoundTrip(r)
	if err != nil {
		tr.Close()
		return nil, err
	}
	resp.Body = testkit.OnClose(resp.Body, func() { tr.Close() })
	return resp, nil
}

// TestUpgradeHTTP3: the UDP socket of HTTP/3 is handed over too, and both
// processes serve QUIC at once for a while, by connection ID (package
// cidroute): under a load of HTTP/3 clients (keeping their QUIC
// connections, and making one per request) and HTTP/1.1 over TLS, and with
// a QUIC handshake deliberately under way at the old process when it hands
// over (its client's second flight held back until then), SIGUSR2 hands
// over to a new process, and no request fails, the held handshake
// included; the old process exits 0, and every visit either process
// answered is counted once.
func TestUpgradeHTTP3(t *testing.T) {
	if err := subreaper(); err != nil {
		t.Skipf("PR_SET_CHILD_SUBREAPER: %v", err)
	}
	t.Parallel()
	ca := edgetest.NewCA(t)
	certFile, keyFile, _ := ca.WritePair(t, t.TempDir(), "short.test")
	dir := t.TempDir()
	plain := analyticsGateway(redirector(t).URL, fmt.Sprintf("  embedded: {path: %s}\n  journal: {path: %s}\n",
		filepath.Join(dir, "analytics"), filepath.Join(dir, "journal")))
	cfg := strings.Replace(plain, "  shutdown_timeout: 10s\n",
		// The held handshake lasts as long as the new process takes to start.
		fmt.Sprintf("  shutdown_timeout: 10s\n  http3: true\n  tls: {cert_file: %s, key_file: %s, handshake_timeout: 2m}\n", certFile, keyFile), 1)
	if cfg == plain {
		t.Fatal("the config has no shutdown_timeout: 10s to put http3 after")
	}
	path := filepath.Join(dir, "gateway.yaml")
	testkit.WriteFile(t, path, cfg)
	gw := startUpgradable(t, path, nil)
	base := "https://" + strings.TrimPrefix(gw.url("gateway", ""), "http://")
	h3 := startLoadWith(base, 2, 2, h3Clients(ca.Pool()))
	tlsClients := func(keep bool) *http.Client {
		c := tcpClient(keep)
		c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: ca.Pool(), ServerName: "short.test"}
		return c
	}
	h1 := startLoadWith(base, 2, 2, tlsClients)
	h3.waitServed(t, 100)
	h1.waitServed(t, 100)

	// A handshake under way at the old process: its client's packets, once
	// it read the server's first, wait until the old process handed over.
	held := holdingClient(t, ca.Pool())
	heldDone := make(chan result, 1)
	go func() {
		start := time.Now()
		resp, err := held.client.Get(base + "/held")
		r := result{at: time.Now(), took: time.Since(start), err: err, newConn: true}
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			r.status = resp.StatusCode
		}
		heldDone <- r
	}()
	testkit.Recv(t, held.holding, time.Minute, "the held client's handshake to begin")

	signalled := time.Now()
	gw.cmd.Process.Signal(syscall.SIGUSR2)
	const handedOver = "http3: handed over: the new process reads the socket and passes this one its packets"
	deadline := time.Now().Add(time.Minute)
	for !gw.logs.Logged(handedOver, nil) {
		if time.Now().After(deadline) {
			t.Fatalf("the old process did not hand HTTP/3 over within a minute\n%s", gw.logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if rs := gw.logs.Records(handedOver, nil); rs[0]["handshakes"] == "0" {
		t.Errorf("the old process handed over with no handshake under way, want the held one")
	}
	held.release()
	next := gw.awaitUpgrade()
	exited := time.Now()
	// The new process serves HTTP/3 on the socket handed over.
	h3.waitServed(t, 100)
	h1.waitServed(t, 100)
	heldResult := testkit.Recv(t, heldDone, time.Minute, "the held client's answer")

	served := 0
	if r := heldResult; r.err != nil || r.status != http.StatusFound {
		t.Errorf("the handshake under way at the handover: status %d after %v, %v", r.status, r.took, r.err)
	} else {
		served++
	}
	clientClosed := 0 // requests failed by the client's own close (clientClosedAfterGoAway)
	for name, l := range map[string]*load{"HTTP/3": h3, "HTTP/1.1 over TLS": h1} {
		results := l.halt()
		var failed []string
		var before, during time.Duration
		for _, r := range results {
			switch {
			case r.err == nil && r.status == http.StatusFound:
				served++
			case clientClosedAfterGoAway(r):
				clientClosed++
				t.Logf("%s: the client closed its connection under a request at %v: %v", name, r.at.Format(time.StampMicro), r.err)
			default:
				failed = append(failed, fmt.Sprintf("%v: status %d after %v, %v (new connection: %v)", r.at.Format(time.StampMicro), r.status, r.took, r.err, r.newConn))
			}
			switch {
			case r.at.Before(signalled):
				before = max(before, r.took)
			case r.at.Add(-r.took).Before(exited):
				during = max(during, r.took)
			}
		}
		t.Logf("%s: %d requests, %d failed; the longest took %v before SIGUSR2, %v from SIGUSR2 until the old process exited (%v after the signal)",
			name, len(results), len(failed), before, during, exited.Sub(signalled).Round(time.Millisecond))
		if len(failed) > 0 {
			t.Errorf("%s: %d of %d requests failed:\n%s", name, len(failed), len(results), strings.Join(failed[:min(len(failed), 20)], "\n"))
		}
	}
	t.Logf("the request of the handshake held until the handover took %v", heldResult.took)
	// The new process passed the old one its packets (the held client's at
	// least), and dropped none.
	if got := metricValue(t, gw.url("admin", "/metrics"), `linkgate_http3_relayed_packets_total{result="relayed"}`); got < 1 {
		t.Errorf("the new process relayed %v datagrams, want some", got)
	}
	if got := metricValue(t, gw.url("admin", "/metrics"), `linkgate_http3_relayed_packets_total{result="dropped"}`); got != 0 {
		t.Errorf("the new process dropped %v of the old one's datagrams, want none", got)
	}

	syscall.Kill(next, syscall.SIGTERM)
	if s := reap(next); s != 0 {
		t.Errorf("the new process exited with status %d on SIGTERM, want 0", s)
	}
	gw3, _ := startGateway(t, plain)
	// A request the client failed by closing its connection may have
	// been answered, and counted, or not.
	if counted := settle(t, gw3, served); counted < served || counted > served+clientClosed {
		t.Errorf("%d visits counted, want the %d answered 302 (and up to %d the client closed its connection under)", counted, served, clientClosed)
	}
}

// clientClosedAfterGoAway says whether r failed because the HTTP/3 client
// closed its own kept connection, with H3_NO_ERROR, under the request.
// quic-go's client closes a connection once the server's GOAWAY came and
// it tracks no request on it; a request whose stream it opened just before
// the GOAWAY may not be tracked yet (quic-go v0.65.0, http3/client.go:
// between openRequestStream's second GOAWAY check and TrackStream), and
// fails. The client's race, not the gateway's answer.
func clientClosedAfterGoAway(r result) bool {
	h3err, ok := errors.AsType[*http3.Error](r.err)
	return ok && !r.newConn && !h3err.Remote && h3err.ErrorCode == http3.ErrCodeNoError
}

// heldClient is an HTTP/3 client of one QUIC connection whose packets,
// once it read one from the server, are held until release: the server
// has the handshake under way meanwhile.
type heldClient struct {
	client  *http.Client
	holding chan struct{} // closed at the first packet held

	mu       sync.Mutex
	conn     net.PacketConn
	read     bool
	released bool
	held     []heldPacket
}

type heldPacket struct {
	b  []byte
	to net.Addr
}

func holdingClient(t *testing.T, roots *x509.CertPool) *heldClient {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	h := &heldClient{conn: udp, holding: make(chan struct{})}
	// A plain net.PacketConn: quic-go reads and writes it by ReadFrom and
	// WriteTo, which heldPacketConn sees.
	tr := &quic.Transport{Conn: heldPacketConn{h}}
	t.Cleanup(func() { tr.Close(); udp.Close() })
	h.client = &http.Client{Timeout: time.Minute, CheckRedirect: testkit.Client.CheckRedirect,
		Transport: &http3.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "short.test"},
			// Held as long as the new process takes to start.
			QUICConfig: &quic.Config{HandshakeIdleTimeout: 2 * time.Minute},
			Dial: func(ctx context.Context, addr string, tlsCfg *tls.Config, cfg *quic.Config) (*quic.Conn, error) {
				ua, err := net.ResolveUDPAddr("udp", addr)
				if err != nil {
					return nil, err
				}
				return tr.Dial(ctx, ua, tlsCfg, cfg)
			},
		}}
	return h
}

// release sends the packets held, and lets the next ones through.
func (h *heldClient) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.released = true
	for _, p := range h.held {
		h.conn.WriteTo(p.b, p.to)
	}
	h.held = nil
}

type heldPacketConn struct{ h *heldClient }

func (c heldPacketConn) ReadFrom(b []byte) (int, net.Addr, error) {
	n, a, err := c.h.conn.ReadFrom(b)
	if err == nil {
		c.h.mu.Lock()
		c.h.read = true
		c.h.mu.Unlock()
	}
	return n, a, err
}

func (c heldPacketConn) WriteTo(b []byte, to net.Addr) (int, error) {
	h := c.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.read && !h.released {
		if len(h.held) == 0 {
			close(h.holding)
		}
		h.held = append(h.held, heldPacket{bytes.Clone(b), to})
		return len(b), nil
	}
	return h.conn.WriteTo(b, to)
}

func (c heldPacketConn) Close() error                       { return c.h.conn.Close() }
func (c heldPacketConn) LocalAddr() net.Addr                { return c.h.conn.LocalAddr() }
func (c heldPacketConn) SetDeadline(t time.Time) error      { return c.h.conn.SetDeadline(t) }
func (c heldPacketConn) SetReadDeadline(t time.Time) error  { return c.h.conn.SetReadDeadline(t) }
func (c heldPacketConn) SetWriteDeadline(t time.Time) error { return c.h.conn.SetWriteDeadline(t) }
