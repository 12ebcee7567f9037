package proxy

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/linkgate/linkgate/forwarded"
)

// Config is the "upstream" section: the web servers requests go to.
type Config struct {
	Targets               []string      `yaml:"targets"` // balanced round-robin; required
	DialTimeout           time.Duration `yaml:"dial_timeout"`
	ResponseHeaderTimeout time.Duration `yaml:"response_header_timeout"`
	HealthCheck           HealthCheck   `yaml:"health_check"`
	// MaxIdleConnsPerHost is how many idle keep-alive connections the proxy
	// keeps to each target. Go's default of 2 makes a loaded proxy open a new
	// upstream connection for almost every request; it should be at least the
	// number of concurrent clients.
	MaxIdleConnsPerHost int `yaml:"max_idle_conns_per_host"`
}

// HealthCheck is the active check that takes targets out and puts them back.
type HealthCheck struct {
	Path     string        `yaml:"path"`
	Interval time.Duration `yaml:"interval"`
}

// DefaultConfig returns the defaults of the upstream section. It names no
// target: a config without upstream.targets is an error, never a gateway
// silently pointed at a default address.
func DefaultConfig() Config {
	return Config{
		DialTimeout:           2 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
		HealthCheck:           HealthCheck{Path: "/healthz", Interval: 5 * time.Second},
		MaxIdleConnsPerHost:   1024,
	}
}

// Plan is a compiled upstream section: validated and immutable. Build one
// with Compile; New turns it into a running Proxy and cannot refuse it.
type Plan struct {
	cfg     Config
	targets []*url.URL // scheme and host of each target, in config order
	trust   *forwarded.Trust
	headers forwarded.Policy
}

// Compile checks cfg and returns its Plan. trust says whose forwarding
// headers are believed (server.trusted_proxies) and headers which of the
// client's headers reach the upstream (identity.user_header only from a
// trusted proxy, server.underscores_in_headers). Errors start with the
// field's path in the config file: `upstream.targets[1]: "ftp://x" is
// not ...`.
func Compile(cfg Config, trust *forwarded.Trust, headers forwarded.Policy) (*Plan, error) {
	p := &Plan{cfg: cfg, trust: trust, headers: headers}
	p.cfg.Targets = slices.Clone(cfg.Targets)
	if len(cfg.Targets) == 0 {
		return nil, fmt.Errorf("upstream.targets: none given; list the web servers to proxy to, like [http://127.0.0.1:8081]")
	}
	for i, t := range cfg.Targets {
		u, err := url.Parse(t)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || !validPort(u) {
			return nil, fmt.Errorf("upstream.targets[%d]: %q is not an http(s)://host:port URL", i, t)
		}
		// The path is forwarded as the client sent it, so a target is only
		// scheme://host[:port]; a base path or query would be silently ignored.
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Opaque != "" {
			return nil, fmt.Errorf("upstream.targets[%d]: %q must be scheme://host[:port] without path, query or user", i, t)
		}
		p.targets = append(p.targets, &url.URL{Scheme: u.Scheme, Host: u.Host})
	}
	switch {
	case cfg.DialTimeout <= 0:
		return nil, fmt.Errorf("upstream.dial_timeout: must be positive")
	case cfg.ResponseHeaderTimeout <= 0:
		return nil, fmt.Errorf("upstream.response_header_timeout: must be positive")
	case cfg.HealthCheck.Interval <= 0:
		return nil, fmt.Errorf("upstream.health_check.interval: must be positive")
	case cfg.HealthCheck.Path == "" || cfg.HealthCheck.Path[0] != '/':
		return nil, fmt.Errorf("upstream.health_check.path: %q must start with /", cfg.HealthCheck.Path)
	case cfg.MaxIdleConnsPerHost <= 0:
		return nil, fmt.Errorf("upstream.max_idle_conns_per_host: must be positive")
	}
	if _, err := url.Parse("http://x" + cfg.HealthCheck.Path); err != nil {
		return nil, fmt.Errorf("upstream.health_check.path: %q is not a URL path", cfg.HealthCheck.Path)
	}
	return p, nil
}

// validPort reports whether u has no port or a port from 1 to 65535.
func validPort(u *url.URL) bool {
	if strings.HasSuffix(u.Host, ":") {
		return false
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		return err == nil && n >= 1 && n <= 65535
	}
	return true
}

// Equal reports whether p and q build the same Proxy: a reload that leaves
// them equal keeps the running Proxy, its connections and its targets'
// health.
func (p *Plan) Equal(q *Plan) bool {
	a, b := p.cfg, q.cfg
	return slices.Equal(a.Targets, b.Targets) && a.DialTimeout == b.DialTimeout &&
		a.ResponseHeaderTimeout == b.ResponseHeaderTimeout && a.HealthCheck == b.HealthCheck &&
		a.MaxIdleConnsPerHost == b.MaxIdleConnsPerHost &&
		p.trust.Equal(q.trust) && p.headers.Equal(q.headers)
}
