package proxy

import (
	"fmt"
	"net/url"
	"time"
)

// Config is the "upstream" section: the web servers requests go to.
type Config struct {
	Targets               []string      `yaml:"targets"` // balanced round-robin
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

// DefaultConfig returns the defaults of the upstream section.
func DefaultConfig() Config {
	return Config{
		Targets:               []string{"http://127.0.0.1:8081"},
		DialTimeout:           2 * time.Second,
		ResponseHeaderTimeout: 10 * time.Second,
		HealthCheck:           HealthCheck{Path: "/healthz", Interval: 5 * time.Second},
		MaxIdleConnsPerHost:   1024,
	}
}

// Validate checks the section.
func (c Config) Validate() error {
	if len(c.Targets) == 0 {
		return fmt.Errorf("targets: none given")
	}
	for i, t := range c.Targets {
		u, err := url.Parse(t)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("targets[%d]: %q is not an http(s)://host:port URL", i, t)
		}
		// The path is forwarded as the client sent it, so a target is only
		// scheme://host[:port]; a base path or query would be silently ignored.
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return fmt.Errorf("targets[%d]: %q must be scheme://host[:port] without path, query or user", i, t)
		}
	}
	switch {
	case c.DialTimeout <= 0:
		return fmt.Errorf("dial_timeout: must be positive")
	case c.ResponseHeaderTimeout <= 0:
		return fmt.Errorf("response_header_timeout: must be positive")
	case c.HealthCheck.Interval <= 0:
		return fmt.Errorf("health_check.interval: must be positive")
	case c.HealthCheck.Path == "" || c.HealthCheck.Path[0] != '/':
		return fmt.Errorf("health_check.path: %q must start with /", c.HealthCheck.Path)
	case c.MaxIdleConnsPerHost <= 0:
		return fmt.Errorf("max_idle_conns_per_host: must be positive")
	}
	return nil
}
