package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/bound"
	"github.com/linkgate/linkgate/cache"
	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/edge"
	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/route"
	"github.com/linkgate/linkgate/stats"
	"github.com/linkgate/linkgate/tenant"
	"github.com/linkgate/linkgate/tracing"
)

// Plan is a config file compiled: every value checked, every pattern,
// address and limit parsed, every token read from the environment. It is
// what start-up and reloads build from, and it is immutable. The build
// (New, Gateway.Reload) cannot refuse a Plan on config grounds: anything
// it would refuse is refused here, so check-config, which runs the same
// compile, never says "ok" to a file the gateway cannot run.
type Plan struct {
	cfg        *config.Config
	trust      *forwarded.Trust
	pools      []poolPlan        // the default pool first, when there is one, then the routes'
	hosts      *route.Hosts[int] // a route's host pattern → its pool, an index into pools
	fallback   int               // the default pool's index in pools; -1: none (421)
	statsHost  string            // the stats API's host, as route.RequestHost writes it; "": every host
	limit      *limit.Plan
	analytics  *analytics.Plan
	cache      *cache.Plan
	tls        *edge.Plan
	tenants    *tenant.Plan // the declared tenants; none: every host in the default tenant
	tracing    *tracing.Plan
	adminToken string       // "": /admin/* answers 403
	statsToken string       // "": /stats is open
	share      stats.Sharer // its Key is nil: no share tokens
}

// Config returns the file the plan was compiled from, as read.
func (p *Plan) Config() *config.Config { return p.cfg }

// Load reads the file at path and compiles it: the one function that
// check-config, start-up and every reload call. getenv reads the
// environment variables the file names for tokens.
func Load(path string, getenv func(string) string) (*Plan, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	return Compile(cfg, getenv)
}

// Compile checks cfg and compiles every section. It is pure apart from
// getenv and the check of the listen addresses, which binds each listen
// host for a moment on a free port (and looks up a host name) so that a
// start-up cannot fail on an address the file names (see checkListen): it
// opens no file or connection and keeps no listener. An error names the
// field and, through cfg.Locate, its line: `config: gw.yaml:12:
// rules[1].allow[0]: "10.0.0.0/33" is not an address or CIDR prefix`.
func Compile(cfg *config.Config, getenv func(string) string) (*Plan, error) {
	p, err := compile(cfg, getenv)
	if err != nil {
		return nil, cfg.Locate(err)
	}
	return p, nil
}

func compile(cfg *config.Config, getenv func(string) string) (*Plan, error) {
	p := &Plan{cfg: cfg}
	if err := compileRuntime(cfg.Runtime); err != nil {
		return nil, err
	}
	if err := compileServer(cfg.Server); err != nil {
		return nil, err
	}
	var err error
	if p.trust, err = forwarded.Parse(cfg.Server.TrustedProxies); err != nil {
		return nil, fmt.Errorf("server.trusted_proxies%w", err)
	}
	if err := checkListen("admin.listen", cfg.Admin.Listen, true); err != nil {
		return nil, err
	}
	if clash(cfg.Server.Listen, cfg.Admin.Listen) {
		return nil, fmt.Errorf("admin.listen: %q is the address of server.listen (%q): the admin listener needs its own", cfg.Admin.Listen, cfg.Server.Listen)
	}
	if p.tls, err = compileEdge(cfg, getenv); err != nil {
		return nil, err
	}
	var identity []string
	if h := cfg.Identity.UserHeader; h != "" {
		identity = append(identity, h)
	}
	if p.limit, err = limit.Compile(cfg.Rules, cfg.Identity, cfg.Limiter, p.trust); err != nil {
		return nil, err
	}
	headers := forwarded.NewPolicy(identity, cfg.Server.UnderscoresInHeaders)
	if p.pools, p.hosts, p.fallback, err = compilePools(cfg, p.trust, headers); err != nil {
		return nil, err
	}
	if err := checkSelfTargets(cfg); err != nil {
		return nil, err
	}
	if p.analytics, err = analytics.CompileEnv(cfg.Analytics, analytics.Env{Trust: p.trust, Getenv: getenv}); err != nil {
		return nil, err
	}
	if p.cache, err = cache.Compile("cache", cfg.Cache); err != nil {
		return nil, err
	}
	if err := stats.Compile(cfg.Stats.Config); err != nil {
		return nil, err
	}
	if p.tenants, err = tenant.Compile(cfg.Tenants); err != nil {
		return nil, err
	}
	if err := checkTenantRetention(cfg, p.tenants, p.analytics); err != nil {
		return nil, err
	}
	if p.tracing, err = tracing.Compile(cfg.Tracing, getenv); err != nil {
		return nil, err
	}
	if err := p.compileAccess(cfg, getenv); err != nil {
		return nil, err
	}
	return p, nil
}

// compileAccess reads who may reach the admin and stats APIs: the stats
// host, the tokens and the share key, each named by an environment variable
// read with getenv.
func (p *Plan) compileAccess(cfg *config.Config, getenv func(string) string) error {
	if h := cfg.Stats.Host; h != "" {
		n, err := route.HostPattern(h)
		if err != nil || strings.HasPrefix(n, "*.") {
			return fmt.Errorf("stats.host: %q is not a host name or IP address (one host, no wildcard)", h)
		}
		p.statsHost = n
	}
	if name := cfg.Admin.TokenEnv; name != "" {
		// Unset, the admin API is off (403): it fails closed, as the
		// contract says.
		p.adminToken = strings.TrimSpace(getenv(name))
	}
	if name := cfg.Stats.TokenEnv; name != "" {
		// Unset, /stats would be open to anyone while the operator meant
		// to close it: refuse instead.
		if p.statsToken = strings.TrimSpace(getenv(name)); p.statsToken == "" {
			return fmt.Errorf("stats.token_env: the environment variable %s is not set or empty; /stats would be open to anyone (set it, or remove token_env to serve /stats openly)", name)
		}
	}
	if name := cfg.Stats.Share.KeyEnv; name != "" {
		key := strings.TrimSpace(getenv(name))
		if key != "" && len(key) < stats.MinShareKeyBytes {
			return fmt.Errorf("stats.share.key_env: the key in %s is %d bytes, fewer than %d (openssl rand -hex 32 makes one)", name, len(key), stats.MinShareKeyBytes)
		}
		if key != "" {
			p.share.Key = []byte(key)
		}
	}
	p.share.MaxTTL = cfg.Stats.Share.MaxTTL
	return nil
}

// Share returns the share tokens of the plan: what signs and checks them.
func (p *Plan) Share() stats.Sharer { return p.share }

// compileEdge checks server.tls (its ticket secret read with getenv) and
// the listeners beside server.listen.
func compileEdge(cfg *config.Config, getenv func(string) string) (*edge.Plan, error) {
	s := cfg.Server
	p, err := edge.CompileEnv(s.TLS, getenv)
	if err != nil {
		return nil, err
	}
	for _, l := range []struct{ field, addr string }{{"server.http_listen", s.HTTPListen}, {"server.internal_listen", s.InternalListen}} {
		if err := checkListen(l.field, l.addr, true); err != nil {
			return nil, err
		}
		for _, o := range []struct{ field, addr string }{{"server.listen", s.Listen}, {"admin.listen", cfg.Admin.Listen}} {
			if clash(l.addr, o.addr) {
				return nil, fmt.Errorf("%s: %q is the address of %s (%q): each listener needs its own", l.field, l.addr, o.field, o.addr)
			}
		}
	}
	if clash(s.HTTPListen, s.InternalListen) {
		return nil, fmt.Errorf("server.internal_listen: %q is the address of server.http_listen (%q): each listener needs its own", s.InternalListen, s.HTTPListen)
	}
	if s.HTTP3 && !p.Enabled() {
		return nil, fmt.Errorf("server.http3: HTTP/3 is always encrypted, but server.tls sets no certificate (cert_file, acme.domains or on_demand.ask)")
	}
	if s.HTTPListen != "" && !p.Enabled() {
		return nil, fmt.Errorf("server.http_listen: it redirects to https://, but server.tls sets no certificate (cert_file, acme.domains or on_demand.ask)")
	}
	return p, nil
}

// serverBounds are the ranges of the server section's own numbers (those
// of server.tls are edge.Compile's), checked first.
var serverBounds = bound.Section[config.Server]{
	bound.At("read_header_timeout", bound.Durations(100*time.Millisecond, 10*time.Minute), func(s config.Server) time.Duration { return s.ReadHeaderTimeout }),
	bound.At("read_timeout", bound.Durations(100*time.Millisecond, 24*time.Hour).OrZero("none"), func(s config.Server) time.Duration { return s.ReadTimeout }),
	bound.At("body_timeout", bound.Durations(100*time.Millisecond, time.Hour).OrZero("none"), func(s config.Server) time.Duration { return s.BodyTimeout }),
	bound.At("write_timeout", bound.Durations(100*time.Millisecond, 24*time.Hour).OrZero("none"), func(s config.Server) time.Duration { return s.WriteTimeout }),
	bound.At("idle_timeout", bound.Durations(100*time.Millisecond, 24*time.Hour).OrZero("none"), func(s config.Server) time.Duration { return s.IdleTimeout }),
	bound.At("max_header_bytes", bound.Sizes(1<<10, 1<<20), func(s config.Server) int { return s.MaxHeaderBytes }),
	bound.At("shutdown_timeout", bound.Durations(0, time.Hour), func(s config.Server) time.Duration { return s.ShutdownTimeout }),
	bound.At("max_concurrent_streams", bound.Counts(1, 10_000), func(s config.Server) int { return s.MaxConcurrentStreams }),
}

func compileServer(s config.Server) error {
	if err := serverBounds.Check("server", s); err != nil {
		return err
	}
	if err := checkListen("server.listen", s.Listen, false); err != nil {
		return err
	}
	for i, m := range s.AllowMethods {
		if m != http.MethodTrace && m != http.MethodConnect {
			return fmt.Errorf("server.allow_methods[%d]: %q: only TRACE and CONNECT are refused unless listed; other methods always pass", i, m)
		}
	}
	return nil
}

// checkListen checks a listen address as start-up will bind it, so that
// a file check-config accepts never fails to listen for a reason the file
// holds: host:port with a port from 0 to 65535, and a host that is empty
// (every interface), an IP address of this machine, or a host name that
// resolves to one. The host is bound for a moment on a free port (port 0):
// the kernel, not a copy of its rules, says whether start-up could bind
// it (an address no interface has, 127.0.0.2 on a loopback that holds
// 127.0.0.0/8, a name /etc/hosts or DNS does not know). The port itself is
// not tried: that it is in use (by the running gateway, on a reload) or
// privileged is the state of the machine when the gateway starts, not a
// mistake of the file. A host whose last label is all digits ("527.0.0.1",
// "10.1") is no host name (RFC 3696 section 2) and no IP address either:
// it is refused before any lookup. optional allows "" (no listener).
func checkListen(field, addr string, optional bool) error {
	if addr == "" && optional {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s: %q is not host:port", field, addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%s: %q: the port must be a number from 0 to 65535", field, addr)
	}
	if host == "" {
		return nil
	}
	_, ipErr := netip.ParseAddr(host)
	if ipErr != nil {
		labels := strings.Split(strings.TrimSuffix(host, "."), ".")
		if last := labels[len(labels)-1]; last != "" && strings.Trim(last, "0123456789") == "" {
			return fmt.Errorf("%s: %q: %q is not an IP address (an IPv4 address is four numbers from 0 to 255) nor a host name (whose last label is never all digits)", field, addr, host)
		}
		if !validHostname(host) {
			return fmt.Errorf("%s: %q: %q is not an IP address or host name", field, addr, host)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), listenProbeTimeout)
	defer cancel()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, "0"))
	if err == nil {
		ln.Close()
		return nil
	}
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr):
		return fmt.Errorf("%s: %q: the host name %q does not resolve (%v): give an address of this machine, or a name that resolves to one", field, addr, host, dnsErr)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		what := "an address"
		if ipErr != nil {
			what = "a name for an address"
		}
		return fmt.Errorf("%s: %q: %s is %s that no interface of this machine has, so nothing can listen on it (empty host or 0.0.0.0: every interface)", field, addr, host, what)
	}
	return fmt.Errorf("%s: %q: cannot listen on %s: %w", field, addr, host, err)
}

// listenProbeTimeout bounds checkListen's lookup of a host name.
const listenProbeTimeout = 5 * time.Second

// validHostname reports whether s is a syntactically valid DNS name.
func validHostname(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// clash reports whether listening on a and on b would collide: the same
// port (not 0, which picks a free one) on the same host, or on hosts of
// which one is every interface. localhost is taken as the loopback
// addresses, other names as themselves: compile does no DNS.
func clash(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	if pa != pb || pa == "0" {
		return false
	}
	wild := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	if wild(ha) || wild(hb) {
		return true
	}
	norm := func(h string) string {
		if strings.EqualFold(h, "localhost") {
			return "127.0.0.1"
		}
		if ip, err := netip.ParseAddr(h); err == nil {
			return ip.Unmap().String()
		}
		return strings.ToLower(h)
	}
	return norm(ha) == norm(hb)
}
