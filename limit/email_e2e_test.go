package limit_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"testing"
	"unicode/utf16"

	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/limit"
)

// loginUpstream is a standard Go login service with the two handlers common
// Go code writes: POST /login reads r.FormValue (urlencoded or multipart
// body, then the query string), POST /api/login decodes JSON with
// json.NewDecoder(r.Body).Decode whatever the Content-Type. An email it
// cannot find is a 400; a wrong password for a known user a 401, recorded.
type loginUpstream struct {
	mu       sync.Mutex
	attempts map[string]int // wrong passwords per user, as the upstream saw them
}

func (u *loginUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var email, password string
	switch r.URL.Path {
	case "/login":
		email, password = r.FormValue("email"), r.FormValue("password")
	case "/api/login":
		var req struct {
			Email    string `json:"email"`
			Password string `json:"password"`
		}
		// Many handlers ignore a decode error once the fields they need
		// are set; the most permissive reader is the attacker's friend.
		json.NewDecoder(r.Body).Decode(&req)
		email, password = req.Email, req.Password
	default:
		http.NotFound(w, r)
		return
	}
	email = strings.TrimSpace(email)
	if email == "" {
		http.Error(w, "email required", http.StatusBadRequest)
		return
	}
	// The user table compares emails case-insensitively, as most do.
	if !strings.EqualFold(email, victim) {
		http.Error(w, "unknown user or wrong password", http.StatusUnauthorized)
		return
	}
	if password == victimPassword {
		fmt.Fprintln(w, "welcome")
		return
	}
	u.mu.Lock()
	u.attempts[victim]++
	u.mu.Unlock()
	http.Error(w, "unknown user or wrong password", http.StatusUnauthorized)
}

func (u *loginUpstream) victimAttempts() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.attempts[victim]
}

// loginGateway is the limiter middleware in front of an
// httputil.ReverseProxy to a loginUpstream, all over real HTTP on loopback:
// one email rule per login handler, 5 wrong passwords a minute.
type loginGateway struct {
	up  *loginUpstream
	srv *httptest.Server
}

const maxBody = 4096

func newLoginGateway(t *testing.T, policy string) *loginGateway {
	t.Helper()
	up := &loginUpstream{attempts: map[string]int{}}
	upSrv := httptest.NewServer(up)
	t.Cleanup(upSrv.Close)
	target, _ := url.Parse(upSrv.URL)
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }}
	id := limit.DefaultIdentity()
	id.MaxBodyBytes = maxBody
	rules := []limit.Rule{
		{Name: "login_email", Match: limit.Match{Methods: []string{"POST"}, Path: "/login"}, Key: limit.Email,
			Limits: limits(t, "5/m"), CountStatus: []int{401}, OnUnreadable: policy},
		{Name: "api_login_email", Match: limit.Match{Methods: []string{"POST"}, Path: "/api/login"}, Key: limit.Email,
			Limits: limits(t, "5/m"), CountStatus: []int{401}, OnUnreadable: policy},
	}
	l := limit.New(compile(t, rules, id, limit.DefaultConfig()), limit.NewMemory(), nil, nil)
	srv := httptest.NewServer(l.Middleware(proxy))
	t.Cleanup(srv.Close)
	return &loginGateway{up: up, srv: srv}
}

// shape is one way of sending a login attempt for the victim with a wrong
// password: the request's query string, headers and body.
type shape struct {
	name     string
	query    string
	header   map[string]string
	body     func(password string) []byte
	chunked  bool // send the body without Content-Length
	readable bool // the gateway must find the victim's email (and so answer 429 on the 6th try)
}

func formBody(kv ...string) func(string) []byte {
	return func(pw string) []byte {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Add(kv[i], kv[i+1])
		}
		v.Set("password", pw)
		return []byte(v.Encode())
	}
}

func rawBody(format string) func(string) []byte {
	return func(pw string) []byte { return []byte(strings.ReplaceAll(format, "PW", pw)) }
}

func multipartBody(boundary string, parts ...[3]string) func(string) []byte {
	return func(pw string) []byte {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		mw.SetBoundary(boundary)
		for _, p := range append(parts, [3]string{"password", pw, ""}) {
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="%s"`, p[0]))
			if p[2] != "" {
				k, v, _ := strings.Cut(p[2], ": ")
				h.Set(k, v)
			}
			w, _ := mw.CreatePart(h)
			io.WriteString(w, p[1])
		}
		mw.Close()
		return b.Bytes()
	}
}

const (
	form     = "application/x-www-form-urlencoded"
	jsonType = "application/json"
	boundary = "xYzZY"
	mpType   = "multipart/form-data; boundary=" + boundary
)

func ct(v string) map[string]string { return map[string]string{"Content-Type": v} }

// bypassShapes are the ways tried to send a wrong password for the victim
// without the login_email rule counting it. readable shapes must be
// counted; the others may be refused; none may reach the upstream more
// than the limit allows.
var bypassShapes = []shape{
	{name: "form body", header: ct(form), body: formBody("email", victim), readable: true},
	{name: "JSON body", header: ct(jsonType), body: rawBody(`{"email":"` + victim + `","password":"PW"}`), readable: true},
	{name: "email in the query string, form body", query: "email=" + url.QueryEscape(victim), header: ct(form), body: formBody(), readable: true},
	{name: "email in the query string, JSON body", query: "email=" + url.QueryEscape(victim), header: ct(jsonType), body: rawBody(`{"password":"PW"}`), readable: true},
	{name: "JSON then trailing garbage", header: ct(jsonType), body: rawBody(`{"email":"` + victim + `","password":"PW"}garbage`)},
	{name: "two JSON objects", header: ct(jsonType), body: rawBody(`{"email":"` + victim + `","password":"PW"}{}`)},
	{name: "JSON padded with white space past max_body_bytes", header: ct(jsonType), body: rawBody(`{"email":"` + victim + `","password":"PW"}` + strings.Repeat(" ", 2*maxBody))},
	{name: "Content-Type application/json; charset (malformed parameter)", header: ct("application/json; charset"), body: rawBody(`{"email":"` + victim + `","password":"PW"}`)},
	{name: "form Content-Type with a malformed parameter", header: ct(form + "; charset"), body: formBody("email", victim)},
	{name: "JSON sent as text/plain", header: ct("text/plain"), body: rawBody(`{"email":"` + victim + `","password":"PW"}`), readable: true},
	{name: "JSON without Content-Type", body: rawBody(`{"email":"` + victim + `","password":"PW"}`), readable: true},
	{name: "JSON sent as a form", header: ct(form), body: rawBody(`{"email":"` + victim + `","password":"PW"}`), readable: true},
	{name: "duplicate JSON keys, the victim's last", header: ct(jsonType), body: rawBody(`{"email":"nobody@example.org","email":"` + victim + `","password":"PW"}`)},
	{name: "JSON key in upper case", header: ct(jsonType), body: rawBody(`{"EMAIL":"` + victim + `","password":"PW"}`), readable: true},
	{name: "JSON keys differing only in case", header: ct(jsonType), body: rawBody(`{"email":"nobody@example.org","Email":"` + victim + `","password":"PW"}`)},
	{name: `\u escapes in the JSON key`, header: ct(jsonType), body: rawBody(`{"em\u0061il":"` + victim + `","password":"PW"}`), readable: true},
	{name: `\u escapes in the JSON value`, header: ct(jsonType), body: rawBody(`{"email":"\u0073am@example.com","password":"PW"}`), readable: true},
	{name: "JSON email field deep after nested values", header: ct(jsonType), body: rawBody(`{"a":[{"b":[1,{"email":"x@y.z"}]}],"email":"` + victim + `","password":"PW"}`), readable: true},
	{name: "two form values", header: ct(form), body: formBody("email", "nobody@example.org", "email", victim)},
	{name: "form body and query string disagree", query: "email=nobody%40example.org", header: ct(form), body: formBody("email", victim)},
	{name: "form field in upper case", header: ct(form), body: formBody("EMAIL", victim)},
	{name: "percent-encoded form key", header: ct(form), body: func(pw string) []byte { return []byte("%65mail=" + url.QueryEscape(victim) + "&password=" + pw) }, readable: true},
	{name: "semicolon-separated query", query: "x=1;email=" + url.QueryEscape(victim), header: ct(form), body: formBody()},
	{name: "blank form email, victim in the query", query: "email=" + url.QueryEscape(victim), header: ct(form), body: formBody("email", ""), readable: true},
	{name: "chunked form body", header: ct(form), body: formBody("email", victim), chunked: true, readable: true},
	{name: "multipart form", header: ct(mpType), body: multipartBody(boundary, [3]string{"email", victim, ""}), readable: true},
	{name: "multipart form, quoted-printable email", header: ct(mpType), body: multipartBody(boundary, [3]string{"email", "sam=40example.com", "Content-Transfer-Encoding: quoted-printable"}), readable: true},
	{name: "multipart form, base64 email", header: ct(mpType), body: multipartBody(boundary, [3]string{"email", "c2FtQGV4YW1wbGUuY29t", "Content-Transfer-Encoding: base64"})},
	{name: "multipart form and query string disagree", query: "email=" + url.QueryEscape(victim), header: ct(mpType), body: multipartBody(boundary, [3]string{"email", "nobody@example.org", ""})},
	{name: "multipart form past max_body_bytes", header: ct(mpType), body: multipartBody(boundary, [3]string{"avatar", strings.Repeat("x", 2*maxBody), ""}, [3]string{"email", victim, ""})},
	{name: "multipart without a boundary", header: ct("multipart/form-data"), body: multipartBody(boundary, [3]string{"email", victim, ""})},
	{name: "gzip Content-Encoding", header: map[string]string{"Content-Type": jsonType, "Content-Encoding": "gzip"}, body: func(pw string) []byte {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		fmt.Fprintf(zw, `{"email":"%s","password":"%s"}`, victim, pw)
		zw.Close()
		return b.Bytes()
	}},
	{name: "UTF-16 JSON", header: ct(jsonType + "; charset=utf-16le"), body: func(pw string) []byte {
		var b []byte
		for _, u := range utf16.Encode([]rune(`{"email":"` + victim + `","password":"` + pw + `"}`)) {
			b = append(b, byte(u), byte(u>>8))
		}
		return b
	}},
	{name: "Latin-1 form", header: ct(form + "; charset=iso-8859-1"), body: formBody("email", victim)},
	{name: "two Content-Type headers", header: map[string]string{"Content-Type": form, "content-type": jsonType}, body: formBody("email", victim)},
	{name: "JSON email as an array", header: ct(jsonType), body: rawBody(`{"email":["` + victim + `"],"password":"PW"}`)},
	{name: "JSON email null then the victim's", header: ct(jsonType), body: rawBody(`{"email":null,"email":"` + victim + `","password":"PW"}`)},
	{name: "JSON email as a number", header: ct(jsonType), body: rawBody(`{"email":1,"password":"PW"}`)},
	{name: "JSON with a byte order mark", header: ct(jsonType), body: rawBody("\ufeff" + `{"email":"` + victim + `","password":"PW"}`)},
	{name: "top-level JSON array", header: ct(jsonType), body: rawBody(`[{"email":"` + victim + `","password":"PW"}]`)},
	{name: "JSON with a comment", header: ct(jsonType), body: rawBody(`{"email":"` + victim + `", /* hi */ "password":"PW"}`)},
	{name: "email in upper case", header: ct(form), body: formBody("email", strings.ToUpper(victim)), readable: true},
	{name: "email with white space around", header: ct(form), body: formBody("email", " \t"+victim+" "), readable: true},
	{name: "NUL after the email", header: ct(jsonType), body: rawBody(`{"email":"` + victim + `\u0000x","password":"PW"}`)},
	{name: "long s (ſ) for s in the email", header: ct(form), body: formBody("email", "ſam@example.com"), readable: true},
	{name: "s, S and ſ in turn (8 spellings the upstream takes for one user)", header: ct(form), body: func(pw string) []byte {
		// pw is "wrong-<attempt>": each attempt spells the email its way.
		spellings := []string{"sam", "ſam", "Sam", "ſAM", "SAM", "ſaM", "sAm", "ſAm"}
		i := int(pw[len(pw)-1] - '0')
		return formBody("email", spellings[i%len(spellings)]+"@example.com")(pw)
	}, readable: true},
	{name: "full-width s, a combining accent and a zero-width space", header: ct(form), body: formBody("email", "ｓa\u0301\u200bm@example.com"), readable: true},
	{name: "control character inside the email", header: ct(form), body: formBody("email", "sam\t@example.com")},
	{name: "invalid UTF-8 in the form email", header: ct(form), body: func(pw string) []byte { return []byte("email=sam%40example.com%FF&password=" + pw) }},
}

// TestEmailBypassShapes sends 8 wrong passwords for the victim in each shape
// to each login handler through the gateway. The upstream must never see
// more wrong passwords for the victim than the rule allows (5): every
// attempt it sees was counted. Shapes the gateway can read end in 429;
// the rest are refused with a 4xx problem before the upstream sees them.
func TestEmailBypassShapes(t *testing.T) {
	var report strings.Builder
	for _, sh := range bypassShapes {
		for _, path := range []string{"/login", "/api/login"} {
			t.Run(sh.name+" "+path, func(t *testing.T) {
				g := newLoginGateway(t, "")
				var statuses []int
				var answers []string // status, and who answered: g the gateway, u the upstream
				for i := range 8 {
					s := g.send(t, path, sh, fmt.Sprintf("wrong-%d", i))
					statuses = append(statuses, s.status)
					answers = append(answers, s.String())
				}
				seen := g.up.victimAttempts()
				fmt.Fprintf(&report, "%-60s %-10s %s; upstream saw %d wrong passwords for the victim\n", sh.name, path, testkit.Runs(answers), seen)
				if seen > 5 {
					t.Errorf("upstream saw %d wrong passwords for the victim, the limit is 5 (statuses %v)", seen, statuses)
				}
				for _, s := range statuses {
					if s == 200 || s >= 500 {
						t.Errorf("status %d in %v", s, statuses)
					}
				}
				if sh.readable && seen > 0 && statuses[7] != 429 {
					t.Errorf("statuses %v: the gateway must read this shape and answer 429 by the 8th try", statuses)
				}
				if !sh.readable && seen > 0 {
					t.Errorf("answers %v: the upstream read the victim's email in a shape the gateway cannot read", answers)
				}
			})
		}
	}
	t.Logf("what each shape gets:\n%s", report.String())
}

// answer is the status a client got and whether the gateway gave it (a
// problem body) or the upstream.
type answer struct {
	status  int
	gateway bool
}

func (a answer) String() string {
	if a.gateway {
		return fmt.Sprintf("%d(gateway)", a.status)
	}
	return fmt.Sprintf("%d(upstream)", a.status)
}

// send makes one attempt and returns the answer.
func (g *loginGateway) send(t *testing.T, path string, sh shape, password string) answer {
	t.Helper()
	u := g.srv.URL + path
	if sh.query != "" {
		u += "?" + sh.query
	}
	var body io.Reader
	if sh.body != nil {
		b := sh.body(password)
		body = bytes.NewReader(b)
		if sh.chunked {
			body = io.MultiReader(body)
		}
	}
	req, err := http.NewRequest("POST", u, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range sh.header {
		req.Header.Add(k, v) // Add: "content-type" after "Content-Type" is a second header
	}
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	// The gateway answers problems naming the rule; the upstream answers
	// plain text.
	gw := resp.Header.Get("Content-Type") == "application/problem+json"
	if gw && !bytes.Contains(b, []byte(`"rule":"`)) {
		t.Errorf("gateway answer %d without the rule: %s", resp.StatusCode, b)
	}
	return answer{resp.StatusCode, gw}
}

// TestUnreadablePolicies: the same unreadable shape under each policy.
func TestUnreadablePolicies(t *testing.T) {
	trailing := shape{header: ct(jsonType), body: rawBody(`{"email":"` + victim + `","password":"PW"}garbage`)}
	for _, tc := range []struct {
		policy string
		want   []int // the 8 statuses
		seen   int   // wrong passwords the upstream saw
	}{
		{limit.OnUnreadableReject, []int{400, 400, 400, 400, 400, 400, 400, 400}, 0},
		// skip: the gateway does not count what it cannot read; the
		// upstream's decoder reads the first value. This is the bypass
		// skip accepts, for routes whose bodies the gateway cannot read.
		{limit.OnUnreadableSkip, []int{401, 401, 401, 401, 401, 401, 401, 401}, 8},
		// key_by_ip: counted per client address under the rule's limits.
		{limit.OnUnreadableKeyByIP, []int{401, 401, 401, 401, 401, 429, 429, 429}, 5},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			g := newLoginGateway(t, tc.policy)
			var got []int
			for i := range 8 {
				got = append(got, g.send(t, "/api/login", trailing, fmt.Sprintf("wrong-%d", i)).status)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || g.up.victimAttempts() != tc.seen {
				t.Errorf("statuses %v, upstream saw %d: want %v and %d", got, g.up.victimAttempts(), tc.want, tc.seen)
			}
		})
	}
}
