package limit

import (
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/linkgate/linkgate/forwarded"
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
	trust      *forwarded.Trust // who may name the client and the user
	ipv6Prefix int
	user       UserSource
	emails     emailReader
	// tenant returns the tenant of a request's host, "" for none (see
	// WithTenants). Nil: every host is in none.
	tenant func(host string) string
}

// ipValue is the counter value of a client address, normalized as
// forwarded returns it (forwarded.Normalize): an IPv4 address, or the IPv6
// prefix it belongs to ("2001:db8:1:2::/64").
func (id *identifier) ipValue(a netip.Addr) string { return IPValue(a, id.ipv6Prefix) }

// IPValue is the counter value of a normalized client address
// (forwarded.Normalize): an IPv4 address, or the IPv6 prefix of
// ipv6Prefix bits it belongs to ("2001:db8:1:2::/64"), so that a client
// with a whole IPv6 network is one client. The limiter's ip rules and the
// TLS edge's handshake limit count clients by it.
func IPValue(a netip.Addr, ipv6Prefix int) string {
	if a.Is4() {
		return a.String()
	}
	p, err := a.Prefix(ipv6Prefix)
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
		return id.ipValue(forwarded.Normalize(a)), true
	}
	if p, err := netip.ParsePrefix(v); err == nil && p.Addr().Is6() && !p.Addr().Is4In6() {
		return id.ipValue(p.Addr()), true
	}
	return "", false
}

// pairEscaper escapes the characters pairValue joins with.
var pairEscaper = strings.NewReplacer("%", "%25", ",", "%2C")

// pairValue is the counter value of a pair of feature values: a and b
// joined by a comma, each with its commas and percent signs
// percent-escaped, so that no two pairs share a value ("a,b" and "c" give
// "a%2Cb,c", "a" and "b,c" give "a,b%2Cc"). An email and an address read
// as they are: "alice@example.com,203.0.113.7".
func pairValue(a, b string) string {
	if strings.ContainsAny(a, ",%") {
		a = pairEscaper.Replace(a)
	}
	if strings.ContainsAny(b, ",%") {
		b = pairEscaper.Replace(b)
	}
	return a + "," + b
}

// splitPair returns the two values a pair's value (pairValue) joins, or
// ok false when v is not one.
func splitPair(v string) (a, b string, ok bool) {
	a, b, ok = strings.Cut(v, ",")
	if !ok || strings.Contains(b, ",") {
		return "", "", false
	}
	a, errA := url.PathUnescape(a)
	b, errB := url.PathUnescape(b)
	return a, b, errA == nil && errB == nil
}
