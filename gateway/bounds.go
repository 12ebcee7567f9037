package gateway

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/proxy"
	"github.com/linkgate/linkgate/stats"
)

// bound is the range Compile accepts for one duration or size of the file:
// min to max, both included, and 0 too when zero says what it means. The
// ranges are what a gateway can run with: a health check every
// nanosecond (16,000 checks a second per target), a two-terabyte header
// limit or a timeout of one nanosecond are typos, refused with the range
// rather than run. The components' own checks (limit, proxy, analytics)
// stay as their constructors' guards and are never looser than these.
type bound struct {
	field    string // the path in the file
	min, max int64  // nanoseconds for a duration
	zero     string // what 0 means when it is allowed ("none"); "": refused
	bytes    bool   // a size in bytes (else a duration or a count)
	count    bool   // a count of things, neither a duration nor bytes
	get      func(*config.Config) int64
	// list, for a field of each item of a list (field "routes[].…"),
	// returns its value in every item; get is then nil.
	list func(*config.Config) []int64
}

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
	tib = 1 << 40
)

func dur(d time.Duration) int64 { return int64(d) }

// eachRoute returns the value get reads from the pool of every route.
func eachRoute(get func(proxy.Config) int64) func(*config.Config) []int64 {
	return func(c *config.Config) []int64 {
		out := make([]int64, len(c.Routes))
		for i, r := range c.Routes {
			out[i] = get(r.Upstream)
		}
		return out
	}
}

// eachRule returns the value get reads from the penalty of every rule.
func eachRule(get func(limit.Penalty) int64) func(*config.Config) []int64 {
	return func(c *config.Config) []int64 {
		out := make([]int64, len(c.Rules))
		for i, r := range c.Rules {
			out[i] = get(r.Penalty)
		}
		return out
	}
}

// bounds lists every duration and size of the file (a test walks
// config.Config to keep it complete); the README's configuration table
// gives each range.
var bounds = []bound{
	{field: "server.read_header_timeout", min: dur(100 * time.Millisecond), max: dur(10 * time.Minute),
		get: func(c *config.Config) int64 { return dur(c.Server.ReadHeaderTimeout) }},
	{field: "server.read_timeout", min: dur(100 * time.Millisecond), max: dur(24 * time.Hour), zero: "none",
		get: func(c *config.Config) int64 { return dur(c.Server.ReadTimeout) }},
	{field: "server.body_timeout", min: dur(100 * time.Millisecond), max: dur(time.Hour), zero: "none",
		get: func(c *config.Config) int64 { return dur(c.Server.BodyTimeout) }},
	{field: "server.write_timeout", min: dur(100 * time.Millisecond), max: dur(24 * time.Hour), zero: "none",
		get: func(c *config.Config) int64 { return dur(c.Server.WriteTimeout) }},
	{field: "server.idle_timeout", min: dur(100 * time.Millisecond), max: dur(24 * time.Hour), zero: "none",
		get: func(c *config.Config) int64 { return dur(c.Server.IdleTimeout) }},
	{field: "server.max_header_bytes", min: kib, max: mib, bytes: true,
		get: func(c *config.Config) int64 { return int64(c.Server.MaxHeaderBytes) }},
	{field: "server.shutdown_timeout", min: 0, max: dur(time.Hour),
		get: func(c *config.Config) int64 { return dur(c.Server.ShutdownTimeout) }},
	{field: "server.max_concurrent_streams", min: 1, max: 10_000, count: true,
		get: func(c *config.Config) int64 { return int64(c.Server.MaxConcurrentStreams) }},
	{field: "server.tls.handshake_timeout", min: dur(time.Second), max: dur(5 * time.Minute),
		get: func(c *config.Config) int64 { return dur(c.Server.TLS.HandshakeTimeout) }},
	{field: "server.tls.on_demand.ask_timeout", min: dur(100 * time.Millisecond), max: dur(time.Minute),
		get: func(c *config.Config) int64 { return dur(c.Server.TLS.OnDemand.AskTimeout) }},
	{field: "server.tls.on_demand.allow_ttl", min: dur(time.Second), max: dur(30 * 24 * time.Hour),
		get: func(c *config.Config) int64 { return dur(c.Server.TLS.OnDemand.AllowTTL) }},
	{field: "server.tls.on_demand.deny_ttl", min: dur(time.Second), max: dur(7 * 24 * time.Hour),
		get: func(c *config.Config) int64 { return dur(c.Server.TLS.OnDemand.DenyTTL) }},
	{field: "server.tls.storage.cassandra.timeout", min: dur(100 * time.Millisecond), max: dur(time.Minute),
		get: func(c *config.Config) int64 { return dur(c.Server.TLS.Storage.Cassandra.Timeout) }},
	{field: "server.tls.storage.cassandra.lock_ttl", min: dur(10 * time.Second), max: dur(time.Hour),
		get: func(c *config.Config) int64 { return dur(c.Server.TLS.Storage.Cassandra.LockTTL) }},
	{field: "upstream.dial_timeout", min: dur(10 * time.Millisecond), max: dur(time.Minute),
		get: func(c *config.Config) int64 { return dur(c.Upstream.DialTimeout) }},
	{field: "upstream.response_header_timeout", min: dur(100 * time.Millisecond), max: dur(time.Hour),
		get: func(c *config.Config) int64 { return dur(c.Upstream.ResponseHeaderTimeout) }},
	{field: "upstream.health_check.interval", min: dur(100 * time.Millisecond), max: dur(time.Hour),
		get: func(c *config.Config) int64 { return dur(c.Upstream.HealthCheck.Interval) }},
	{field: "upstream.max_idle_conns_per_host", min: 1, max: 65536, count: true,
		get: func(c *config.Config) int64 { return int64(c.Upstream.MaxIdleConnsPerHost) }},
	{field: "routes[].upstream.dial_timeout", min: dur(10 * time.Millisecond), max: dur(time.Minute),
		list: eachRoute(func(u proxy.Config) int64 { return dur(u.DialTimeout) })},
	{field: "routes[].upstream.response_header_timeout", min: dur(100 * time.Millisecond), max: dur(time.Hour),
		list: eachRoute(func(u proxy.Config) int64 { return dur(u.ResponseHeaderTimeout) })},
	{field: "routes[].upstream.health_check.interval", min: dur(100 * time.Millisecond), max: dur(time.Hour),
		list: eachRoute(func(u proxy.Config) int64 { return dur(u.HealthCheck.Interval) })},
	{field: "routes[].upstream.max_idle_conns_per_host", min: 1, max: 65536, count: true,
		list: eachRoute(func(u proxy.Config) int64 { return int64(u.MaxIdleConnsPerHost) })},
	{field: "identity.max_body_bytes", min: 1, max: 16 * mib, bytes: true,
		get: func(c *config.Config) int64 { return c.Identity.MaxBodyBytes }},
	{field: "limiter.memcached.timeout", min: dur(time.Millisecond), max: dur(10 * time.Second),
		get: func(c *config.Config) int64 { return dur(c.Limiter.Memcached.Timeout) }},
	{field: "limiter.memcached.max_idle_conns", min: 1, max: limit.MaxIdleConnsLimit, count: true,
		get: func(c *config.Config) int64 { return int64(c.Limiter.Memcached.MaxIdleConns) }},
	{field: "rules[].penalty.duration", min: dur(time.Second), max: dur(limit.DefaultPenaltyMax), zero: "no penalty",
		list: eachRule(func(p limit.Penalty) int64 { return dur(p.Duration) })},
	{field: "rules[].penalty.max", min: dur(time.Second), max: dur(limit.DefaultPenaltyMax), zero: "168h",
		list: eachRule(func(p limit.Penalty) int64 { return dur(p.Max) })},
	{field: "rules[].penalty.forget_after", min: dur(time.Second), max: dur(limit.MaxForgetAfter), zero: "24h",
		list: eachRule(func(p limit.Penalty) int64 { return dur(p.ForgetAfter) })},
	{field: "analytics.flush_interval", min: dur(100 * time.Millisecond), max: dur(time.Hour),
		get: func(c *config.Config) int64 { return dur(c.Analytics.FlushInterval) }},
	{field: "analytics.max_keys", min: 1, max: 100_000_000, count: true,
		get: func(c *config.Config) int64 { return int64(c.Analytics.MaxKeys) }},
	{field: "analytics.max_key_bytes", min: 1, max: 65535, bytes: true,
		get: func(c *config.Config) int64 { return int64(c.Analytics.MaxKeyBytes) }},
	{field: "analytics.max_buffer_bytes", min: mib, max: 64 * gib, bytes: true,
		get: func(c *config.Config) int64 { return c.Analytics.MaxBufferBytes }},
	{field: "analytics.journal.max_bytes", min: mib, max: tib, bytes: true,
		get: func(c *config.Config) int64 { return c.Analytics.Journal.MaxBytes }},
	{field: "stats.read_timeout", min: dur(10 * time.Millisecond), max: dur(time.Minute),
		get: func(c *config.Config) int64 { return dur(c.Stats.ReadTimeout) }},
	{field: "analytics.live.max_links", min: 1, max: analytics.MaxLiveLinks, count: true, zero: "all links only",
		get: func(c *config.Config) int64 { return int64(c.Analytics.Live.MaxLinks) }},
	{field: "stats.live.max_streams", min: 1, max: stats.MaxStreamsLimit, count: true, zero: "no live stream",
		get: func(c *config.Config) int64 { return int64(c.Stats.Live.MaxStreams) }},
	{field: "stats.share.max_ttl", min: dur(time.Minute), max: dur(10 * 365 * 24 * time.Hour),
		get: func(c *config.Config) int64 { return dur(c.Stats.Share.MaxTTL) }},
	{field: "analytics.dimensions.max_values", min: 1, max: 10_000, count: true, zero: "no breakdowns",
		get: func(c *config.Config) int64 { return int64(c.Analytics.Dimensions.MaxValues) }},
	{field: "analytics.dimensions.retention_days", min: 1, max: 7300, count: true,
		get: func(c *config.Config) int64 { return int64(c.Analytics.Dimensions.RetentionDays) }},
	{field: "analytics.rollup_grace", min: dur(time.Second), max: dur(24 * time.Hour),
		get: func(c *config.Config) int64 { return dur(c.Analytics.RollupGrace) }},
}

// checkBounds returns an error naming the first field of c outside its
// bound, with the range it can take.
func checkBounds(c *config.Config) error {
	for _, b := range bounds {
		if b.list == nil {
			if err := b.check(b.field, b.get(c)); err != nil {
				return err
			}
			continue
		}
		for i, v := range b.list(c) {
			if err := b.check(strings.Replace(b.field, "[]", "["+strconv.Itoa(i)+"]", 1), v); err != nil {
				return err
			}
		}
	}
	return nil
}

// check returns an error naming field when v is outside b.
func (b bound) check(field string, v int64) error {
	if v == 0 && b.zero != "" || v >= b.min && v <= b.max {
		return nil
	}
	rel, limit := "less", b.min
	if v > b.max {
		rel, limit = "more", b.max
	}
	return fmt.Errorf("%s: %s is %s than %s; it can be %s", field, b.format(v), rel, b.format(limit), b.describe())
}

// format writes v as the file would: a Go duration, or a number.
func (b bound) format(v int64) string {
	if b.bytes || b.count {
		return strconv.FormatInt(v, 10)
	}
	return formatDuration(time.Duration(v))
}

// describe says the range in words: "100ms to 24h, or 0s for none",
// "1024 to 1048576 (1 KiB to 1 MiB)".
func (b bound) describe() string {
	s := b.format(b.min) + " to " + b.format(b.max)
	switch mn, mx := sizeName(b, b.min), sizeName(b, b.max); {
	case mn != "" && mx != "":
		s += " (" + mn + " to " + mx + ")"
	case mx != "":
		s += " (at most " + mx + ")"
	}
	if b.zero != "" {
		s += ", or " + b.format(0) + " for " + b.zero
	}
	return s
}

// sizeName is "1 MiB" for a size that is a round binary unit, else "".
func sizeName(b bound, v int64) string {
	if !b.bytes {
		return ""
	}
	for _, u := range []struct {
		n    int64
		name string
	}{{tib, "TiB"}, {gib, "GiB"}, {mib, "MiB"}, {kib, "KiB"}} {
		if v >= u.n && v%u.n == 0 {
			return fmt.Sprintf("%d %s", v/u.n, u.name)
		}
	}
	return ""
}

// formatDuration writes d in the largest unit that divides it: "100ms",
// "10m", "24h" (where time.Duration.String writes "24h0m0s").
func formatDuration(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}, {time.Millisecond, "ms"}, {time.Microsecond, "µs"}} {
		if d != 0 && d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.name
		}
	}
	if d == 0 {
		return "0s"
	}
	return d.String()
}
