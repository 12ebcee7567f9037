package route

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestSimpleMatchesAsChi: a simple pattern (literal and whole "{name}"
// segments) matched by matchSimple gives what chi gives, over random
// patterns and paths made of the same pieces.
func TestSimpleMatchesAsChi(t *testing.T) {
	literals := []string{"", "a", "A", "login", "x.y", "a-b", "%2F", "é"}
	params := []string{"{k}", "{short_key}"}
	pieces := append(append([]string{}, literals...), "", "..", ".", ";x", "k", "a;b", " ", "{k}", "*", "a/b", "//")
	rng := rand.New(rand.NewPCG(7, 9))
	for i := range 20000 {
		var pat strings.Builder
		var name string
		for range 1 + rng.IntN(3) {
			pat.WriteByte('/')
			if rng.IntN(2) == 0 {
				p := params[rng.IntN(len(params))]
				if strings.Contains(pat.String(), p) {
					p = "{other}"
				}
				pat.WriteString(p)
				if name == "" {
					name = p[1 : len(p)-1]
				}
			} else {
				pat.WriteString(literals[rng.IntN(len(literals))])
			}
		}
		mt, err := Match{Path: pat.String()}.Compile()
		if err != nil {
			continue // chi refuses it (a duplicate parameter name)
		}
		if mt.simple == nil {
			t.Fatalf("pattern %q: not taken as simple", pat.String())
		}
		segs := mt.simple
		for range 20 {
			var path strings.Builder
			for range rng.IntN(4) {
				path.WriteByte('/')
				path.WriteString(pieces[rng.IntN(len(pieces))])
			}
			p := path.String()
			switch rng.IntN(8) {
			case 0:
				p += "/"
			case 1:
				p = strings.TrimPrefix(p, "/")
			}
			gotV, gotOK := matchSimple(segs, p, name)
			mt.simple = nil
			wantV, wantOK := mt.matchPath(p, name)
			mt.simple = segs
			if gotV != wantV || gotOK != wantOK {
				t.Fatalf("case %d: pattern %q, path %q: simple (%q, %v), chi (%q, %v)", i, pat.String(), p, gotV, gotOK, wantV, wantOK)
			}
		}
	}
}

// TestNotSimple: patterns with more than literals and whole parameters
// are left to chi.
func TestNotSimple(t *testing.T) {
	for _, p := range []string{"/api/*", "/{id:[0-9]+}", "/{id}.json", "/a{b}", "/*"} {
		mt, err := Match{Path: p}.Compile()
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if mt.simple != nil {
			t.Errorf("%s: taken as simple", p)
		}
	}
}
