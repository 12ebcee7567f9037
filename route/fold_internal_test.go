package route

import (
	"path"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzFoldPath: foldPath is dropping each segment's ';' parameters, then
// path.Clean and lower-casing, whether or not its shortcut (isFolded) is
// taken.
func FuzzFoldPath(f *testing.F) {
	for _, s := range []string{"/login", "/LOGIN", "//login", "/a/./b", "/a/../b", "/a/", "/", "", "/.x", "/..x", "/a/..", "/login;x", "/a;b/c;d", ";", "/;/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			segs[i], _, _ = strings.Cut(s, ";")
		}
		clean := path.Clean("/" + strings.Join(segs, "/"))
		want := strings.Map(func(r rune) rune {
			if 'A' <= r && r <= 'Z' {
				return r + 'a' - 'A'
			}
			return r
		}, clean)
		if !utf8.ValidString(p) {
			want = lowerASCII(clean) // Map would replace invalid bytes
		}
		if got := foldPath(p); got != want {
			t.Fatalf("foldPath(%q) = %q, want %q", p, got, want)
		}
	})
}
