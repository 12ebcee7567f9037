package gateway_test

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/gateway"
	"github.com/linkgate/linkgate/internal/testkit"
)

// otlpReceiver is a collector of the test's own: the OTLP/HTTP traces
// endpoint, each export decoded with the OTLP protobuf types, as a
// collector takes them.
type otlpReceiver struct {
	URL     string
	mu      sync.Mutex
	spans   []rspan
	service map[string]bool // the service.name of every export
	bad     []string        // exports that were not OTLP/HTTP protobuf
}

// rspan is a span as the receiver got it.
type rspan struct {
	name             string
	kind             tracepb.Span_SpanKind
	trace, id, paren string // hex
	attrs            map[string]string
	errored          bool
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	o := &otlpReceiver{service: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(o.serve))
	t.Cleanup(srv.Close)
	o.URL = srv.URL
	return o
}

func (o *otlpReceiver) serve(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(data, &req)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil || r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		o.bad = append(o.bad, fmt.Sprintf("%s %s %s: %v", r.Method, r.URL.Path, r.Header.Get("Content-Type"), err))
		http.Error(w, "not an OTLP/HTTP protobuf export", http.StatusBadRequest)
		return
	}
	for _, rs := range req.ResourceSpans {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				o.service[kv.GetValue().GetStringValue()] = true
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				o.spans = append(o.spans, rspan{
					name: s.Name, kind: s.Kind, trace: hex.EncodeToString(s.TraceId), id: hex.EncodeToString(s.SpanId),
					paren: hex.EncodeToString(s.ParentSpanId), attrs: attrText(s.Attributes),
					errored: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
				})
			}
		}
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// attrText writes every attribute's value as text.
func attrText(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		switch v := kv.GetValue().Value.(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = fmt.Sprint(v.IntValue)
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = fmt.Sprint(v.BoolValue)
		default:
			m[kv.Key] = kv.GetValue().String()
		}
	}
	return m
}

// find returns the spans named name that match every attribute of want.
func (o *otlpReceiver) find(name string, want map[string]string) []rspan {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []rspan
	for _, s := range o.spans {
		if s.name != name {
			continue
		}
		ok := true
		for k, v := range want {
			if s.attrs[k] != v {
				ok = false
			}
		}
		if ok {
			out = append(out, s)
		}
	}
	return out
}

// one waits for the one span named name with the attributes want.
func (o *otlpReceiver) one(t *testing.T, name string, want map[string]string) rspan {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, fmt.Sprintf("a %s span with %v", name, want), func() bool { return len(o.find(name, want)) > 0 })
	got := o.find(name, want)
	if len(got) != 1 {
		t.Fatalf("%d %s spans with %v, want 1: %+v", len(got), name, want, got)
	}
	return got[0]
}

// childOf returns the span named name whose parent is p.
func (o *otlpReceiver) childOf(t *testing.T, name string, p rspan) rspan {
	t.Helper()
	var got []rspan
	testkit.Eventually(t, 20*time.Second, "the "+name+" child of span "+p.id, func() bool {
		got = nil
		for _, s := range o.find(name, nil) {
			if s.paren == p.id && s.trace == p.trace {
				got = append(got, s)
			}
		}
		return len(got) > 0
	})
	if len(got) != 1 {
		t.Fatalf("%d %s children of %s", len(got), name, p.id)
	}
	return got[0]
}

// parseTraceparent splits a W3C traceparent: trace id, parent id, flags.
func parseTraceparent(t *testing.T, v string) (trace, parent, flags string) {
	t.Helper()
	p := strings.Split(v, "-")
	if len(p) != 4 || p[0] != "00" || len(p[1]) != 32 || len(p[2]) != 16 {
		t.Fatalf("traceparent %q is not a W3C version 00 traceparent", v)
	}
	return p[1], p[2], p[3]
}

// clientFrom is an HTTP client whose connections come from the local
// address from (127.0.0.1 is a trusted proxy of the test configs,
// 127.0.0.2 is not).
func clientFrom(from string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	return &http.Client{
		Transport:     &http.Transport{DialContext: d.DialContext},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       testkit.Slack(30 * time.Second),
	}
}

// seenUpstream is an upstream like tinyURL that keeps the trace context
// of every request it gets, by its X-Test-Request field.
type seenUpstream struct {
	mu    sync.Mutex
	state map[string][2]string // X-Test-Request → traceparent, tracestate
}

func (u *seenUpstream) get(id string) (traceparent, tracestate string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := u.state[id]
	return s[0], s[1]
}

func newSeenUpstream(t *testing.T) (*seenUpstream, string) {
	u := &seenUpstream{state: map[string][2]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("/{key}", func(w http.ResponseWriter, r *http.Request) {
		if id := r.Header.Get("X-Test-Request"); id != "" {
			u.mu.Lock()
			u.state[id] = [2]string{r.Header.Get("Traceparent"), r.Header.Get("Tracestate")}
			u.mu.Unlock()
		}
		if r.PathValue("key") == "go" {
			http.Redirect(w, r, "https://go.dev", http.StatusFound)
			return
		}
		http.NotFound(w, r)
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return u, s.URL
}

// TestTracing runs a gateway exporting every trace (sample: 1) to a
// receiver of the test's own, and checks the spans of five requests: a
// visit from a trusted hop that sends a traceparent (its trace
// continued, through the gateway's span and its upstream child, to the
// upstream), the same from an untrusted client (its traceparent and
// tracestate ignored and replaced), a request the limiter lets through
// then the one it refuses, and a /stats request; then the flusher's
// spans.
func TestTracing(t *testing.T) {
	t.Parallel()
	rcv := newOTLPReceiver(t)
	up, upURL := newSeenUpstream(t)
	r := start(t, fmt.Sprintf(`server:
  listen: 127.0.0.1:0
  trusted_proxies: [127.0.0.1/32]
admin:
  listen: 127.0.0.1:0
upstream:
  targets: [%s]
  health_check: {path: /healthz, interval: 100ms}
rules:
  - {name: burst, match: {path: /limited}, key: ip, limits: [1/m]}
analytics:
  flush_interval: 200ms
  embedded: {path: %s}
tracing:
  otlp_endpoint: %s
  sample: 1
  service_name: linkgate-test
`, upURL, t.TempDir(), rcv.URL))
	trusted, untrusted := clientFrom("127.0.0.1"), clientFrom("127.0.0.2")
	send := func(c *http.Client, path, id string, want int, hdr ...string) {
		t.Helper()
		req, _ := http.NewRequest("GET", r.url(path), nil)
		req.Header.Set("X-Test-Request", id)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	const (
		hopTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
		hopParent = "00f067aa0ba902b7"
		forged    = "0af7651916cd43dd8448eb211c80319c"
	)
	send(trusted, "/go", "trusted", http.StatusFound, "Traceparent", "00-"+hopTrace+"-"+hopParent+"-01", "Tracestate", "hop=1")
	send(untrusted, "/go", "untrusted", http.StatusFound, "Traceparent", "00-"+forged+"-b7ad6b7169203331-01", "Tracestate", "forged=1")
	send(trusted, "/limited", "passed", http.StatusNotFound)
	send(trusted, "/limited", "refused", http.StatusTooManyRequests)
	send(trusted, "/stats/go", "stats", http.StatusOK)

	// 1. The trusted hop's trace, continued: the gateway's span is its
	// child, the upstream span the gateway's, and the upstream is sent
	// the upstream span as its parent, with the hop's tracestate.
	hop := rcv.one(t, "GET", map[string]string{"url.path": "/go", "client.address": "127.0.0.1"})
	if hop.trace != hopTrace || hop.paren != hopParent || hop.kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("the trusted hop's request: trace %s parent %s kind %v, want trace %s parent %s, a server span", hop.trace, hop.paren, hop.kind, hopTrace, hopParent)
	}
	for k, v := range map[string]string{
		"http.response.status_code": "302", "linkgate.route": "upstream", "linkgate.limit.decision": "passed",
		"linkgate.visit.counted": "true", "network.protocol.version": "1.1", "server.address": r.g.Addr().String(),
	} {
		if hop.attrs[k] != v {
			t.Errorf("the trusted hop's request: %s = %q, want %q (%v)", k, hop.attrs[k], v, hop.attrs)
		}
	}
	if hop.attrs["linkgate.cache"] == "" || hop.attrs["linkgate.request_id"] == "" {
		t.Errorf("the trusted hop's request: no cache result or request id: %v", hop.attrs)
	}
	hopUp := rcv.childOf(t, "upstream", hop)
	if hopUp.kind != tracepb.Span_SPAN_KIND_CLIENT || hopUp.attrs["http.response.status_code"] != "302" || hopUp.attrs["linkgate.pool"] != "upstream" {
		t.Errorf("the upstream span: kind %v, attributes %v", hopUp.kind, hopUp.attrs)
	}
	tp, ts := up.get("trusted")
	if tr, parent, flags := parseTraceparent(t, tp); tr != hopTrace || parent != hopUp.id || flags != "01" {
		t.Errorf("the upstream got traceparent %q, want trace %s, parent %s (the upstream span), sampled", tp, hopTrace, hopUp.id)
	}
	if ts != "hop=1" {
		t.Errorf("the upstream got tracestate %q, want the trusted hop's hop=1", ts)
	}

	// 2. An untrusted client's trace context: ignored, a new trace, and
	// the upstream is sent the gateway's.
	own := rcv.one(t, "GET", map[string]string{"url.path": "/go", "client.address": "127.0.0.2"})
	if own.trace == forged || own.paren != "" {
		t.Errorf("an untrusted client's request: trace %s parent %q; want a new trace, no parent", own.trace, own.paren)
	}
	ownUp := rcv.childOf(t, "upstream", own)
	tp, ts = up.get("untrusted")
	if tr, parent, _ := parseTraceparent(t, tp); tr != own.trace || parent != ownUp.id {
		t.Errorf("the upstream got traceparent %q from an untrusted client's request, want trace %s parent %s", tp, own.trace, ownUp.id)
	}
	if ts != "" {
		t.Errorf("the upstream got tracestate %q from an untrusted client's request, want none", ts)
	}

	// 3, 4. The limiter's decisions.
	passed := rcv.one(t, "GET", map[string]string{"url.path": "/limited", "linkgate.limit.decision": "passed"})
	if passed.attrs["http.response.status_code"] != "404" || passed.attrs["linkgate.visit.counted"] != "false" {
		t.Errorf("the request the limiter passed: %v", passed.attrs)
	}
	refused := rcv.one(t, "GET", map[string]string{"url.path": "/limited", "linkgate.limit.decision": "refused"})
	if refused.attrs["linkgate.limit.rule"] != "burst" || refused.attrs["http.response.status_code"] != "429" || refused.attrs["linkgate.route"] != "upstream" {
		t.Errorf("the request the limiter refused: %v", refused.attrs)
	}
	if n := len(rcv.find("upstream", nil)); n != 3 {
		t.Errorf("%d upstream spans, want 3: the refused request and /stats reach no upstream", n)
	}

	// 5. The stats API.
	stats := rcv.one(t, "GET", map[string]string{"url.path": "/stats/go"})
	if stats.attrs["linkgate.route"] != "stats" || stats.attrs["http.response.status_code"] != "200" {
		t.Errorf("the /stats request: %v", stats.attrs)
	}

	// The flusher's writes, each a span of its own, and the visits.
	testkit.Eventually(t, 20*time.Second, "flush spans with the two visits", func() bool {
		visits := 0
		for _, s := range rcv.find("analytics.flush", nil) {
			n, _ := strconv.Atoi(s.attrs["linkgate.batch.visits"])
			if s.paren == "" {
				visits += n
			}
		}
		return visits >= 2 // in one batch or two
	})
	// The receiver has the spans before the exporter has its answer and
	// counts them: wait for the count.
	testkit.Eventually(t, 20*time.Second, "linkgate_tracing_spans_exported_total at least 8", func() bool {
		return testkit.Metric(t, r.g.Registry(), "linkgate_tracing_spans_exported_total") >= 8
	})
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.bad) > 0 || !rcv.service["linkgate-test"] || len(rcv.service) != 1 {
		t.Errorf("exports: bad %v, service names %v", rcv.bad, rcv.service)
	}
}

// TestTracingCollectorDown: a collector that refuses connections, and one
// that takes them and never answers, fail no request and hold none: the
// spans are dropped and counted. With the collector hanging for the whole
// test, exactly max_queue spans wait and every later one is dropped at
// once.
func TestTracingCollectorDown(t *testing.T) {
	t.Parallel()
	up := tinyURL(t)
	release := make(chan struct{})
	hung := testkit.ServeTCP(t, func(_ int, c net.Conn) {
		go io.Copy(io.Discard, c)
		<-release
		c.Close()
	})
	for _, c := range []struct {
		name, endpoint, reason string
	}{
		{"refused", "http://" + testkit.DeadAddr(t), "export_failed"},
		{"hung", "http://" + hung, "queue_full"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := start(t, testkit.BaseConfig(up.URL)+fmt.Sprintf(`tracing:
  otlp_endpoint: %s
  sample: 1
  max_queue: 16
  export_timeout: 1m
`, c.endpoint))
			const n = 100
			for i := range n {
				resp, body := testkit.Do(t, "GET", r.url("/go"), nil)
				if resp.StatusCode != http.StatusFound {
					t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
				}
			}
			dropped := func() float64 {
				return testkit.Metric(t, r.g.Registry(), "linkgate_tracing_spans_dropped_total", "reason", c.reason)
			}
			if c.reason == "queue_full" {
				// Two spans a request (the request's, the upstream's): 16
				// wait for the hung export, the rest are dropped.
				if got := dropped(); got != 2*n-16 {
					t.Errorf("dropped %v spans with the queue full, want %d", got, 2*n-16)
				}
			} else {
				testkit.Eventually(t, 20*time.Second, "spans dropped with their failed export", func() bool { return dropped() > 0 })
			}
			if got := testkit.Metric(t, r.g.Registry(), "linkgate_tracing_spans_exported_total"); got != 0 {
				t.Errorf("%v spans exported to a collector that is down", got)
			}
		})
	}
	close(release)
}

// TestTracingReload: a reload applies tracing.sample and keeps the
// collector, naming it in restart_required.
func TestTracingReload(t *testing.T) {
	t.Parallel()
	rcv := newOTLPReceiver(t)
	up := tinyURL(t)
	cfg := func(endpoint, sample string) string {
		return testkit.BaseConfig(up.URL) + fmt.Sprintf("tracing:\n  otlp_endpoint: %s\n  sample: %s\n", endpoint, sample)
	}
	r := start(t, cfg(rcv.URL, "0"))
	r.watching(t)
	send := func(id string) {
		t.Helper()
		resp, body := testkit.Do(t, "GET", r.url("/go"), nil, "X-Request-Id", id)
		if resp.StatusCode != http.StatusFound {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	send("unsampled")
	testkit.WriteFile(t, r.path, cfg("http://"+testkit.DeadAddr(t), "1"))
	testkit.Eventually(t, 20*time.Second, "the reload", func() bool { return r.logs.Count("config reloaded", nil) >= 2 })
	if !strings.Contains(r.logs.String(), "tracing.otlp_endpoint") {
		t.Errorf("the reload did not name tracing.otlp_endpoint as restart-only:\n%s", r.logs.String())
	}
	send("sampled")
	rcv.one(t, "GET", map[string]string{"linkgate.request_id": "sampled"})
	if got := rcv.find("GET", map[string]string{"linkgate.request_id": "unsampled"}); len(got) > 0 {
		t.Errorf("a request sent with sample: 0 was exported: %+v", got)
	}
}

// TestTracingFlushedAtExit: the spans that wait are sent when the gateway
// stops (as at a binary upgrade's handover, which stops it the same way),
// after the final analytics flush, whose span goes too: they are at the
// receiver once Serve has returned, with no wait for the next batch.
func TestTracingFlushedAtExit(t *testing.T) {
	t.Parallel()
	rcv := newOTLPReceiver(t)
	up := tinyURL(t)
	r := start(t, analyticsConfig(up.URL, "  embedded: {path: "+t.TempDir()+"}", "1h")+"tracing:\n  otlp_endpoint: "+rcv.URL+"\n  sample: 1\n")
	resp, body := testkit.Do(t, "GET", r.url("/go"), nil, "X-Request-Id", "last")
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if err := r.shutdown(); err != nil {
		t.Fatal(err)
	}
	if got := rcv.find("GET", map[string]string{"linkgate.request_id": "last"}); len(got) != 1 {
		t.Errorf("%d spans of the last request at the receiver once the gateway stopped, want 1", len(got))
	}
	final := rcv.find("analytics.flush", map[string]string{"linkgate.batch.visits": "1"})
	if len(final) != 1 {
		t.Errorf("%d spans of the final flush (the one visit) at the receiver once the gateway stopped, want 1", len(final))
	}
}

// TestTracingConfigErrors: check-config's compile refuses a tracing
// section that would not start, naming the field and its line; one it
// accepts builds a gateway (no connection is made at start).
func TestTracingConfigErrors(t *testing.T) {
	t.Parallel()
	base := "upstream: {targets: [\"http://127.0.0.1:1\"]}\nadmin: {listen: \"\"}\nanalytics: {enabled: false}\ntracing:\n"
	for _, c := range []struct{ section, path string }{
		{"  otlp_endpoint: http://collector:4318\n  sample: 1.5\n", "tracing.sample"},
		{"  otlp_endpoint: collector:4318\n", "tracing.otlp_endpoint"},
		{"  otlp_endpoint: http://collector:4318\n  headers_env: LG_TEST_NO_SUCH_VARIABLE\n", "tracing.headers_env"},
		{"  otlp_endpoint: http://collector:4318\n  max_queue: 1\n", "tracing.max_queue"},
	} {
		cfg, err := config.Parse([]byte(base + c.section))
		if err != nil {
			t.Fatal(err)
		}
		_, err = gateway.Compile(cfg, getenv)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Path != c.path || ce.Line < 5 {
			t.Errorf("%q: %v; want an error naming %s and its line", c.section, err, c.path)
		}
	}
	cfg, err := config.Parse([]byte(base + "  otlp_endpoint: http://" + testkit.DeadAddr(t) + "\n  sample: 0.5\n"))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := gateway.Compile(cfg, getenv)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(plan, gateway.Options{})
	if err != nil {
		t.Fatalf("a section Compile accepted did not start: %v", err)
	}
	g.Close(context.Background())
}
