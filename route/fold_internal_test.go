package route

import (
	"path"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzFoldPath: foldPath is path.Clean and lower-casing, whether or not
// its shortcut (isFolded) is taken.
func FuzzFoldPath(f *testing.F) {
	for _, s := range []string{"/login", "/LOGIN", "//login", "/a/./b", "/a/../b", "/a/", "/", "", "/.x", "/..x", "/a/.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		want := strings.Map(func(r rune) rune {
			if 'A' <= r && r <= 'Z' {
				return r + 'a' - 'A'
			}
			return r
		}, path.Clean("/"+p))
		if !utf8.ValidString(p) {
			want = lowerASCII(path.Clean("/" + p)) // Map would replace invalid bytes
		}
		if got := foldPath(p); got != want {
			t.Fatalf("foldPath(%q) = %q, want %q", p, got, want)
		}
	})
}
