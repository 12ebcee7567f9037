package limit

import (
	"io"
	"net/http"
	"slices"
	"testing"
)

// TestOverrides: the methods a request names as overrides, in its headers
// and query string, and in its body.
func TestOverrides(t *testing.T) {
	for _, tc := range []struct {
		name  string
		query string
		hdr   []string
		want  []string
	}{
		{name: "none", query: "utm_source=x&a=b"},
		{name: "X-HTTP-Method-Override", hdr: []string{"X-HTTP-Method-Override", " post "}, want: []string{"POST"}},
		{name: "X-Method-Override and X-HTTP-Method", hdr: []string{"X-Method-Override", "PUT", "X-HTTP-Method", "DELETE"}, want: []string{"DELETE", "PUT"}},
		{name: "joined by a comma", hdr: []string{"X-HTTP-Method-Override", "PATCH, post"}, want: []string{"PATCH", "POST"}},
		{name: "_method in the query", query: "a=1&_method=patch", want: []string{"PATCH"}},
		{name: "_METHOD in the query", query: "_METHOD=POST", want: []string{"POST"}},
		{name: "encoded key", query: "%5Fmethod=POST&%5f%6Dethod=PUT", want: []string{"POST", "PUT"}},
		{name: "';' separator", query: "a=1;_method=POST", want: []string{"POST"}},
		{name: "encoded value", query: "_method=P%4FST", want: []string{"POST"}},
		{name: "blank value", query: "_method=&_method=+"},
		{name: "other keys of seven bytes", query: "methods=POST&_methox=PUT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := request(tc.query, nil, tc.hdr...)
			got := overrides(r)
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("overrides: %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBodyOverrides(t *testing.T) {
	const mp = "--b\r\nContent-Disposition: form-data; name=\"_method\"\r\n\r\nput\r\n--b\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\na@b.c\r\n--b--\r\n"
	for _, tc := range []struct {
		name, body string
		hdr        []string
		want       []string
		unknown    bool // the gateway cannot tell
		none       bool // not a body a _method is read from: not looked into
	}{
		{name: "form", body: "email=a&_method=PUT", hdr: []string{"Content-Type", "application/x-www-form-urlencoded"}, want: []string{"PUT"}},
		{name: "form without _method", body: "email=a", hdr: []string{"Content-Type", "application/x-www-form-urlencoded"}},
		{name: "no Content-Type, read as a form", body: "_method=delete", want: []string{"DELETE"}},
		{name: "form with a bad escape in _method", body: "_method=%zz", hdr: []string{"Content-Type", "application/x-www-form-urlencoded"}, unknown: true},
		{name: "multipart", body: mp, hdr: []string{"Content-Type", "multipart/form-data; boundary=b"}, want: []string{"PUT"}},
		{name: "multipart cut short", body: mp[:60], hdr: []string{"Content-Type", "multipart/form-data; boundary=b"}, unknown: true},
		{name: "multipart without a boundary", body: mp, hdr: []string{"Content-Type", "multipart/form-data"}, unknown: true},
		{name: "JSON", body: `{"a":{"_method":"GET"},"_method":"PUT","_METHOD":"PATCH"}`, hdr: []string{"Content-Type", "application/json"}, want: []string{"PATCH", "PUT"}},
		{name: "JSON array", body: `[{"_method":"PUT"}]`, hdr: []string{"Content-Type", "application/json"}},
		{name: "JSON with trailing data", body: `{"_method":"PUT"}x`, hdr: []string{"Content-Type", "application/json"}, unknown: true},
		{name: "gzip", body: "x", hdr: []string{"Content-Type", "application/x-www-form-urlencoded", "Content-Encoding", "gzip"}, unknown: true},
		{name: "latin-1", body: "_method=PUT", hdr: []string{"Content-Type", "application/x-www-form-urlencoded; charset=latin1"}, unknown: true},
		{name: "a Content-Type that does not parse", body: "_method=PUT", hdr: []string{"Content-Type", "application/x-www-form-urlencoded; charset"}, unknown: true},
		{name: "an image", body: "_method=PUT", hdr: []string{"Content-Type", "image/png"}, none: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := request("", []byte(tc.body), tc.hdr...)
			kind, boundary := overrideBody(r)
			if none := kind == noOverrideBody; none != tc.none {
				t.Fatalf("kind %d: not looked into %v, want %v", kind, none, tc.none)
			}
			got, ok := bodyOverrides(kind, boundary, []byte(tc.body))
			slices.Sort(got)
			if ok == tc.unknown || !slices.Equal(got, tc.want) {
				t.Errorf("bodyOverrides: %q, ok %v; want %q, ok %v", got, ok, tc.want, !tc.unknown)
			}
		})
	}
}

// TestMiddlewareOverrides: a rule matches a request under a method its
// override names, wherever it names it, and a POST whose form body cannot
// be read matches the rules of other methods on its path.
func TestMiddlewareOverrides(t *testing.T) {
	rules := []Rule{{Name: "change_email", Match: Match{Methods: []string{"PUT"}, Path: "/account"}, Key: IP, Limits: mustLimits(t, "1/m")}}
	for _, tc := range []struct {
		name, method, query, body string
		hdr                       []string
		limited                   bool // the second request is refused: the rule matched
	}{
		{name: "PUT", method: "PUT", limited: true},
		{name: "POST", method: "POST", body: "a=b", hdr: []string{"Content-Type", "application/x-www-form-urlencoded"}},
		{name: "POST, _method=PUT in the body", method: "POST", body: "a=b&_method=put", hdr: []string{"Content-Type", "application/x-www-form-urlencoded"}, limited: true},
		{name: "POST, _method=PUT in the query", method: "POST", query: "_method=PUT", limited: true},
		{name: "POST, override header", method: "POST", hdr: []string{"X-HTTP-Method-Override", "PUT"}, limited: true},
		{name: "POST, a form body larger than max_body_bytes", method: "POST", body: "a=" + string(make([]byte, 70<<10)), hdr: []string{"Content-Type", "application/x-www-form-urlencoded"}, limited: true},
		{name: "POST, a gzip form body", method: "POST", body: "\x1f\x8b", hdr: []string{"Content-Type", "application/x-www-form-urlencoded", "Content-Encoding", "gzip"}, limited: true},
		{name: "POST, a JSON body that does not parse", method: "POST", body: `{"_method":`, hdr: []string{"Content-Type", "application/json"}, limited: true},
		{name: "POST, an image larger than max_body_bytes", method: "POST", body: string(make([]byte, 70<<10)), hdr: []string{"Content-Type", "image/png"}},
		{name: "PATCH, a form body larger than max_body_bytes", method: "PATCH", body: "a=" + string(make([]byte, 70<<10)), hdr: []string{"Content-Type", "application/x-www-form-urlencoded"}},
		{name: "POST, _method=PUT on another path", method: "POST", body: "_method=PUT", hdr: []string{"Content-Type", "application/x-www-form-urlencoded"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := New(compileT(t, rules, DefaultConfig()), NewMemory(), NewMetrics(nil), nil)
			var upstream []byte
			h := l.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				upstream, _ = io.ReadAll(r.Body)
			}))
			path := "/account"
			if tc.name == "POST, _method=PUT on another path" {
				path = "/other"
			}
			var statuses []int
			for range 2 {
				r := request(tc.query, []byte(tc.body), tc.hdr...)
				r.Method, r.URL.Path, r.RemoteAddr = tc.method, path, "192.0.2.1:1"
				if tc.body == "" {
					r.Body, r.ContentLength = http.NoBody, 0
				}
				w := &statusRecorder{h: http.Header{}}
				upstream = nil
				h.ServeHTTP(w, r)
				statuses = append(statuses, w.status)
				if w.status == 0 && string(upstream) != tc.body {
					t.Fatalf("the upstream got %d bytes of the %d-byte body", len(upstream), len(tc.body))
				}
			}
			if limited := statuses[1] == http.StatusTooManyRequests; limited != tc.limited {
				t.Errorf("statuses %v: limited %v, want %v", statuses, limited, tc.limited)
			}
		})
	}
}

// statusRecorder records the status a handler answers; 0 when it answers
// nothing.
type statusRecorder struct {
	h      http.Header
	status int
}

func (w *statusRecorder) Header() http.Header { return w.h }
func (w *statusRecorder) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(p), nil
}
func (w *statusRecorder) WriteHeader(s int) { w.status = s }
