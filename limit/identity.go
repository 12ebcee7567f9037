package limit

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
)

// UserSource returns the user a request is made by, or false when the
// request names none that can be believed. trusted says whether the peer is
// a trusted proxy. The header source (identity.user_header) is the default;
// a verified-token source can be put in its place with WithUserSource.
type UserSource func(r *http.Request, trusted bool) (string, bool)

// HeaderUser returns a UserSource reading the user id from header, believed
// only when the peer is a trusted proxy: a client could set it itself.
func HeaderUser(header string) UserSource {
	return func(r *http.Request, trusted bool) (string, bool) {
		if !trusted || header == "" {
			return "", false
		}
		v := strings.TrimSpace(r.Header.Get(header))
		return v, v != ""
	}
}

// identifier extracts and normalizes features. It is immutable and safe for
// concurrent use.
type identifier struct {
	trusted    []netip.Prefix
	ipv6Prefix int
	user       UserSource
	emails     emailReader
}

func newIdentifier(id Identity, trusted []netip.Prefix) *identifier {
	d := DefaultIdentity()
	if id.IPv6Prefix == 0 {
		id.IPv6Prefix = d.IPv6Prefix
	}
	if id.MaxBodyBytes == 0 {
		id.MaxBodyBytes = d.MaxBodyBytes
	}
	if len(id.EmailFields) == 0 {
		id.EmailFields = d.EmailFields
	}
	ps := make([]netip.Prefix, len(trusted))
	for i, p := range trusted {
		ps[i] = netip.PrefixFrom(p.Addr().Unmap(), unmappedBits(p)).Masked()
	}
	return &identifier{trusted: ps, ipv6Prefix: id.IPv6Prefix, user: HeaderUser(id.UserHeader),
		emails: newEmailReader(id.EmailFields, id.MaxBodyBytes, id.EmailFold)}
}

// unmappedBits is p's length after unmapping an IPv4-mapped IPv6 prefix.
func unmappedBits(p netip.Prefix) int {
	if p.Addr().Is4In6() {
		return max(p.Bits()-96, 0)
	}
	return p.Bits()
}

func (id *identifier) isTrusted(a netip.Addr) bool {
	for _, p := range id.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// peer returns the address of the connection's other end.
func peer(r *http.Request) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if a, err := netip.ParseAddr(r.RemoteAddr); err == nil {
		return a.Unmap().WithZone(""), true
	}
	return netip.Addr{}, false
}

// clientAddr returns the client's address: the peer, or when the peer is a
// trusted proxy the rightmost address of X-Forwarded-For that is not itself
// a trusted proxy (the leftmost ones are the client's to forge), or failing
// any X-Forwarded-For, X-Real-IP. trusted reports whether the peer is trusted.
func (id *identifier) clientAddr(r *http.Request) (addr netip.Addr, trusted, ok bool) {
	p, ok := peer(r)
	if !ok {
		return netip.Addr{}, false, false
	}
	if !id.isTrusted(p) {
		return p, false, true
	}
	xff := r.Header.Values("X-Forwarded-For")
	if len(xff) == 0 {
		if v := r.Header.Get("X-Real-IP"); v != "" {
			if a, err := netip.ParseAddr(strings.TrimSpace(v)); err == nil {
				return a.Unmap().WithZone(""), true, true
			}
		}
		return p, true, true
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
			e = strings.TrimSpace(e)
			if e == "" {
				continue
			}
			a, err := parseForwarded(e)
			if err != nil {
				// A garbled entry: nothing left of it can be believed.
				return last, true, true
			}
			if !id.isTrusted(a) {
				return a, true, true
			}
			last = a
		}
	}
	return last, true, true // every hop is trusted: the leftmost is the client
}

// parseForwarded reads an X-Forwarded-For entry: an address, possibly with a
// port or in brackets.
func parseForwarded(s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), nil
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), nil
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap().WithZone(""), nil
		}
	}
	return netip.Addr{}, errors.New("limit: bad X-Forwarded-For entry")
}

// ipValue is the counter value of a client address: an IPv4 address, or the
// IPv6 prefix it belongs to ("2001:db8:1:2::/64").
func (id *identifier) ipValue(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	if a.Is4() {
		return a.String()
	}
	p, err := a.Prefix(id.ipv6Prefix)
	if err != nil {
		return a.String()
	}
	return p.String()
}

// normalizeIP reads a value given to the admin endpoint as a client would
// appear: an address, or an IPv6 prefix.
func (id *identifier) normalizeIP(v string) (string, bool) {
	v = strings.TrimSpace(v)
	if a, err := netip.ParseAddr(v); err == nil {
		return id.ipValue(a), true
	}
	if p, err := netip.ParsePrefix(v); err == nil && p.Addr().Is6() && !p.Addr().Is4In6() {
		return id.ipValue(p.Addr()), true
	}
	return "", false
}
