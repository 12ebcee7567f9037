package cache

import (
	"strconv"
	"strings"
	"time"
)

// The targeted fields the cache obeys (RFC 9213), the first present and
// valid one deciding: the gateway's own, then the one every CDN reads.
// The gateway's own is removed before the client sees the answer; the
// CDN's is passed on, for a CDN in front.
const (
	OwnField = "Linkgate-Cache-Control"
	CDNField = "Cdn-Cache-Control" // canonical form of CDN-Cache-Control
)

// control is what a targeted field says: how long the answer is fresh,
// and how long after that it may still be served (RFC 5861). Ages are
// -1 when the field does not say.
type control struct {
	noStore      bool // no-store, private or no-cache: not kept
	maxAge       time.Duration
	staleIfError time.Duration
	staleRevalid time.Duration
}

// parseControl reads a targeted field's lines as a Structured Field
// Dictionary (RFC 8941 section 3.2), as RFC 9213 section 2.1 requires:
// ok is false when the field is absent or does not parse, and then the
// cache ignores it (RFC 9213 section 2.1: "a cache MUST ignore the field
// value" that fails to parse). A directive whose value has the wrong type
// (max-age="10", max-age=1.5, a negative age) is ignored alone;
// parameters are ignored.
func parseControl(lines []string) (c control, ok bool) {
	if len(lines) == 0 {
		return c, false
	}
	c = control{maxAge: -1, staleIfError: -1, staleRevalid: -1}
	s := strings.Join(lines, ",")
	for {
		s = strings.TrimLeft(s, " \t")
		key, rest, ok := sfKey(s)
		if !ok {
			return control{}, false
		}
		val, isInt := int64(0), false
		if strings.HasPrefix(rest, "=") {
			v, r, ok := sfItem(rest[1:])
			if !ok {
				return control{}, false
			}
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 && n <= maxDirectiveSeconds {
				val, isInt = n, true
			}
			rest = r
		}
		for strings.HasPrefix(rest, ";") { // parameters: read and ignored
			_, r, ok := sfKey(rest[1:])
			if !ok {
				return control{}, false
			}
			rest = r
			if strings.HasPrefix(rest, "=") {
				if _, r, ok = sfItem(rest[1:]); !ok {
					return control{}, false
				}
				rest = r
			}
		}
		age := time.Duration(val) * time.Second
		switch key {
		case "no-store", "private", "no-cache":
			c.noStore = true
		case "max-age", "s-maxage":
			if isInt {
				c.maxAge = age
			}
		case "stale-if-error":
			if isInt {
				c.staleIfError = age
			}
		case "stale-while-revalidate":
			if isInt {
				c.staleRevalid = age
			}
		}
		rest = strings.TrimLeft(rest, " \t")
		if rest == "" {
			return c, true
		}
		if rest[0] != ',' {
			return control{}, false
		}
		s = rest[1:]
		if strings.TrimLeft(s, " \t") == "" {
			return control{}, false // a trailing comma
		}
	}
}

// maxDirectiveSeconds caps an age at about 31 years (RFC 8941 integers
// have 15 digits; a duration of more would overflow).
const maxDirectiveSeconds = 1 << 30

// sfKey reads a Dictionary key: lcalpha or "*", then lcalpha, digits,
// "_-.*".
func sfKey(s string) (key, rest string, ok bool) {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] == '*') {
		return "", s, false
	}
	i := 1
	for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= '0' && s[i] <= '9' || strings.IndexByte("_-.*", s[i]) >= 0) {
		i++
	}
	return s[:i], s[i:], true
}

// sfItem reads a bare item: an integer or decimal, a string, a token, a
// byte sequence or a boolean. It returns the item's text (the digits of a
// number) for the caller to type.
func sfItem(s string) (item, rest string, ok bool) {
	if s == "" {
		return "", s, false
	}
	switch c := s[0]; {
	case c == '-' || c >= '0' && c <= '9':
		i := 1
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		return s[:i], s[i:], i > 1 || c != '-'
	case c == '"':
		for i := 1; i < len(s); i++ {
			switch s[i] {
			case '\\':
				i++
			case '"':
				return s[:i+1], s[i+1:], true
			}
		}
		return "", s, false
	case c == ':':
		end := strings.IndexByte(s[1:], ':')
		if end < 0 {
			return "", s, false
		}
		return s[:end+2], s[end+2:], true
	case c == '?':
		if len(s) < 2 || s[1] != '0' && s[1] != '1' {
			return "", s, false
		}
		return s[:2], s[2:], true
	case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*':
		i := 1
		for i < len(s) && s[i] > ' ' && s[i] < 0x7f && strings.IndexByte(`"(),;<=>?@[\]{}`, s[i]) < 0 {
			i++
		}
		return s[:i], s[i:], true
	}
	return "", s, false
}
