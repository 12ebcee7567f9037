package visitclass

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestUAMatcherOverlaps checks the automaton against strings.Contains on
// random patterns and sections over a tiny alphabet, where patterns
// overlap and are suffixes and prefixes of one another: the cases failure
// links exist for.
func TestUAMatcherOverlaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	word := func(max int) string {
		var sb strings.Builder
		for range 1 + rng.IntN(max) {
			sb.WriteByte("abAB"[rng.IntN(4)])
		}
		return sb.String()
	}
	for range 300 {
		var pats []string
		var tags []uaTag
		for range 1 + rng.IntN(5) {
			pats = append(pats, word(5))
			tags = append(tags, uaTag(1+rng.IntN(int(numTags)-1)))
		}
		m := compileUAs(pats, tags)
		for range 50 {
			s := word(12)
			want := tagNone
			for i, p := range pats {
				if strings.Contains(strings.ToLower(s), strings.ToLower(p)) && (want == tagNone || tags[i] < want) {
					want = tags[i]
				}
			}
			if got := m.match(s); got != want {
				t.Fatalf("patterns %q tags %v: match(%q) = %v, want %v", pats, tags, s, got, want)
			}
		}
	}
}
