package route_test

import (
	"strings"
	"testing"

	"github.com/linkgate/linkgate/route"
)

func TestMatcher(t *testing.T) {
	tests := []struct {
		name          string
		match         route.Match
		method, path  string
		want          bool
		param, wantPV string
	}{
		{"literal", route.Match{Methods: []string{"POST"}, Path: "/login"}, "POST", "/login", true, "", ""},
		{"wrong method", route.Match{Methods: []string{"POST"}, Path: "/login"}, "GET", "/login", false, "", ""},
		{"any method", route.Match{Path: "/login"}, "DELETE", "/login", true, "", ""},
		{"other path", route.Match{Path: "/login"}, "POST", "/logout", false, "", ""},
		{"param", route.Match{Path: "/{short_key}"}, "GET", "/abc123", true, "short_key", "abc123"},
		{"param one segment", route.Match{Path: "/{short_key}"}, "GET", "/a/b", false, "", ""},
		{"root is no key", route.Match{Path: "/{short_key}"}, "GET", "/", false, "", ""},
		{"wildcard", route.Match{Path: "/api/*"}, "GET", "/api/v1/users", true, "", ""},
		{"wildcard prefix only", route.Match{Path: "/api/*"}, "GET", "/apix", false, "", ""},
		{"regexp param", route.Match{Path: "/{id:[0-9]+}"}, "GET", "/42", true, "id", "42"},
		{"regexp param mismatch", route.Match{Path: "/{id:[0-9]+}"}, "GET", "/x42", false, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := tt.match.Compile()
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Match(tt.method, tt.path); got != tt.want {
				t.Errorf("Match(%s %s) = %v, want %v", tt.method, tt.path, got, tt.want)
			}
			if tt.param != "" {
				if got, _ := m.Param(tt.method, tt.path, tt.param); got != tt.wantPV {
					t.Errorf("Param(%s) = %q, want %q", tt.param, got, tt.wantPV)
				}
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	for _, m := range []route.Match{
		{Path: "login"},
		{Path: "/x", Methods: []string{"FETCH"}},
		{Path: "/{a}/{a}"},
	} {
		if _, err := m.Compile(); err == nil {
			t.Errorf("Compile(%+v): no error", m)
		}
	}
}

func BenchmarkParam(b *testing.B) {
	m, _ := route.Match{Methods: []string{"GET", "HEAD"}, Path: "/{short_key}"}.Compile()
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := m.Param("GET", "/abc123", "short_key"); !ok {
			b.Fatal("no match")
		}
	}
}

// TestMatchFolded: a rule written for POST /login also catches the
// variants a lenient upstream routes to the same handler.
func TestMatchFolded(t *testing.T) {
	m, err := route.Match{Methods: []string{"POST"}, Path: "/login"}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		method, path string
		want         bool
	}{
		{"POST", "/login", true},
		{"POST", "/LOGIN", true},
		{"POST", "/Login/", true},
		{"POST", "//login", true},
		{"POST", "/x/../login", true},
		{"post", "/login", true},
		// ';' path parameters, which servlet containers (Tomcat, Jetty)
		// and Spring drop from each segment before routing; %3B is ';' once
		// the path is decoded
		{"POST", "/login;jsessionid=1", true},
		{"POST", "/login;", true},
		{"POST", "/Login;a=b/", true},
		{"POST", "/login/;x", true},
		{"POST", "/;x/login", true},
		{"POST", "/x;/../login", true},
		{"GET", "/login", false},
		{"POST", "/logout", false},
		{"POST", "/login/x", false},
		{"POST", "/loginx;/", false},
	} {
		if got := m.MatchFolded(tc.method, tc.path); got != tc.want {
			t.Errorf("MatchFolded(%s %s) = %v, want %v", tc.method, tc.path, got, tc.want)
		}
	}
	p, _ := route.Match{Path: "/api/*"}.Compile()
	if !p.MatchFolded("GET", "/API/v1/Users") {
		t.Error("a wildcard pattern misses an upper-case path")
	}
}

// TestFoldingAlso: a Folding matches under the other methods the
// request may be routed as (a method override), and MatchPath ignores
// methods altogether.
func TestFoldingAlso(t *testing.T) {
	post, _ := route.Match{Methods: []string{"POST"}, Path: "/login"}.Compile()
	for _, tc := range []struct {
		method string
		also   []string
		path   string
		want   bool
	}{
		{"PUT", nil, "/login", false},
		{"PUT", []string{"POST"}, "/login", true},
		{"GET", []string{"DELETE", "POST"}, "/LOGIN;x", true},
		{"PUT", []string{"PATCH"}, "/login", false},
		{"PUT", []string{"POST"}, "/logout", false},
	} {
		q := route.Folding{Method: tc.method, Path: tc.path, Also: tc.also}
		if got := q.Match(post); got != tc.want {
			t.Errorf("%s %s also %v: Match = %v, want %v", tc.method, tc.path, tc.also, got, tc.want)
		}
		if got, want := q.MatchPath(post), !strings.Contains(tc.path, "out"); got != want {
			t.Errorf("%s %s: MatchPath = %v, want %v", tc.method, tc.path, got, want)
		}
	}
}

// TestAllMethodsMeansAll: a pattern without methods matches every method,
// those chi does not know included (PROPFIND, a made-up FOO), since an
// upstream may route them to the same handler.
func TestAllMethodsMeansAll(t *testing.T) {
	all, _ := route.Match{Path: "/login"}.Compile()
	for _, m := range []string{"GET", "POST", "PROPFIND", "FOO", "post"} {
		if !all.Match(m, "/login") {
			t.Errorf("%s /login: no match for a pattern of every method", m)
		}
	}
	if v, ok := all.Param("FOO", "/login", "x"); !ok || v != "" {
		t.Errorf("Param for FOO: %q %v", v, ok)
	}
}

func BenchmarkMatchFoldedMiss(b *testing.B) {
	m, _ := route.Match{Methods: []string{"POST"}, Path: "/login"}.Compile()
	b.ReportAllocs()
	for b.Loop() {
		if m.MatchFolded("GET", "/abc123") {
			b.Fatal("matched")
		}
	}
}
