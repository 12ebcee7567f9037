package cache

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// SearchField is the field by which the upstream says which query
// parameters do not change its answer (No-Vary-Search,
// draft-ietf-httpbis-no-vary-search, the field Chrome's prefetch cache
// reads): a Structured Field Dictionary of key-order (the parameters'
// order does not matter), params (every parameter, or the inner list of
// those that do not matter) and except (with params alone: the
// parameters that still do). A value that does not parse, or breaks one
// of the draft's rules, is ignored, and the answer is kept by its full
// query. The client gets the field as the upstream sent it.
const SearchField = "No-Vary-Search"

// search is a No-Vary-Search as read: a URL search variance.
type search struct {
	all      bool     // params: every parameter is ignored but those of names
	names    []string // decoded names: those ignored, or with all those kept
	keyOrder bool     // key-order: the parameters' order does not matter
}

// parseSearch reads the lines of a No-Vary-Search field as the draft's
// "parse a URL search variance" does. It returns nil when the field is
// absent, malformed or says what no field says (params=?0, params=(),
// key-order=?0): the answer then depends on its full query. Keys the
// draft does not define are ignored, as it asks.
func parseSearch(lines []string) *search {
	ms, ok := parseDictionary(lines)
	if !ok {
		return nil
	}
	s := &search{}
	var params, except *member
	for i, m := range ms {
		switch m.key {
		case "key-order":
			v, ok := sfBool(m.item)
			if !ok || m.inner {
				return nil
			}
			s.keyOrder = v
		case "params":
			params = &ms[i]
		case "except":
			except = &ms[i]
		}
	}
	if params != nil {
		if params.inner {
			if s.names, ok = searchNames(params.list); !ok {
				return nil
			}
		} else if s.all, ok = sfBool(params.item); !ok {
			return nil
		}
	}
	if except != nil {
		if !s.all || !except.inner {
			return nil
		}
		if s.names, ok = searchNames(except.list); !ok {
			return nil
		}
	}
	if !s.all && len(s.names) == 0 && !s.keyOrder {
		return nil
	}
	return s
}

// searchNames is the names of an inner list of strings, decoded as the
// draft's "parse a key" does; ok is false when an item is not a string.
func searchNames(items []string) (names []string, ok bool) {
	for _, it := range items {
		s, ok := sfString(it)
		if !ok {
			return nil, false
		}
		names = append(names, formDecode(s))
	}
	return names, true
}

// equal reports whether s and t ignore the same parameters.
func (s *search) equal(t *search) bool {
	return s.all == t.all && s.keyOrder == t.keyOrder && slices.Equal(s.names, t.names)
}

// bytes is what s takes in memory beyond its struct.
func (s *search) bytes() int {
	n := 0
	for _, name := range s.names {
		n += len(name) + 16
	}
	return n
}

// query is the raw query q as s sees it: its parameters read as
// application/x-www-form-urlencoded (split at "&", "+" a space,
// percent-decoded), those s ignores dropped, sorted by name when their
// order does not matter, and encoded again. Two queries have the same
// only when the draft holds them equivalent under s. Names and values
// are compared as decoded bytes, not as UTF-8 text: a query with bytes
// that are not UTF-8 matches only the same bytes, where the draft would
// match any other such bytes too (a cache may reuse less).
func (s *search) query(q string) string {
	type pair struct{ name, value string }
	var ps []pair
	for part := range strings.SplitSeq(q, "&") {
		if part == "" {
			continue
		}
		name, value, _ := strings.Cut(part, "=")
		name = formDecode(name)
		if slices.Contains(s.names, name) != s.all {
			continue // ignored: named without all, or not named with all
		}
		ps = append(ps, pair{name, formDecode(value)})
	}
	if s.keyOrder {
		slices.SortStableFunc(ps, func(a, b pair) int { return strings.Compare(a.name, b.name) })
	}
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(url.QueryEscape(p.name))
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(p.value))
	}
	return b.String()
}

// formDecode decodes a name or value of a query as
// application/x-www-form-urlencoded does: "+" is a space, "%" and two hex
// digits a byte, and any other "%" itself.
func formDecode(s string) string {
	if strings.IndexByte(s, '+') < 0 && strings.IndexByte(s, '%') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b = append(b, ' ')
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			v, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
			b = append(b, byte(v))
			i += 2
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// searchNoteKey is where the note of r's path is kept: the path's key,
// then "?" and a NUL, which no request's query has (the server refuses
// control bytes in a target), so that a purge of the path's key, which
// takes its query strings, takes the note and its answers too.
func searchNoteKey(r *http.Request) string {
	return strings.ToLower(r.Host) + r.URL.EscapedPath() + "?\x00"
}

// searchKey is the key of r's answer under the note n kept at noteKey:
// the note's key, its generation (a purge, or a new No-Vary-Search,
// leaves the answers kept under another unreachable) and r's query as
// the note's field sees it.
func searchKey(noteKey string, n *entry, r *http.Request) string {
	return noteKey + strconv.FormatUint(n.gen, 10) + "\x00" + n.search.query(r.URL.RawQuery)
}
