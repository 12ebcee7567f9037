package proxy

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/linkgate/linkgate/bound"
	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/route"
)

// Config is the "upstream" section: the web servers requests go to, a
// pool. The gateway's routes give other hosts pools of their own, each a
// Config (routes[].upstream).
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
	// MaxConnsPerHost is how many connections the proxy may have open to
	// each target, idle and in use: a request that finds them all in use
	// waits up to DialTimeout for one, then is answered 503 with
	// Retry-After. It bounds what a burst (of streams a client resets
	// above all) can cost a target.
	MaxConnsPerHost int `yaml:"max_conns_per_host"`
	// TLS is how the pool's https:// targets are spoken to.
	TLS TLS `yaml:"tls"`
}

// TLS is how the proxy speaks TLS to the https:// targets of a pool. The
// zero value verifies each target's certificate against the system's
// roots for the target's own host, and presents no client certificate.
// A target's certificate is always verified.
type TLS struct {
	// CAFile is a PEM file of the roots that the targets' certificates
	// must chain to, instead of the system's (an internal CA). "": the
	// system's roots.
	CAFile string `yaml:"ca_file"`
	// ServerName is the name sent in the handshake (SNI) and that the
	// targets' certificates must hold, for targets written as addresses
	// or under names their certificates do not have. "": each target's
	// host.
	ServerName string `yaml:"server_name"`
	// CertFile and KeyFile are a client certificate chain and its key
	// (PEM), presented to targets that ask for one (mutual TLS).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
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
		MaxConnsPerHost:       1024,
	}
}

// Plan is a compiled upstream section: validated and immutable. Build one
// with Compile; New turns it into a running Proxy and cannot refuse it.
type Plan struct {
	cfg     Config
	field   string     // the section's path in the file: "upstream", "routes[2].upstream"
	targets []*url.URL // scheme and host of each target, in config order
	trust   *forwarded.Trust
	headers forwarded.Policy
	tls     *tls.Config // for https:// targets; nil: Go's defaults
	// The bytes of the files TLS names, as read: a reload after they
	// changed builds a new Proxy (Equal).
	caPEM, certPEM, keyPEM []byte
}

// bounds are the ranges of the section's numbers, checked first.
var bounds = bound.Section[Config]{
	bound.At("dial_timeout", bound.Durations(10*time.Millisecond, time.Minute), func(c Config) time.Duration { return c.DialTimeout }),
	bound.At("response_header_timeout", bound.Durations(100*time.Millisecond, time.Hour), func(c Config) time.Duration { return c.ResponseHeaderTimeout }),
	bound.At("health_check.interval", bound.Durations(100*time.Millisecond, time.Hour), func(c Config) time.Duration { return c.HealthCheck.Interval }),
	bound.At("max_idle_conns_per_host", bound.Counts(1, 65536), func(c Config) int { return c.MaxIdleConnsPerHost }),
	bound.At("max_conns_per_host", bound.Counts(1, 65536), func(c Config) int { return c.MaxConnsPerHost }),
}

// Bounds lists the ranges of the numbers of a pool's section at path
// ("upstream", "routes[].upstream"), as Compile checks them.
func Bounds(path string) []bound.Named { return bounds.Ranges(path) }

// CheckBounds checks the numbers of a pool's section at path alone, as
// Compile does first: for a section that is not compiled (an upstream
// section without targets beside routes), so that giving it targets later
// cannot bring an error to light.
func CheckBounds(path string, cfg Config) error { return bounds.Check(path, cfg) }

// Compile checks cfg, the upstream section, and returns its Plan. trust
// says whose forwarding headers are believed (server.trusted_proxies) and
// headers which of the client's headers reach the upstream
// (identity.user_header only from a trusted proxy,
// server.underscores_in_headers). It reads the files cfg.TLS names, so
// that one that cannot be used is refused here (by check-config) rather
// than at the first request. Errors start with the field's path in the
// config file: `upstream.targets[1]: "ftp://x" is not ...`.
func Compile(cfg Config, trust *forwarded.Trust, headers forwarded.Policy) (*Plan, error) {
	return CompileAt("upstream", cfg, trust, headers)
}

// CompileAt is Compile for a pool whose section is at field in the file
// ("routes[2].upstream"): its errors start with that path.
func CompileAt(field string, cfg Config, trust *forwarded.Trust, headers forwarded.Policy) (*Plan, error) {
	if err := bounds.Check(field, cfg); err != nil {
		return nil, err
	}
	p := &Plan{cfg: cfg, field: field, trust: trust, headers: headers}
	p.cfg.Targets = slices.Clone(cfg.Targets)
	if len(cfg.Targets) == 0 {
		return nil, fmt.Errorf("%s.targets: none given; list the web servers to proxy to, like [http://127.0.0.1:8081]", field)
	}
	https := false
	for i, t := range cfg.Targets {
		u, err := url.Parse(t)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || !validPort(u) {
			return nil, fmt.Errorf("%s.targets[%d]: %q is not an http(s)://host:port URL", field, i, t)
		}
		// The path is forwarded as the client sent it, so a target is only
		// scheme://host[:port]; a base path or query would be silently ignored.
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Opaque != "" {
			return nil, fmt.Errorf("%s.targets[%d]: %q must be scheme://host[:port] without path, query or user", field, i, t)
		}
		p.targets = append(p.targets, &url.URL{Scheme: u.Scheme, Host: u.Host})
		https = https || u.Scheme == "https"
	}
	if cfg.HealthCheck.Path == "" || cfg.HealthCheck.Path[0] != '/' {
		return nil, fmt.Errorf("%s.health_check.path: %q must start with /", field, cfg.HealthCheck.Path)
	}
	if _, err := url.Parse("http://x" + cfg.HealthCheck.Path); err != nil {
		return nil, fmt.Errorf("%s.health_check.path: %q is not a URL path", field, cfg.HealthCheck.Path)
	}
	if err := p.compileTLS(https); err != nil {
		return nil, err
	}
	return p, nil
}

// compileTLS reads the files of the pool's tls section and builds the
// client's TLS settings from them.
func (p *Plan) compileTLS(https bool) error {
	c := p.cfg.TLS
	f := p.field + ".tls."
	if c == (TLS{}) {
		return nil
	}
	if !https {
		name := "ca_file"
		switch {
		case c.CAFile != "":
		case c.ServerName != "":
			name = "server_name"
		case c.CertFile != "":
			name = "cert_file"
		default:
			name = "key_file"
		}
		return fmt.Errorf("%s%s: set, but no target of %s is https://; TLS settings apply to https:// targets only", f, name, p.field)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return fmt.Errorf("%sca_file: %w", f, err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%sca_file: %s holds no PEM certificate", f, c.CAFile)
		}
		p.caPEM = pem
	}
	if c.ServerName != "" {
		n, err := route.HostPattern(c.ServerName)
		if err != nil || strings.HasPrefix(n, "*.") {
			return fmt.Errorf("%sserver_name: %q is not a host name or IP address", f, c.ServerName)
		}
		tc.ServerName = n
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fmt.Errorf("%scert_file: cert_file and key_file go together (cert_file %q, key_file %q)", f, c.CertFile, c.KeyFile)
	}
	if c.CertFile != "" {
		var err error
		if p.certPEM, err = os.ReadFile(c.CertFile); err != nil {
			return fmt.Errorf("%scert_file: %w", f, err)
		}
		if p.keyPEM, err = os.ReadFile(c.KeyFile); err != nil {
			return fmt.Errorf("%skey_file: %w", f, err)
		}
		cert, err := tls.X509KeyPair(p.certPEM, p.keyPEM)
		if err != nil {
			return fmt.Errorf("%scert_file: %s, %s: %w", f, c.CertFile, c.KeyFile, err)
		}
		// A server verifying client certificates refuses one whose
		// extended key usage leaves out client authentication: say so
		// here rather than in every failed handshake.
		if leaf := cert.Leaf; leaf != nil && len(leaf.ExtKeyUsage) > 0 &&
			!slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
			return fmt.Errorf("%scert_file: %s is not for client authentication (its extended key usage leaves out clientAuth)", f, c.CertFile)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	p.tls = tc
	return nil
}

// tlsKey is the identity of the plan's TLS settings, for the pools of
// its https:// targets (poolKey).
func (p *Plan) tlsKey() tlsKey {
	h := sha256.New()
	for _, b := range [][]byte{p.caPEM, p.certPEM, p.keyPEM} {
		h.Write(b)
		h.Write([]byte{0}) // no PEM holds a NUL
	}
	k := tlsKey{cfg: p.cfg.TLS}
	h.Sum(k.files[:0])
	return k
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
		a.MaxIdleConnsPerHost == b.MaxIdleConnsPerHost && a.MaxConnsPerHost == b.MaxConnsPerHost && a.TLS == b.TLS &&
		bytes.Equal(p.caPEM, q.caPEM) && bytes.Equal(p.certPEM, q.certPEM) && bytes.Equal(p.keyPEM, q.keyPEM) &&
		p.trust.Equal(q.trust) && p.headers.Equal(q.headers)
}
