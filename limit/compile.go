package limit

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/linkgate/linkgate/bound"
	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/route"
)

// Plan is the compiled form of the limiter's part of the config (the rules,
// identity and limiter sections): every check done, every pattern and
// address parsed. It is immutable; New turns it into a Limiter over a Store
// and cannot refuse it. Build one with Compile.
type Plan struct {
	rules    []*rule // compiled; their metrics are set by New
	id       identifier
	failOpen bool
	cfg      Config // the limiter section: which store, and how to reach it
}

// Compile checks the rules, identity and limiter sections and returns their
// Plan. trust is the parsed server.trusted_proxies: who may name the client
// (X-Forwarded-For) and the user (identity.user_header). Compile is pure:
// it reads no file, environment or network. Errors start with the field's
// path in the config file (`rules[2].allow[0]: "10.0.0.0/33" is not ...`).
func Compile(rules []Rule, id Identity, cfg Config, trust *forwarded.Trust) (*Plan, error) {
	if err := limiterBounds.Check("limiter", cfg); err != nil {
		return nil, err
	}
	if err := identityBounds.Check("identity", id); err != nil {
		return nil, err
	}
	p := &Plan{cfg: cfg}
	p.cfg.Memcached.Servers = slices.Clone(cfg.Memcached.Servers)
	prec, err := compileLimiter(cfg)
	if err != nil {
		return nil, err
	}
	p.failOpen = cfg.OnStoreError == "allow"
	if err := compileIdentity(id); err != nil {
		return nil, err
	}
	p.id = identifier{
		trust:      trust,
		ipv6Prefix: id.IPv6Prefix,
		user:       HeaderUser(id.UserHeader),
		emails:     newEmailReader(id.EmailFields, id.MaxBodyBytes, id.EmailFold),
	}
	seen := make(map[string]int, len(rules))
	for i, r := range rules {
		path := fmt.Sprintf("rules[%d]", i)
		cr, err := compileRule(r, prec, id, p.id.emails)
		if err != nil {
			return nil, fmt.Errorf("%s.%w", path, err)
		}
		if j, dup := seen[r.Name]; dup {
			return nil, fmt.Errorf("%s.name: %q is already the name of rules[%d]; names key the counters and must be unique", path, r.Name, j)
		}
		seen[r.Name] = i
		p.rules = append(p.rules, cr)
	}
	return p, nil
}

// Store returns the limiter section the plan was compiled from: the one
// place that picks a backend reads Store and Memcached from it.
func (p *Plan) Store() Config { return p.cfg }

// SameStore reports whether p and q use the same backend with the same
// settings: a reload that keeps it keeps the store, and so the counters.
func (p *Plan) SameStore(q *Plan) bool {
	a, b := p.cfg, q.cfg
	if a.Store != b.Store {
		return false
	}
	return a.Store != "memcached" || slices.Equal(a.Memcached.Servers, b.Memcached.Servers) &&
		a.Memcached.Timeout == b.Memcached.Timeout && a.Memcached.MaxIdleConns == b.Memcached.MaxIdleConns
}

// compileLimiter checks the limiter section and returns its precision.
func compileLimiter(c Config) (Precision, error) {
	switch {
	case c.Store != "memory" && c.Store != "memcached":
		return 0, fmt.Errorf("limiter.store: %q is not memory or memcached", c.Store)
	case c.OnStoreError != "allow" && c.OnStoreError != "deny":
		return 0, fmt.Errorf("limiter.on_store_error: %q is not allow or deny", c.OnStoreError)
	}
	if c.Store == "memcached" {
		if len(c.Memcached.Servers) == 0 {
			return 0, fmt.Errorf("limiter.memcached.servers: none given")
		}
		seen := map[string]int{}
		for i, a := range c.Memcached.Servers {
			if err := checkServer(a); err != nil {
				return 0, fmt.Errorf("limiter.memcached.servers[%d]: %w", i, err)
			}
			if j, dup := seen[a]; dup {
				// Rendezvous hashing would give the one server two seeds
				// and place counters on it twice as often as on the others.
				return 0, fmt.Errorf("limiter.memcached.servers[%d]: %q is already servers[%d]", i, a, j)
			}
			seen[a] = i
		}
	}
	switch c.Precision {
	case "bucket":
		return Bucketed, nil
	case "exact":
		return Exact, nil
	}
	return 0, fmt.Errorf("limiter.precision: %q is not bucket or exact", c.Precision)
}

// checkServer checks a memcached address: host:port, or the path of a
// unix socket (anything with a slash).
func checkServer(a string) error {
	if strings.Contains(a, "/") {
		return nil
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port or a socket path", a)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || host == "" {
		return fmt.Errorf("%q is not host:port with a port from 1 to 65535", a)
	}
	return nil
}

// The ranges of the numbers of the limiter and identity sections, which
// Compile checks first.
var (
	limiterBounds = bound.Section[Config]{
		bound.At("memcached.timeout", bound.Durations(time.Millisecond, 10*time.Second), func(c Config) time.Duration { return c.Memcached.Timeout }),
		bound.At("memcached.max_idle_conns", bound.Counts(1, MaxIdleConnsLimit), func(c Config) int { return c.Memcached.MaxIdleConns }),
	}
	identityBounds = bound.Section[Identity]{
		bound.At("ipv6_prefix", bound.Counts(1, 128), func(id Identity) int { return id.IPv6Prefix }),
		// The body read to find an email is held in memory, once per
		// request in flight.
		bound.At("max_body_bytes", bound.Sizes(1, 16<<20), func(id Identity) int64 { return id.MaxBodyBytes }),
	}
)

// Bounds lists the ranges of the numbers of the limiter and identity
// sections and of each rule's penalty, as Compile checks them.
func Bounds() []bound.Named {
	return slices.Concat(limiterBounds.Ranges("limiter"), identityBounds.Ranges("identity"), penaltyBounds.Ranges("rules[].penalty"))
}

func compileIdentity(id Identity) error {
	if id.UserHeader != "" && !validToken(id.UserHeader) {
		return fmt.Errorf("identity.user_header: %q is not a header name", id.UserHeader)
	}
	for i, f := range id.EmailFields {
		if strings.TrimSpace(f) == "" {
			return fmt.Errorf("identity.email_fields[%d]: empty", i)
		}
	}
	for i, f := range id.EmailFold {
		if f != FoldPlusTag && f != FoldGmailDots {
			return fmt.Errorf("identity.email_fold[%d]: %q is not %s or %s", i, f, FoldPlusTag, FoldGmailDots)
		}
	}
	return nil
}

// validToken reports whether s is an RFC 9110 token, as header names are.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// compileRule checks one rule and compiles it. Errors start with the
// field's name within the rule ("allow[0]: ...").
func compileRule(r Rule, prec Precision, id Identity, emails emailReader) (*rule, error) {
	if err := checkRuleName(r.Name); err != nil {
		return nil, err
	}
	mt, err := r.Match.Route().Compile()
	if err != nil {
		return nil, fmt.Errorf("match: %w", err)
	}
	hosts, err := compileHosts(r.Match.Hosts)
	if err != nil {
		return nil, err
	}
	if err := compileKey(r.Key, id); err != nil {
		return nil, err
	}
	if len(r.Limits) == 0 {
		return nil, fmt.Errorf("limits: none given")
	}
	if err := checkCounting(r); err != nil {
		return nil, err
	}
	pen, err := compilePenalty(r.Penalty)
	if err != nil {
		return nil, err
	}
	if r.Edge && (pen == nil || r.Key != IP) {
		return nil, fmt.Errorf("edge: a rule that gates the TLS edge must be keyed by ip alone and have a penalty (the edge asks whether a client address is in the box)")
	}
	// Allowed responses carry RateLimit headers unless they would tell
	// anyone how many failed logins another person's email has.
	cr := &rule{Rule: r, match: mt, hosts: hosts, windows: windows{
		name: r.Name, key: r.Key, plan: newBucketPlan(r.Limits, prec), pen: pen, shadow: r.Shadow, strict: r.Strict,
		headers: !r.Key.has(Email) && !r.Shadow,
	}}
	cr.plan.box = pen != nil
	cr.keyName = string(r.Key)
	if p := r.Key.Parts(); len(p) == 2 {
		cr.isPair, cr.pair = true, [2]Feature{p[0], p[1]}
		cr.keyName = string(p[0]) + " and " + string(p[1])
	}
	if err := cr.compileAllow(emails); err != nil {
		return nil, err
	}
	cr.nameWindows()
	return cr, nil
}

// checkRuleName checks a rule's name: a RateLimit-Policy string, a metric
// label and a URL segment of the admin API.
func checkRuleName(name string) error {
	if name == "" {
		return fmt.Errorf("name: missing")
	}
	for _, ch := range name {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || strings.ContainsRune("_.:-", ch)) {
			return fmt.Errorf("name: %q may hold only letters, digits and _ . : -", name)
		}
	}
	return nil
}

// compileHosts compiles a rule's match.hosts; nil when it names none.
func compileHosts(hs []string) (*route.Hosts[struct{}], error) {
	if len(hs) == 0 {
		return nil, nil
	}
	hosts := &route.Hosts[struct{}]{}
	for i, h := range hs {
		if err := hosts.Add(h, struct{}{}); err != nil {
			return nil, fmt.Errorf("match.hosts[%d]: %w", i, err)
		}
	}
	return hosts, nil
}

// checkCounting checks the fields that say when a rule counts a request:
// count_status, strict and on_unreadable.
func checkCounting(r Rule) error {
	for i, s := range r.CountStatus {
		if s < 100 || s > 599 {
			return fmt.Errorf("count_status[%d]: %d is not an HTTP status", i, s)
		}
	}
	if r.Strict && len(r.CountStatus) > 0 {
		return fmt.Errorf("strict: cannot be combined with count_status (a strict rule counts before the upstream answers)")
	}
	switch r.OnUnreadable {
	case "", OnUnreadableReject, OnUnreadableSkip, OnUnreadableKeyByIP:
	default:
		return fmt.Errorf("on_unreadable: %q is not reject, skip or key_by_ip", r.OnUnreadable)
	}
	if r.OnUnreadable != "" && !r.Key.has(Email) {
		return fmt.Errorf("on_unreadable: only email rules read a request's body; this rule's key is %s", r.Key)
	}
	return nil
}

// compileAllow compiles the rule's allow list: networks for rules keyed
// by ip (and, where a value parses as one, by a pair with ip), values
// for the others.
func (cr *rule) compileAllow(emails emailReader) error {
	for i, a := range cr.Allow {
		if cr.Key.has(IP) {
			p, err := forwarded.ParsePrefix(a)
			if err == nil || cr.Key == IP {
				if err != nil {
					return fmt.Errorf("allow[%d]: %w", i, err)
				}
				cr.allowNets = append(cr.allowNets, p)
				continue
			}
		}
		if strings.TrimSpace(a) == "" {
			return fmt.Errorf("allow[%d]: empty", i)
		}
		if cr.allowVals == nil {
			cr.allowVals = make(map[string]bool)
		}
		if cr.Key.has(Email) {
			// Allowed emails are counted values: folded as requests' are.
			a = emails.normalize(a)
		}
		cr.allowVals[a] = true
	}
	return nil
}

// nameWindows names the rule's windows (metric labels, the RateLimit
// fields' items) and writes its RateLimit-Policy value.
func (cr *rule) nameWindows() {
	var items []string
	for _, lim := range cr.Limits {
		name := cr.Name + "-" + windowName(lim.Window)
		cr.names = append(cr.names, name)
		cr.quoted = append(cr.quoted, strconv.Quote(name))
		cr.limitNames = append(cr.limitNames, lim.String())
		items = append(items, fmt.Sprintf("%q;q=%d;w=%d", name, lim.N, int64(lim.Window/time.Second)))
	}
	cr.policy = strings.Join(items, ", ")
}

// compileKey checks a rule's key: a feature the identity section can
// read, or a pair of two distinct ones.
func compileKey(k Feature, id Identity) error {
	parts := k.Parts()
	if len(parts) == 2 && parts[0] == parts[1] {
		return fmt.Errorf("key: [%s, %s] names %s twice; a pair counts by two features", parts[0], parts[1], parts[0])
	}
	for _, f := range parts {
		switch f {
		case IP:
		case User:
			if id.UserHeader == "" {
				return fmt.Errorf("key: user needs identity.user_header to name the header a trusted proxy sets")
			}
		case Email:
			if len(id.EmailFields) == 0 {
				return fmt.Errorf("key: email needs identity.email_fields to name the body fields")
			}
		case Tenant:
		default:
			return fmt.Errorf("key: %q is not one of ip, user, email, tenant, or a pair of them like [email, ip]", f)
		}
	}
	return nil
}

// allowlisted reports whether r never limits this client: its address is
// in an allowed network (rules keyed by ip, alone or in a pair), or its
// value (of a pair: a value of either feature) is allowed.
func (r *rule) allowlisted(value string, parts []string, addr netip.Addr) bool {
	for _, p := range r.allowNets {
		if p.Contains(addr) {
			return true
		}
	}
	if r.allowVals == nil {
		return false
	}
	if len(parts) < 2 {
		return r.allowVals[value]
	}
	return r.allowVals[parts[0]] || r.allowVals[parts[1]]
}
