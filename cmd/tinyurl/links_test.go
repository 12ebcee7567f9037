package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// runDemo runs the real program in-process with args and returns its base
// URL and a function that stops it as SIGTERM would and waits for it.
func runDemo(t *testing.T, args ...string) (base string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	base, lines, done := testkit.StartCommand(t, ctx, run, append([]string{"tinyurl", "-listen", "127.0.0.1:0"}, args...)...)
	go func() { // the request log
		for lines.Scan() {
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := testkit.Recv(t, done, 10*time.Second, "run returning after cancel"); err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return base, stop
}

func shorten(t *testing.T, base, long string) string {
	t.Helper()
	a := do(t, "POST", base+"/shorten", form, "url="+url.QueryEscape(long))
	if a.status != http.StatusCreated {
		t.Fatalf("shorten %s: %d %s", long, a.status, a.body)
	}
	var got struct {
		ShortKey string `json:"short_key"`
	}
	if err := json.Unmarshal(a.body, &got); err != nil {
		t.Fatal(err)
	}
	return got.ShortKey
}

// TestLinksSurviveRestart shortens links, stops the program, starts it again
// on the same links file and follows them.
func TestLinksSurviveRestart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "data", "tinyurl", "links.json") // its folder does not exist yet
	base, stop := runDemo(t, "-links", file)
	want := map[string]string{}
	for i := range 5 {
		long := fmt.Sprintf("https://example.org/page/%d?x=%d", i, i*i)
		want[shorten(t, base, long)] = long
	}
	stop()

	base, stop = runDemo(t, "-links", file)
	defer stop()
	for key, long := range want {
		if a := do(t, "GET", base+"/"+key, "", ""); a.status != http.StatusFound || a.header.Get("Location") != long {
			t.Errorf("after restart GET /%s = %d %q, want 302 %q", key, a.status, a.header.Get("Location"), long)
		}
	}
	if a := do(t, "GET", base+"/go", "", ""); a.header.Get("Location") != seedLinks["go"] {
		t.Errorf("seed link after restart: %d %q", a.status, a.header.Get("Location"))
	}
	// Links made after the restart join the others in the file.
	want[shorten(t, base, "https://example.net/later")] = "https://example.net/later"
	got, err := loadLinks(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("links file holds %d links, want %d: %v", len(got), len(want), got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("links file: %s = %q, want %q", k, got[k], v)
		}
	}
	// The seeds are the program's, not the file's.
	if _, ok := got["go"]; ok {
		t.Error("the links file holds the seed links")
	}
	if tmps, _ := filepath.Glob(filepath.Join(filepath.Dir(file), ".*.tmp")); len(tmps) != 0 {
		t.Errorf("temporary files left beside the links file: %q", tmps)
	}
}

// TestLinksConcurrentSaves shortens from many goroutines at once: the file
// ends with every link, whatever order the saves ran in.
func TestLinksConcurrentSaves(t *testing.T) {
	file := filepath.Join(t.TempDir(), "links.json")
	ts := httptest.NewServer(mustServer(t, options{LinksFile: file}))
	defer ts.Close()
	var mu sync.Mutex
	want := map[string]string{}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := range 8 {
				long := fmt.Sprintf("https://example.com/%d/%d", g, i)
				key := shorten(t, ts.URL, long)
				mu.Lock()
				want[key] = long
				mu.Unlock()
			}
		})
	}
	testkit.Await(t, wg.Wait, 5*time.Minute, "the concurrent shortens")
	got, err := loadLinks(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("links file holds %d links, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("links file: %s = %q, want %q", k, got[k], v)
		}
	}
}

// TestLinksFileRefused: a links file that is not what the program writes
// stops it with an error naming the file, instead of starting without the
// links.
func TestLinksFileRefused(t *testing.T) {
	for name, content := range map[string]string{
		"not json":         `{"abc123": "https://go.dev"`,
		"an array":         `["https://go.dev"]`,
		"a bad key":        `{"a/b": "https://go.dev"}`,
		"a seed-like key":  `{"go": "https://go.dev"}`,
		"a javascript url": `{"abc123": "javascript:alert(1)"}`,
		"a number":         `{"abc123": 42}`,
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "links.json")
			if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			err := run(context.Background(), []string{"tinyurl", "-listen", "127.0.0.1:0", "-links", file}, io.Discard)
			if err == nil || !strings.Contains(err.Error(), "-links") || !strings.Contains(err.Error(), file) {
				t.Errorf("run with %s = %v, want an error naming -links and %s", name, err, file)
			}
		})
	}
}

// TestLinksSaveFails: when the file cannot be written, /shorten answers 503
// and hands out no key that the next start would not know.
func TestLinksSaveFails(t *testing.T) {
	folder := filepath.Join(t.TempDir(), "links")
	ts := httptest.NewServer(mustServer(t, options{LinksFile: filepath.Join(folder, "links.json")}))
	defer ts.Close()
	// Once started, its folder cannot be made: a file is in the way.
	if err := os.WriteFile(folder, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	a := do(t, "POST", ts.URL+"/shorten", form, "url=https://go.dev/x")
	testkit.Problem(t, a.resp, string(a.body), http.StatusServiceUnavailable)
	if a.header.Get("Location") != "" || !strings.Contains(string(a.body), "could not be saved") {
		t.Errorf("503 answer: Location %q, body %s", a.header.Get("Location"), a.body)
	}
}

// TestSaveLinksReplacesWhole: a save that fails leaves no temporary file
// behind, and each save replaces the file whole.
func TestSaveLinksReplacesWhole(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "links.json")
	first := map[string]string{"abc123": "https://go.dev"}
	if err := saveLinks(file, first); err != nil {
		t.Fatal(err)
	}
	// A folder where the file should go: the rename fails.
	blocked := filepath.Join(dir, "blocked")
	if err := os.MkdirAll(filepath.Join(blocked, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := saveLinks(blocked, first); err == nil {
		t.Fatal("saveLinks over a non-empty folder succeeded")
	}
	if err := saveLinks(file, map[string]string{"abc123": "https://go.dev", "XYZ789": "https://example.com"}); err != nil {
		t.Fatal(err)
	}
	got, err := loadLinks(file)
	if err != nil || len(got) != 2 || got["XYZ789"] != "https://example.com" {
		t.Errorf("after the second save: %v, %v", got, err)
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, ".*.tmp")); len(tmps) != 0 {
		t.Errorf("temporary files left: %q", tmps)
	}
	if got, err := loadLinks(filepath.Join(dir, "missing.json")); err != nil || len(got) != 0 {
		t.Errorf("a missing file: %v, %v; want no links and no error", got, err)
	}
}
