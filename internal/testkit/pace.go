package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests wait on events, not on clocks. The few durations a test still
// bounds (how long it waits for an event before it fails, how long a
// timeout of the product took to fire) are written for an idle machine
// and stretched by the machine's pace, so that the suite passes on a
// loaded or slow machine as it does on an idle one, and a test that fails
// still fails (the event never comes, the timeout never fires, or fires at
// a time the stretched bound still tells from the right one).

// PaceEnv names the environment variable that sets the pace: a number, at
// least 1, of how many times slower than an idle machine the tests should
// allow for. When it is unset the pace is measured.
const PaceEnv = "LG_TEST_PACE"

// Pace is how many times slower than an idle machine this one runs now:
// the value of LG_TEST_PACE when it is set, otherwise the number of
// threads that wanted a CPU over the last minute (the load average) per
// CPU, at least 1. It is read afresh at each call: a suite runs for
// minutes, and the machine's load changes under it. An invalid
// LG_TEST_PACE panics: a CI setting that is ignored is worse than none.
func Pace() float64 {
	if s := os.Getenv(PaceEnv); s != "" {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f < 1 || f > 1000 {
			panic(fmt.Sprintf("%s=%q: want a number from 1 to 1000, how many times slower than an idle machine to allow for", PaceEnv, s))
		}
		return f
	}
	return max(1, loadAverage()/float64(runtime.NumCPU()))
}

// loadAverage is the one-minute load average, 0 where /proc/loadavg is
// missing or unreadable (the pace is then 1, as on an idle machine).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return f
}

// Slack returns d stretched by the machine's pace (Pace): the bound of a
// wait, or of a duration the product measures, that an idle machine meets
// within d.
func Slack(d time.Duration) time.Duration {
	return time.Duration(float64(d) * Pace())
}

// Recv waits for a value on ch and returns it; it fails t, naming what it
// awaited, if none comes within Slack(within). A closed channel gives its
// zero value, as a receive does.
func Recv[T any](t testing.TB, ch <-chan T, within time.Duration, what string) T {
	t.Helper()
	limit := Slack(within)
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("not within %v: %s", limit, what)
		panic("unreachable")
	}
}

// Await calls wait (a WaitGroup's Wait, a process's) and returns when it
// returns; it fails t, naming what it awaited, if wait has not returned
// within Slack(within). The wait goes on, on a goroutine of its own.
func Await(t testing.TB, wait func(), within time.Duration, what string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wait()
		close(done)
	}()
	Recv(t, done, within, what)
}

// Deadline ends the test binary with every goroutine's stack, as go
// test's -timeout does, if t has not ended within Slack(d): a test that
// hangs names itself and shows where it waits, in minutes rather than at
// the end of the binary's whole -timeout. It is for tests that wait on
// servers, child processes or other goroutines that a bug could leave
// waiting forever.
func Deadline(t testing.TB, d time.Duration) {
	t.Helper()
	limit := Slack(d)
	timer := time.AfterFunc(limit, func() {
		debug.SetTraceback("all")
		panic(fmt.Sprintf("test %s did not end within %v (pace %.1f): it hangs; every goroutine's stack follows", t.Name(), limit, Pace()))
	})
	t.Cleanup(func() { timer.Stop() })
}

// DiesWithTheBinary makes the process cmd starts get SIGKILL when the test
// binary ends, however it ends: a -timeout panic or a Deadline leaves no
// server of a test (a gateway, memcached, pebble) running after it. Call
// it before cmd.Start. (Linux sends the signal when the thread that
// started the process ends: Go's threads last as long as the binary, but
// for one locked to a goroutine that returns without unlocking it, which
// the callers do not do.)
func DiesWithTheBinary(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
