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
	next    []uint16 // next[state*classes+class]
	out     []bool   // a pattern ends in this state (or in a suffix of it)
}

func lowerASCII(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// compileBots builds the automaton for pats. It panics if pats have more than
// 255 distinct bytes or 65535 states, neither of which a list of product
// names comes near.
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
	if len(trie) > 1<<16-1 {
		panic(fmt.Sprintf("analytics: bot patterns need %d states", len(trie)))
	}
	// Breadth first, every state's transitions are its trie edges or else
	// its failure state's transitions, already complete.
	m.next = make([]uint16, len(trie)*k)
	m.out = make([]bool, len(trie))
	fail := make([]int, len(trie))
	queue := []int{}
	for c := range k {
		if t := trie[0][c]; t >= 0 {
			m.next[c] = uint16(t)
			queue = append(queue, int(t))
		}
	}
	m.out[0] = end[0]
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		m.out[s] = end[s] || m.out[fail[s]]
		for c := range k {
			if t := trie[s][c]; t >= 0 {
				fail[t] = int(m.next[fail[s]*k+c])
				m.next[s*k+c] = uint16(t)
				queue = append(queue, int(t))
			} else {
				m.next[s*k+c] = m.next[fail[s]*k+c]
			}
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
	s, k := 0, m.classes
	for i := 0; i < len(ua); i++ {
		s = int(m.next[s*k+int(m.class[ua[i]])])
		if m.out[s] {
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
