package visitclass

import (
	_ "embed"
	"fmt"
	"strings"
)

// useragents is the reviewed list of User-Agent substrings of clients that
// say what they are; see useragents.txt.
//
//go:embed useragents.txt
var useragents string

// uaTag is the section of useragents.txt a pattern is in; 0 for none. A
// lower tag wins over a higher one in the same User-Agent.
type uaTag uint8

const (
	tagNone uaTag = iota
	tagPreview
	tagBot
	numTags
)

var tagSections = [numTags]string{"", "[preview]", "[bot]"}

// Pattern is a User-Agent substring of useragents.txt and the class it
// names.
type Pattern struct {
	Text  string
	Class Class
}

// Patterns returns the User-Agent substrings that Classify looks for, in
// the order of useragents.txt.
func Patterns() []Pattern {
	pats, tags := parseUAList(useragents)
	out := make([]Pattern, len(pats))
	for i, p := range pats {
		out[i] = Pattern{Text: p, Class: tagClass(tags[i])}
	}
	return out
}

func tagClass(t uaTag) Class {
	if t == tagPreview {
		return Preview
	}
	return Bot
}

// parseUAList returns the patterns of a list in useragents.txt's format
// and the section of each. It panics on a pattern before any section: the
// embedded list is checked by the tests.
func parseUAList(s string) (pats []string, tags []uaTag) {
	tag := tagNone
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "[") {
			tag = tagNone
			for t, name := range tagSections {
				if name == line {
					tag = uaTag(t)
				}
			}
			if tag == tagNone {
				panic(fmt.Sprintf("visitclass: unknown section %s", line))
			}
			continue
		}
		if tag == tagNone {
			panic(fmt.Sprintf("visitclass: pattern %q before any section", line))
		}
		pats = append(pats, line)
		tags = append(tags, tag)
	}
	return pats, tags
}

var knownUAs = compileUAs(parseUAList(useragents))

// ByUserAgent returns what the User-Agent ua says of its client by the
// list of useragents.txt (ASCII case ignored): PreviewUA for a link
// unfurler, BotUA for a crawler, None for anything else. It reads ua once, does not allocate and is safe for
// concurrent use.
func ByUserAgent(ua string) Reason { return tagReasons[knownUAs.match(ua)] }

var tagReasons = [numTags]Reason{None, PreviewUA, BotUA}

// uaMatcher is an Aho–Corasick automaton over ASCII-folded bytes, compiled
// into a full transition table: matching is one table lookup per byte of the
// User-Agent however many patterns there are. Bytes that occur in no pattern
// share class 0, which keeps the table small (states × classes).
type uaMatcher struct {
	class   [256]uint8 // byte → its class; upper-case ASCII folded to lower
	classes int
	// next[state*classes+class] is the next state times classes (the
	// offset of its row), or'ed with outBit when a pattern ends there.
	// 16 bits keep the table in a first-level cache: the list uses about
	// 24,000 of the 32,768 offsets there are room for.
	next []uint16
	// tag[state] is the lowest tag of the patterns that end in the state
	// (or in its failure states), for the states whose entries have outBit.
	tag []uaTag
}

const outBit = 1 << 15

func lowerASCII(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// compileUAs builds the automaton for pats, tags[i] being pats[i]'s
// section. It panics if pats have more than 255 distinct bytes or need
// more than 32,767 table rows times classes (see uaMatcher.next); the
// tests load the list, so that fails there first.
func compileUAs(pats []string, tags []uaTag) *uaMatcher {
	m := &uaMatcher{classes: 1}
	for _, p := range pats {
		for i := 0; i < len(p); i++ {
			b := lowerASCII(p[i])
			if m.class[b] == 0 {
				if m.classes == 256 {
					panic("visitclass: User-Agent patterns use too many distinct bytes")
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
	end := []uaTag{tagNone}
	for pi, p := range pats {
		s := 0
		for i := 0; i < len(p); i++ {
			c := m.class[p[i]]
			if trie[s][c] < 0 {
				trie = append(trie, newRow(k))
				end = append(end, tagNone)
				trie[s][c] = int32(len(trie) - 1)
			}
			s = int(trie[s][c])
		}
		if end[s] == tagNone || tags[pi] < end[s] {
			end[s] = tags[pi]
		}
	}
	if len(trie)*k >= outBit {
		panic(fmt.Sprintf("visitclass: User-Agent patterns need %d states", len(trie)))
	}
	// Breadth first, every state's transitions are its trie edges or else
	// its failure state's transitions, already complete; a state's tag is
	// the lowest of its own and its failure state's.
	next := make([]int32, len(trie)*k) // plain next states
	out := make([]uaTag, len(trie))
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
		out[s] = end[s]
		if f := out[fail[s]]; f != tagNone && (out[s] == tagNone || f < out[s]) {
			out[s] = f
		}
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
	m.tag = make([]uaTag, len(trie)*k)
	for i, t := range next {
		m.next[i] = uint16(int(t) * k)
		if out[t] != tagNone {
			m.next[i] |= outBit
			m.tag[int(t)*k] = out[t]
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

// match returns the lowest tag of the patterns ua contains; tagNone for
// none. It reads ua once, and stops at a match of the lowest tag.
func (m *uaMatcher) match(ua string) uaTag {
	next := m.next
	s := uint16(0)
	best := tagNone
	for i := 0; i < len(ua); i++ {
		s = next[s+uint16(m.class[ua[i]])]
		if s&outBit != 0 {
			s &^= outBit
			if t := m.tag[s]; best == tagNone || t < best {
				best = t
				if t == tagPreview {
					return t
				}
			}
		}
	}
	return best
}
