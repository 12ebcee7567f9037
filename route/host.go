package route

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"golang.org/x/net/idna"
)

// Hosts maps host patterns to values: exact names ("sho.rt", an IP
// address) and wildcards one label deep ("*.links.example" is
// "a.links.example", neither "links.example" nor "a.b.links.example"), as
// a TLS certificate's wildcard names are. An exact name wins over the
// wildcard that also covers it; no two patterns can match the same host
// otherwise, so a lookup is two map reads and no order matters.
//
// The zero value is empty and ready to use. Add is not safe for concurrent
// use; Lookup is, once the Hosts is no longer added to.
type Hosts[V any] struct {
	exact map[string]V
	wild  map[string]V // by the suffix after "*."
}

// Add maps pattern (as a config file writes it) to v. It refuses a
// pattern that is not a host name, an IP address or "*." and a host name,
// and one that is already in h, naming it as it was first written.
func (h *Hosts[V]) Add(pattern string, v V) error {
	p, err := HostPattern(pattern)
	if err != nil {
		return err
	}
	m := &h.exact
	key := p
	if rest, ok := strings.CutPrefix(p, "*."); ok {
		m, key = &h.wild, rest
	}
	if *m == nil {
		*m = map[string]V{}
	}
	if _, dup := (*m)[key]; dup {
		return fmt.Errorf("%q is listed twice (as %q)", pattern, p)
	}
	(*m)[key] = v
	return nil
}

// Len returns the number of patterns in h.
func (h *Hosts[V]) Len() int { return len(h.exact) + len(h.wild) }

// Lookup returns the value of the pattern that matches host, as a request
// names it (its Host header or :authority): the port, a trailing dot and
// the case do not matter, and an IPv6 address may be in brackets. It does
// not allocate unless host has upper-case letters.
func (h *Hosts[V]) Lookup(host string) (v V, ok bool) {
	if h == nil || h.Len() == 0 {
		return v, false
	}
	host = RequestHost(host)
	if v, ok = h.exact[host]; ok {
		return v, true
	}
	if i := strings.IndexByte(host, '.'); i > 0 && len(h.wild) > 0 {
		v, ok = h.wild[host[i+1:]]
	}
	return v, ok
}

// Match reports whether a pattern of h matches host (see Lookup).
func (h *Hosts[V]) Match(host string) bool {
	_, ok := h.Lookup(host)
	return ok
}

// RequestHost returns the host of a request's Host header (or HTTP/2
// :authority) as Hosts compares it: without the port, the brackets of an
// IPv6 address and a trailing dot, in lower case. Names are compared as
// the client sent them: a name in Unicode is never decoded, so only its
// ASCII (punycode) form can match. It allocates only to lower-case.
func RequestHost(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.IndexByte(h[i:], ']') < 0 && (h[0] == '[' || strings.IndexByte(h[:i], ':') < 0) {
		h = h[:i] // a port: "name:443", "[::1]:443", but not the last group of a bare "::1"
	}
	if len(h) > 1 && h[0] == '[' && h[len(h)-1] == ']' {
		h = h[1 : len(h)-1]
	}
	h = strings.TrimSuffix(h, ".")
	for i := 0; i < len(h); i++ {
		if c := h[i]; 'A' <= c && c <= 'Z' {
			return lowerASCII(h)
		}
	}
	return h
}

// HostPattern checks a host pattern of a config file and returns it as
// Hosts keeps it: an IP address in its canonical form, or a host name (or
// "*." and a host name) in lower-case ASCII, internationalized names in
// their punycode form, without a trailing dot.
func HostPattern(s string) (string, error) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil && a.Zone() == "" {
		return a.Unmap().String(), nil
	}
	name, wild := strings.CutPrefix(s, "*.")
	n, err := idna.Lookup.ToASCII(strings.TrimSuffix(name, "."))
	if err != nil || n == "" || strings.ContainsAny(n, "*/:@[] ") {
		return "", fmt.Errorf("%q is not a host name, an IP address or *. and a host name", s)
	}
	n = strings.ToLower(n)
	labels := strings.Split(n, ".")
	if len(n) > 253 || slices.ContainsFunc(labels, func(l string) bool { return l == "" || len(l) > 63 }) {
		return "", fmt.Errorf("%q is not a host name (an empty or overlong label)", s)
	}
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" {
		// "10.0.0", "*.0.0.1": no host name ends in a number (RFC 3696
		// section 2), and an address is no wildcard.
		return "", fmt.Errorf("%q is not a host name (its last label is a number) nor an IP address", s)
	}
	if wild {
		return "*." + n, nil
	}
	return n, nil
}
