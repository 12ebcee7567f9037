package gateway_test

import (
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"strings"
	"sync"
	"testing"

	"github.com/linkgate/linkgate/internal/testkit"
)

// lenientLogin is a login service that routes as lenient stacks do, the
// upstream an email rule must not be stepped around in front of:
//
//   - the path: each segment's ";" parameters dropped (Tomcat, Jetty,
//     Spring: "/login;jsessionid=1", and "/login%3Bx" once decoded), then
//     cleaned and lower-cased;
//   - the method: the one X-HTTP-Method-Override, X-Method-Override or
//     X-HTTP-Method names, or a "_method" field of the query string or the
//     body, on whatever method the request came with (Rack and Symfony
//     honour them on POST only; this one is laxer);
//   - the email: the email field, or else email[] or email[0] (PHP, Rails
//     and Node's qs read them as a list holding the email).
//
// With anyMethod, /login logs in whatever the method, overrides or not.
// Wrong passwords are counted per email as the service saw them.
type lenientLogin struct {
	anyMethod bool

	mu       sync.Mutex
	wrong    map[string]int
	requests int // every request but health checks
}

func (u *lenientLogin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		return
	}
	u.mu.Lock()
	u.requests++
	u.mu.Unlock()
	segs := strings.Split(r.URL.Path, "/")
	for i, s := range segs {
		segs[i], _, _ = strings.Cut(s, ";")
	}
	p := strings.ToLower(path.Clean("/" + strings.Join(segs, "/")))
	r.ParseMultipartForm(1 << 20) // the query string and a form or multipart body, on any method
	if r.MultipartForm == nil && r.Method != "POST" && r.Method != "PUT" && r.Method != "PATCH" {
		// Go parses bodies of these three only; this service reads the
		// form body of any method.
		if b, err := io.ReadAll(r.Body); err == nil {
			if vs, err := url.ParseQuery(string(b)); err == nil {
				for k, v := range vs {
					r.Form[k] = append(r.Form[k], v...)
				}
			}
		}
	}
	method := r.Method
	if v := r.Form.Get("_method"); v != "" {
		method = strings.ToUpper(v)
	}
	for _, h := range []string{"X-HTTP-Method-Override", "X-Method-Override", "X-HTTP-Method"} {
		if v := r.Header.Get(h); v != "" {
			method = strings.ToUpper(v)
		}
	}
	if p != "/login" {
		http.NotFound(w, r)
		return
	}
	if method != "POST" && !u.anyMethod {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	email := r.Form.Get("email")
	for _, k := range []string{"email[]", "email[0]"} {
		if email == "" {
			email = r.Form.Get(k)
		}
	}
	if email == "" {
		http.Error(w, "email required", http.StatusBadRequest)
		return
	}
	if r.Form.Get("password") == "demo" {
		io.WriteString(w, "welcome")
		return
	}
	u.mu.Lock()
	u.wrong[strings.ToLower(email)]++
	u.mu.Unlock()
	http.Error(w, "wrong password", http.StatusUnauthorized)
}

// seen returns the wrong passwords the service saw for email, and the
// requests it got in all.
func (u *lenientLogin) seen(email string) (wrong, requests int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.wrong[email], u.requests
}

// routingShape is one way of sending a wrong password for an email.
type routingShape struct {
	name, method, target string // target: the path and query as sent, EMAIL standing for the email
	header               []string
	body                 func(email string) (contentType string, body []byte)
}

func form(kv ...string) func(string) (string, []byte) {
	return func(email string) (string, []byte) {
		var b strings.Builder
		for i := 0; i+1 < len(kv); i += 2 {
			if b.Len() > 0 {
				b.WriteByte('&')
			}
			b.WriteString(kv[i] + "=" + url.QueryEscape(strings.ReplaceAll(kv[i+1], "EMAIL", email)))
		}
		return "application/x-www-form-urlencoded", []byte(b.String())
	}
}

func multipartForm(kv ...string) func(string) (string, []byte) {
	return func(email string) (string, []byte) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		for i := 0; i+1 < len(kv); i += 2 {
			mw.WriteField(kv[i], strings.ReplaceAll(kv[i+1], "EMAIL", email))
		}
		mw.Close()
		return mw.FormDataContentType(), b.Bytes()
	}
}

// TestEmailRuleRoutedAsTheUpstream sends 8 wrong passwords in each shape
// through a real gateway to a lenientLogin, with the rule of the example
// config (POST /login, key email, 5/m, counting 401s). Shapes the service
// routes to its login handler by a method override or despite path
// parameters must be counted like a plain POST /login: the service sees at
// most 5 and the client gets 429. A rule applies only to the methods it
// lists: in front of a service that logs in on any method, PUT and GET
// pass a POST rule uncounted (docs/security.md says so), and a rule without
// methods counts them. Methods the gateway's router does not know
// (PROPFIND, FOO) never reach the service. Run with -v for the table of
// what each shape gets.
func TestEmailRuleRoutedAsTheUpstream(t *testing.T) {
	type setup struct {
		up  *lenientLogin
		gw  *running
		cfg string
	}
	newSetup := func(anyMethod bool, methods string) setup {
		up := &lenientLogin{anyMethod: anyMethod, wrong: map[string]int{}}
		srv := httptest.NewServer(up)
		t.Cleanup(srv.Close)
		cfg := testkit.BaseConfig(srv.URL) + fmt.Sprintf(`identity:
  email_fields: [email]
rules:
  - {name: login_email, match: {methods: %s, path: /login}, key: email, limits: [5/m], count_status: [401]}
`, methods)
		return setup{up, start(t, cfg), "methods " + methods}
	}
	byMethod := newSetup(false, "[POST]")
	anyPost := newSetup(true, "[POST]")
	anyAll := newSetup(true, "[]")

	pw := "password"
	const (
		counted    = iota // the service sees at most 5, and a 429 comes by the 8th (or the gateway refuses them all)
		through           // the documented assumption: the rule does not list the method, the service sees all 8
		notProxied        // the service gets none of the 8 requests
	)
	for i, tc := range []struct {
		s    setup
		sh   routingShape
		want int
	}{
		{byMethod, routingShape{name: "plain POST /login", method: "POST", target: "/login", body: form("email", "EMAIL", pw, "x")}, counted},
		{byMethod, routingShape{name: "path parameter /login;jsessionid=1", method: "POST", target: "/login;jsessionid=1", body: form("email", "EMAIL", pw, "x")}, counted},
		{byMethod, routingShape{name: "encoded path parameter /login%3Bx", method: "POST", target: "/login%3Bx", body: form("email", "EMAIL", pw, "x")}, counted},
		{byMethod, routingShape{name: "/Login;a=b/", method: "POST", target: "/Login;a=b/", body: form("email", "EMAIL", pw, "x")}, counted},
		{byMethod, routingShape{name: "/;x/login", method: "POST", target: "/;x/login", body: form("email", "EMAIL", pw, "x")}, counted},
		{byMethod, routingShape{name: "PUT + X-HTTP-Method-Override: POST", method: "PUT", target: "/login", header: []string{"X-HTTP-Method-Override", "POST"}, body: form("email", "EMAIL", pw, "x")}, counted},
		{byMethod, routingShape{name: "PUT + X-Method-Override: POST", method: "PUT", target: "/login", header: []string{"X-Method-Override", "POST"}, body: form("email", "EMAIL", pw, "x")}, counted},
		{byMethod, routingShape{name: "PATCH + X-HTTP-Method: post", method: "PATCH", target: "/login", header: []string{"X-HTTP-Method", "post"}, body: form("email", "EMAIL", pw, "x")}, counted},
		{byMethod, routingShape{name: "DELETE + X-HTTP-Method-Override: POST, /login;x", method: "DELETE", target: "/login;x", header: []string{"X-HTTP-Method-Override", "POST"}, body: form("email", "EMAIL", pw, "x")}, counted},
		{byMethod, routingShape{name: "GET ?_method=POST&email=&password=", method: "GET", target: "/login?_method=POST&email=EMAIL&password=x"}, counted},
		{byMethod, routingShape{name: "GET ?%5Fmethod=POST (encoded key)", method: "GET", target: "/login?%5Fmethod=POST&email=EMAIL&password=x"}, counted},
		{byMethod, routingShape{name: "GET ?x=1;_method=POST (';' separator)", method: "GET", target: "/login?x=1;_method=POST&email=EMAIL&password=x"}, counted},
		{byMethod, routingShape{name: "PUT ?_method=POST, form body", method: "PUT", target: "/login?_method=POST", body: form("email", "EMAIL", pw, "x")}, counted},
		{byMethod, routingShape{name: "PUT, _method=POST in the form body", method: "PUT", target: "/login", body: form("_method", "POST", "email", "EMAIL", pw, "x")}, counted},
		{byMethod, routingShape{name: "PATCH, _method=POST in a multipart body", method: "PATCH", target: "/login", body: multipartForm("_method", "POST", "email", "EMAIL", pw, "x")}, counted},
		{byMethod, routingShape{name: "DELETE, _method=POST in the form body", method: "DELETE", target: "/login", body: form("_method", "POST", "email", "EMAIL", pw, "x")}, counted},
		{byMethod, routingShape{name: "POST + X-HTTP-Method-Override: PUT (routed as PUT)", method: "POST", target: "/login", header: []string{"X-HTTP-Method-Override", "PUT"}, body: form("email", "EMAIL", pw, "x")}, counted},
		{byMethod, routingShape{name: "email[]=", method: "POST", target: "/login", body: form("email[]", "EMAIL", pw, "x")}, counted},
		{byMethod, routingShape{name: "email[0]=", method: "POST", target: "/login", body: form("email[0]", "EMAIL", pw, "x")}, counted},
		{byMethod, routingShape{name: "email%5B%5D= (encoded brackets)", method: "POST", target: "/login?email%5B%5D=EMAIL", body: form(pw, "x")}, counted},
		{byMethod, routingShape{name: "email[] in a multipart body", method: "POST", target: "/login", body: multipartForm("email[]", "EMAIL", pw, "x")}, counted},
		{byMethod, routingShape{name: "PUT ?_method=POST&email[]=, /login;x", method: "PUT", target: "/login;x?_method=POST&email[]=EMAIL&password=x"}, counted},
		{anyPost, routingShape{name: "PUT /login, a service taking any method", method: "PUT", target: "/login", body: form("email", "EMAIL", pw, "x")}, through},
		{anyPost, routingShape{name: "GET /login?email=&password=, a service taking any method", method: "GET", target: "/login?email=EMAIL&password=x"}, through},
		{anyAll, routingShape{name: "PUT /login, rule without methods", method: "PUT", target: "/login", body: form("email", "EMAIL", pw, "x")}, counted},
		{anyAll, routingShape{name: "GET /login?email=&password=, rule without methods", method: "GET", target: "/login?email=EMAIL&password=x"}, counted},
		{anyAll, routingShape{name: "DELETE /login;x, rule without methods", method: "DELETE", target: "/login;x", body: form("email", "EMAIL", pw, "x")}, counted},
		{anyAll, routingShape{name: "FOO /login (a method the router does not know)", method: "FOO", target: "/login", body: form("email", "EMAIL", pw, "x")}, notProxied},
		{anyPost, routingShape{name: "PROPFIND /login + X-HTTP-Method-Override: POST", method: "PROPFIND", target: "/login", header: []string{"X-HTTP-Method-Override", "POST"}, body: form("email", "EMAIL", pw, "x")}, notProxied},
	} {
		t.Run(tc.sh.name, func(t *testing.T) {
			email := fmt.Sprintf("victim%d@example.com", i) // a counter of its own per shape
			var answers []string
			last := 0
			_, before := tc.s.up.seen(email)
			for range 8 {
				_, n := tc.s.up.seen(email)
				target := strings.ReplaceAll(tc.sh.target, "EMAIL", url.QueryEscape(email))
				var body io.Reader
				var ctype string
				if tc.sh.body != nil {
					var b []byte
					ctype, b = tc.sh.body(email)
					body = bytes.NewReader(b)
				}
				req, err := http.NewRequest(tc.sh.method, "http://"+tc.s.gw.g.Addr().String()+target, body)
				if err != nil {
					t.Fatal(err)
				}
				if ctype != "" {
					req.Header.Set("Content-Type", ctype)
				}
				for i := 0; i+1 < len(tc.sh.header); i += 2 {
					req.Header.Set(tc.sh.header[i], tc.sh.header[i+1])
				}
				resp, err := testkit.Client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				who := "gateway"
				if _, m := tc.s.up.seen(email); m > n {
					who = "upstream"
				}
				answers = append(answers, fmt.Sprintf("%d(%s)", resp.StatusCode, who))
				last = resp.StatusCode
			}
			seen, after := tc.s.up.seen(email)
			got := after - before
			t.Logf("%-60s %-13s %s; the service got %d requests, saw %d wrong passwords", tc.sh.name, tc.s.cfg, testkit.Runs(answers), got, seen)
			switch tc.want {
			case counted:
				if seen > 5 || seen > 0 && last != 429 {
					t.Errorf("answers %v, the service saw %d wrong passwords: want at most 5 and a 429 by the 8th", answers, seen)
				}
			case through:
				if seen != 8 {
					t.Errorf("answers %v, the service saw %d: a rule that does not list the method does not count it", answers, seen)
				}
			case notProxied:
				if got != 0 {
					t.Errorf("answers %v, the service got %d of the requests, want none", answers, got)
				}
			}
		})
	}
}
