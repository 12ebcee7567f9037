package analytics

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/linkgate/linkgate/bound"
	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/route"
	"github.com/linkgate/linkgate/visitclass"
	"github.com/linkgate/linkgate/visitor"
)

// Plan is the compiled analytics section: every check done, the route and
// the bot policy parsed. It is immutable. The parts that the gateway reads
// at start only (store, retention, flush_interval) and those a reload
// changes (match, count_status, bots, max_keys) are both in it; RestartOnly
// says which is which. Build one with Compile.
type Plan struct {
	cfg   Config
	match *route.Matcher
	count [600]bool // count[s]: status s is a visit
	bots  BotPolicy
	// rollup is the batch periods and tiers the flusher, the readers, the
	// stores and the rollup worker share: the one plan built.
	rollup *rollup.Plan
	// visit reads a visit's features; nil when dimensions are off.
	visit *visitor.Reader
	// uniques hashes visitors; nil when no secret is set.
	uniques *visitor.Uniques
	trust   *forwarded.Trust
	// classes decides each visit's class (human, bot, preview, …).
	classes *visitclass.Classifier
}

// Env is what CompileEnv needs beside the section: the gateway's decision
// of who the client is (server.trusted_proxies), which the country of a
// visit is looked up for.
type Env struct {
	// Trust decides the client address. Nil: the connection's peer.
	Trust *forwarded.Trust
	// Getenv reads the environment variable analytics.uniques.secret_env
	// names. Nil: no variable is set.
	Getenv func(string) string
}

// minSecretBytes is the shortest uniques secret: 128 bits.
const minSecretBytes = 16

// Limits of analytics.dimensions.
const (
	maxMaxValues        = 10_000
	maxDimRetentionDays = 20 * 365 // Cassandra's longest TTL
)

// bounds are the ranges of the section's numbers, checked first.
var bounds = bound.Section[Config]{
	bound.At("flush_interval", bound.Durations(100*time.Millisecond, time.Hour), func(c Config) time.Duration { return c.FlushInterval }),
	bound.At("max_keys", bound.Counts(1, 100_000_000), func(c Config) int { return c.MaxKeys }),
	bound.At("max_key_bytes", bound.Sizes(1, maxKeyBytesLimit), func(c Config) int { return c.MaxKeyBytes }),
	bound.At("max_buffer_bytes", bound.Sizes(1<<20, 64<<30), func(c Config) int64 { return c.MaxBufferBytes }),
	bound.At("journal.max_bytes", bound.Sizes(minJournalBytes, 1<<40), func(c Config) int64 { return c.Journal.MaxBytes }),
	bound.At("live.max_links", bound.Counts(1, MaxLiveLinks).OrZero("all links only"), func(c Config) int { return c.Live.MaxLinks }),
	bound.At("dimensions.max_values", bound.Counts(1, maxMaxValues).OrZero("no breakdowns"), func(c Config) int { return c.Dimensions.MaxValues }),
	bound.At("dimensions.retention_days", bound.Counts(1, maxDimRetentionDays), func(c Config) int { return c.Dimensions.RetentionDays }),
	bound.At("classes.burst_window", bound.Durations(time.Second, time.Hour).OrZero("the default, 2m"), func(c Config) time.Duration { return c.Classes.BurstWindow }),
	bound.At("rollup_grace", bound.Durations(time.Second, 24*time.Hour), func(c Config) time.Duration { return c.RollupGrace }),
}

// Bounds lists the ranges of the section's numbers, as Compile checks
// them.
func Bounds() []bound.Named { return bounds.Ranges("analytics") }

// Config returns the section the plan was compiled from. Do not modify
// its slices.
func (p *Plan) Config() Config { return p.cfg }

// Rollup returns the rollup plan of the retention tiers.
func (p *Plan) Rollup() *rollup.Plan { return p.rollup }

var (
	consistencies = []string{"ANY", "ONE", "TWO", "THREE", "QUORUM", "ALL", "LOCAL_QUORUM", "EACH_QUORUM", "LOCAL_ONE"}
	// keyspaceName is what Cassandra accepts unquoted; the store writes it
	// into its CQL, so nothing else may pass.
	keyspaceName = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_]{0,47}$`)
)

// cassandraMaxTTL is the longest TTL Cassandra accepts (630,720,000 s).
const cassandraMaxTTL = 20 * rollup.Year

// Compile checks the analytics section and returns its Plan. It is pure:
// it opens no store. Errors start with the field's path in the config file
// (`analytics.retention: ...`). A disabled section is still checked, so
// that enabling it later cannot surprise.
func Compile(cfg Config) (*Plan, error) { return CompileEnv(cfg, Env{}) }

// CompileEnv is Compile with what the rest of the config decides: the
// gateway's compile step calls it. It reads the country database
// (analytics.geoip.path) whole, so that a file it accepts is one the
// gateway can use.
func CompileEnv(cfg Config, env Env) (*Plan, error) {
	if err := bounds.Check("analytics", cfg); err != nil {
		return nil, err
	}
	p := &Plan{cfg: cfg}
	p.cfg.Retention = slices.Clone(cfg.Retention)
	mt, err := cfg.Match.Compile()
	if err != nil {
		return nil, fmt.Errorf("analytics.match: %w", err)
	}
	if !strings.Contains(cfg.Match.Path, "{short_key") {
		return nil, fmt.Errorf("analytics.match: path %q has no {short_key} parameter", cfg.Match.Path)
	}
	p.match = mt
	for i, s := range cfg.CountStatus {
		if s < 100 || s >= len(p.count) {
			return nil, fmt.Errorf("analytics.count_status[%d]: %d is not an HTTP status", i, s)
		}
		p.count[s] = true
	}
	if p.bots, err = ParseBotPolicy(cfg.Bots); err != nil {
		return nil, fmt.Errorf("analytics.bots: %q is not separate, count or ignore", cfg.Bots)
	}
	switch {
	case cfg.Journal.Path != "" && strings.TrimSpace(cfg.Journal.Path) == "":
		return nil, fmt.Errorf("analytics.journal.path: blank")
	case cfg.Store == "embedded" && cfg.Journal.Path != "" && filepath.Clean(cfg.Journal.Path) == filepath.Clean(cfg.Embedded.Path):
		return nil, fmt.Errorf("analytics.journal.path: %q is the embedded store's directory", cfg.Journal.Path)
	case cfg.Store != "embedded" && cfg.Store != "cassandra":
		return nil, fmt.Errorf("analytics.store: %q is not embedded or cassandra", cfg.Store)
	case cfg.Store == "embedded" && strings.TrimSpace(cfg.Embedded.Path) == "":
		return nil, fmt.Errorf("analytics.embedded.path: missing")
	}
	if cfg.Store == "cassandra" {
		c := cfg.Cassandra
		switch {
		case len(c.Hosts) == 0:
			return nil, fmt.Errorf("analytics.cassandra.hosts: none given")
		case !keyspaceName.MatchString(c.Keyspace):
			return nil, fmt.Errorf("analytics.cassandra.keyspace: %q: want a letter then up to 47 letters, digits or underscores", c.Keyspace)
		case c.ReplicationFactor < 1:
			return nil, fmt.Errorf("analytics.cassandra.replication_factor: must be at least 1")
		case !slices.Contains(consistencies, c.Consistency):
			return nil, fmt.Errorf("analytics.cassandra.consistency: %q is not one of %s", c.Consistency, strings.Join(consistencies, ", "))
		}
		for i, h := range c.Hosts {
			if strings.TrimSpace(h) == "" {
				return nil, fmt.Errorf("analytics.cassandra.hosts[%d]: empty", i)
			}
		}
		for i, t := range cfg.Retention {
			// Rows carry the tier's retention as their TTL, and Cassandra
			// refuses a TTL over 20 years: such a tier would fail every write.
			if t.Retention > cassandraMaxTTL {
				return nil, fmt.Errorf("analytics.retention[%d]: %v: Cassandra keeps a row at most 20y (its largest TTL)", i, t)
			}
		}
	}
	if err := p.compileClasses(); err != nil {
		return nil, err
	}
	if err := p.compileDims(env); err != nil {
		return nil, err
	}
	if err := rollup.ValidateTiers(cfg.Retention); err != nil {
		return nil, fmt.Errorf("analytics.retention: %w", err)
	}
	if p.rollup, err = rollup.NewPlan(cfg.Retention, cfg.Grace()); err != nil {
		return nil, fmt.Errorf("analytics.retention: with rollup_grace %v: %w", cfg.Grace(), err)
	}
	return p, nil
}

// compileDims checks analytics.dimensions and analytics.geoip and builds
// the visit reader.
func (p *Plan) compileDims(env Env) error {
	d := p.cfg.Dimensions
	for i, name := range d.SourceParams {
		if name == "" || strings.ContainsAny(name, "&=;#? ") {
			return fmt.Errorf("analytics.dimensions.source_params[%d]: %q is not a query parameter name", i, name)
		}
	}
	var geo *visitor.GeoIP
	if path := p.cfg.GeoIP.Path; path != "" {
		var err error
		if geo, err = visitor.OpenGeoIP(path); err != nil {
			return fmt.Errorf("analytics.geoip.path: %w", err)
		}
	}
	if d.MaxValues > 0 {
		p.visit = visitor.New(visitor.Options{Trust: env.Trust, GeoIP: geo, SourceParams: slices.Clone(d.SourceParams)})
	}
	p.trust = env.Trust
	if name := p.cfg.Uniques.SecretEnv; name != "" && env.Getenv != nil {
		if secret := strings.TrimSpace(env.Getenv(name)); secret != "" {
			if len(secret) < minSecretBytes {
				return fmt.Errorf("analytics.uniques.secret_env: the secret in %s has %d bytes; give at least %d (openssl rand -hex 32)", name, len(secret), minSecretBytes)
			}
			p.uniques = visitor.NewUniques([]byte(secret))
		}
	}
	return nil
}

// compileClasses checks analytics.asn and analytics.classes and builds the
// classifier. It reads the ASN database whole, so that a file it accepts
// is one the gateway can use.
func (p *Plan) compileClasses() error {
	c := p.cfg.Classes
	o := visitclass.Options{BurstWindow: c.BurstWindow}
	for i, s := range c.InternalNetworks {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			a, aerr := netip.ParseAddr(s)
			if aerr != nil {
				return fmt.Errorf("analytics.classes.internal_networks[%d]: %q is not a network (CIDR) or an address", i, s)
			}
			pfx = netip.PrefixFrom(a, a.BitLen())
		}
		o.Internal = append(o.Internal, pfx.Masked())
	}
	if path := p.cfg.ASN.Path; path != "" {
		nets, err := visitclass.OpenNetworks(path,
			append(slices.Clone(visitclass.DefaultScannerNetworks), c.ScannerNetworks...),
			append(slices.Clone(visitclass.DefaultCloudNetworks), c.CloudNetworks...))
		if err != nil {
			return fmt.Errorf("analytics.asn.path: %w", err)
		}
		o.Networks = nets
	} else if len(c.ScannerNetworks)+len(c.CloudNetworks) > 0 {
		return fmt.Errorf("analytics.classes: scanner_networks and cloud_networks need an ASN database (analytics.asn.path)")
	}
	p.classes = visitclass.New(o)
	return nil
}

// Uniques reports whether unique visitors are counted: a secret is set.
func (p *Plan) Uniques() bool { return p.uniques != nil }

// DimRetention returns how long breakdowns are kept after their day.
func (p *Plan) DimRetention() time.Duration {
	return time.Duration(p.cfg.Dimensions.RetentionDays) * rollup.Day
}
