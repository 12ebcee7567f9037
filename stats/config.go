package stats

import (
	"fmt"
	"path"
	"regexp"
	"time"

	"github.com/linkgate/linkgate/bound"
)

// ancestorSource is a source of CSP's frame-ancestors (CSP Level 3 section
// 2.3.1): *, 'self', a scheme (https:), or a host with an optional scheme, a
// leading "*." and a port; no 'none' (an empty list says it) and nothing
// that would end the directive (a space, ";" or ",").
var ancestorSource = regexp.MustCompile(`^(?i:\*|'self'|[a-z][a-z0-9+.-]*:|([a-z][a-z0-9+.-]*://)?(\*\.)?[a-z0-9-]+(\.[a-z0-9-]+)*(:([0-9]{1,5}|\*))?(/[^\s;,']*)?)$`)

// cleanPrefix is the shape of stats.prefix: "/" and a segment, any
// number of times, each segment of URL-unreserved characters (RFC 3986
// section 2.3), so that the prefix matches a request's path as written
// and as decoded alike; path.Clean then refuses "." and "..".
var cleanPrefix = regexp.MustCompile(`^(/[A-Za-z0-9._~-]+)+$`)

// Config is the "stats" section: where the gateway serves /stats.
type Config struct {
	Prefix   string `yaml:"prefix"`    // served by the gateway, never proxied
	TokenEnv string `yaml:"token_env"` // env var with a bearer token for the stats API; empty: open
	// ReadTimeout bounds the store reads of one stats request: past it the
	// answer is partial (from the counts the gateway holds), so /stats
	// answers quickly while the store hangs.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// Live bounds the live streams.
	Live LiveConfig `yaml:"live"`
	// Share configures share tokens.
	Share ShareConfig `yaml:"share"`
	// Embed configures the embed view.
	Embed EmbedConfig `yaml:"embed"`
}

// EmbedConfig is the "stats.embed" section.
type EmbedConfig struct {
	// FrameAncestors are the sources whose pages may show the embed view
	// (format=embed) in an iframe, as CSP's frame-ancestors takes them:
	// https://blog.example, https://*.example.com, 'self'. Empty: none.
	FrameAncestors []string `yaml:"frame_ancestors"`
}

// ShareConfig is the "stats.share" section (see Sharer).
type ShareConfig struct {
	// KeyEnv names the environment variable holding the key share tokens
	// are signed with (at least 16 bytes); unset or empty: no sharing.
	// The key is never stored: rotating it revokes every token.
	KeyEnv string `yaml:"key_env"`
	// MaxTTL is the longest lifetime of a share token, made or accepted.
	MaxTTL time.Duration `yaml:"max_ttl"`
}

// LiveConfig is the "stats.live" section: how the live streams of one
// gateway are divided (see Streams). Each gateway counts its own.
type LiveConfig struct {
	// MaxStreams caps the live streams open at once on this gateway; 0:
	// none (format=events answers 503).
	MaxStreams int `yaml:"max_streams"`
	// ReservedStreams of MaxStreams are kept for streams opened with the
	// stats token, while one is required (stats.token_env): share tokens
	// and clients without a token share the rest. At MaxStreams or more,
	// every stream is kept for the stats token.
	ReservedStreams int `yaml:"reserved_streams"`
	// PerShareToken caps the streams open at once on one share token.
	PerShareToken int `yaml:"per_share_token"`
	// PerClient caps the streams open at once from one client address
	// (IPv6 per identity.ipv6_prefix), those opened with the stats token
	// aside.
	PerClient int `yaml:"per_client"`
	// PerTenant caps the streams open at once on the tokens of one tenant
	// (its tenant tokens and the share tokens of its links), so that one
	// customer's dashboards cannot take the others' share.
	PerTenant int `yaml:"per_tenant"`
}

// DefaultConfig returns the defaults of the stats section.
func DefaultConfig() Config {
	return Config{Prefix: "/stats", ReadTimeout: time.Second, Live: LiveConfig{MaxStreams: DefaultMaxStreams,
		ReservedStreams: DefaultReservedStreams, PerShareToken: DefaultPerShareToken, PerClient: DefaultPerClient, PerTenant: DefaultPerTenant},
		Share: ShareConfig{KeyEnv: "LINKGATE_SHARE_KEY", MaxTTL: DefaultShareMaxTTL}}
}

// bounds are the ranges of the section's numbers, checked first. A
// reserve of max_streams or more keeps every stream for the stats token
// (Streams takes the smaller): refusing it would refuse a file that only
// lowered max_streams under the default reserve.
var bounds = bound.Section[Config]{
	bound.At("read_timeout", bound.Durations(10*time.Millisecond, time.Minute), func(c Config) time.Duration { return c.ReadTimeout }),
	bound.At("live.max_streams", bound.Counts(1, MaxStreamsLimit).OrZero("no live stream"), func(c Config) int { return c.Live.MaxStreams }),
	bound.At("live.reserved_streams", bound.Counts(0, MaxStreamsLimit), func(c Config) int { return c.Live.ReservedStreams }),
	bound.At("live.per_share_token", bound.Counts(1, MaxStreamsLimit), func(c Config) int { return c.Live.PerShareToken }),
	bound.At("live.per_client", bound.Counts(1, MaxStreamsLimit), func(c Config) int { return c.Live.PerClient }),
	bound.At("live.per_tenant", bound.Counts(1, MaxStreamsLimit), func(c Config) int { return c.Live.PerTenant }),
	bound.At("share.max_ttl", bound.Durations(time.Minute, 10*365*24*time.Hour), func(c Config) time.Duration { return c.Share.MaxTTL }),
}

// Bounds lists the ranges of the section's numbers, as Compile checks
// them.
func Bounds() []bound.Named { return bounds.Ranges("stats") }

// Compile checks the stats section. Errors start with the field's
// path in the config file.
func Compile(c Config) error {
	if err := bounds.Check("stats", c); err != nil {
		return err
	}
	if !cleanPrefix.MatchString(c.Prefix) || path.Clean(c.Prefix) != c.Prefix {
		return fmt.Errorf("stats.prefix: %q must be a clean absolute path like /stats or /_lg/stats: segments of letters, digits and - . _ ~, none of them . or .., no // or trailing /, nothing escaped (%%)", c.Prefix)
	}
	for i, a := range c.Embed.FrameAncestors {
		if !ancestorSource.MatchString(a) {
			return fmt.Errorf("stats.embed.frame_ancestors[%d]: %q is not a CSP source like https://blog.example, https://*.example.com, https: or 'self'", i, a)
		}
	}
	return nil
}
