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

// Grant is what a share token allows: reading Key's stats (analytics.AllLinks:
// every link's and all links together) until Expires.
type Grant struct {
	Key     string
	Issued  time.Time
	Expires time.Time
}

// All reports whether g is for all links.
func (g Grant) All() bool { return g.Key == analytics.AllLinks }

// Allows reports whether g lets its holder read key's stats
// (analytics.AllLinks: all links together).
func (g Grant) Allows(key string) bool { return g.All() || g.Key == key }

// Errors of VerifyShare.
var (
	ErrShareMalformed = errors.New("stats: not a share token")
	ErrShareSignature = errors.New("stats: the share token's signature does not match (a key rotated since it was made, or a token altered)")
	ErrShareExpired   = errors.New("stats: the share token has expired")
	ErrShareTooLong   = errors.New("stats: the share token lives longer than stats.share.max_ttl allows")
)

// SignShare returns the share token of g under key.
func SignShare(key []byte, g Grant) string {
	payload := strconv.FormatInt(g.Issued.Unix(), 10) + ":" + strconv.FormatInt(g.Expires.Unix(), 10) + ":" + g.Key
	p := sharePrefix + base64.RawURLEncoding.EncodeToString([]byte(payload))
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
	rest, ok := strings.CutPrefix(token, sharePrefix)
	if !ok || len(key) == 0 {
		return Grant{}, ErrShareMalformed
	}
	p, sig, ok := strings.Cut(rest, ".")
	if !ok {
		return Grant{}, ErrShareMalformed
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return Grant{}, ErrShareMalformed
	}
	if !hmac.Equal(got, shareMAC(key, sharePrefix+p)) {
		return Grant{}, ErrShareSignature
	}
	raw, err := base64.RawURLEncoding.DecodeString(p)
	if err != nil {
		return Grant{}, ErrShareMalformed
	}
	parts := strings.SplitN(string(raw), ":", 3)
	if len(parts) != 3 || parts[2] == "" {
		return Grant{}, ErrShareMalformed
	}
	iat, err1 := strconv.ParseInt(parts[0], 10, 64)
	exp, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil || exp < iat {
		return Grant{}, ErrShareMalformed
	}
	g := Grant{Key: parts[2], Issued: time.Unix(iat, 0).UTC(), Expires: time.Unix(exp, 0).UTC()}
	if !now.Before(g.Expires) {
		return g, ErrShareExpired
	}
	if maxTTL > 0 && g.Expires.Sub(g.Issued) > maxTTL {
		return g, ErrShareTooLong
	}
	return g, nil
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

// Make returns a token granting key's stats (analytics.AllLinks: all links)
// from now for ttl (0: DefaultShareTTL, capped at MaxTTL). key must be a
// short key (no "/") or AllLinks.
func (s Sharer) Make(key string, ttl time.Duration, now time.Time) (string, Grant, error) {
	if len(s.Key) == 0 {
		return "", Grant{}, ErrSharingOff
	}
	if key == "" || key != analytics.AllLinks && strings.Contains(key, "/") {
		return "", Grant{}, fmt.Errorf("stats: %q is not a short key", key)
	}
	if ttl == 0 {
		ttl = min(DefaultShareTTL, s.MaxTTL)
	}
	if ttl < time.Second || s.MaxTTL > 0 && ttl > s.MaxTTL {
		return "", Grant{}, fmt.Errorf("stats: a share token's ttl must be from 1s to %v (stats.share.max_ttl), not %v", s.MaxTTL, ttl)
	}
	g := Grant{Key: key, Issued: now.UTC().Truncate(time.Second)}
	g.Expires = g.Issued.Add(ttl)
	return SignShare(s.Key, g), g, nil
}

// Verify checks token at now: see VerifyShare.
func (s Sharer) Verify(token string, now time.Time) (Grant, error) {
	if len(s.Key) == 0 {
		return Grant{}, ErrSharingOff
	}
	return VerifyShare(s.Key, token, now, s.MaxTTL)
}
