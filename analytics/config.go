package analytics

import (
	"fmt"
	"slices"
	"strings"
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
	// RollupGrace is how long after a batch period ends the rollup worker
	// waits before it rolls the period into the next tier: the time a
	// flush of the period's last visits may take to land, plus the clock
	// difference between gateways. Counts flushed more than half of it
	// after their period ended are late: their coarse buckets are marked
	// and rolled again. Grace returns the value in force.
	RollupGrace time.Duration `yaml:"rollup_grace"`
	Bots        string        `yaml:"bots"` // separate | count | ignore
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
		Retention:   rollup.DefaultTiers(),
		RollupGrace: rollup.DefaultGrace,
		Bots:        "separate",
	}
}

var consistencies = []string{"ANY", "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE"}

// Validate checks the section.
func (c Config) Validate() error {
	if _, err := c.Match.Compile(); err != nil {
		return fmt.Errorf("match: %w", err)
	}
	if !strings.Contains(c.Match.Path, "{short_key") {
		return fmt.Errorf("match: path %q has no {short_key} parameter", c.Match.Path)
	}
	for _, s := range c.CountStatus {
		if s < 100 || s > 599 {
			return fmt.Errorf("count_status: %d is not an HTTP status", s)
		}
	}
	switch {
	case c.FlushInterval < 100*time.Millisecond:
		return fmt.Errorf("flush_interval: %v is shorter than 100ms", c.FlushInterval)
	case c.MaxKeys <= 0:
		return fmt.Errorf("max_keys: must be positive")
	case c.Store != "embedded" && c.Store != "cassandra":
		return fmt.Errorf("store: %q is not embedded or cassandra", c.Store)
	case c.Store == "embedded" && c.Embedded.Path == "":
		return fmt.Errorf("embedded.path: missing")
	case c.Store == "cassandra" && len(c.Cassandra.Hosts) == 0:
		return fmt.Errorf("cassandra.hosts: none given")
	case c.Store == "cassandra" && c.Cassandra.Keyspace == "":
		return fmt.Errorf("cassandra.keyspace: missing")
	case c.Cassandra.ReplicationFactor < 1:
		return fmt.Errorf("cassandra.replication_factor: must be at least 1")
	case c.Bots != "separate" && c.Bots != "count" && c.Bots != "ignore":
		return fmt.Errorf("bots: %q is not separate, count or ignore", c.Bots)
	}
	if !slices.Contains(consistencies, c.Cassandra.Consistency) {
		return fmt.Errorf("cassandra.consistency: %q is not one of %s", c.Cassandra.Consistency, strings.Join(consistencies, ", "))
	}
	if err := rollup.ValidateTiers(c.Retention); err != nil {
		return fmt.Errorf("retention: %w", err)
	}
	if c.RollupGrace <= 0 {
		return fmt.Errorf("rollup_grace: %v is not positive", c.RollupGrace)
	}
	if _, err := rollup.NewPlan(c.Retention, c.Grace()); err != nil {
		return fmt.Errorf("retention (with rollup_grace %v): %w", c.Grace(), err)
	}
	return nil
}

// Grace returns the rollup grace in force: RollupGrace, raised to 6 ×
// FlushInterval when that is longer. A flush may take up to three
// intervals to land (its write timeout), and counts flushed after half the
// grace count as late, so a shorter grace would let the worker roll a
// period before an on-time flush of it has landed.
func (c Config) Grace() time.Duration { return max(c.RollupGrace, 6*c.FlushInterval) }

// StatsConfig is the "stats" section: where the gateway serves /stats.
type StatsConfig struct {
	Prefix   string `yaml:"prefix"`    // served by the gateway, never proxied
	TokenEnv string `yaml:"token_env"` // env var with a bearer token for the stats API; empty: open
}

// DefaultStatsConfig returns the defaults of the stats section.
func DefaultStatsConfig() StatsConfig { return StatsConfig{Prefix: "/stats"} }

// Validate checks the section.
func (c StatsConfig) Validate() error {
	if !strings.HasPrefix(c.Prefix, "/") || len(c.Prefix) < 2 || strings.HasSuffix(c.Prefix, "/") || strings.ContainsAny(c.Prefix, "{}*") {
		return fmt.Errorf("prefix: %q must be a literal path like /stats", c.Prefix)
	}
	return nil
}
