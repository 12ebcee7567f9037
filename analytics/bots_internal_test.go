package analytics

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestBotMatcherOverlaps checks the automaton against strings.Contains on
// random patterns over a tiny alphabet, where patterns overlap and are
// suffixes and prefixes of one another: the cases failure links exist for.
func TestBotMatcherOverlaps(t *testing.T) {
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
		for range 1 + rng.IntN(5) {
			pats = append(pats, word(5))
		}
		m := compileBots(pats)
		for range 50 {
			s := word(12)
			want := false
			for _, p := range pats {
				want = want || strings.Contains(strings.ToLower(s), strings.ToLower(p))
			}
			if got := m.match(s); got != want {
				t.Fatalf("patterns %q: match(%q) = %v, want %v", pats, s, got, want)
			}
		}
	}
}

func TestParseBotPolicy(t *testing.T) {
	for s, want := range map[string]BotPolicy{"separate": BotsSeparate, "": BotsSeparate, "count": BotsCount, "ignore": BotsIgnore} {
		if got, err := ParseBotPolicy(s); err != nil || got != want {
			t.Errorf("ParseBotPolicy(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := ParseBotPolicy("Separate"); err == nil {
		t.Error("ParseBotPolicy(Separate): no error")
	}
}
