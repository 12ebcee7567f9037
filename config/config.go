// Package config loads the gateway's YAML file (see configs/gateway.example.yaml)
// into one Config. Each section's type belongs to the package that uses it
// (proxy.Config, limit.Rule, analytics.Config, ...); this package composes
// them, fills defaults, rejects unknown fields and reports every problem with
// the field's path and its line in the file.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/proxy"
)

// Config is the whole configuration file. A Config returned by Load or Parse
// is valid and is never modified afterwards: a reload builds a new one.
type Config struct {
	Server    Server                `yaml:"server"`
	Admin     Admin                 `yaml:"admin"`
	Upstream  proxy.Config          `yaml:"upstream"`
	Identity  limit.Identity        `yaml:"identity"`
	Limiter   limit.Config          `yaml:"limiter"`
	Rules     []limit.Rule          `yaml:"rules"`
	Analytics analytics.Config      `yaml:"analytics"`
	Stats     analytics.StatsConfig `yaml:"stats"`
}

// Server is the client-facing listener.
type Server struct {
	Listen            string        `yaml:"listen"`
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	ReadTimeout       time.Duration `yaml:"read_timeout"`  // whole request, body included; 0: none
	WriteTimeout      time.Duration `yaml:"write_timeout"` // whole response; 0: none
	IdleTimeout       time.Duration `yaml:"idle_timeout"`
	MaxHeaderBytes    int           `yaml:"max_header_bytes"`
	ShutdownTimeout   time.Duration `yaml:"shutdown_timeout"` // how long SIGTERM waits for in-flight requests
	TrustedProxies    []string      `yaml:"trusted_proxies"`  // CIDRs or addresses allowed to set X-Forwarded-For / X-Real-IP
	AccessLog         bool          `yaml:"access_log"`
}

// Trusted returns TrustedProxies parsed; a bare address is a /32 or /128.
func (s Server) Trusted() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(s.TrustedProxies))
	for _, p := range s.TrustedProxies {
		if pfx, err := parsePrefix(p); err == nil {
			out = append(out, pfx)
		}
	}
	return out
}

func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

// Admin is the operator's listener.
type Admin struct {
	Listen   string `yaml:"listen"`
	TokenEnv string `yaml:"token_env"` // env var holding the bearer token for /admin/*; unset: /admin/* answers 403
}

// Default returns the configuration an empty file gives.
func Default() *Config {
	return &Config{
		Server: Server{
			Listen:            "127.0.0.1:8080",
			ReadHeaderTimeout: 5 * time.Second,
			IdleTimeout:       120 * time.Second,
			MaxHeaderBytes:    64 << 10,
			ShutdownTimeout:   30 * time.Second,
			TrustedProxies:    []string{"127.0.0.1/32"},
		},
		Admin:     Admin{Listen: "127.0.0.1:9090", TokenEnv: "LINKGATE_ADMIN_TOKEN"},
		Upstream:  proxy.DefaultConfig(),
		Identity:  limit.DefaultIdentity(),
		Limiter:   limit.DefaultConfig(),
		Analytics: analytics.DefaultConfig(),
		Stats:     analytics.DefaultStatsConfig(),
	}
}

// Error is a problem with one field of a file.
type Error struct {
	File string // the file's name, "" when parsed from bytes
	Line int    // 0 when unknown
	Path string // the field, like "rules[1].limits"
	Err  error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Load reads and validates the file at path.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(data)
	var ce *Error
	if errors.As(err, &ce) {
		ce.File = path
	}
	return c, err
}

// Parse decodes and validates a file's contents. Unknown fields are errors,
// so that a typo never passes silently; omitted fields take their defaults.
func Parse(data []byte) (*Config, error) {
	var doc yaml.Node
	lines, fields := map[string]int{}, map[int][]string{}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, decodeError(err, fields)
	}
	index(&doc, "", lines, fields)
	c := Default()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && err != io.EOF {
		return nil, decodeError(err, fields)
	}
	if err := c.validate(); err != nil {
		var fe *Error
		if errors.As(err, &fe) {
			fe.Line = lineOf(lines, fe.Path, fe.Err)
		}
		return nil, err
	}
	return c, nil
}

var lineMsg = regexp.MustCompile(`^line (\d+): (.*)$`)

// fieldAt names the field of a line: the one field on it, or the field
// holding all of them (a flow mapping like {name: a, key: ip}).
func fieldAt(paths []string) string {
	if len(paths) == 0 {
		return ""
	}
	common := paths[0]
	for _, p := range paths[1:] {
		for !strings.HasPrefix(p, common) || (len(p) > len(common) && p[len(common)] != '.' && p[len(common)] != '[') {
			i := strings.LastIndexAny(common, ".[")
			if i < 0 {
				return ""
			}
			common = common[:i]
		}
	}
	return common
}

// decodeError turns an error of the yaml library into an Error. Its
// messages start with their line ("line 7: ..."): the line and the field
// there (fields, by line) become the Error's.
func decodeError(err error, fields map[int][]string) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msg = strings.Join(te.Errors, "; ")
	}
	m := lineMsg.FindStringSubmatch(msg)
	if m == nil {
		return &Error{Err: errors.New(msg)}
	}
	line, _ := strconv.Atoi(m[1])
	return &Error{Line: line, Path: fieldAt(fields[line]), Err: errors.New(m[2])}
}

func (c *Config) validate() error {
	field := func(path string, err error) error {
		if err == nil {
			return nil
		}
		return &Error{Path: path, Err: err}
	}
	if err := c.Server.validate(); err != nil {
		return field("server", err)
	}
	if c.Admin.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Admin.Listen); err != nil {
			return field("admin", fmt.Errorf("listen: %q is not host:port", c.Admin.Listen))
		}
	}
	if err := c.Upstream.Validate(); err != nil {
		return field("upstream", err)
	}
	if err := c.Identity.Validate(); err != nil {
		return field("identity", err)
	}
	if err := c.Limiter.Validate(); err != nil {
		return field("limiter", err)
	}
	seen := map[string]bool{}
	for i, r := range c.Rules {
		path := fmt.Sprintf("rules[%d]", i)
		if err := r.Validate(); err != nil {
			return field(path, err)
		}
		if seen[r.Name] {
			return field(path, fmt.Errorf("name: %q is used by an earlier rule", r.Name))
		}
		seen[r.Name] = true
	}
	if err := c.Analytics.Validate(); err != nil {
		return field("analytics", err)
	}
	return field("stats", c.Stats.Validate())
}

func (s Server) validate() error {
	if _, _, err := net.SplitHostPort(s.Listen); err != nil {
		return fmt.Errorf("listen: %q is not host:port", s.Listen)
	}
	for name, d := range map[string]time.Duration{
		"read_header_timeout": s.ReadHeaderTimeout, "read_timeout": s.ReadTimeout, "write_timeout": s.WriteTimeout,
		"idle_timeout": s.IdleTimeout, "shutdown_timeout": s.ShutdownTimeout,
	} {
		if d < 0 {
			return fmt.Errorf("%s: %v is negative", name, d)
		}
	}
	if s.MaxHeaderBytes <= 0 {
		return fmt.Errorf("max_header_bytes: must be positive")
	}
	for i, p := range s.TrustedProxies {
		if _, err := parsePrefix(p); err != nil {
			return fmt.Errorf("trusted_proxies[%d]: %q is not an address or CIDR", i, p)
		}
	}
	return nil
}

// index records the line of every field path in the document, and the
// fields (keys and list items) on each line.
func index(n *yaml.Node, path string, lines map[string]int, fields map[int][]string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			index(c, path, lines, fields)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			lines[p] = n.Content[i].Line
			fields[n.Content[i].Line] = append(fields[n.Content[i].Line], p)
			index(n.Content[i+1], p, lines, fields)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			lines[p] = c.Line
			if c.Kind == yaml.ScalarNode {
				fields[c.Line] = append(fields[c.Line], p)
			}
			index(c, p, lines, fields)
		}
	}
}

// lineOf finds the line of the deepest field named by path and the leading
// field names of err's message ("memcached.timeout: must be positive").
func lineOf(lines map[string]int, path string, err error) int {
	best := lines[path]
	msg := err.Error()
	for {
		name, rest, ok := strings.Cut(msg, ": ")
		if !ok || strings.ContainsAny(name, " \"") {
			return best
		}
		for _, part := range strings.Split(name, ".") {
			if i := strings.IndexByte(part, '['); i > 0 {
				path += "." + part[:i] + part[i:]
			} else {
				path += "." + part
			}
		}
		l, ok := lines[path]
		if !ok {
			return best
		}
		best, msg = l, rest
	}
}
