package testkit_test

import (
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/internal/testkit"
)

// TestImportsNoLinkgatePackage: the tests of every package import testkit,
// so testkit importing one of them would be an import cycle for that
// package's own tests.
func TestImportsNoLinkgatePackage(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "github.com/linkgate/linkgate/") {
				t.Errorf("%s imports %s", f, p)
			}
		}
	}
}

func TestMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"rule", "outcome"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "d_seconds", Help: "d"})
	reg.MustRegister(c, h)
	c.WithLabelValues("a", "allowed").Add(2)
	c.WithLabelValues("a", "limited").Add(3)
	c.WithLabelValues("b", "limited").Add(5)
	h.Observe(1)
	h.Observe(2)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
		has    bool
	}{
		{"x_total", []string{"rule", "a", "outcome", "limited"}, 3, true},
		{"x_total", []string{"outcome", "limited"}, 8, true},
		{"x_total", nil, 10, true},
		{"x_total", []string{"rule", "c"}, 0, false},
		{"d_seconds", nil, 2, true},
		{"absent", nil, 0, false},
	} {
		if got := testkit.Metric(t, reg, tc.name, tc.labels...); got != tc.want {
			t.Errorf("Metric(%s, %v) = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
		if got := testkit.HasMetric(t, reg, tc.name, tc.labels...); got != tc.has {
			t.Errorf("HasMetric(%s, %v) = %v, want %v", tc.name, tc.labels, got, tc.has)
		}
	}
	if s := testkit.Samples(t, reg)["d_seconds"]; len(s) != 1 || s[0].Type != "histogram" {
		t.Errorf("Samples: d_seconds = %+v, want one histogram", s)
	}
}

func TestLogsHandler(t *testing.T) {
	var logs testkit.Logs
	log := slog.New(logs.Handler()).With("server", "admin")
	log.Info("listening", "addr", "127.0.0.1:1")
	log.WithGroup("g").Warn("slow", "n", 3)
	if !logs.Logged("listening", map[string]string{"server": "admin", "addr": "127.0.0.1:1", "level": "INFO"}) {
		t.Errorf("the record with its attributes is missing:\n%s", logs.String())
	}
	if r := logs.Records("", nil); len(r) != 2 || r[1]["n"] != "3" || r[1]["server"] != "admin" {
		t.Errorf("Records = %v, want both records, the group's attribute by its own key", r)
	}
	logs.Clear()
	if n := logs.Count("", nil); n != 0 {
		t.Errorf("%d records after Clear", n)
	}
}

// TestDeadAddrRefusesAndHoldsItsPort: a connection to DeadAddr is refused,
// and no server can take the port while the test runs.
func TestDeadAddrRefusesAndHoldsItsPort(t *testing.T) {
	addr := testkit.DeadAddr(t)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Errorf("dial %s: %v, want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Errorf("a server could listen on %s", addr)
	}
}

// TestPace: LG_TEST_PACE sets the pace and Slack stretches by it; unset,
// the pace is measured and never below 1; a value that is no pace panics.
func TestPace(t *testing.T) {
	t.Setenv(testkit.PaceEnv, "")
	if p := testkit.Pace(); p < 1 {
		t.Errorf("measured pace %v, want at least 1", p)
	}
	t.Setenv(testkit.PaceEnv, "2.5")
	if p, s := testkit.Pace(), testkit.Slack(time.Second); p != 2.5 || s != 2500*time.Millisecond {
		t.Errorf("%s=2.5: pace %v, Slack(1s) %v", testkit.PaceEnv, p, s)
	}
	for _, bad := range []string{"0.5", "fast", "-1"} {
		t.Setenv(testkit.PaceEnv, bad)
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s=%q: no panic", testkit.PaceEnv, bad)
				}
			}()
			testkit.Pace()
		}()
	}
}

// TestRecv: a value that comes is returned; none fails the test, naming
// what it waited for.
func TestRecv(t *testing.T) {
	t.Setenv(testkit.PaceEnv, "1")
	ch := make(chan int, 1)
	ch <- 7
	if got := testkit.Recv(t, ch, time.Second, "seven"); got != 7 {
		t.Errorf("Recv = %d, want 7", got)
	}
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		testkit.Recv(rec, ch, 10*time.Millisecond, "a value never sent")
	}()
	<-done
	if !strings.Contains(rec.msg, "a value never sent") {
		t.Errorf("Recv on a silent channel failed with %q, want what it waited for named", rec.msg)
	}
}

// TestAwait: a wait that returns is awaited; one that does not fails the
// test, naming what it waited for.
func TestAwait(t *testing.T) {
	t.Setenv(testkit.PaceEnv, "1")
	ended := make(chan struct{})
	close(ended)
	testkit.Await(t, func() { <-ended }, time.Second, "a wait that ends")
	rec := &fatalRecorder{TB: t}
	block := make(chan struct{})
	defer close(block)
	done := make(chan struct{})
	go func() {
		defer close(done)
		testkit.Await(rec, func() { <-block }, 10*time.Millisecond, "a wait that never ends")
	}()
	<-done
	if !strings.Contains(rec.msg, "a wait that never ends") {
		t.Errorf("Await of a wait that does not return failed with %q, want what it waited for named", rec.msg)
	}
}

// fatalRecorder keeps the message of Fatalf and ends the goroutine, as
// testing.T does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestDeadlineDumpsAHang runs a test that hangs past its Deadline in a
// child process: the process fails, naming the test, with the stack of
// every goroutine, the hung one's included, and the server it started
// (DiesWithTheBinary) does not outlive it.
func TestDeadlineDumpsAHang(t *testing.T) {
	if os.Getenv("LG_TESTKIT_HANG") == "1" {
		sleeper := exec.Command("sleep", "600")
		testkit.DiesWithTheBinary(sleeper)
		if err := sleeper.Start(); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("sleeper %d\n", sleeper.Process.Pid)
		testkit.Deadline(t, 50*time.Millisecond)
		select {} // hangs
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDeadlineDumpsAHang$", "-test.timeout=1m")
	cmd.Env = append(os.Environ(), "LG_TESTKIT_HANG=1", testkit.PaceEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the hung test passed:\n%s", out)
	}
	for _, want := range []string{"test TestDeadlineDumpsAHang did not end within 50ms", "goroutine ", "testkit_test.TestDeadlineDumpsAHang("} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the hung test's output lacks %q:\n%s", want, out)
		}
	}
	var pid int
	if _, err := fmt.Sscanf(string(out[strings.Index(string(out), "sleeper "):]), "sleeper %d", &pid); err != nil {
		t.Fatalf("no sleeper's pid in the output: %v\n%s", err, out)
	}
	testkit.Eventually(t, 5*time.Second, "the sleeper killed with the binary", func() bool {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		return err != nil || strings.Contains(string(stat), ") Z ") // gone, or dead and not reaped yet
	})
}

// TestClock: a Clock reads what it was set to, moved by Advance (back for
// a negative duration), from several goroutines at once.
func TestClock(t *testing.T) {
	t0 := time.Date(2026, 3, 28, 10, 0, 0, 0, time.UTC)
	c := testkit.NewClock(t0)
	if got := c.Now(); !got.Equal(t0) || got.Location() != time.UTC {
		t.Fatalf("Now %v, want %v in UTC", got, t0)
	}
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 100 {
				c.Advance(time.Second)
				_ = c.Now()
			}
		}()
	}
	for range 4 {
		testkit.Recv(t, done, time.Minute, "an advancing goroutine")
	}
	if got := c.Now(); !got.Equal(t0.Add(400 * time.Second)) {
		t.Errorf("after 400 advances of 1s: %v, want %v", got, t0.Add(400*time.Second))
	}
	c.Advance(-time.Hour)
	c.Set(t0.Add(time.Minute))
	if got := c.Now(); !got.Equal(t0.Add(time.Minute)) {
		t.Errorf("after Set: %v, want %v", got, t0.Add(time.Minute))
	}
}

func TestRuns(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{nil, ""},
		{[]string{"401"}, "401×1"},
		{[]string{"401", "401", "200", "401"}, "401×2 200×1 401×1"},
	} {
		if got := testkit.Runs(c.in); got != c.want {
			t.Errorf("Runs(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
