package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// start serves the demo on a real loopback listener.
func start(t *testing.T) *httptest.Server {
	t.Helper()
	ts := httptest.NewServer(mustServer(t, options{Password: "demo"}))
	t.Cleanup(ts.Close)
	return ts
}

func mustServer(t testing.TB, o options) http.Handler {
	t.Helper()
	h, err := newServer(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// answer is a response with its whole body.
type answer struct {
	resp   *http.Response
	status int
	header http.Header
	body   []byte
}

// do sends a request with the Content-Type contentType (none when "") and
// the header pairs (name, value, ...), not following redirects.
func do(t *testing.T, method, u, contentType, body string, header ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, b := testkit.Send(t, req)
	return answer{resp, resp.StatusCode, resp.Header, []byte(b)}
}

const (
	form = "application/x-www-form-urlencoded"
	js   = "application/json"
)

func TestShortenThenRedirect(t *testing.T) {
	ts := start(t)
	for _, tc := range []struct{ name, contentType, body, long string }{
		{"form", form, "url=" + url.QueryEscape("https://example.org/a?b=c&d=e#f"), "https://example.org/a?b=c&d=e#f"},
		{"json", js, `{"url": "http://example.net/path"}`, "http://example.net/path"},
		{"json with charset", "application/json; charset=utf-8", `{"url": "https://example.com/ünï"}`, "https://example.com/ünï"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, "POST", ts.URL+"/shorten", tc.contentType, tc.body)
			if a.status != http.StatusCreated {
				t.Fatalf("shorten: status %d, want 201; body %s", a.status, a.body)
			}
			var got struct {
				ShortKey string `json:"short_key"`
				ShortURL string `json:"short_url"`
			}
			if err := json.Unmarshal(a.body, &got); err != nil {
				t.Fatalf("shorten body %s: %v", a.body, err)
			}
			if len(got.ShortKey) != keyLen || got.ShortURL != ts.URL+"/"+got.ShortKey {
				t.Fatalf("shorten = %+v, want a %d-character key under %s", got, keyLen, ts.URL)
			}
			r := do(t, "GET", got.ShortURL, "", "")
			if r.status != http.StatusFound || r.header.Get("Location") != tc.long {
				t.Errorf("GET %s = %d Location %q, want 302 %q", got.ShortURL, r.status, r.header.Get("Location"), tc.long)
			}
		})
	}
}

func TestShortURLBehindProxy(t *testing.T) {
	ts := start(t)
	a := do(t, "POST", ts.URL+"/shorten", form, "url=https://go.dev/doc",
		"X-Forwarded-Proto", "https", "X-Forwarded-Host", "tiny.example, inner.example")
	var got struct {
		ShortKey string `json:"short_key"`
		ShortURL string `json:"short_url"`
	}
	if err := json.Unmarshal(a.body, &got); err != nil {
		t.Fatal(err)
	}
	if want := "https://tiny.example/" + got.ShortKey; got.ShortURL != want {
		t.Errorf("short_url = %q, want %q", got.ShortURL, want)
	}

	fixed := httptest.NewServer(mustServer(t, options{BaseURL: "https://t.example/"}))
	defer fixed.Close()
	a = do(t, "POST", fixed.URL+"/shorten", js, `{"url":"https://go.dev"}`)
	if err := json.Unmarshal(a.body, &got); err != nil {
		t.Fatal(err)
	}
	if want := "https://t.example/" + got.ShortKey; got.ShortURL != want {
		t.Errorf("with BaseURL: short_url = %q, want %q", got.ShortURL, want)
	}
}

func TestShortenRejects(t *testing.T) {
	ts := start(t)
	for _, tc := range []struct{ name, contentType, body string }{
		{"missing", form, ""},
		{"empty json", js, `{}`},
		{"ftp", form, "url=ftp://example.com/x"},
		{"javascript", form, "url=" + url.QueryEscape("javascript:alert(1)")},
		{"relative", form, "url=/just/a/path"},
		{"no host", form, "url=http://"},
		{"not a url", js, `{"url": "%zz://bad"}`},
		{"number", js, `{"url": 42}`},
		{"bad json", js, `{"url": `},
		{"json array", js, `["https://go.dev"]`},
		{"too long", form, "url=https://example.com/" + strings.Repeat("a", maxURLLen)},
		{"too large a body", form, "url=https://example.com/&pad=" + strings.Repeat("a", maxBodyBytes)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, "POST", ts.URL+"/shorten", tc.contentType, tc.body)
			testkit.Problem(t, a.resp, string(a.body), http.StatusBadRequest)
		})
	}
}

func TestSeededAndUnknown(t *testing.T) {
	ts := start(t)
	for key, long := range seedLinks {
		for _, method := range []string{"GET", "HEAD"} {
			a := do(t, method, ts.URL+"/"+key, "", "")
			if a.status != http.StatusFound || a.header.Get("Location") != long {
				t.Errorf("%s /%s = %d Location %q, want 302 %q", method, key, a.status, a.header.Get("Location"), long)
			}
			if len(a.body) != 0 {
				t.Errorf("%s /%s: body %q, want none", method, key, a.body)
			}
		}
	}
	if a := do(t, "HEAD", ts.URL+"/nope", "", ""); a.status != http.StatusNotFound {
		t.Errorf("HEAD unknown = %d, want 404", a.status)
	}
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/nope", http.StatusNotFound},
		{"GET", "/a/b", http.StatusNotFound},
		{"DELETE", "/go", http.StatusMethodNotAllowed},
	} {
		a := do(t, tc.method, ts.URL+tc.path, "", "")
		testkit.Problem(t, a.resp, string(a.body), tc.status)
	}
}

func TestLogin(t *testing.T) {
	ts := start(t)
	for _, tc := range []struct {
		name, contentType, body string
		want                    int
	}{
		{"form ok", form, "email=Alice@Example.com&password=demo", 200},
		{"form wrong", form, "email=alice@example.com&password=guess", 401},
		{"form no password", form, "email=alice@example.com", 401},
		{"json ok", js, `{"email":"alice@example.com","password":"demo"}`, 200},
		{"json wrong", js, `{"email":"alice@example.com","password":"Demo"}`, 401},
		{"json prefix of password", js, `{"email":"alice@example.com","password":"dem"}`, 401},
		{"no email", form, "password=demo", 400},
		{"bad json", js, `{"email":`, 400},
		{"json password not a string", js, `{"email":"a@b.c","password":1}`, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := do(t, "POST", ts.URL+"/login", tc.contentType, tc.body)
			if tc.want != 200 {
				testkit.Problem(t, a.resp, string(a.body), tc.want)
				return
			}
			if a.status != 200 {
				t.Fatalf("status = %d, want 200; body %s", a.status, a.body)
			}
			var got struct {
				Email  string
				UserID string `json:"user_id"`
			}
			if err := json.Unmarshal(a.body, &got); err != nil || got.UserID == "" || got.Email != "alice@example.com" {
				t.Errorf("body %s: %+v %v", a.body, got, err)
			}
		})
	}
}

func TestHealthzAndMe(t *testing.T) {
	ts := start(t)
	if a := do(t, "GET", ts.URL+"/healthz", "", ""); a.status != 200 {
		t.Errorf("healthz = %d, want 200", a.status)
	}
	a := do(t, "GET", ts.URL+"/api/me", "", "", "X-User-ID", "alice")
	var got struct {
		UserID        string `json:"user_id"`
		Authenticated bool
	}
	if err := json.Unmarshal(a.body, &got); err != nil || a.status != 200 || got.UserID != "alice" || !got.Authenticated {
		t.Errorf("/api/me = %d %s, want 200 echoing alice", a.status, a.body)
	}
	a = do(t, "GET", ts.URL+"/api/me", "", "")
	if err := json.Unmarshal(a.body, &got); err != nil || got.UserID != "" || got.Authenticated {
		t.Errorf("/api/me without header = %s, want anonymous", a.body)
	}
}

// TestConcurrent shortens and follows links from many goroutines (run with -race).
func TestConcurrent(t *testing.T) {
	ts := start(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				long := fmt.Sprintf("https://example.com/%d/%d", g, i)
				a := do(t, "POST", ts.URL+"/shorten", form, "url="+url.QueryEscape(long))
				var got struct {
					ShortURL string `json:"short_url"`
				}
				if err := json.Unmarshal(a.body, &got); err != nil {
					t.Error(err)
					return
				}
				if r := do(t, "GET", got.ShortURL, "", ""); r.header.Get("Location") != long {
					t.Errorf("GET %s: Location %q, want %q", got.ShortURL, r.header.Get("Location"), long)
				}
			}
		})
	}
	testkit.Await(t, wg.Wait, 5*time.Minute, "the concurrent requests")
}

// TestRun drives the real program: flags, listener, shutdown on cancel.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, lines, done := testkit.StartCommand(t, ctx, run, "tinyurl", "-listen", "127.0.0.1:0", "-password", "s3cret", "-log", "-links", "")
	go func() { // the request log
		for lines.Scan() {
		}
	}()
	if a := do(t, "GET", base+"/healthz", "", ""); a.status != 200 {
		t.Errorf("healthz = %d", a.status)
	}
	if a := do(t, "POST", base+"/login", form, "email=a@b.c&password=s3cret"); a.status != 200 {
		t.Errorf("login with -password = %d, want 200", a.status)
	}
	if a := do(t, "POST", base+"/login", form, "email=a@b.c&password=demo"); a.status != 401 {
		t.Errorf("login with the default password = %d, want 401", a.status)
	}
	cancel()
	if err := testkit.Recv(t, done, 5*time.Second, "run returning after cancel"); err != nil {
		t.Errorf("run = %v, want nil after cancel", err)
	}
}

// TestRunOverTLS: with -cert and -key the demo answers over HTTPS,
// HTTP/1.1 and HTTP/2 as the client asks (bench/protocols.sh's direct
// target).
func TestRunOverTLS(t *testing.T) {
	ca := edgetest.NewCA(t)
	cert, key, _ := ca.WritePair(t, t.TempDir(), "127.0.0.1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, _, done := testkit.StartCommand(t, ctx, run, "tinyurl", "-listen", "127.0.0.1:0", "-links", "", "-cert", cert, "-key", key)
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("tinyurl listening on %q, want https://", base)
	}
	ca.GetOverBoth(t, base+"/go", http.StatusFound)
	cancel()
	if err := testkit.Recv(t, done, 5*time.Second, "run returning after cancel"); err != nil {
		t.Errorf("run = %v, want nil after cancel", err)
	}
}

func TestRunBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"tinyurl", "-nope"},
		{"tinyurl", "extra"},
		{"tinyurl", "-base-url", "ftp://x"},
		{"tinyurl", "-listen", "not-an-address"},
		{"tinyurl", "-key", "k.pem"},
	} {
		if err := run(context.Background(), args, io.Discard); err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
}

func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{"https://go.dev", "http://", "javascript:x", "https://a.b/ c", "http://[::1]:80/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := checkURL(s)
		if err != nil {
			return
		}
		u, perr := url.Parse(got)
		if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			t.Fatalf("checkURL(%q) accepted %q", s, got)
		}
	})
}

// BenchmarkRedirect is the upstream's share of every benchmark request.
func BenchmarkRedirect(b *testing.B) {
	h := mustServer(b, options{})
	req := httptest.NewRequest("GET", "/go", nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := httptest.NewRecorder()
		for pb.Next() {
			clear(w.Header())
			h.ServeHTTP(w, req)
		}
	})
}

// TestAsk: GET /tls/ask allows the service's branded domains, exact or
// one label under a *.suffix, and denies every other name.
func TestAsk(t *testing.T) {
	ts := httptest.NewServer(mustServer(t, options{Domains: []string{"go.brand.example", "*.links.example"}}))
	defer ts.Close()
	for _, c := range []struct {
		domain string
		want   int
	}{
		{"go.brand.example", 200}, {"GO.Brand.Example.", 200}, {"a.links.example", 200},
		{"links.example", 404}, {"a.b.links.example", 404}, {"evil.example", 404}, {"", 400},
	} {
		resp, err := http.Get(ts.URL + "/tls/ask?domain=" + url.QueryEscape(c.domain))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("ask %q: %d, want %d", c.domain, resp.StatusCode, c.want)
		}
	}
}
