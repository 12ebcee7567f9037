// Package testkit holds the helpers that the end-to-end tests of several
// packages share: an HTTP client that shows redirects, polling, small
// upstreams, config files written atomically, a gateway config on free
// ports, the log records a test matches, and tmpfs volumes for disk faults.
// It is imported by tests only.
package testkit

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// AdminToken is the admin token of BaseConfig's gateway, read from the
// environment variable LG_TEST_ADMIN_TOKEN.
const AdminToken = "s3cret-admin"

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
  dial_timeout: 500ms
  response_header_timeout: 1s
  health_check: {path: /healthz, interval: 100ms}
analytics:
  enabled: false
`, strings.Join(targets, ", "))
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

// Client does not follow redirects: the tests look at them.
var Client = &http.Client{
	Timeout:       20 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// Do sends a request with the header pairs hdr (name, value, ...) and
// returns the answer with its whole body; a transport error fails t.
func Do(t testing.TB, method, url string, body io.Reader, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
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

// Eventually polls cond every 20 ms until it holds, and fails t naming
// what was awaited if it does not hold within the given time.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
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

// Tmpfs mounts a tmpfs of size bytes on a new folder and unmounts it at
// the end of the test. It skips the test, loudly, where mounting is not
// permitted (not root, or a container without CAP_SYS_ADMIN): the caller
// names the unprivileged test that covers the same logic in why.
func Tmpfs(t testing.TB, size int64, why string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		t.Skipf("*** SKIPPED: this test mounts a tmpfs (root with CAP_SYS_ADMIN): %v: %s; %s ***", err, strings.TrimSpace(string(out)), why)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}
