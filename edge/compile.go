package edge

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gocql/gocql"
	"golang.org/x/net/idna"

	"github.com/linkgate/linkgate/bound"
)

// Plan is a server.tls section checked and compiled: the static
// certificate read and parsed, the CA's roots parsed, the ask URL and the
// HSTS patterns parsed. What Compile accepts, New and Apply do not refuse.
type Plan struct {
	cfg     Config
	static  *tls.Certificate // nil: none
	roots   *x509.CertPool   // nil: the system's
	ask     *url.URL         // nil: no on-demand certificates
	domains []string         // ACME names, normalized
	hsts    []hstsRule
	tickets *ticketPlan
}

// Config returns the section the plan was compiled from.
func (p *Plan) Config() Config { return p.cfg }

// Enabled reports whether the listener terminates TLS.
func (p *Plan) Enabled() bool { return p.cfg.Enabled() }

// hstsRule is one compiled HSTS entry.
type hstsRule struct {
	hosts  []string // exact names, or ".suffix" for *.suffix
	header string
}

// bounds are the ranges of the section's numbers, checked first.
var bounds = bound.Section[Config]{
	bound.At("handshake_timeout", bound.Durations(time.Second, 5*time.Minute), func(c Config) time.Duration { return c.HandshakeTimeout }),
	bound.At("on_demand.ask_timeout", bound.Durations(100*time.Millisecond, time.Minute), func(c Config) time.Duration { return c.OnDemand.AskTimeout }),
	bound.At("on_demand.allow_ttl", bound.Durations(time.Second, 30*24*time.Hour), func(c Config) time.Duration { return c.OnDemand.AllowTTL }),
	bound.At("on_demand.deny_ttl", bound.Durations(time.Second, 7*24*time.Hour), func(c Config) time.Duration { return c.OnDemand.DenyTTL }),
	// A listener tries lifetime ÷ rotate + 2 keys at most: 170.
	bound.At("session_tickets.rotate", bound.Durations(time.Hour, 7*24*time.Hour), func(c Config) time.Duration { return c.SessionTickets.Rotate }),
	bound.At("session_tickets.lifetime", bound.Durations(time.Minute, 7*24*time.Hour), func(c Config) time.Duration { return c.SessionTickets.Lifetime }),
	bound.At("storage.cassandra.timeout", bound.Durations(100*time.Millisecond, time.Minute), func(c Config) time.Duration { return c.Storage.Cassandra.Timeout }),
	// A lock is refreshed every third of its TTL.
	bound.At("storage.cassandra.lock_ttl", bound.Durations(10*time.Second, time.Hour), func(c Config) time.Duration { return c.Storage.Cassandra.LockTTL }),
}

// Bounds lists the ranges of the section's numbers, as Compile checks
// them.
func Bounds() []bound.Named { return bounds.Ranges("server.tls") }

// Compile is CompileEnv without an environment: a session_tickets.secret_env
// is refused as unset.
func Compile(c Config) (*Plan, error) { return CompileEnv(c, nil) }

// CompileEnv checks a server.tls section. It reads the files the section
// names (the certificate and key, the CA root) and the secret
// session_tickets.secret_env names (from getenv), so that what cannot be
// used is refused here, by check-config, rather than at start; it opens
// no listener or connection. Errors start with the field's path under
// server.tls.
func CompileEnv(c Config, getenv func(string) string) (*Plan, error) {
	if err := bounds.Check("server.tls", c); err != nil {
		return nil, err
	}
	p := &Plan{cfg: c}
	if err := p.compileCert(c); err != nil {
		return nil, err
	}
	if err := p.compileACME(c.ACME); err != nil {
		return nil, err
	}
	if err := p.compileOnDemand(c.OnDemand); err != nil {
		return nil, err
	}
	if err := compileStorage(c.Storage, c.Managed()); err != nil {
		return nil, err
	}
	var err error
	if p.tickets, err = compileTickets(c.SessionTickets, getenv); err != nil {
		return nil, err
	}
	hosts := slices.Sorted(maps.Keys(c.HSTS))
	for _, h := range hosts {
		r, err := compileHSTS(h, c.HSTS[h])
		if err != nil {
			return nil, fmt.Errorf("server.tls.hsts: %q: %w", h, err)
		}
		p.hsts = append(p.hsts, r)
	}
	return p, nil
}

// compileCert loads the static certificate, if the section names one.
func (p *Plan) compileCert(c Config) error {
	const f = "server.tls."
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fmt.Errorf(f+"cert_file: cert_file and key_file go together (cert_file %q, key_file %q)", c.CertFile, c.KeyFile)
	}
	if c.CertFile != "" {
		cert, err := LoadPair(c.CertFile, c.KeyFile)
		if err != nil {
			return fmt.Errorf(f+"cert_file: %w", err)
		}
		p.static = cert
	}
	return nil
}

// compileACME checks the acme section and reads its CA root.
func (p *Plan) compileACME(a ACME) error {
	const f = "server.tls.acme."
	u, err := url.Parse(a.CA)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf(f+"ca: %q is not an https:// URL of an ACME directory", a.CA)
	}
	if a.CARoot != "" {
		pem, err := os.ReadFile(a.CARoot)
		if err != nil {
			return fmt.Errorf(f+"ca_root: %w", err)
		}
		p.roots = x509.NewCertPool()
		if !p.roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf(f+"ca_root: %s holds no PEM certificate", a.CARoot)
		}
	}
	if a.Email != "" && (!strings.Contains(a.Email, "@") || strings.ContainsAny(a.Email, " \t<>")) {
		return fmt.Errorf(f+"email: %q is not an email address", a.Email)
	}
	for i, d := range a.Domains {
		n, err := normalizeName(d)
		if err != nil {
			return fmt.Errorf(f+"domains[%d]: %w", i, err)
		}
		p.domains = append(p.domains, n)
	}
	if len(a.Challenges) == 0 {
		return fmt.Errorf(f + "challenges: none given; offer tls-alpn-01, http-01 or both")
	}
	for i, ch := range a.Challenges {
		if ch != TLSALPN01 && ch != HTTP01 {
			return fmt.Errorf(f+"challenges[%d]: %q is not tls-alpn-01 or http-01", i, ch)
		}
	}
	return nil
}

// compileOnDemand checks the on_demand section: its ask URL and limits.
func (p *Plan) compileOnDemand(o OnDemand) error {
	const f = "server.tls.on_demand."
	if o.Ask != "" {
		u, err := url.Parse(o.Ask)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf(f+"ask: %q is not an http:// or https:// URL", o.Ask)
		}
		if u.Query().Has("domain") {
			return fmt.Errorf(f+"ask: %q already has a domain parameter; the gateway adds it", o.Ask)
		}
		p.ask = u
	}
	if len(o.HandshakesPerClient) == 0 {
		return fmt.Errorf(f + "handshakes_per_client: none given; without a limit one client could make the gateway ask for any number of names")
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"orders_per_hour", o.OrdersPerHour}, {"orders_per_hour_per_client", o.OrdersPerHourPerClient}, {"orders_per_hour_per_domain", o.OrdersPerHourPerDomain}} {
		if n.v <= 0 {
			return fmt.Errorf(f+"%s: %d must be positive", n.name, n.v)
		}
	}
	return nil
}

func compileStorage(s Storage, managed bool) error {
	const f = "server.tls.storage."
	cs := s.Cassandra
	if len(cs.Hosts) == 0 {
		if s.Path == "" && managed {
			return errors.New(f + "path: empty; certificates obtained by ACME need a folder (or storage.cassandra.hosts)")
		}
		return nil
	}
	if cs.Keyspace == "" || strings.Trim(strings.ToLower(cs.Keyspace), "abcdefghijklmnopqrstuvwxyz0123456789_") != "" || len(cs.Keyspace) > 48 {
		return fmt.Errorf(f+"cassandra.keyspace: %q: up to 48 letters, digits and _", cs.Keyspace)
	}
	for i, h := range cs.Hosts {
		if strings.TrimSpace(h) == "" {
			return fmt.Errorf(f+"cassandra.hosts[%d]: empty", i)
		}
	}
	var c gocql.Consistency
	if err := c.UnmarshalText([]byte(cs.Consistency)); err != nil {
		return fmt.Errorf(f+"cassandra.consistency: %q is not a consistency level (LOCAL_QUORUM, QUORUM, ONE...)", cs.Consistency)
	}
	if cs.ReplicationFactor < 1 {
		return fmt.Errorf(f+"cassandra.replication_factor: %d must be at least 1", cs.ReplicationFactor)
	}
	return nil
}

// compileHSTS checks one host's Strict-Transport-Security value (RFC
// 6797 section 6.1): max-age required, includeSubDomains and preload only
// as written, preload only as the preload list takes it.
func compileHSTS(host, value string) (hstsRule, error) {
	var r hstsRule
	wild := strings.HasPrefix(host, "*.")
	n, err := normalizeName(strings.TrimPrefix(host, "*."))
	if err != nil {
		return r, err
	}
	if wild {
		n = "." + n
	}
	r.hosts = []string{n}
	maxAge, sub, preload := int64(-1), false, false
	for _, d := range strings.Split(value, ";") {
		d = strings.TrimSpace(d)
		name, v, hasV := strings.Cut(d, "=")
		switch {
		case strings.EqualFold(name, "max-age") && hasV:
			n, err := strconv.ParseInt(strings.Trim(v, `"`), 10, 64)
			if err != nil || n < 0 {
				return r, fmt.Errorf("max-age=%s is not a number of seconds", v)
			}
			maxAge = n
		case strings.EqualFold(d, "includeSubDomains"):
			sub = true
		case strings.EqualFold(d, "preload"):
			preload = true
		case d == "":
		default:
			return r, fmt.Errorf("%q is not max-age=N, includeSubDomains or preload", d)
		}
	}
	if maxAge < 0 {
		return r, errors.New("no max-age=N (seconds)")
	}
	if preload && (!sub || maxAge < 31536000) {
		// https://hstspreload.org/#submission-requirements
		return r, errors.New("preload: the preload list takes only max-age=31536000 or more with includeSubDomains")
	}
	r.header = fmt.Sprintf("max-age=%d", maxAge)
	if sub {
		r.header += "; includeSubDomains"
	}
	if preload {
		r.header += "; preload"
	}
	return r, nil
}

// normalizeName returns a host name as handshakes present it: lower-case
// ASCII (IDNA), without a trailing dot.
func normalizeName(s string) (string, error) {
	n, err := idna.Lookup.ToASCII(strings.TrimSuffix(strings.TrimSpace(s), "."))
	if err != nil || n == "" || strings.ContainsAny(n, "*/: ") {
		return "", fmt.Errorf("%q is not a host name", s)
	}
	return strings.ToLower(n), nil
}

// LoadPair reads a certificate chain and its private key (PEM) and checks
// that they match.
func LoadPair(certFile, keyFile string) (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("edge: %s, %s: %w", certFile, keyFile, err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("edge: %s: %w", certFile, err)
		}
	}
	return &cert, nil
}

// matchHost reports whether host matches one of patterns ("name" or
// ".suffix" for *.suffix, one label deep).
func matchHost(patterns []string, host string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool {
		if p[0] == '.' {
			rest, ok := strings.CutSuffix(host, p)
			return ok && rest != "" && !strings.Contains(rest, ".")
		}
		return p == host
	})
}
