package limit

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
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
	trust       *forwarded.Trust // who may name the client and the user
	ipv6Prefix  int
	user        UserSource
	emailFields []string
	maxBody     int64
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

// NormalizeEmail is how an email is compared: trimmed and lower-cased.
func NormalizeEmail(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

// email reads the email field of a form or JSON body, reading at most
// maxBody bytes, and puts the body back so that the upstream receives it byte
// for byte whatever its size. ok is false when there is no email, the body is
// larger than maxBody, or it cannot be parsed.
func (id *identifier) email(r *http.Request) (string, bool) {
	if r.Body == nil || r.Body == http.NoBody {
		return "", false
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || (mt != "application/x-www-form-urlencoded" && mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return "", false
	}
	if r.ContentLength > id.maxBody {
		return "", false // too large to parse: leave the body untouched
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, id.maxBody+1))
	r.Body = &replayBody{Reader: io.MultiReader(bytes.NewReader(buf), r.Body), c: r.Body}
	if err != nil || int64(len(buf)) > id.maxBody {
		return "", false
	}
	var v string
	if mt == "application/x-www-form-urlencoded" {
		q, err := url.ParseQuery(string(buf))
		if err != nil {
			return "", false
		}
		for _, f := range id.emailFields {
			if v = q.Get(f); strings.TrimSpace(v) != "" {
				break
			}
		}
	} else {
		var m map[string]json.RawMessage
		if json.Unmarshal(buf, &m) != nil {
			return "", false
		}
		for _, f := range id.emailFields {
			var s string
			if raw, ok := m[f]; ok && json.Unmarshal(raw, &s) == nil && strings.TrimSpace(s) != "" {
				v = s
				break
			}
		}
	}
	v = NormalizeEmail(v)
	return v, v != ""
}

// replayBody is a request body whose first bytes were read by the limiter:
// it reads them again, then the rest, and closes the original.
type replayBody struct {
	io.Reader
	c io.Closer
}

func (b *replayBody) Close() error { return b.c.Close() }
