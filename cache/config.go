package cache

import (
	"fmt"
	"net/textproto"
	"reflect"
	"strings"
	"time"

	"github.com/linkgate/linkgate/bound"
)

// Config is the "cache" section: the redirect cache in front of every
// pool's proxy.
type Config struct {
	// Enabled keeps the answers the upstream asks the gateway to keep
	// (OwnField, CDNField) or a route's default_ttl allows. Default true;
	// false: nothing is kept, and the gateway's own field is still
	// removed from answers.
	Enabled bool `yaml:"enabled"`
	// MaxBytes bounds the memory the entries take (their status, fields,
	// body, key and a fixed overhead each). Default 64 MiB.
	MaxBytes int64 `yaml:"max_bytes"`
	// MaxEntryBytes is the largest answer kept (fields and body). Default
	// 16 KiB: a redirect takes a few hundred bytes.
	MaxEntryBytes int64 `yaml:"max_entry_bytes"`
	// DefaultTTL keeps the redirects of answers without a targeted field
	// for this long; 0 (the default): such answers are not kept. A route's
	// cache.default_ttl replaces it for the route.
	DefaultTTL time.Duration `yaml:"default_ttl"`
	// NegativeTTL caps how long a 404 or 410 is kept. Default 10s; 0:
	// never kept.
	NegativeTTL time.Duration `yaml:"negative_ttl"`
	// StaleIfError is how long after it stops being fresh an answer may
	// still be served when the upstream fails (RFC 5861), when the
	// targeted field does not say. Default 24h; 0: none.
	StaleIfError time.Duration `yaml:"stale_if_error"`
	// StaleWhileRevalidate is how long after it stops being fresh an
	// answer is served while a request in the background renews it, when
	// the targeted field does not say. Default 0: none.
	StaleWhileRevalidate time.Duration `yaml:"stale_while_revalidate"`
	// Vary lists the request fields an answer's Vary may name and still be
	// kept (one entry per value of them). Default none: an answer with a
	// Vary is not kept.
	Vary []string `yaml:"vary,omitempty"`
}

// Route is a route's "cache" section.
type Route struct {
	// DefaultTTL replaces cache.default_ttl for the route's hosts; 0
	// keeps nothing without a targeted field. Unset: cache.default_ttl.
	DefaultTTL *time.Duration `yaml:"default_ttl,omitempty"`
}

// DefaultConfig is the section's defaults.
func DefaultConfig() Config {
	return Config{Enabled: true, MaxBytes: 64 << 20, MaxEntryBytes: 16 << 10,
		NegativeTTL: 10 * time.Second, StaleIfError: 24 * time.Hour}
}

// Package bounds. An entry's weight is a uint32 for the cache library,
// hence the cap on max_entry_bytes; max_bytes is what a gateway's memory
// can hold.
const (
	minBytes      = 1 << 20
	maxBytes      = 1 << 40
	minEntryBytes = 1 << 10
	maxEntryBytes = 1 << 20
	maxTTL        = 365 * 24 * time.Hour
)

// ttlRange is default_ttl's, in the section and in a route's.
var ttlRange = bound.Durations(time.Second, maxTTL).OrZero("nothing kept without a targeted field")

// Bounds are the section's bounded numbers.
var Bounds = bound.Section[Config]{
	bound.At("max_bytes", bound.Sizes(minBytes, maxBytes), func(c Config) int64 { return c.MaxBytes }),
	bound.At("max_entry_bytes", bound.Sizes(minEntryBytes, maxEntryBytes), func(c Config) int64 { return c.MaxEntryBytes }),
	bound.At("default_ttl", ttlRange, func(c Config) time.Duration { return c.DefaultTTL }),
	bound.At("negative_ttl", bound.Durations(time.Second, time.Hour).OrZero("404 and 410 not kept"), func(c Config) time.Duration { return c.NegativeTTL }),
	bound.At("stale_if_error", bound.Durations(time.Second, maxTTL).OrZero("none"), func(c Config) time.Duration { return c.StaleIfError }),
	bound.At("stale_while_revalidate", bound.Durations(time.Second, 24*time.Hour).OrZero("none"), func(c Config) time.Duration { return c.StaleWhileRevalidate }),
}

// Plan is the section compiled. It is immutable.
type Plan struct {
	cfg  Config
	vary map[string]bool // canonical field names
}

// Compile checks the section at field (normally "cache").
func Compile(field string, c Config) (*Plan, error) {
	if err := Bounds.Check(field, c); err != nil {
		return nil, err
	}
	if c.MaxEntryBytes > c.MaxBytes {
		return nil, fmt.Errorf("%s.max_entry_bytes: %d is more than %s.max_bytes (%d)", field, c.MaxEntryBytes, field, c.MaxBytes)
	}
	p := &Plan{cfg: c, vary: map[string]bool{}}
	for i, f := range c.Vary {
		if f == "" || strings.IndexFunc(f, func(r rune) bool { return !isTokenRune(r) }) >= 0 {
			return nil, fmt.Errorf("%s.vary[%d]: %q is not a field name", field, i, f)
		}
		n := textproto.CanonicalMIMEHeaderKey(f)
		switch n {
		case "Authorization", "Cookie", "Proxy-Authorization":
			return nil, fmt.Errorf("%s.vary[%d]: %s: an answer that depends on the client's credentials is never kept", field, i, f)
		}
		p.vary[n] = true
	}
	return p, nil
}

// CheckRoute checks a route's section at field ("routes[2].cache").
func CheckRoute(field string, r Route) error {
	if r.DefaultTTL == nil {
		return nil
	}
	return ttlRange.Check(field+".default_ttl", int64(*r.DefaultTTL))
}

// Config returns the section as compiled.
func (p *Plan) Config() Config { return p.cfg }

// Equal reports whether p and q keep the same answers for the same time.
func (p *Plan) Equal(q *Plan) bool {
	return reflect.DeepEqual(p.cfg, q.cfg)
}

func isTokenRune(r rune) bool {
	return r < 0x7f && r > ' ' && !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r)
}
