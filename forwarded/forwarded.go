// Package forwarded decides who the client of a request is. It is the one
// owner of "is this peer a trusted proxy" and "which address is the
// client": the limiter keys on its answer and the proxy writes the outgoing
// X-Forwarded-* headers from it, so the two can never disagree. (chi's
// middleware.RealIP shows why a second, looser copy of this decision
// becomes the hole: it believes X-Forwarded-For from anyone.)
//
// A client's own X-Forwarded-For, X-Real-IP, X-Forwarded-Proto and
// X-Forwarded-Host are believed only when the peer, the other end of the
// TCP connection, is in the configured trusted proxies
// (server.trusted_proxies). Addresses are compared unmapped: an
// IPv4-mapped IPv6 address or prefix (::ffff:10.0.0.0/104) means the IPv4
// one (10.0.0.0/8), whichever way a peer or an entry is written.
package forwarded

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
)

// Trust is a parsed list of trusted proxies. The zero Trust (and a nil
// *Trust) trusts no one. A Trust is immutable and safe for concurrent use.
type Trust struct {
	prefixes []netip.Prefix // unmapped, masked
}

// Parse parses a list of trusted proxies, each an address ("10.0.0.7",
// "2001:db8::1": a /32 or /128) or a CIDR prefix ("10.0.0.0/8"). An error
// names the first bad entry by its index: `[2]: "10.0.0.0/33" is not an
// address or CIDR prefix`.
func Parse(entries []string) (*Trust, error) {
	t := &Trust{prefixes: make([]netip.Prefix, 0, len(entries))}
	for i, e := range entries {
		p, err := ParsePrefix(e)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		t.prefixes = append(t.prefixes, p)
	}
	return t, nil
}

// ParsePrefix parses an address or a CIDR prefix as Parse does: a bare
// address is the prefix holding it alone, and an IPv4-mapped IPv6 address
// or prefix becomes the IPv4 one. Host bits are cleared. It is the parser
// of every address list in the config (trusted proxies, rule allow lists).
func ParsePrefix(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	var p netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if p, err = netip.ParsePrefix(s); err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an address or CIDR prefix", s)
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q is not an address or CIDR prefix", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if a := p.Addr(); a.Is4In6() {
		if p.Bits() < 96 {
			// ::ffff:0:0/95 and shorter reach beyond the mapped range: no
			// IPv4 prefix means the same.
			return netip.Prefix{}, fmt.Errorf("%q: an IPv4-mapped prefix needs at least 96 bits", s)
		}
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// Normalize returns a as every address this package returns is: unmapped
// (an IPv4-mapped IPv6 address is the IPv4 one) and without a zone. It is
// the one normalization of client addresses: code that takes an address
// from elsewhere (an operator's input) passes it through Normalize before
// comparing it with one from Client.
func Normalize(a netip.Addr) netip.Addr { return a.Unmap().WithZone("") }

// Contains reports whether a, normalized, lies in one of t's prefixes.
func (t *Trust) Contains(a netip.Addr) bool {
	if t == nil {
		return false
	}
	a = Normalize(a)
	for _, p := range t.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Equal reports whether t and u trust the same prefixes, in the same order.
func (t *Trust) Equal(u *Trust) bool {
	var a, b []netip.Prefix
	if t != nil {
		a = t.prefixes
	}
	if u != nil {
		b = u.prefixes
	}
	return slices.Equal(a, b)
}

// Peer returns the address of the connection's other end, normalized;
// false when RemoteAddr holds none (a unix socket).
func Peer(r *http.Request) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return Normalize(ap.Addr()), true
	}
	if a, err := netip.ParseAddr(r.RemoteAddr); err == nil {
		return Normalize(a), true
	}
	return netip.Addr{}, false
}

// Client is who sent a request, as a Trust sees it. Both addresses are
// normalized (see Normalize).
type Client struct {
	// Addr is the client's address: the peer, or, when the peer is a
	// trusted proxy, the address the proxies' headers name.
	Addr netip.Addr
	// Peer is the connection's other end.
	Peer netip.Addr
	// ViaProxy is true when Peer is a trusted proxy: then, and only then,
	// headers that carry the client's identity (X-Forwarded-*, X-Real-IP,
	// identity.user_header) were set by a hop the operator vouches for.
	ViaProxy bool
}

// Client returns who sent r. When the peer is a trusted proxy, the client
// is the rightmost address of X-Forwarded-For that is not itself a trusted
// proxy: the entries to its left were appended by hops nobody vouches for,
// so they are the client's to forge. Every entry is trusted: the leftmost.
// A garbled entry stops the walk at the last good hop. Without
// X-Forwarded-For, a parseable X-Real-IP names the client. ok is false when
// the peer has no address.
func (t *Trust) Client(r *http.Request) (c Client, ok bool) {
	p, ok := Peer(r)
	if !ok {
		return Client{}, false
	}
	c = Client{Addr: p, Peer: p}
	if !t.Contains(p) {
		return c, true
	}
	c.ViaProxy = true
	xff := r.Header.Values("X-Forwarded-For")
	if len(xff) == 0 {
		if a, err := parseEntry(r.Header.Get("X-Real-Ip")); err == nil {
			c.Addr = a
		}
		return c, true
	}
	last := p // the hop that appended the entry being read
	for i := len(xff) - 1; i >= 0; i-- {
		h := xff[i]
		for h != "" {
			var e string
			if j := strings.LastIndexByte(h, ','); j >= 0 {
				h, e = h[:j], h[j+1:]
			} else {
				h, e = "", h
			}
			if e = strings.TrimSpace(e); e == "" {
				continue
			}
			a, err := parseEntry(e)
			if err != nil {
				c.Addr = last // nothing left of the header can be believed
				return c, true
			}
			if !t.Contains(a) {
				c.Addr = a
				return c, true
			}
			last = a
		}
	}
	c.Addr = last
	return c, true
}

var errBadEntry = errors.New("forwarded: not an address")

// parseEntry reads an X-Forwarded-For entry or an X-Real-IP value: an
// address, possibly with a port or in brackets.
func parseEntry(s string) (netip.Addr, error) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return Normalize(a), nil
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return Normalize(ap.Addr()), nil
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return Normalize(a), nil
		}
	}
	return netip.Addr{}, errBadEntry
}

// SetHeaders sets on out, the request going upstream, the headers that
// tell the upstream who the client is, for in, the request received:
//
//   - X-Forwarded-For: the chain in received from a trusted proxy with the
//     peer appended, or just the peer;
//   - X-Real-IP: the client's address as Client decides it;
//   - X-Forwarded-Proto, X-Forwarded-Host: a trusted proxy's values, or
//     this hop's own;
//   - Forwarded (RFC 7239) is removed: nothing here maintains it, so a
//     copy would misstate the chain;
//   - every header named in identity (the user id header) is removed
//     unless the peer is a trusted proxy, so that no client can claim an
//     identity to the upstream by setting it.
//
// An X-Forwarded-For present in in with a nil value means "send none", as
// for httputil.ProxyRequest.SetXForwarded.
func (t *Trust) SetHeaders(out http.Header, in *http.Request, identity []string) {
	c, ok := t.Client(in)
	out.Del("Forwarded")
	if !c.ViaProxy {
		for _, h := range identity {
			out.Del(h)
		}
	}
	peer := c.Peer.String()
	if !ok {
		peer = in.RemoteAddr
	}
	prior, has := in.Header["X-Forwarded-For"]
	switch {
	case has && prior == nil:
		out.Del("X-Forwarded-For")
	case c.ViaProxy && len(prior) > 0:
		out.Set("X-Forwarded-For", strings.Join(prior, ", ")+", "+peer)
	default:
		out.Set("X-Forwarded-For", peer)
	}
	if ok {
		real := peer
		if c.Addr != c.Peer {
			real = c.Addr.String()
		}
		out.Set("X-Real-Ip", real)
	} else {
		out.Del("X-Real-Ip")
	}
	if v := in.Header.Get("X-Forwarded-Proto"); c.ViaProxy && v != "" {
		out.Set("X-Forwarded-Proto", v)
	} else if in.TLS != nil {
		out.Set("X-Forwarded-Proto", "https")
	} else {
		out.Set("X-Forwarded-Proto", "http")
	}
	if v := in.Header.Get("X-Forwarded-Host"); c.ViaProxy && v != "" {
		out.Set("X-Forwarded-Host", v)
	} else {
		out.Set("X-Forwarded-Host", in.Host)
	}
}
