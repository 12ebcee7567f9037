package cache_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/linkgate/linkgate/cache"
)

// TestNoVarySearch: the query parameters an answer's No-Vary-Search
// names (or, with params alone, all but except's) do not change its key;
// key-order makes their order not matter; the client gets the field.
func TestNoVarySearch(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, fr front) {
		fields := map[string]string{
			"/utm":    `params=("utm_source" "utm_medium"), key-order`,
			"/except": `params, except=("id")`,
			"/enc":    `params=("utm%5Fsource" "a+b")`,
		}
		u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			redirect("CDN-Cache-Control", "max-age=300", "No-Vary-Search", fields[r.URL.Path])(w, r)
		})
		g := newGateway(t, fr, u, cache.DefaultConfig(), 0)
		for _, tc := range []struct {
			path     string
			upstream bool // the request goes upstream
		}{
			{"/utm?utm_source=a", true},
			{"/utm?utm_source=b", false},
			{"/utm", false},
			{"/utm?", false},
			{"/utm?utm_medium=x&utm_source=y&&", false},
			{"/utm?id=1&x=2", true},
			{"/utm?x=2&utm_source=z&id=1", false}, // key-order
			{"/utm?id=%31&x=2", false},            // percent-decoded
			{"/utm?id=1&x=2&x=3", true},
			{"/utm?id=1&x=3&x=2", true}, // the order of one name's values matters
			{"/utm?id=2", true},
			{"/utm?Utm_source=a", true}, // names are case-sensitive
			{"/except?id=1&utm=x", true},
			{"/except?ref=y&id=1", false},
			{"/except?id=1", false},
			{"/except?id=2", true},
			{"/except?id=1&id=2", true},
			{"/enc?utm_source=a&a%20b=1", true},
			{"/enc?a+b=2", false},
			{"/enc", false},
			{"/enc?utm_source", false},
		} {
			before := u.Count(tc.path)
			res, _ := g.get(t, tc.path)
			if res.StatusCode != http.StatusFound {
				t.Fatalf("%s: %s", tc.path, res.Status)
			}
			if went := u.Count(tc.path) > before; went != tc.upstream {
				t.Errorf("%s: sent upstream %v, want %v", tc.path, went, tc.upstream)
			}
			if p, _, _ := strings.Cut(tc.path, "?"); res.Header.Get("No-Vary-Search") != fields[p] {
				t.Errorf("%s: No-Vary-Search %q, want the upstream's %q", tc.path, res.Header.Get("No-Vary-Search"), fields[p])
			}
		}
		// A purge of the path takes its note and the answers kept under it.
		host := strings.TrimPrefix(g.url, "http://")
		if n := g.store.Apply(cache.Purge{Key: host + "/utm"}, "admin"); n < 4 {
			t.Errorf("the purge of /utm removed %d entries, want the note and 3 answers", n)
		}
		before := u.Count("/utm?utm_source=b")
		g.get(t, "/utm?utm_source=b")
		if u.Count("/utm?utm_source=b") != before+1 {
			t.Error("after the purge of /utm, /utm?utm_source=b was answered from the cache")
		}
	})
}

// TestNoVarySearchRefused: a No-Vary-Search that does not parse, breaks
// one of the draft's rules or says nothing leaves the full query in the
// key: every query goes upstream once, and is kept.
func TestNoVarySearchRefused(t *testing.T) {
	t.Parallel()
	eachFront(t, func(t *testing.T, fr front) {
		values := []string{
			`params=("utm_source"`,            // not a dictionary
			`params=("utm_source");`,          // an empty parameter
			`params=("utm_source" utm)`,       // an item not a string
			`params=(utm_source)`,             // a token, not a string
			`params="utm_source"`,             // neither a boolean nor a list
			`params=?0`,                       // the default
			`params=()`,                       // the default
			`key-order=?0`,                    // the default
			`key-order="yes", params`,         // key-order not a boolean
			`params=("a"), except=("b")`,      // except without params
			`except=("utm_source")`,           // except alone
			`params, except="utm_source"`,     // except not a list
			`params=("a\x")`,                  // a bad escape
			`Params`,                          // not a key
			`params=("utm_source"),`,          // a trailing comma
			"params=(\"utm_source\"),,params", // an empty member
		}
		byPath := map[string]string{} // read by the upstream: filled before it starts
		for i, v := range values {
			byPath["/r"+string(rune('a'+i))] = v
		}
		u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
			redirect("CDN-Cache-Control", "max-age=300", "No-Vary-Search", byPath[r.URL.Path])(w, r)
		})
		g := newGateway(t, fr, u, cache.DefaultConfig(), 0)
		for i, v := range values {
			p := "/r" + string(rune('a'+i))
			for _, q := range []string{"?utm_source=a", "?utm_source=b", "", "?utm_source=a"} {
				g.get(t, p+q)
			}
			if u.Count(p+"?utm_source=a") != 1 || u.Count(p+"?utm_source=b") != 1 || u.Count(p) != 1 {
				t.Errorf("No-Vary-Search: %s: upstream asked %d, %d, %d times for ?utm_source=a, b and none, want 1 each",
					v, u.Count(p+"?utm_source=a"), u.Count(p+"?utm_source=b"), u.Count(p))
			}
		}
	})
}
