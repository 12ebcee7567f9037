package tracing_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/tracing"
)

// TestCompile: every section Compile refuses names its field and says
// why, never printing a credential; the ones it accepts say where spans
// go. Off (no endpoint) is the default.
func TestCompile(t *testing.T) {
	env := map[string]string{"OTLP_HEADERS": "Authorization=Bearer%20s3cret,X-Scope-OrgID=acme", "BAD_HEADERS": "Authorization", "BAD_VALUE": "X=s3cret%0Aevil"}
	getenv := func(k string) string { return env[k] }
	with := func(f func(*tracing.Config)) tracing.Config {
		c := tracing.DefaultConfig()
		c.OTLPEndpoint = "http://collector:4318"
		f(&c)
		return c
	}
	for _, c := range []struct {
		name string
		cfg  tracing.Config
		want string // the error's start; "": accepted
		url  string
	}{
		{"default", tracing.DefaultConfig(), "", ""},
		{"base URL", with(func(*tracing.Config) {}), "", "http://collector:4318/v1/traces"},
		{"root path", with(func(c *tracing.Config) { c.OTLPEndpoint = "https://otlp.example/" }), "", "https://otlp.example/v1/traces"},
		{"full URL", with(func(c *tracing.Config) { c.OTLPEndpoint = "https://otlp.example/api/traces" }), "", "https://otlp.example/api/traces"},
		{"headers", with(func(c *tracing.Config) { c.HeadersEnv = "OTLP_HEADERS" }), "", "http://collector:4318/v1/traces"},
		{"sample over 1", with(func(c *tracing.Config) { c.Sample = 1.5 }), "tracing.sample: 1.5 is more than 1", ""},
		{"sample NaN", with(func(c *tracing.Config) { c.Sample = math.NaN() }), "tracing.sample: NaN", ""},
		{"queue", with(func(c *tracing.Config) { c.MaxQueue = 1 }), "tracing.max_queue: 1 is less than 16", ""},
		{"timeout", with(func(c *tracing.Config) { c.ExportTimeout = time.Hour }), "tracing.export_timeout: 1h is more than 1m", ""},
		{"no service name", with(func(c *tracing.Config) { c.ServiceName = " " }), "tracing.service_name:", ""},
		{"scheme", with(func(c *tracing.Config) { c.OTLPEndpoint = "collector:4318" }), "tracing.otlp_endpoint: \"collector:4318\": want an http:// or https:// URL", ""},
		{"grpc", with(func(c *tracing.Config) { c.OTLPEndpoint = "grpc://collector:4317" }), "tracing.otlp_endpoint:", ""},
		{"no host", with(func(c *tracing.Config) { c.OTLPEndpoint = "http:///v1/traces" }), "tracing.otlp_endpoint:", ""},
		{"port", with(func(c *tracing.Config) { c.OTLPEndpoint = "http://collector:99999" }), "tracing.otlp_endpoint:", ""},
		{"query", with(func(c *tracing.Config) { c.OTLPEndpoint = "http://collector:4318/v1/traces?x=1" }), "tracing.otlp_endpoint:", ""},
		{"credentials in the URL", with(func(c *tracing.Config) { c.OTLPEndpoint = "http://u:s3cret@collector:4318" }), "tracing.otlp_endpoint:", ""},
		{"headers unset", with(func(c *tracing.Config) { c.HeadersEnv = "NOT_SET" }), "tracing.headers_env: the environment variable NOT_SET is not set", ""},
		{"headers not pairs", with(func(c *tracing.Config) { c.HeadersEnv = "BAD_HEADERS" }), "tracing.headers_env: the value of BAD_HEADERS: pair 1", ""},
		{"header value", with(func(c *tracing.Config) { c.HeadersEnv = "BAD_VALUE" }), "tracing.headers_env: the value of BAD_VALUE: the value of X", ""},
		{"headers while off", func() tracing.Config { c := tracing.DefaultConfig(); c.HeadersEnv = "OTLP_HEADERS"; return c }(), "tracing.headers_env: set, but tracing.otlp_endpoint is empty", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := tracing.Compile(c.cfg, getenv)
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if p.URL() != c.url || p.Enabled() != (c.url != "") {
					t.Errorf("URL %q (enabled %v), want %q", p.URL(), p.Enabled(), c.url)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Fatalf("error %v, want one starting %q", err, c.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error shows a credential: %v", err)
			}
		})
	}
}

// TestRestartOnly: a reload takes the sample and keeps the rest, naming
// what it kept.
func TestRestartOnly(t *testing.T) {
	run := tracing.DefaultConfig()
	run.OTLPEndpoint = "http://a:4318"
	next := run
	next.Sample, next.OTLPEndpoint, next.MaxQueue = 0.5, "http://b:4318", 64
	eff, changed := tracing.RestartOnly(run, next)
	if eff.Sample != 0.5 || eff.OTLPEndpoint != run.OTLPEndpoint || eff.MaxQueue != run.MaxQueue {
		t.Errorf("effective %+v", eff)
	}
	if strings.Join(changed, ",") != "tracing.otlp_endpoint,tracing.max_queue" {
		t.Errorf("changed %v", changed)
	}
}
