package limit

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/linkgate/linkgate/route"
)

// Feature is what a rule counts by: the client address, the logged-in user,
// the email address in the request's query string or body, or the tenant of
// the request's host (package tenant); or a pair of two of them (Pair),
// counted together: the rule's counters are per pair of values. A file
// writes a feature as a word (`key: email`) and a pair as a list (`key:
// [email, ip]`).
type Feature string

// The features a rule can be keyed by.
const (
	IP    Feature = "ip"
	User  Feature = "user"
	Email Feature = "email"
	// Tenant counts the requests of each tenant apart, so that one
	// customer's campaign cannot use up a shared rule's budget for the
	// others; a request for a host in no tenant is not counted by it.
	Tenant Feature = "tenant"
)

// pairSep joins the two features of a pair in a Feature: "email+ip".
const pairSep = "+"

// Pair returns the key of a rule that counts by a and b together, in that
// order: Pair(Email, IP) counts the failed logins of each email from each
// address apart, so that nobody can lock a person out from an address of
// their own.
func Pair(a, b Feature) Feature { return a + pairSep + b }

// Parts returns the features f counts by: itself, or the two of a pair.
func (f Feature) Parts() []Feature {
	a, b, ok := strings.Cut(string(f), pairSep)
	if !ok {
		return []Feature{f}
	}
	return []Feature{Feature(a), Feature(b)}
}

// has reports whether f counts by g, alone or in a pair.
func (f Feature) has(g Feature) bool {
	a, b, ok := strings.Cut(string(f), pairSep)
	return Feature(a) == g || ok && Feature(b) == g
}

// UnmarshalYAML reads a feature (a word) or a pair (a list of two words).
// A list of another length or a mapping is a *yaml.TypeError, as a value
// of the wrong type is, so that decoding goes on and the file's other
// errors are reported with it; Compile checks the words.
func (f *Feature) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*f = Feature(n.Value)
		return nil
	case yaml.SequenceNode:
		if len(n.Content) == 2 && n.Content[0].Kind == yaml.ScalarNode && n.Content[1].Kind == yaml.ScalarNode {
			*f = Pair(Feature(n.Content[0].Value), Feature(n.Content[1].Value))
			return nil
		}
	}
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: want one of ip, user, email, tenant, or a pair of them like [email, ip]", n.Line)}}
}

// MarshalJSON writes f as a string, a pair as a list of two: ["email","ip"].
func (f Feature) MarshalJSON() ([]byte, error) {
	if p := f.Parts(); len(p) == 2 {
		return json.Marshal([]string{string(p[0]), string(p[1])})
	}
	return json.Marshal(string(f))
}

// MarshalYAML writes f as UnmarshalYAML reads it: a pair as a list.
func (f Feature) MarshalYAML() (any, error) {
	if p := f.Parts(); len(p) == 2 {
		return []string{string(p[0]), string(p[1])}, nil
	}
	return string(f), nil
}

// Rule is one configured limit rule (a "rules" entry of the config file).
// Name is the event the rule counts (a login, a signup): part of every
// counter key, so counts survive an edit of the limits.
type Rule struct {
	Name        string   `yaml:"name"`
	Match       Match    `yaml:"match"`
	Key         Feature  `yaml:"key"`
	Limits      []Limit  `yaml:"limits"`
	CountStatus []int    `yaml:"count_status,omitempty"` // count a hit only for these upstream statuses; empty: every request
	Shadow      bool     `yaml:"shadow,omitempty"`       // log and count would-be rejections, block nothing
	Strict      bool     `yaml:"strict,omitempty"`       // count before checking, so that several gateways never overshoot
	Allow       []string `yaml:"allow,omitempty"`        // CIDRs (ip rules) or feature values this rule never limits
	// OnUnreadable is what an email rule does with a request whose email
	// the gateway cannot tell (see OnUnreadableReject): reject, skip or
	// key_by_ip. Empty means reject.
	OnUnreadable string `yaml:"on_unreadable,omitempty"`
	// Penalty keeps a client that went over a limit out for a while,
	// longer each time; the zero value keeps nobody out beyond the limits.
	Penalty Penalty `yaml:"penalty,omitempty"`
	// Edge makes a client address this rule boxes also get no on-demand
	// certificate and no handshake for a name without an answer while it
	// is in the box (the TLS edge asks Limiter.Boxed).
	Edge bool `yaml:"edge,omitempty"`
}

// Penalty is a rule's penalty box (the "penalty" of a rule): a request
// over one of the rule's limits is a trip, and puts the rule's key (the
// address, user, email or pair) in the box, where every request the rule
// matches gets 429 until the box ends. The first trip costs Duration;
// each trip within ForgetAfter of the one before multiplies the box by
// Factor, never past Max (fail2ban's bantime.increment and
// bantime.factor). Durations are whole seconds at least; a box ends on a
// whole second, never before Duration has passed, nor before the rule's
// limits let a request through.
type Penalty struct {
	// Duration is the box of a first trip. Zero: no penalty (the default).
	Duration time.Duration `yaml:"duration,omitempty"`
	// Factor multiplies the box at each trip within ForgetAfter of the
	// one before. Zero means 1: every box lasts Duration.
	Factor float64 `yaml:"factor,omitempty"`
	// Max caps the box. Zero means DefaultPenaltyMax.
	Max time.Duration `yaml:"max,omitempty"`
	// ForgetAfter is how long after a trip the next one still escalates:
	// a client that stays out of trouble that long starts again at
	// Duration. Zero means DefaultForgetAfter.
	ForgetAfter time.Duration `yaml:"forget_after,omitempty"`
}

// The penalty's defaults and bounds.
const (
	// DefaultPenaltyMax is the cap of a box when penalty.max is zero, and
	// the longest penalty.duration and penalty.max may be: a week, as the
	// longest window.
	DefaultPenaltyMax = 7 * 24 * time.Hour
	// DefaultForgetAfter is penalty.forget_after when it is zero.
	DefaultForgetAfter = 24 * time.Hour
	// MaxForgetAfter bounds penalty.forget_after: a box and its trips are
	// kept that long after a trip, and memcached keeps a key at most 30
	// days.
	MaxForgetAfter = 30 * 24 * time.Hour
	// MaxPenaltyFactor bounds penalty.factor.
	MaxPenaltyFactor = 100
)

// Match is the requests a rule applies to: the methods and chi-style path
// pattern of a route.Match, on the hosts listed.
type Match struct {
	Methods []string `yaml:"methods,omitempty"` // all when empty
	Path    string   `yaml:"path"`
	// Hosts are the hosts whose requests the rule applies to, as the
	// gateway's routes name them: exact names (or IP addresses) and
	// *.suffix one label deep, matched against the request's Host, port
	// and case aside. Empty: every host.
	Hosts []string `yaml:"hosts,omitempty"`
}

// Route returns m's methods and path, HEAD among the methods when GET is:
// a server answers HEAD with its GET handler (RFC 9110 section 9.3.2;
// Go's ServeMux, Rails, Express and Spring all do), so a HEAD does a GET's
// work upstream, and a redirect's Location comes with it, and a rule for
// GET that let HEAD pass would let anyone around it.
func (m Match) Route() route.Match {
	methods := m.Methods
	if slices.Contains(methods, http.MethodGet) && !slices.Contains(methods, http.MethodHead) {
		methods = append(slices.Clip(methods), http.MethodHead)
	}
	return route.Match{Methods: methods, Path: m.Path}
}

// The on_unreadable policies of an email rule, for a request whose email
// the gateway cannot be sure to read as the upstream will (a body it cannot
// parse or that is larger than identity.max_body_bytes, JSON with trailing
// data, values that disagree, an encoding or charset it cannot read).
const (
	// OnUnreadableReject answers 400, 413 or 415 with a problem saying
	// what could not be read; the request goes no further. The default:
	// a limit on wrong passwords per email must not be stepped around.
	OnUnreadableReject = "reject"
	// OnUnreadableSkip lets the request through without this rule, as if
	// it named no email (the behaviour of a gateway that does not look).
	OnUnreadableSkip = "skip"
	// OnUnreadableKeyByIP counts the request under this rule's limits by
	// client address instead, in the rule's counters with the value
	// "ip:<address or IPv6 prefix>".
	OnUnreadableKeyByIP = "key_by_ip"
)

// Identity says how features are read from a request (the "identity" section).
type Identity struct {
	IPv6Prefix   int      `yaml:"ipv6_prefix"`    // IPv6 clients are limited per prefix of this length
	UserHeader   string   `yaml:"user_header"`    // user id header, believed only from trusted proxies
	EmailFields  []string `yaml:"email_fields"`   // query, form or JSON fields holding the email
	MaxBodyBytes int64    `yaml:"max_body_bytes"` // body bytes read to find the email
	// EmailFold lists optional foldings of an email before it is counted:
	// FoldPlusTag, FoldGmailDots. Off by default: they merge addresses that
	// some mail systems deliver to different people.
	EmailFold []string `yaml:"email_fold,omitempty"`
}

// DefaultIdentity returns the defaults of the identity section.
func DefaultIdentity() Identity {
	return Identity{IPv6Prefix: 64, UserHeader: "X-User-ID", EmailFields: []string{"email"}, MaxBodyBytes: 64 << 10}
}

// Config is the "limiter" section: which store holds the counters and how
// the limiter behaves when it fails.
type Config struct {
	Store        string    `yaml:"store"` // memory | memcached
	Memcached    Memcached `yaml:"memcached"`
	OnStoreError string    `yaml:"on_store_error"` // allow | deny
	Precision    string    `yaml:"precision"`      // bucket | exact
}

// Memcached is where the memcached store connects.
type Memcached struct {
	Servers []string      `yaml:"servers"`
	Timeout time.Duration `yaml:"timeout"`
	// MaxIdleConns is how many connections to each server the store keeps
	// open, all dialed when it starts and again when a server comes back:
	// at least the requests on limited routes in flight at once, plus the
	// four the flusher uses. Below that, every burst dials new connections,
	// and under load dials are what miss the timeout.
	MaxIdleConns int `yaml:"max_idle_conns"`
}

// DefaultMaxIdleConns is the default of limiter.memcached.max_idle_conns:
// room for 64 client connections waiting on the limiter at once (a loaded
// gateway on a small machine) twice over.
const DefaultMaxIdleConns = 128

// MaxIdleConnsLimit bounds limiter.memcached.max_idle_conns: memcached
// accepts 1024 connections by default, shared by every gateway.
const MaxIdleConnsLimit = 1024

// DefaultConfig returns the defaults of the limiter section.
func DefaultConfig() Config {
	return Config{
		Store:        "memory",
		Memcached:    Memcached{Servers: []string{"127.0.0.1:11211"}, Timeout: 100 * time.Millisecond, MaxIdleConns: DefaultMaxIdleConns},
		OnStoreError: "allow",
		Precision:    "bucket",
	}
}

// Limit is N hits per Window, written "5/m" or "100/15m".
type Limit struct {
	N      int64
	Window time.Duration
}

// MaxWindow is the longest window a limit may have: a week. The limiter is
// built for windows of up to a day (2/s, 5/m, 10/h, 100/d); a week leaves
// room for weekly limits, whose buckets live a week (Bucket.TTL) and whose
// check reads 168 hour buckets.
const MaxWindow = 7 * 24 * time.Hour

// ParseLimit parses "N/unit" where unit is s, m, h or d with an optional
// whole multiplier ("100/15m").
func ParseLimit(s string) (Limit, error) {
	num, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Limit{}, fmt.Errorf("limit %q: want N/unit, like 5/m or 100/15m", s)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return Limit{}, fmt.Errorf("limit %q: count %q is not a positive whole number", s, num)
	}
	if per == "" {
		return Limit{}, fmt.Errorf("limit %q: missing unit (s, m, h or d)", s)
	}
	units := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour}
	unit, ok := units[per[len(per)-1]]
	m := per[:len(per)-1]
	if !ok || strings.TrimLeft(m, "0123456789") != "" {
		return Limit{}, fmt.Errorf("limit %q: unit %q is not s, m, h or d, with an optional multiplier like 15m", s, per)
	}
	mult := int64(1)
	if m != "" {
		mult, err = strconv.ParseInt(m, 10, 64)
		if err != nil || mult <= 0 {
			return Limit{}, fmt.Errorf("limit %q: multiplier %q is not a positive whole number", s, m)
		}
	}
	if mult > int64(MaxWindow/unit) {
		return Limit{}, fmt.Errorf("limit %q: window is longer than %v", s, MaxWindow)
	}
	return Limit{N: n, Window: time.Duration(mult) * unit}, nil
}

// String formats l as ParseLimit reads it.
func (l Limit) String() string {
	for _, u := range []struct {
		d time.Duration
		s string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if l.Window%u.d == 0 {
			if k := l.Window / u.d; k == 1 {
				return fmt.Sprintf("%d/%s", l.N, u.s)
			} else {
				return fmt.Sprintf("%d/%d%s", l.N, k, u.s)
			}
		}
	}
	return fmt.Sprintf("%d/%v", l.N, l.Window)
}

// MarshalText implements encoding.TextMarshaler.
func (l Limit) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (l *Limit) UnmarshalText(b []byte) error {
	v, err := ParseLimit(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// UnmarshalYAML reads a limit from its node's text as UnmarshalText does,
// so that a mapping is refused rather than decoded into N and Window. A bad
// limit is a *yaml.TypeError, as yaml reports a value of the wrong type, so
// that decoding goes on and a file's other errors are reported with it;
// the config package finds its line.
func (l *Limit) UnmarshalYAML(n *yaml.Node) error {
	if err := l.UnmarshalText([]byte(n.Value)); err != nil {
		return &yaml.TypeError{Errors: []string{err.Error()}}
	}
	return nil
}
