package analytics

import (
	_ "embed"
	"fmt"
	"strings"
)

// botsList is the reviewed list of bot User-Agent substrings; see bots.txt.
//
//go:embed bots.txt
var botsList string

// BotPatterns returns the User-Agent substrings of known bots and
// link-preview fetchers that IsBot looks for, as listed in bots.txt.
func BotPatterns() []string { return parseBotList(botsList) }

func parseBotList(s string) []string {
	var pats []string
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			pats = append(pats, line)
		}
	}
	return pats
}

var knownBots = compileBots(BotPatterns())

// IsBot reports whether the User-Agent ua contains, ignoring ASCII case, the
// name of a known bot or link-preview fetcher (bots.txt). It reads ua once,
// does not allocate and is safe for concurrent use.
func IsBot(ua string) bool { return knownBots.match(ua) }

// botMatcher is an Aho–Corasick automaton over ASCII-folded bytes, compiled
// into a full transition table: matching is one table lookup per byte of the
// User-Agent however many patterns there are. Bytes that occur in no pattern
// share class 0, which keeps the table small (states × classes).
type botMatcher struct {
	class   [256]uint8 // byte → its class; upper-case ASCII folded to lower
	classes int
	// next[state*classes+class] is the next state times classes (the
	// offset of its row), or'ed with outBit when a pattern ends there.
	// 16 bits keep the table in a first-level cache: the list uses about
	// 24,000 of the 32,768 offsets there are room for.
	next []uint16
}

const outBit = 1 << 15

func lowerASCII(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// compileBots builds the automaton for pats. It panics if pats have more than
// 255 distinct bytes or need more than 32,767 table rows times classes (see
// botMatcher.next); the tests load the list, so that fails there first.
func compileBots(pats []string) *botMatcher {
	m := &botMatcher{classes: 1}
	for _, p := range pats {
		for i := 0; i < len(p); i++ {
			b := lowerASCII(p[i])
			if m.class[b] == 0 {
				if m.classes == 256 {
					panic("analytics: bot patterns use too many distinct bytes")
				}
				m.class[b] = uint8(m.classes)
				m.classes++
			}
		}
	}
	for b := 'A'; b <= 'Z'; b++ {
		m.class[b] = m.class[b+'a'-'A']
	}
	// The trie: goto[state][class], -1 for none.
	k := m.classes
	trie := [][]int32{newRow(k)}
	end := []bool{false}
	for _, p := range pats {
		s := 0
		for i := 0; i < len(p); i++ {
			c := m.class[p[i]]
			if trie[s][c] < 0 {
				trie = append(trie, newRow(k))
				end = append(end, false)
				trie[s][c] = int32(len(trie) - 1)
			}
			s = int(trie[s][c])
		}
		end[s] = true
	}
	if len(trie)*k >= outBit {
		panic(fmt.Sprintf("analytics: bot patterns need %d states", len(trie)))
	}
	// Breadth first, every state's transitions are its trie edges or else
	// its failure state's transitions, already complete; a state is final
	// when a pattern ends in it or in its failure state.
	next := make([]int32, len(trie)*k) // plain next states
	out := make([]bool, len(trie))
	fail := make([]int32, len(trie))
	queue := []int32{}
	for c := range k {
		if t := trie[0][c]; t >= 0 {
			next[c] = t
			queue = append(queue, t)
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		out[s] = end[s] || out[fail[s]]
		for c := range int32(k) {
			if t := trie[s][c]; t >= 0 {
				fail[t] = next[fail[s]*int32(k)+c]
				next[s*int32(k)+c] = t
				queue = append(queue, t)
			} else {
				next[s*int32(k)+c] = next[fail[s]*int32(k)+c]
			}
		}
	}
	m.next = make([]uint16, len(next))
	for i, t := range next {
		m.next[i] = uint16(int(t) * k)
		if out[t] {
			m.next[i] |= outBit
		}
	}
	return m
}

func newRow(k int) []int32 {
	r := make([]int32, k)
	for i := range r {
		r[i] = -1
	}
	return r
}

func (m *botMatcher) match(ua string) bool {
	next := m.next
	s := uint16(0)
	for i := 0; i < len(ua); i++ {
		s = next[s+uint16(m.class[ua[i]])]
		if s&outBit != 0 {
			return true
		}
	}
	return false
}

// BotPolicy is what the analytics middleware does with a bot visit: the
// "bots" setting.
type BotPolicy uint8

// The values of the "bots" setting.
const (
	BotsSeparate BotPolicy = iota // counted as bot visits, beside human ones
	BotsCount                     // counted as human visits
	BotsIgnore                    // not counted
)

// ParseBotPolicy parses "separate", "count" or "ignore".
func ParseBotPolicy(s string) (BotPolicy, error) {
	switch s {
	case "separate", "":
		return BotsSeparate, nil
	case "count":
		return BotsCount, nil
	case "ignore":
		return BotsIgnore, nil
	}
	return 0, fmt.Errorf("analytics: bots: %q is not separate, count or ignore", s)
}
