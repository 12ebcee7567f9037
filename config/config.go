// Package config reads the gateway's YAML file (see configs/gateway.example.yaml)
// into one Config. Each section's type belongs to the package that uses it
// (proxy.Config, limit.Rule, analytics.Config, ...); this package composes
// them, fills defaults, rejects unknown fields and values of the wrong type,
// and names the field and line of every problem. It does not decide whether
// the values make sense together: that is the gateway's one compile step
// (gateway.Compile), which check-config, start-up and every reload run.
// Its errors are located in the file by Config.Locate.
package config

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/cache"
	"github.com/linkgate/linkgate/edge"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/proxy"
	"github.com/linkgate/linkgate/stats"
	"github.com/linkgate/linkgate/suggest"
	"github.com/linkgate/linkgate/tenant"
	"github.com/linkgate/linkgate/tracing"
)

// Config is the whole configuration file, decoded and with defaults filled
// in, but not checked for meaning: compile it (gateway.Compile) before use.
// A Config returned by Load or Parse is never modified afterwards: a reload
// reads a new one.
type Config struct {
	Server    Server           `yaml:"server"`
	Admin     Admin            `yaml:"admin"`
	Upstream  proxy.Config     `yaml:"upstream"` // the default pool: hosts no route names
	Routes    []Route          `yaml:"routes"`
	Identity  limit.Identity   `yaml:"identity"`
	Limiter   limit.Config     `yaml:"limiter"`
	Rules     []limit.Rule     `yaml:"rules"`
	Analytics analytics.Config `yaml:"analytics"`
	Cache     cache.Config     `yaml:"cache"`
	Stats     Stats            `yaml:"stats"`
	// Tenants are the customers of the link service whose links are
	// counted and read apart (package tenant); none: every host is in the
	// default tenant.
	Tenants []tenant.Config `yaml:"tenants"`
	Runtime Runtime         `yaml:"runtime"`
	// Tracing exports OpenTelemetry traces (package tracing); off by
	// default.
	Tracing tracing.Config `yaml:"tracing"`

	src source // where the fields are in the file, for Locate
}

// source is where a Config was read from.
type source struct {
	file  string         // "" when parsed from bytes
	lines map[string]int // field path → line
	sum   [32]byte       // the SHA-256 of the bytes parsed
}

// Server is the client-facing listener.
type Server struct {
	Listen            string        `yaml:"listen"`
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	ReadTimeout       time.Duration `yaml:"read_timeout"`  // whole request, body included; 0: none
	BodyTimeout       time.Duration `yaml:"body_timeout"`  // longest wait for the next bytes of a request body; 0: none
	WriteTimeout      time.Duration `yaml:"write_timeout"` // whole response; 0: none
	IdleTimeout       time.Duration `yaml:"idle_timeout"`
	MaxHeaderBytes    int           `yaml:"max_header_bytes"`
	ShutdownTimeout   time.Duration `yaml:"shutdown_timeout"` // how long SIGTERM waits for in-flight requests
	TrustedProxies    []string      `yaml:"trusted_proxies"`  // CIDRs or addresses allowed to set X-Forwarded-For / X-Real-IP
	AccessLog         bool          `yaml:"access_log"`
	AllowMethods      []string      `yaml:"allow_methods"` // TRACE, CONNECT: proxied only when listed here
	// UnderscoresInHeaders passes request headers whose names hold '_' on
	// to the upstream (but never one an upstream reading '_' as '-' would
	// take for a header the gateway sets, removes or routes by); false, the
	// default, drops them, as nginx's underscores_in_headers off does.
	UnderscoresInHeaders bool `yaml:"underscores_in_headers"`
	// HTTPListen is a plain HTTP listener beside a TLS server.listen: it
	// answers ACME HTTP-01 challenges and redirects everything else to
	// https:// with 308. "": none.
	HTTPListen string `yaml:"http_listen"`
	// InternalListen is an internal listener serving HTTP/1.1 and cleartext
	// HTTP/2 (h2c, prior knowledge) to the same handler, for a trusted
	// hop in front. "": none.
	InternalListen string `yaml:"internal_listen"`
	// MaxConcurrentStreams is how many requests one HTTP/2 connection may
	// have in flight.
	MaxConcurrentStreams int `yaml:"max_concurrent_streams"`
	// HTTP3 serves HTTP/3 (QUIC) on the UDP port of server.listen's
	// address, beside TLS, and advertises it with Alt-Svc on the HTTP/1.1
	// and HTTP/2 answers. Off by default: it opens a UDP port a firewall
	// must let through, and a client told of a port that drops its
	// packets waits for its fallback to TCP.
	HTTP3 bool `yaml:"http3"`
	// TLS terminates TLS on server.listen (see package edge).
	TLS edge.Config `yaml:"tls"`
}

// Route sends the requests for some hosts to an upstream pool of their
// own (a "routes" entry): a branded domain's clicks to the servers that
// redirect them, the service's own site to its web servers. The hosts no
// route names go to the upstream section, the default pool.
type Route struct {
	// Hosts are the names the route serves, as a request's Host names
	// them: exact names (or IP addresses) and *.suffix wildcards one label
	// deep, as certificates take them. A host is in one route at most.
	Hosts []string `yaml:"hosts"`
	// Upstream is the route's pool: the fields of the upstream section,
	// with the same defaults.
	Upstream proxy.Config `yaml:"upstream"`
	// Cache is the route's own cache settings (its default_ttl).
	Cache cache.Route `yaml:"cache,omitempty"`
}

// UnmarshalYAML decodes a route over the defaults of its pool, as Parse
// decodes the file over Default (list items otherwise start from the zero
// value). It has the older form of yaml's Unmarshaler, which decodes with
// the file's own decoder, so that unknown fields inside a route are still
// errors, with their lines.
func (r *Route) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Route // without this method
	p := plain{Upstream: proxy.DefaultConfig()}
	if err := unmarshal(&p); err != nil {
		return err
	}
	*r = Route(p)
	return nil
}

// Stats is the "stats" section: where and how the stats API is served
// (stats.Config) and on which host (Host), which is the gateway's routing.
type Stats struct {
	stats.Config `yaml:",inline"`
	// Host is the one host whose requests under stats.prefix are the stats
	// API and chart page; on every other host those paths are proxied like
	// any other. "": every host.
	Host string `yaml:"host"`
}

// Admin is the operator's listener.
type Admin struct {
	Listen   string `yaml:"listen"`
	TokenEnv string `yaml:"token_env"` // env var holding the bearer token for /admin/*; unset: /admin/* answers 403
}

// Default returns the values of the fields a file leaves out.
func Default() *Config {
	return &Config{
		Server: Server{
			Listen:               "127.0.0.1:8080",
			ReadHeaderTimeout:    5 * time.Second,
			ReadTimeout:          60 * time.Second,
			BodyTimeout:          60 * time.Second,
			IdleTimeout:          120 * time.Second,
			MaxHeaderBytes:       64 << 10,
			ShutdownTimeout:      30 * time.Second,
			TrustedProxies:       []string{"127.0.0.1/32"},
			MaxConcurrentStreams: 250,
			TLS:                  edge.DefaultConfig(),
		},
		Admin:     Admin{Listen: "127.0.0.1:9090", TokenEnv: "LINKGATE_ADMIN_TOKEN"},
		Upstream:  proxy.DefaultConfig(),
		Identity:  limit.DefaultIdentity(),
		Limiter:   limit.DefaultConfig(),
		Analytics: analytics.DefaultConfig(),
		Cache:     cache.DefaultConfig(),
		Stats:     Stats{Config: stats.DefaultConfig()},
		Runtime:   Runtime{GOGC: DefaultGOGC},
		Tracing:   tracing.DefaultConfig(),
	}
}

// Runtime is the Go runtime's garbage collector, tuned in the file like
// the rest (the gateway applies it at start and on every reload, over
// the GOGC and GOMEMLIMIT environment variables).
type Runtime struct {
	// GOGC is how far the heap may grow over what the last collection
	// left live before the next one starts, in percent (Go's GOGC); -1
	// turns collections off until MemoryLimit is reached.
	GOGC int `yaml:"gogc"`
	// MemoryLimit is a soft limit on the memory of the Go runtime, in
	// bytes (Go's GOMEMLIMIT): near it the collector runs as often as it
	// must, whatever GOGC says. 0: none.
	MemoryLimit int64 `yaml:"memory_limit"`
}

// DefaultGOGC is runtime.gogc's default. A proxied request allocates
// little and keeps nothing, so the live heap is small and collections
// are frequent at Go's 100: at 400 they are a quarter as many, for about
// 5 % less CPU per request (README, Benchmarks) and a heap of a few tens
// of MiB under load.
const DefaultGOGC = 400

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

// Load reads and decodes the file at path (see Parse).
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
	if c != nil {
		c.src.file = path
	}
	return c, err
}

// ErrEmpty is the error of a file without a single field: a file truncated
// to nothing, or one being written, never a config that runs on defaults.
var ErrEmpty = errors.New("the file is empty; a config needs at least upstream.targets")

// Parse decodes a file's contents. Unknown fields and values of the wrong
// type are errors, so that a typo never passes silently (an unknown field
// is named with the fields it could have meant); omitted fields take their
// defaults. An empty file (nothing but comments and blanks) is ErrEmpty, and
// a second YAML document after "---" is an error, never silently ignored.
func Parse(data []byte) (*Config, error) {
	var doc yaml.Node
	lines, fields := map[string]int{}, map[int][]string{}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, decodeError(err, nil, fields)
	}
	if len(doc.Content) == 0 || doc.Content[0].Tag == "!!null" {
		return nil, &Error{Err: ErrEmpty}
	}
	index(&doc, "", lines, fields)
	c := Default()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && err != io.EOF {
		return nil, decodeError(err, data, fields)
	}
	var next yaml.Node
	if err := dec.Decode(&next); err != io.EOF {
		if err != nil {
			return nil, decodeError(err, nil, fields)
		}
		// A trailing "---" with nothing but comments after it is harmless.
		if len(next.Content) > 0 && next.Content[0].Tag != "!!null" {
			return nil, &Error{Line: next.Line, Err: ErrSecondDocument}
		}
	}
	c.src.lines = lines
	c.src.sum = sha256.Sum256(data)
	return c, nil
}

// Sum is the SHA-256 of the file's contents as parsed: what a watch of
// the file compares the file with to tell a change.
func (c *Config) Sum() [32]byte { return c.src.sum }

// ErrSecondDocument is the error of a file holding more than one YAML
// document: the gateway would read the first and ignore the rest.
var ErrSecondDocument = errors.New(`a second YAML document starts here ("---"): a config file is one document, and what follows would be ignored`)

// trimmed is an error whose message lost its leading field path to an
// Error's Path; it still unwraps to the original.
type trimmed struct {
	msg string
	err error
}

func (t trimmed) Error() string { return t.msg }
func (t trimmed) Unwrap() error { return t.err }

// fieldPath matches the field path a compile error starts with:
// "rules[2].allow[0]", "upstream.targets", "server.listen".
var fieldPath = regexp.MustCompile(`^[a-z][a-z0-9_]*(\[\d+\])*(\.[a-z][a-z0-9_]*(\[\d+\])*)*$`)

// Locate returns err as an *Error naming the file, the field and its line,
// when err's message starts with a field path ("rules[1].name: ...", as
// every compile step's errors do); other errors are returned as they are.
// The line is that of the deepest part of the path present in the file:
// for a field left at its default, the line of its section.
func (c *Config) Locate(err error) error {
	var ce *Error
	if err == nil || errors.As(err, &ce) {
		return err
	}
	path, rest, ok := strings.Cut(err.Error(), ": ")
	if !ok || !fieldPath.MatchString(path) {
		return err
	}
	e := &Error{File: c.src.file, Path: path, Err: trimmed{rest, err}}
	for p := path; p != ""; {
		if l, ok := c.src.lines[p]; ok {
			e.Line = l
			break
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return e
}

// lineMsg matches the yaml library's own errors, which start with their
// line.
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

// decodeError turns an error of decoding data into an Error naming the
// line of the first problem and the field there (fields, by line); any
// others follow in its message, each with its line. It is the one place
// that finds where a decoding error is in the file. The yaml library's own
// errors start with their line ("line 7: ..."); those of a value's own
// decoding (a limit.Limit or a rollup.Tier refusing "5/fortnight") carry
// none, and refused finds them in data (nil: not looked for).
func decodeError(err error, data []byte, fields map[int][]string) *Error {
	msgs := []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	e := &Error{}
	seen := map[string]int{}
	for i, msg := range msgs {
		line := 0
		if m := lineMsg.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		} else if te != nil && data != nil {
			seen[msg]++
			if n := refused(data, msg, seen[msg]); n != nil {
				line = n.Line
			}
		}
		path := fieldAt(fields[line])
		if m := unknownField.FindStringSubmatch(msg); m != nil {
			path, msg = unknown(m[1], fields[line])
			if i > 0 && path != "" {
				msg = path + ": " + msg // a later error names its field too
			}
		}
		switch {
		case i == 0:
			e.Line, e.Path = line, path
		case line > 0:
			msg = fmt.Sprintf("line %d: %s", line, msg)
		}
		msgs[i] = msg
	}
	e.Err = errors.New(strings.Join(msgs, "; "))
	return e
}

// unknownField matches the yaml library's error for a key no field of the
// struct has.
var unknownField = regexp.MustCompile(`^field (\S+) not found in type \S+$`)

// unknown returns the path of the unknown key name among paths (those of
// its line) and the message that says so in the file's own words: the
// fields of the section that holds it, and the one within two edits of
// name it most likely meant. The yaml library's own message names Go
// types ("field servr not found in type config.Config").
func unknown(name string, paths []string) (path, msg string) {
	parent := ""
	for _, p := range paths {
		if p == name || strings.HasSuffix(p, "."+name) {
			path, parent = p, strings.TrimSuffix(strings.TrimSuffix(p, name), ".")
			break
		}
	}
	known := fieldsAt(parent)
	if len(known) == 0 {
		return path, fmt.Sprintf("unknown field %q", name)
	}
	where := "the file's top level"
	if parent != "" {
		where = parent
	}
	msg = fmt.Sprintf("unknown field; %s has %s", where, strings.Join(known, ", "))
	if guess := suggest.Closest(name, known...); guess != "" {
		msg = fmt.Sprintf("unknown field (did you mean %s?); %s has %s", guess, where, strings.Join(known, ", "))
	}
	if path == "" {
		msg = fmt.Sprintf("%q: %s", name, msg)
	}
	return path, msg
}

// fieldsAt returns the names of the fields of the section at path
// ("server", "rules[0].match", "" for the top level), as a file writes
// them, or nil when path names no section.
func fieldsAt(path string) []string {
	t := reflect.TypeFor[Config]()
	if path != "" {
		for _, part := range strings.Split(path, ".") {
			name, index, _ := strings.Cut(part, "[")
			f, ok := yamlField(t, name)
			if !ok {
				return nil
			}
			t = f.Type
			for range strings.Count(index, "]") {
				if t.Kind() != reflect.Slice {
					return nil
				}
				t = t.Elem()
			}
		}
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	return fieldsOf(t)
}

// fieldsOf returns the names of the fields of struct type t, as a file
// writes them.
func fieldsOf(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		if f := t.Field(i); inline(f) {
			names = append(names, fieldsOf(f.Type)...)
		} else if n := yamlName(f); n != "" {
			names = append(names, n)
		}
	}
	return names
}

// yamlField returns the field of struct type t that a file names name,
// looking into the structs t inlines.
func yamlField(t reflect.Type, name string) (reflect.StructField, bool) {
	if t.Kind() != reflect.Struct {
		return reflect.StructField{}, false
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if inline(f) {
			if g, ok := yamlField(f.Type, name); ok {
				return g, true
			}
		} else if yamlName(f) == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// inline reports whether f's fields are written at its struct's level
// (yaml:",inline").
func inline(f reflect.StructField) bool {
	_, flags, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return f.IsExported() && f.Type.Kind() == reflect.Struct && slices.Contains(strings.Split(flags, ","), "inline")
}

// yamlName is the name a file gives f, "" when it has none.
func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	switch name {
	case "-":
		return ""
	case "":
		return strings.ToLower(f.Name) // the yaml library's default
	}
	return name
}

// refused returns the value of data that its type refused with msg the
// n-th time in the document, or nil when there is none. A type's own
// decoding knows no line, but yaml decodes in document order, so the value
// is the last of the shortest beginning of the document (see cut) whose
// decoding refuses msg n times: found by bisection, a few decodings.
func refused(data []byte, msg string, n int) *yaml.Node {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return nil
	}
	vs := values(&doc, nil)
	k := sort.Search(len(vs)+1, func(k int) bool {
		var d yaml.Node
		yaml.Unmarshal(data, &d) // it parsed above
		cut(&d, k)
		var te *yaml.TypeError
		if !errors.As(d.Decode(Default()), &te) {
			return false
		}
		count := 0
		for _, e := range te.Errors {
			if e == msg {
				count++
			}
		}
		return count >= n
	})
	if k == 0 || k > len(vs) {
		return nil
	}
	return vs[k-1]
}

// values appends to vs the values under n, each mapping value and sequence
// item, in document order: a value before those inside it.
func values(n *yaml.Node, vs []*yaml.Node) []*yaml.Node {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			vs = values(c, vs)
		}
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			vs = values(n.Content[i], append(vs, n.Content[i]))
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			vs = values(c, append(vs, c))
		}
	}
	return vs
}

// cut keeps the first k values under n, in the order of values, and removes
// the others with their keys; it returns how many of the k are left for
// what follows n. A map or list keeps what comes before the cut, so what
// is decoded before it is decoded as in the whole document.
func cut(n *yaml.Node, k int) int {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			k = cut(c, k)
		}
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			if k == 0 {
				n.Content = n.Content[:i-1]
				return 0
			}
			k = cut(n.Content[i], k-1)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if k == 0 {
				n.Content = n.Content[:i]
				return 0
			}
			k = cut(c, k-1)
		}
	}
	return k
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
