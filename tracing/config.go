package tracing

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/linkgate/linkgate/bound"
)

// Config is the "tracing" section of the file. Tracing is off while
// OTLPEndpoint is empty, the default.
type Config struct {
	// OTLPEndpoint is the collector's OTLP/HTTP address: a base URL
	// ("http://collector:4318"), to which /v1/traces is added, or the
	// full URL of its traces ("https://otlp.example.com/v1/traces"), sent
	// to as written. https:// verifies the collector's certificate.
	// "": no tracing.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// Sample is the share of the requests that begin a trace at the
	// gateway whose spans are kept and exported, 0 to 1. A request from a
	// trusted hop that carries a traceparent follows its sampled flag.
	Sample float64 `yaml:"sample"`
	// ServiceName is the service.name of the spans.
	ServiceName string `yaml:"service_name"`
	// HeadersEnv names an environment variable holding the fields sent to
	// the collector with every export, for its authentication, as
	// OTEL_EXPORTER_OTLP_HEADERS writes them: "Authorization=Bearer%20x,
	// X-Scope=a" (values URL-encoded). "": none.
	HeadersEnv string `yaml:"headers_env"`
	// MaxQueue is how many ended spans wait for export at most: past it,
	// a span is dropped and counted, never waited for.
	MaxQueue int `yaml:"max_queue"`
	// ExportTimeout bounds one export to the collector.
	ExportTimeout time.Duration `yaml:"export_timeout"`
}

// DefaultConfig is the section's defaults: off.
func DefaultConfig() Config {
	return Config{Sample: 0.01, ServiceName: "linkgate", MaxQueue: 2048, ExportTimeout: 10 * time.Second}
}

// Bounds are the ranges of the section's numbers, checked first. A queue
// holds a span's attributes (about 1 KiB): the top is 100 MiB or so.
var Bounds = bound.Section[Config]{
	bound.At("max_queue", bound.Counts(16, 100_000), func(c Config) int { return c.MaxQueue }),
	bound.At("export_timeout", bound.Durations(100*time.Millisecond, time.Minute), func(c Config) time.Duration { return c.ExportTimeout }),
}

// Plan is the section compiled: the collector's URL and the fields sent
// to it, read from the environment once.
type Plan struct {
	cfg     Config
	url     string            // the traces URL, "" when off
	headers map[string]string // sent with every export
}

// Enabled reports whether spans are exported.
func (p *Plan) Enabled() bool { return p != nil && p.url != "" }

// Config is the section the plan was compiled from.
func (p *Plan) Config() Config { return p.cfg }

// URL is where spans are sent, "" when tracing is off.
func (p *Plan) URL() string { return p.url }

// Compile checks the section (errors name the field under "tracing")
// and reads the collector's fields from the environment with getenv.
// Every section it accepts starts: nothing is opened or dialled here, and
// nothing at start fails on what the section says.
func Compile(c Config, getenv func(string) string) (*Plan, error) {
	if err := Bounds.Check("tracing", c); err != nil {
		return nil, err
	}
	if err := bound.Fraction("tracing.sample", c.Sample); err != nil {
		return nil, err
	}
	if n := strings.TrimSpace(c.ServiceName); n == "" || n != c.ServiceName || len(n) > 255 {
		return nil, fmt.Errorf("tracing.service_name: %q: want a name of 1 to 255 characters without leading or trailing spaces", c.ServiceName)
	}
	p := &Plan{cfg: c}
	if c.OTLPEndpoint == "" {
		if c.HeadersEnv != "" {
			return nil, fmt.Errorf("tracing.headers_env: set, but tracing.otlp_endpoint is empty (tracing off): give the collector's address, or remove headers_env")
		}
		return p, nil
	}
	var err error
	if p.url, err = traceURL(c.OTLPEndpoint); err != nil {
		shown := c.OTLPEndpoint
		if u, perr := url.Parse(shown); perr == nil {
			shown = u.Redacted() // the password, if any, out of the log
		}
		return nil, fmt.Errorf("tracing.otlp_endpoint: %q: %w", shown, err)
	}
	if name := c.HeadersEnv; name != "" {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			return nil, fmt.Errorf("tracing.headers_env: the environment variable %s is not set or empty; the collector would get no credentials (set it, or remove headers_env)", name)
		}
		if p.headers, err = parseHeaders(v); err != nil {
			return nil, fmt.Errorf("tracing.headers_env: the value of %s: %w", name, err)
		}
	}
	return p, nil
}

// traceURL is the URL spans are posted to for the endpoint e: e with
// /v1/traces when it has no path, else e as written.
func traceURL(e string) (string, error) {
	u, err := url.Parse(e)
	switch {
	case err != nil:
		return "", fmt.Errorf("not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("want an http:// or https:// URL, like http://collector:4318")
	case u.Host == "" || u.Hostname() == "":
		return "", fmt.Errorf("no host")
	case u.User != nil:
		return "", fmt.Errorf("credentials in the URL would be logged with it: put them in the variable tracing.headers_env names")
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return "", fmt.Errorf("a query or fragment: the exporter sends to a path only")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("the port must be a number from 1 to 65535")
		}
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// parseHeaders reads fields written as OTEL_EXPORTER_OTLP_HEADERS writes
// them: name=value pairs apart by commas, values URL-encoded. Errors
// name the pair by its place, never its value (a credential).
func parseHeaders(s string) (map[string]string, error) {
	out := map[string]string{}
	for i, pair := range strings.Split(s, ",") {
		name, raw, ok := strings.Cut(pair, "=")
		name = strings.TrimSpace(name)
		if !ok || !httpguts.ValidHeaderFieldName(name) {
			return nil, fmt.Errorf("pair %d is not name=value with a field name (Authorization=Bearer%%20...)", i+1)
		}
		v, err := url.PathUnescape(strings.TrimSpace(raw))
		if err != nil || !httpguts.ValidHeaderFieldValue(v) {
			return nil, fmt.Errorf("the value of %s (pair %d) is not a field value once URL-decoded", name, i+1)
		}
		out[name] = v
	}
	return out, nil
}

// RestartOnly returns the section a reload runs with: next, but for the
// fields a running process keeps until it restarts (the collector, its
// fields, the service name and the queue: the exporter is built once, at
// start), with the names of those that differed. The sample takes effect
// on reload.
func RestartOnly(run, next Config) (Config, []string) {
	eff := run
	eff.Sample = next.Sample
	var changed []string
	for _, f := range []struct {
		name string
		same bool
	}{
		{"tracing.otlp_endpoint", run.OTLPEndpoint == next.OTLPEndpoint},
		{"tracing.service_name", run.ServiceName == next.ServiceName},
		{"tracing.headers_env", run.HeadersEnv == next.HeadersEnv},
		{"tracing.max_queue", run.MaxQueue == next.MaxQueue},
		{"tracing.export_timeout", run.ExportTimeout == next.ExportTimeout},
	} {
		if !f.same {
			changed = append(changed, f.name)
		}
	}
	return eff, changed
}
