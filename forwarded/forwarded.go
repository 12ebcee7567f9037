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
//
// What the upstream is told is decided here too (SetHeaders): the client
// as Client decides it, and none of the client's own claims of an address,
// a URL or an identity that an upstream might believe, unless a trusted
// proxy made them; header names with '_', which CGI-style servers read as
// '-', are dropped as nginx drops them (Policy).
package forwarded

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"github.com/linkgate/linkgate/internal/header"
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
	if a, _, ok := parseIPv4Port(r.RemoteAddr); ok {
		return a, true
	}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return Normalize(ap.Addr()), true
	}
	if a, err := netip.ParseAddr(r.RemoteAddr); err == nil {
		return Normalize(a), true
	}
	return netip.Addr{}, false
}

// PeerText returns the text of a, the peer address of r (Peer): the host
// part of r.RemoteAddr when it spells a so, which costs no allocation,
// else a.String().
func PeerText(r *http.Request, a netip.Addr) string {
	if b, host, ok := parseIPv4Port(r.RemoteAddr); ok && b == a {
		return host
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		var buf [64]byte
		if string(a.AppendTo(buf[:0])) == host {
			return host
		}
	}
	return a.String()
}

// parseIPv4Port parses s as netip.ParseAddrPort does when s is an IPv4
// address and a port ("192.0.2.1:8080", the RemoteAddr of nearly every
// request), without its cost; ok is false for anything else, which
// ParseAddrPort may still accept. host is s's address part.
func parseIPv4Port(s string) (a netip.Addr, host string, ok bool) {
	var ip [4]byte
	i := 0
	for k := range ip {
		if k > 0 {
			if i >= len(s) || s[i] != '.' {
				return netip.Addr{}, "", false
			}
			i++
		}
		start, v := i, 0
		for i < len(s) && i-start < 3 && '0' <= s[i] && s[i] <= '9' {
			v = v*10 + int(s[i]-'0')
			i++
		}
		if i == start || v > 255 || s[start] == '0' && i-start > 1 {
			return netip.Addr{}, "", false // no digit, too large, a leading zero
		}
		ip[k] = byte(v)
	}
	if i >= len(s) || s[i] != ':' {
		return netip.Addr{}, "", false
	}
	host = s[:i]
	port, n := 0, 0
	for i++; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' || n == 5 {
			return netip.Addr{}, "", false
		}
		port, n = port*10+int(s[i]-'0'), n+1
	}
	if n == 0 || port > 65535 {
		return netip.Addr{}, "", false
	}
	return netip.AddrFrom4(ip), host, true
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
// so they are the client's to forge, and are not read. Every entry is
// trusted: the leftmost. Without X-Forwarded-For, X-Real-IP names the
// client. ok is false when the peer has no address (c is then zero), and
// when the entry of X-Forwarded-For where the client's address should be
// (or X-Real-IP) is not an address ("unknown", a name, garbage): who the
// client is cannot be told, and it is not the proxy that vouched for the
// entry either (keyed on the proxy, one client's garbage would limit every
// client behind it, or pass as the proxy in a rule's allow list). c then
// has Peer and ViaProxy, and no Addr: the gateway refuses such a request
// (400) before anything else asks.
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
	xff := r.Header["X-Forwarded-For"]
	if len(xff) == 0 {
		if v := header.First(r.Header, "X-Real-Ip"); v != "" {
			a, err := parseEntry(v)
			if err != nil {
				c.Addr = netip.Addr{}
				return c, false
			}
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
				c.Addr = netip.Addr{}
				return c, false
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

// Policy is what SetHeaders does with the headers a client sent besides
// those it writes itself. The zero Policy removes no user header and drops
// every header whose name holds '_'. A Policy is immutable; build one with
// NewPolicy.
type Policy struct {
	identity    []string // canonical names
	underscores bool
}

// NewPolicy returns the Policy that removes the headers named in identity
// (identity.user_header) unless the peer is a trusted proxy, and passes on
// header names that hold '_' when underscores is true
// (server.underscores_in_headers; false drops them, as nginx does by
// default).
func NewPolicy(identity []string, underscores bool) Policy {
	p := Policy{underscores: underscores}
	for _, h := range identity {
		p.identity = append(p.identity, http.CanonicalHeaderKey(h))
	}
	return p
}

// Equal reports whether p and q treat every request alike.
func (p Policy) Equal(q Policy) bool {
	return p.underscores == q.underscores && slices.Equal(p.identity, q.identity)
}

// A headerClass is how SetHeaders treats a client's header (see
// headerClasses); the zero class passes it on.
type headerClass uint8

const (
	passed headerClass = iota
	// removed: written by SetHeaders itself, or a statement of the client's
	// address or of the request's URL. The upstream learns the client from
	// X-Forwarded-For and X-Real-IP alone, which SetHeaders writes from the
	// one decision Client makes, and is routed by the request line the
	// limiter matched: any other claim is removed, whoever sent it.
	removed
	// fromProxy: forwarding details and identities that a trusted proxy
	// vouches for (the port or path prefix it was reached on, the user an
	// authenticating proxy logged in, a client certificate): passed on from
	// a trusted proxy, removed from anyone else.
	fromProxy
	// framing: headers the upstream frames or routes the request by; they
	// pass as they are, but never in a spelling with '_'.
	framing
)

// headerClasses is the class of every header SetHeaders does not simply
// pass on, by canonical name. The lists name the headers common servers,
// frameworks and libraries read a client address, a scheme, host, port or
// prefix, a user or a URL from (Rack, Symfony, Spring's
// ForwardedHeaderFilter, ASP.NET's forwarded headers, the request-ip npm
// package, PHP's HTTP_CLIENT_IP idiom, oauth2-proxy, Envoy, IIS).
var headerClasses = map[string]headerClass{
	// Written by SetHeaders.
	"X-Forwarded-For": removed, "X-Forwarded-Proto": removed, "X-Forwarded-Host": removed, "X-Real-Ip": removed,
	// RFC 7239: nothing here maintains it, so a copy would misstate the chain.
	"Forwarded": removed,
	// The client's address, as other hops and vendors name it.
	"X-Client-Ip": removed, "Client-Ip": removed, "True-Client-Ip": removed, "Cf-Connecting-Ip": removed,
	"Cf-Connecting-Ipv6": removed, "Cf-Pseudo-Ipv4": removed, "Fastly-Client-Ip": removed,
	"X-Cluster-Client-Ip": removed, "X-Original-Forwarded-For": removed, "X-Forwarded": removed,
	"Forwarded-For": removed, "X-Originating-Ip": removed, "X-Remote-Ip": removed, "X-Remote-Addr": removed,
	"X-Appengine-User-Ip": removed, "X-Envoy-External-Address": removed,
	// A URL that replaces the request line's (IIS, Symfony, Zend).
	"X-Original-Url": removed, "X-Rewrite-Url": removed, "X-Original-Uri": removed,
	// How a trusted proxy was reached.
	"X-Forwarded-Port": fromProxy, "X-Forwarded-Server": fromProxy, "X-Forwarded-Prefix": fromProxy,
	"X-Forwarded-Uri": fromProxy, "X-Forwarded-Scheme": fromProxy, "X-Forwarded-Ssl": fromProxy,
	"X-Forwarded-Protocol": fromProxy, "X-Url-Scheme": fromProxy, "Front-End-Https": fromProxy,
	"X-Host": fromProxy, "X-Original-Host": fromProxy,
	// Who an authenticating proxy logged in, and client certificates.
	"X-Forwarded-User": fromProxy, "X-Forwarded-Email": fromProxy, "X-Forwarded-Preferred-Username": fromProxy,
	"X-Forwarded-Groups": fromProxy, "X-Forwarded-Access-Token": fromProxy, "X-Auth-Request-User": fromProxy,
	"X-Auth-Request-Email": fromProxy, "X-Auth-Request-Preferred-Username": fromProxy,
	"X-Auth-Request-Groups": fromProxy, "X-Auth-Request-Access-Token": fromProxy, "X-Remote-User": fromProxy,
	"Remote-User": fromProxy, "X-Forwarded-Client-Cert": fromProxy, "X-Client-Cert": fromProxy,
	"X-Ssl-Client-Cert": fromProxy, "Ssl-Client-Cert": fromProxy, "X-Client-Verify": fromProxy,
	"X-Ssl-Client-Verify": fromProxy, "X-Ssl-Client-Dn": fromProxy, "X-Ssl-Client-S-Dn": fromProxy,
	// Framing and routing.
	"Content-Length": framing, "Content-Type": framing, "Transfer-Encoding": framing, "Host": framing,
	"Connection": framing, "Proxy-Connection": framing, "Keep-Alive": framing, "Upgrade": framing,
	"X-Http-Method-Override": framing, "X-Http-Method": framing, "X-Method-Override": framing,
}

// Passes reports whether the client's header k, one of h (the headers of
// the request received), may go on to the upstream; viaProxy says whether
// the peer is a trusted proxy (Forwarding.ViaProxy). It is what
// SetHeaders decides for each header, for a client that writes the
// request going upstream without a header map.
func (p Policy) Passes(h http.Header, k string, viaProxy bool) bool {
	if strings.IndexByte(k, '_') >= 0 {
		return p.underscores && !p.shadows(h, k)
	}
	ck := http.CanonicalHeaderKey(k) // k itself, without allocating, as received
	switch headerClasses[ck] {
	case removed:
		return false
	case fromProxy:
		return viaProxy
	}
	return viaProxy || !slices.Contains(p.identity, ck)
}

// shadows reports whether k, a name with '_', names another header to an
// upstream that reads '_' as '-' (a CGI variable: X-User_ID and X-User-ID
// are both HTTP_X_USER_ID to PHP, Rack or WSGI): one present in h, one
// SetHeaders writes, removes or passes on only from trusted proxies, a
// user header, or one the upstream frames or routes by. Such a spelling is
// dropped whoever sent it: a trusted proxy vouches for the header it sets,
// not for a twin it may pass on untouched.
func (p Policy) shadows(h http.Header, k string) bool {
	d := http.CanonicalHeaderKey(strings.ReplaceAll(k, "_", "-"))
	if _, ok := h[d]; ok {
		return true
	}
	return headerClasses[d] != passed || slices.Contains(p.identity, d)
}

// SetHeaders sets on out, the request going upstream, the headers that
// tell the upstream who the client is, for in, the request received, and
// removes from out the client's headers that would tell it otherwise:
//
//   - X-Forwarded-For: the chain in received from a trusted proxy with the
//     peer appended, or just the peer;
//   - X-Real-IP: the client's address as Client decides it;
//   - X-Forwarded-Proto, X-Forwarded-Host: a trusted proxy's values, or
//     this hop's own;
//   - Forwarded (RFC 7239), the client address as other hops name it
//     (X-Client-IP, True-Client-IP, CF-Connecting-IP, X-Cluster-Client-IP,
//     Fastly-Client-IP, X-Original-Forwarded-For...) and a URL replacing
//     the request line's (X-Original-URL, X-Rewrite-URL) are removed,
//     whoever sent them (see headerClasses);
//   - the other forwarding details (X-Forwarded-Port, -Prefix, -Server,
//     -Ssl...), the users of authenticating proxies (X-Forwarded-User,
//     X-Auth-Request-Email, Remote-User...), client certificates, and every
//     header named in pol's identity (the user id header) are removed
//     unless the peer is a trusted proxy, so that no client can claim an
//     identity to the upstream by setting it;
//   - a header name with '_' is dropped, unless pol passes them on; even
//     then, one that an upstream reading '_' as '-' would take for another
//     header of in (X-User_ID beside X-User-ID), or for one of those
//     above or a framing header (Transfer_Encoding), is dropped.
//
// An X-Forwarded-For present in in with a nil value means "send none", as
// for httputil.ProxyRequest.SetXForwarded.
func (t *Trust) SetHeaders(out http.Header, in *http.Request, pol Policy) {
	f := t.Forwarding(in)
	for k := range out {
		if !pol.Passes(in.Header, k, f.ViaProxy) {
			delete(out, k)
		}
	}
	// The four values share one array (every request pays this): each
	// header gets a slice of its own element, as Header.Set would give it
	// a slice of its own.
	vals := [...]string{f.For, f.RealIP, f.Proto, f.Host}
	shared := vals[:]
	for i, k := range [...]string{"X-Forwarded-For", "X-Real-Ip", "X-Forwarded-Proto", "X-Forwarded-Host"} {
		if vals[i] != "" {
			out[k] = shared[i : i+1 : i+1]
		}
	}
}

// Forwarding is what SetHeaders tells the upstream of a request: the
// values of its four headers, "" for one not sent.
type Forwarding struct {
	ViaProxy bool   // the peer is a trusted proxy
	For      string // X-Forwarded-For
	RealIP   string // X-Real-IP: none when the peer's address is unknown
	Proto    string // X-Forwarded-Proto
	Host     string // X-Forwarded-Host
}

// Forwarding returns what SetHeaders sets for in.
func (t *Trust) Forwarding(in *http.Request) Forwarding {
	c, ok := t.Client(in)
	f := Forwarding{ViaProxy: c.ViaProxy}
	peer := in.RemoteAddr
	if c.Peer.IsValid() {
		peer = PeerText(in, c.Peer)
	}
	prior, has := in.Header["X-Forwarded-For"]
	switch {
	case has && prior == nil:
		// none
	case c.ViaProxy && len(prior) > 0:
		f.For = strings.Join(prior, ", ") + ", " + peer
	default:
		f.For = peer
	}
	if ok {
		f.RealIP = peer
		if c.Addr != c.Peer {
			f.RealIP = c.Addr.String()
		}
	}
	if v := header.First(in.Header, "X-Forwarded-Proto"); c.ViaProxy && v != "" {
		f.Proto = v
	} else if in.TLS != nil {
		f.Proto = "https"
	} else {
		f.Proto = "http"
	}
	if v := header.First(in.Header, "X-Forwarded-Host"); c.ViaProxy && v != "" {
		f.Host = v
	} else {
		f.Host = in.Host
	}
	return f
}
