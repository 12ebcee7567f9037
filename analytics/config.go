package analytics

import (
	"time"

	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/route"
	"github.com/linkgate/linkgate/visitclass"
)

// Config is the "analytics" section: what a visit is, how often counts are
// flushed, where they are stored and at which resolutions.
type Config struct {
	Enabled       bool          `yaml:"enabled"`
	Match         route.Match   `yaml:"match"`        // the route whose {short_key} is counted
	CountStatus   []int         `yaml:"count_status"` // a visit is a request the upstream answers with one of these
	FlushInterval time.Duration `yaml:"flush_interval"`
	MaxKeys       int           `yaml:"max_keys"` // distinct links held in memory between flushes
	Store         string        `yaml:"store"`    // embedded | cassandra
	Embedded      Embedded      `yaml:"embedded"`
	Cassandra     Cassandra     `yaml:"cassandra"`
	Retention     []rollup.Tier `yaml:"retention"`
	// RollupGrace is how long after a batch period ends the rollup worker
	// waits before it rolls the period into the next tier: the time a
	// flush of the period's last visits may take to land, plus the clock
	// difference between gateways. Counts flushed more than half of it
	// after their period ended are late: their coarse buckets are marked
	// and rolled again. Grace returns the value in force.
	RollupGrace time.Duration `yaml:"rollup_grace"`
	Bots        string        `yaml:"bots"` // separate | count | ignore

	// MaxKeyBytes caps a short key's length: a visit to a longer one is
	// not counted (linkgate_analytics_keys_too_long_total), so that nobody
	// fills memory and storage with megabytes of made-up keys.
	MaxKeyBytes int `yaml:"max_key_bytes"`
	// MaxBufferBytes caps the memory the links tracked between two flushes
	// take (their keys and per-link state), as max_keys caps their number:
	// beyond it visits to links not yet tracked count in the all-links
	// total only.
	MaxBufferBytes int64 `yaml:"max_buffer_bytes"`
	// Journal is where counts the store refused wait on local disk.
	Journal JournalConfig `yaml:"journal"`

	// GeoIP is the country database; without one, countries are off.
	GeoIP GeoIPConfig `yaml:"geoip"`
	// ASN is the network database; without one, the classes of visits
	// use no network signal.
	ASN ASNConfig `yaml:"asn"`
	// Classes configures how visits are classed (package visitclass).
	Classes ClassesConfig `yaml:"classes"`
	// Dimensions configures the breakdowns of visits by where they come
	// from (referrer, source, country, device, browser, OS).
	Dimensions DimensionsConfig `yaml:"dimensions"`
	// Uniques configures the unique-visitor counts.
	Uniques UniquesConfig `yaml:"uniques"`
	// Live configures the live view's memory (see Recorder.Live).
	Live LiveConfig `yaml:"live"`
}

// LiveConfig bounds the live view: the last 15 minutes in 10-second
// buckets, per link, held in memory beside the counts waiting for a flush.
type LiveConfig struct {
	// MaxLinks caps the links followed (a link visited on several cores
	// counts once per core); 0: none, only all links together.
	MaxLinks int `yaml:"max_links"`
}

// UniquesConfig names the secret of the unique-visitor hashes.
type UniquesConfig struct {
	// SecretEnv is the environment variable holding the secret (at least
	// 16 bytes); unset or empty: no unique visitors. The secret is never
	// stored.
	SecretEnv string `yaml:"secret_env"`
}

// GeoIPConfig names the country database.
type GeoIPConfig struct {
	// Path is a MaxMind-format .mmdb file (GeoLite2-Country, or the CC0
	// geo-whois-asn-country of ip-location-db); empty: no country.
	Path string `yaml:"path"`
}

// ASNConfig names the network database.
type ASNConfig struct {
	// Path is a MaxMind-format ASN .mmdb file (GeoLite2-ASN, or an asn
	// database of ip-location-db); empty: no network signals.
	Path string `yaml:"path"`
}

// ClassesConfig configures the classes of visits (human, bot, preview,
// scanner, prefetch, internal).
type ClassesConfig struct {
	// InternalNetworks are the operator's own networks (CIDR, or an
	// address): visits from them are internal.
	InternalNetworks []string `yaml:"internal_networks"`
	// ScannerNetworks add to visitclass.DefaultScannerNetworks: "AS1234",
	// or an organization name substring.
	ScannerNetworks []string `yaml:"scanner_networks"`
	// CloudNetworks add to visitclass.DefaultCloudNetworks, likewise.
	CloudNetworks []string `yaml:"cloud_networks"`
	// BurstWindow is how long after a link's first visit from a cloud
	// network further ones are scanners (visitclass.DefaultBurstWindow);
	// 0: the default.
	BurstWindow time.Duration `yaml:"burst_window"`
}

// DimensionsConfig configures the breakdowns (see Dimensions in the
// package documentation).
type DimensionsConfig struct {
	// MaxValues caps the values counted per link, UTC day and dimension:
	// beyond it a visit's value counts as "other". 0: no breakdowns.
	MaxValues int `yaml:"max_values"`
	// RetentionDays is how long the daily breakdowns are kept.
	RetentionDays int `yaml:"retention_days"`
	// SourceParams are the query parameters that name a visit's source,
	// in order of precedence; a visit without any has its referrer as
	// source.
	SourceParams []string `yaml:"source_params"`
}

// JournalConfig configures the journal of counts not yet in the store
// (see Journal).
type JournalConfig struct {
	// Path is the journal's directory; empty: "analytics-journal" beside
	// embedded.path (DefaultJournalPath), whichever store is used.
	Path string `yaml:"path"`
	// MaxBytes caps the journal's bytes on disk; at the cap the oldest
	// counts are folded into hours, then days, then dropped (counted in
	// linkgate_analytics_dropped_visits_total).
	MaxBytes int64 `yaml:"max_bytes"`
}

// Embedded configures the on-disk store of one machine.
type Embedded struct {
	Path string `yaml:"path"`
}

// Cassandra configures the shared store.
type Cassandra struct {
	Hosts             []string `yaml:"hosts"`
	Keyspace          string   `yaml:"keyspace"`
	Consistency       string   `yaml:"consistency"`
	ReplicationFactor int      `yaml:"replication_factor"`
}

// Defaults of analytics.max_key_bytes and max_buffer_bytes. 256 bytes is
// far beyond any generated short key and within every store's key limits;
// 256 MiB holds max_keys' default million links with keys up to about 128
// bytes (a link costs its key plus about 128 bytes).
const (
	DefaultMaxKeyBytes    = 256
	DefaultMaxBufferBytes = 256 << 20
	// maxKeyBytesLimit is the longest key Cassandra accepts (CQL limits:
	// key length 2^16-1).
	maxKeyBytesLimit = 65535
)

// Defaults of analytics.dimensions: a hundred values of each dimension per
// link and day (the breakdowns of the products analysts compare with show
// a few dozen), kept 400 days, as the day tier is by default.
const (
	DefaultMaxValues        = 100
	DefaultDimRetentionDays = 400
)

// DefaultConfig returns the defaults of the analytics section.
func DefaultConfig() Config {
	return Config{
		Enabled:       true,
		Match:         route.Match{Methods: []string{"GET", "HEAD"}, Path: "/{short_key}"},
		CountStatus:   []int{301, 302, 303, 307, 308},
		FlushInterval: 10 * time.Second,
		MaxKeys:       1_000_000,
		Store:         "embedded",
		Embedded:      Embedded{Path: "./data/analytics"},
		Cassandra: Cassandra{
			Hosts: []string{"127.0.0.1:9042"}, Keyspace: "linkgate",
			Consistency: "LOCAL_QUORUM", ReplicationFactor: 1,
		},
		Retention:   rollup.DefaultTiers(),
		RollupGrace: rollup.DefaultGrace,
		Bots:        "separate",

		MaxKeyBytes:    DefaultMaxKeyBytes,
		MaxBufferBytes: DefaultMaxBufferBytes,
		Journal:        JournalConfig{MaxBytes: DefaultJournalMaxBytes},
		Uniques:        UniquesConfig{SecretEnv: "LINKGATE_UNIQUES_SECRET"},
		Live:           LiveConfig{MaxLinks: DefaultLiveLinks},
		Classes:        ClassesConfig{BurstWindow: visitclass.DefaultBurstWindow},
		Dimensions: DimensionsConfig{
			MaxValues: DefaultMaxValues, RetentionDays: DefaultDimRetentionDays,
			SourceParams: []string{"utm_source", "src"},
		},
	}
}

// Grace returns the rollup grace in force: RollupGrace, raised to 6 ×
// FlushInterval when that is longer. A flush may take up to three
// intervals to land (its write timeout), and counts flushed after half the
// grace count as late, so a shorter grace would let the worker roll a
// period before an on-time flush of it has landed.
func (c Config) Grace() time.Duration { return max(c.RollupGrace, 6*c.FlushInterval) }
