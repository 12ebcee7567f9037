package stats

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/tenant"
)

// Share tokens
//
// A share token lets whoever holds it read one link's stats, or all links',
// until it expires, without the stats token: the chart page, its JSON and
// CSV, the live stream and the embed view accept it as the "share"
// parameter (or as a bearer token). It is read-only by construction: the
// stats API has nothing else. It is signed with HMAC-SHA-256 under a key
// from the environment (stats.share.key_env), which is never stored: a
// token is checked by recomputing its signature, so the gateway keeps no
// list of tokens, and rotating the key (a new value, then a restart; or a
// reload whose key_env names another variable) revokes every token signed
// with the old one, and ends the live streams opened with them.
//
//	lgs1.<payload>.<signature>
//
// payload is base64url (no padding) of "<issued unix seconds>:<expiry unix
// seconds>:<short_key>", "/" standing for all links; signature is base64url
// of HMAC-SHA-256(key, "lgs1." + payload). A token whose lifetime (expiry
// less issue) is over stats.share.max_ttl is refused, so lowering max_ttl
// revokes the long-lived ones.

// sharePrefix starts every share token: its format's version.
const sharePrefix = "lgs1."

// MinShareKeyBytes is the shortest share key: 128 bits.
const MinShareKeyBytes = 16

// Grant is what a share token allows: reading Key's stats until Expires.
// Key is a stored key (analytics.TenantKey): a link's, or all links'
// (analytics.AllLinks, or a tenant's analytics.TenantAll), which grants
// every link of its tenant too.
type Grant struct {
	Key     string
	Issued  time.Time
	Expires time.Time
}

// All reports whether g is for all links (of its tenant).
func (g Grant) All() bool {
	_, short := analytics.SplitKey(g.Key)
	return short == ""
}

// Tenant returns the tenant of g's links ("": the default tenant).
func (g Grant) Tenant() string {
	t, _ := analytics.SplitKey(g.Key)
	return t
}

// Allows reports whether g lets its holder read the stored key's stats
// (analytics.AllLinks, analytics.TenantAll: all links together): its own
// key, or, for all links, any key of its tenant.
func (g Grant) Allows(key string) bool {
	if g.Key == key {
		return true
	}
	t, _ := analytics.SplitKey(key)
	return g.All() && t == g.Tenant()
}

// Errors of VerifyShare.
var (
	ErrShareMalformed = errors.New("stats: not a share token")
	ErrShareSignature = errors.New("stats: the share token's signature does not match (a key rotated since it was made, or a token altered)")
	ErrShareExpired   = errors.New("stats: the share token has expired")
	ErrShareTooLong   = errors.New("stats: the share token lives longer than stats.share.max_ttl allows")
)

// SignShare returns the share token of g under key.
func SignShare(key []byte, g Grant) string {
	return sign(key, sharePrefix, g.Issued, g.Expires, g.Key)
}

// sign returns the token prefix.<payload>.<signature> of what (a stored
// key, a tenant) from issued to expires: the prefix names the kind of
// token and is signed with the payload, so that no token of one kind
// passes for one of another.
func sign(key []byte, prefix string, issued, expires time.Time, what string) string {
	payload := strconv.FormatInt(issued.Unix(), 10) + ":" + strconv.FormatInt(expires.Unix(), 10) + ":" + what
	p := prefix + base64.RawURLEncoding.EncodeToString([]byte(payload))
	return p + "." + base64.RawURLEncoding.EncodeToString(shareMAC(key, p))
}

func shareMAC(key []byte, signed string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(signed))
	return m.Sum(nil)
}

// VerifyShare checks token under key at now and returns what it grants:
// its signature must match (in constant time), it must not have expired,
// and its lifetime must be at most maxTTL (0: any).
func VerifyShare(key []byte, token string, now time.Time, maxTTL time.Duration) (Grant, error) {
	what, issued, expires, err := verify(key, sharePrefix, token, now, maxTTL)
	return Grant{Key: what, Issued: issued, Expires: expires}, err
}

// verify checks a token of sign's under key at now and returns what it
// is for and its lifetime: see VerifyShare.
func verify(key []byte, prefix, token string, now time.Time, maxTTL time.Duration) (what string, issued, expires time.Time, err error) {
	rest, ok := strings.CutPrefix(token, prefix)
	if !ok || len(key) == 0 {
		return "", issued, expires, ErrShareMalformed
	}
	p, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return "", issued, expires, ErrShareMalformed
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return "", issued, expires, ErrShareMalformed
	}
	if !hmac.Equal(got, shareMAC(key, prefix+p)) {
		return "", issued, expires, ErrShareSignature
	}
	raw, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil {
		return "", issued, expires, ErrShareMalformed
	}
	parts := strings.SplitN(string(raw), ":", 3)
	if len(parts) != 3 || parts[2] == "" {
		return "", issued, expires, ErrShareMalformed
	}
	iat, err1 := strconv.ParseInt(parts[0], 10, 64)
	exp, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || exp < iat {
		return "", issued, expires, ErrShareMalformed
	}
	what, issued, expires = parts[2], time.Unix(iat, 0).UTC(), time.Unix(exp, 0).UTC()
	if !now.Before(expires) {
		return what, issued, expires, ErrShareExpired
	}
	if maxTTL > 0 && expires.Sub(issued) > maxTTL {
		return what, issued, expires, ErrShareTooLong
	}
	return what, issued, expires, nil
}

// Sharer makes and checks share tokens under one key. The zero value, or
// one without a key, makes none and accepts none.
type Sharer struct {
	Key    []byte
	MaxTTL time.Duration // the longest lifetime a token may have
}

// DefaultShareTTL is the lifetime of a share token made without one.
const DefaultShareTTL = 30 * 24 * time.Hour

// DefaultShareMaxTTL is the default of stats.share.max_ttl.
const DefaultShareMaxTTL = 365 * 24 * time.Hour

// ErrSharingOff is returned by Sharer.Make without a key.
var ErrSharingOff = errors.New("stats: sharing is off: set the environment variable named by stats.share.key_env (at least 16 bytes) and restart")

// Make returns a token granting key's stats (a stored key: a short key,
// analytics.AllLinks for all links, or a tenant's analytics.TenantKey or
// analytics.TenantAll) from now for ttl (0: DefaultShareTTL, capped at
// MaxTTL).
func (s Sharer) Make(key string, ttl time.Duration, now time.Time) (string, Grant, error) {
	if len(s.Key) == 0 {
		return "", Grant{}, ErrSharingOff
	}
	t, short := analytics.SplitKey(key)
	if key == "" || t != "" && !tenant.ValidName(t) || strings.Contains(short, "/") {
		return "", Grant{}, fmt.Errorf("stats: %q is not a short key", key)
	}
	issued, expires, err := s.lifetime(ttl, now)
	if err != nil {
		return "", Grant{}, err
	}
	g := Grant{Key: key, Issued: issued, Expires: expires}
	return SignShare(s.Key, g), g, nil
}

// lifetime returns the issue time and expiry of a token made at now for
// ttl (0: DefaultShareTTL, capped at MaxTTL).
func (s Sharer) lifetime(ttl time.Duration, now time.Time) (issued, expires time.Time, err error) {
	if ttl == 0 {
		ttl = min(DefaultShareTTL, s.MaxTTL)
	}
	if ttl < time.Second || s.MaxTTL > 0 && ttl > s.MaxTTL {
		return issued, expires, fmt.Errorf("stats: a token's ttl must be from 1s to %v (stats.share.max_ttl), not %v", s.MaxTTL, ttl)
	}
	issued = now.UTC().Truncate(time.Second)
	return issued, issued.Add(ttl), nil
}

// Verify checks token at now: see VerifyShare.
func (s Sharer) Verify(token string, now time.Time) (Grant, error) {
	if len(s.Key) == 0 {
		return Grant{}, ErrSharingOff
	}
	return VerifyShare(s.Key, token, now, s.MaxTTL)
}
