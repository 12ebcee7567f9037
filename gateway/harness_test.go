package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/linkgate/linkgate/gateway"
	"github.com/linkgate/linkgate/internal/browser"
	"github.com/linkgate/linkgate/internal/testkit"
)

// The tests here run the whole gateway in-process: a real Gateway, its
// listeners on 127.0.0.1:0, real HTTP clients, real upstreams (httptest
// servers), real stores. cmd/gateway keeps the few tests that need a
// separate process (signals, exit codes).

// TestMain runs up to 8 parallel tests at once: they wait on flush
// intervals, health checks and timeouts, not on the CPU.
func TestMain(m *testing.M) {
	testkit.SetParallel(8)
	os.Exit(browser.Run(m)) // browser: the page tests' Chromium, if they started it
}

// env is the environment the gateways under test see; setenv changes it
// for the rest of a test.
var (
	envMu sync.Mutex
	env   = map[string]string{"LG_TEST_ADMIN_TOKEN": testkit.AdminToken}
)

func getenv(k string) string {
	envMu.Lock()
	defer envMu.Unlock()
	return env[k]
}

func setenv(t *testing.T, k, v string) {
	envMu.Lock()
	env[k] = v
	envMu.Unlock()
	t.Cleanup(func() {
		envMu.Lock()
		delete(env, k)
		envMu.Unlock()
	})
}

// running is a Gateway serving on loopback.
type running struct {
	t    *testing.T
	g    *gateway.Gateway
	path string        // its config file
	logs *testkit.Logs // what it logged
	hup  chan os.Signal
	stop context.CancelFunc
	done chan error // Serve's result
}

// start writes cfg to a file and runs a gateway on it, watching the file.
func start(t *testing.T, cfg string) *running {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	testkit.WriteFile(t, path, cfg)
	return startFile(t, path, true)
}

// startFile runs a gateway on the config file at path.
func startFile(t *testing.T, path string, watch bool) *running {
	t.Helper()
	plan, err := gateway.Load(path, getenv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return startPlan(t, plan, path, watch)
}

// startPlan is startFile with the plan loaded from path already; opts,
// when given, change the gateway's options. A test that runs a gateway
// and hangs (a handler, a shutdown, a wait) ends the binary with every
// goroutine's stack after 10 minutes stretched by the machine's pace,
// rather than at the binary's -timeout.
func startPlan(t *testing.T, plan *gateway.Plan, path string, watch bool, opts ...func(*gateway.Options)) *running {
	t.Helper()
	testkit.Deadline(t, 10*time.Minute)
	var err error
	r := &running{t: t, path: path, logs: &testkit.Logs{}, hup: make(chan os.Signal, 1), done: make(chan error, 1)}
	o := gateway.Options{
		Path: path, Getenv: getenv, Log: slog.New(r.logs.Handler()), Watch: watch, Hangup: r.hup, Version: "test",
	}
	for _, f := range opts {
		f(&o)
	}
	r.g, err = gateway.New(plan, o)
	if err != nil {
		t.Fatalf("gateway.New: %v", err)
	}
	if err := r.g.Listen(); err != nil {
		r.g.Close(context.Background())
		t.Fatalf("Listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() { r.done <- r.g.Serve(ctx) }()
	t.Cleanup(func() {
		if err := r.shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return r
}

// shutdown stops the gateway as SIGTERM does and waits for Serve.
func (r *running) shutdown() error {
	r.stop()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
		}
		return err
	case <-time.After(testkit.Slack(30 * time.Second)):
		return fmt.Errorf("Serve did not return within %v", testkit.Slack(30*time.Second))
	}
}

// watching sends SIGHUP and waits until the reload it makes is logged.
// Serve starts the watch after the listeners, and the watch takes the file
// it first reads for the running one: once it has answered SIGHUP, a file
// the test writes is a change it sees.
func (r *running) watching(t *testing.T) {
	t.Helper()
	sighup := map[string]string{"source": "SIGHUP"}
	reloads := func() int {
		return r.logs.Count("config reloaded", sighup) + r.logs.Count("config reload failed, running config kept", sighup)
	}
	n := reloads()
	r.hup <- syscall.SIGHUP
	testkit.Eventually(t, 5*time.Second, "SIGHUP answered: the watch runs", func() bool { return reloads() > n })
}

// url returns the URL of path on the client listener.
func (r *running) url(path string) string { return "http://" + r.g.Addr().String() + path }

// admin returns the URL of path on the admin listener.
func (r *running) admin(path string) string { return "http://" + r.g.AdminAddr().String() + path }

// tinyURL is an upstream like the demo service, written as a plain Go web
// server would be: redirects for a few known keys and 404 otherwise,
// POST /login reading the email the way common Go handlers do (r.FormValue
// for forms, json.Decoder for JSON) and accepting the password "demo",
// GET /api/me answering the X-User-ID a trusted proxy set.
func tinyURL(t *testing.T) *httptest.Server {
	links := map[string]string{"go": "https://go.dev", "gh": "https://github.com", "ex": "https://example.com"}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		var email, password string
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			var in struct{ Email, Password string }
			json.NewDecoder(r.Body).Decode(&in)
			email, password = in.Email, in.Password
		} else {
			email, password = r.FormValue("email"), r.FormValue("password")
		}
		if email == "" || password != "demo" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		io.WriteString(w, "welcome "+email)
	})
	mux.HandleFunc("GET /api/me", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"authenticated": r.Header.Get("X-User-ID") != "", "user_id": r.Header.Get("X-User-ID")})
	})
	mux.HandleFunc("/{key}", func(w http.ResponseWriter, r *http.Request) {
		if u, ok := links[r.PathValue("key")]; ok && (r.Method == "GET" || r.Method == "HEAD") {
			http.Redirect(w, r, u, http.StatusFound)
			return
		}
		http.NotFound(w, r)
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}
