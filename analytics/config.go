package analytics

import (
	"time"

	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/route"
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
	Bots          string        `yaml:"bots"` // separate | count | ignore
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
		Retention: rollup.DefaultTiers(),
		Bots:      "separate",
	}
}

// StatsConfig is the "stats" section: where the gateway serves /stats.
type StatsConfig struct {
	Prefix   string `yaml:"prefix"`    // served by the gateway, never proxied
	TokenEnv string `yaml:"token_env"` // env var with a bearer token for the stats API; empty: open
}

// DefaultStatsConfig returns the defaults of the stats section.
func DefaultStatsConfig() StatsConfig { return StatsConfig{Prefix: "/stats"} }
