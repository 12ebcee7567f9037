package cache

import (
	"strconv"
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
// (max-age="10", max-age=1.5, a negative age) is ignored alone.
func parseControl(lines []string) (c control, ok bool) {
	ms, ok := parseDictionary(lines)
	if !ok {
		return c, false
	}
	c = control{maxAge: -1, staleIfError: -1, staleRevalid: -1}
	for _, m := range ms {
		if m.key == "no-store" || m.key == "private" || m.key == "no-cache" {
			c.noStore = true
			continue
		}
		n, err := strconv.ParseInt(m.item, 10, 64)
		if err != nil || m.inner || n < 0 || n > maxDirectiveSeconds {
			continue
		}
		age := time.Duration(n) * time.Second
		switch m.key {
		case "max-age", "s-maxage":
			c.maxAge = age
		case "stale-if-error":
			c.staleIfError = age
		case "stale-while-revalidate":
			c.staleRevalid = age
		}
	}
	return c, true
}

// maxDirectiveSeconds caps an age at about 31 years (RFC 8941 integers
// have 15 digits; a duration of more would overflow).
const maxDirectiveSeconds = 1 << 30
