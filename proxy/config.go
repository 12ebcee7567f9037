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
	}
	return nil
}
