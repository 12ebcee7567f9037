package cache

import "strings"

// member is a member of a Structured Field Dictionary (RFC 8941 section
// 3.2): its key and its value, the text of a bare item ("?1" for a key
// without a value, which is the boolean true) or, with inner set, the
// texts of an inner list's items. Parameters are read and dropped: no
// field the cache reads gives them a meaning.
type member struct {
	key   string
	item  string
	list  []string
	inner bool
}

// parseDictionary reads a field's lines, joined by commas as RFC 9110
// section 5.3 combines them, as a Dictionary. ok is false when the field
// is absent or does not parse. A key given twice keeps its last value
// (RFC 8941 section 4.2.2).
func parseDictionary(lines []string) (ms []member, ok bool) {
	if len(lines) == 0 {
		return nil, false
	}
	s := strings.Join(lines, ",")
	for {
		s = strings.TrimLeft(s, " \t")
		key, rest, ok := sfKey(s)
		if !ok {
			return nil, false
		}
		m := member{key: key, item: "?1"}
		if strings.HasPrefix(rest, "=") {
			if strings.HasPrefix(rest[1:], "(") {
				m.inner = true
				m.list, rest, ok = sfInnerList(rest[1:])
			} else {
				m.item, rest, ok = sfItem(rest[1:])
			}
			if !ok {
				return nil, false
			}
		}
		if rest, ok = sfParams(rest); !ok {
			return nil, false
		}
		if i := indexOfKey(ms, key); i >= 0 {
			ms[i] = m
		} else {
			ms = append(ms, m)
		}
		rest = strings.TrimLeft(rest, " \t")
		if rest == "" {
			return ms, true
		}
		if rest[0] != ',' {
			return nil, false
		}
		s = rest[1:]
		if strings.TrimLeft(s, " \t") == "" {
			return nil, false // a trailing comma
		}
	}
}

func indexOfKey(ms []member, key string) int {
	for i, m := range ms {
		if m.key == key {
			return i
		}
	}
	return -1
}

// sfInnerList reads an inner list, s starting at its "(": its items'
// texts, and its parameters after the ")".
func sfInnerList(s string) (items []string, rest string, ok bool) {
	s = s[1:]
	for {
		s = strings.TrimLeft(s, " ")
		if strings.HasPrefix(s, ")") {
			return items, s[1:], true
		}
		item, r, ok := sfItem(s)
		if !ok {
			return nil, s, false
		}
		if r, ok = sfParams(r); !ok {
			return nil, s, false
		}
		items = append(items, item)
		if r == "" || r[0] != ' ' && r[0] != ')' {
			return nil, s, false
		}
		s = r
	}
}

// sfParams reads and drops the parameters at the start of s.
func sfParams(s string) (rest string, ok bool) {
	for strings.HasPrefix(s, ";") {
		_, r, ok := sfKey(strings.TrimLeft(s[1:], " "))
		if !ok {
			return s, false
		}
		if strings.HasPrefix(r, "=") {
			if _, r, ok = sfItem(r[1:]); !ok {
				return s, false
			}
		}
		s = r
	}
	return s, true
}

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
// number, a string with its quotes and escapes) for the caller to type.
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
			switch {
			case s[i] == '\\':
				if i+1 == len(s) || s[i+1] != '"' && s[i+1] != '\\' {
					return "", s, false
				}
				i++
			case s[i] == '"':
				return s[:i+1], s[i+1:], true
			case s[i] < ' ' || s[i] > '~':
				return "", s, false
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

// sfString is the value of a string item's text, ok false when the item
// is not a string.
func sfString(item string) (string, bool) {
	if len(item) < 2 || item[0] != '"' {
		return "", false
	}
	item = item[1 : len(item)-1]
	if strings.IndexByte(item, '\\') < 0 {
		return item, true
	}
	var b strings.Builder
	for i := 0; i < len(item); i++ {
		if item[i] == '\\' {
			i++
		}
		b.WriteByte(item[i])
	}
	return b.String(), true
}

// sfBool is the value of a boolean item's text, ok false when the item
// is not a boolean.
func sfBool(item string) (v, ok bool) {
	switch item {
	case "?1":
		return true, true
	case "?0":
		return false, true
	}
	return false, false
}
