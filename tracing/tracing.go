// Package tracing exports OpenTelemetry traces of the gateway's requests
// and background runs to a collector over OTLP/HTTP (the "tracing"
// section): it owns the SDK's tracer provider (sampling, the bounded
// queue, the exporter), the W3C trace context of a request (taken from a
// trusted hop only, and what the upstream is sent), the upstream's child
// span, and the flush at exit and at a binary upgrade's handover.
//
// Off (no otlp_endpoint), Start returns nil and the gateway adds nothing
// to a request's path. On, every request gets a span; the sample decides
// which are kept, and a kept span's attributes are only then set. A
// collector that is down or slow never holds a request: ended spans wait
// in a bounded queue and past it are dropped, counted in
// linkgate_tracing_spans_dropped_total.
package tracing

import (
	"context"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/linkgate/linkgate/internal/metric"
	"github.com/linkgate/linkgate/logthrottle"
	"github.com/linkgate/linkgate/ongoing"
)

// batchTimeout is the longest a kept span waits for its batch to be sent:
// at most one export a second.
const batchTimeout = time.Second

// Metrics are the tracer's counters.
type Metrics struct {
	exported prometheus.Counter
	dropped  *prometheus.CounterVec
}

// NewMetrics registers the tracer's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	s := metric.With(reg)
	m := &Metrics{
		exported: s.Counter("linkgate_tracing_spans_exported_total", "Spans the collector took."),
		dropped:  s.CounterVec("linkgate_tracing_spans_dropped_total", "Kept spans never exported, by reason (queue_full: tracing.max_queue spans were waiting; export_failed: the collector refused the batch, or did not answer within tracing.export_timeout).", "reason"),
	}
	m.dropped.WithLabelValues("queue_full")
	m.dropped.WithLabelValues("export_failed")
	return m
}

// Tracer is a running tracing section: the SDK's provider and its export.
// A nil *Tracer is tracing off: Tracer returns nil, Shutdown and
// SetSample do nothing.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	sampler  *ratio
}

// Start builds the tracer plan describes, nil when it is off. It opens no
// connection: the first export does. version is the service.version of
// the spans.
func Start(p *Plan, version string, m *Metrics, log *slog.Logger) (*Tracer, error) {
	if !p.Enabled() {
		return nil, nil
	}
	c := p.cfg
	exp, err := otlptracehttp.New(context.Background(),
		otlptracehttp.WithEndpointURL(p.url), otlptracehttp.WithHeaders(p.headers),
		otlptracehttp.WithTimeout(c.ExportTimeout),
		// A batch that failed is dropped and counted: retrying it would
		// hold the next ones, and the queue, for a collector that is down.
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	if err != nil {
		return nil, err
	}
	e := &exporter{SpanExporter: exp, max: int64(c.MaxQueue), m: m, log: log}
	e.logs.Every = time.Minute
	// The processor's own queue holds no more than the queue lets in: it
	// never drops uncounted, and never blocks.
	q := &queue{exporter: e, SpanProcessor: sdktrace.NewBatchSpanProcessor(e, sdktrace.WithMaxQueueSize(c.MaxQueue+1),
		sdktrace.WithBatchTimeout(batchTimeout), sdktrace.WithExportTimeout(c.ExportTimeout))}
	s := &ratio{}
	s.set(c.Sample)
	res := resource.NewSchemaless(attribute.String("service.name", c.ServiceName), attribute.String("service.version", version))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(s)), sdktrace.WithResource(res),
		sdktrace.WithSpanProcessor(q))
	return &Tracer{provider: tp, tracer: tp.Tracer("github.com/linkgate/linkgate"), sampler: s}, nil
}

// Tracer is the tracer of the background runs (the analytics flusher,
// the rollup worker); nil when t is.
func (t *Tracer) Tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	return t.tracer
}

// SetSample applies a reloaded tracing.sample.
func (t *Tracer) SetSample(f float64) {
	if t != nil {
		t.sampler.set(f)
	}
}

// Shutdown exports the spans that wait, within ctx, and stops exporting.
// The gateway calls it last on its way out, after the final analytics
// flush, whether it exits or hands over to a new process.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// ratio samples a share of the traces that begin here, which a reload
// may change.
type ratio struct {
	s atomic.Pointer[sdktrace.Sampler]
}

func (r *ratio) set(f float64) {
	s := sdktrace.TraceIDRatioBased(f)
	r.s.Store(&s)
}

// ShouldSample keeps the sample's share of the traces that begin here
// (by their trace id), and every background run (a span of the internal
// kind without a parent: a few a minute).
func (r *ratio) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if p.Kind == trace.SpanKindInternal && !trace.SpanContextFromContext(p.ParentContext).IsValid() {
		return always.ShouldSample(p)
	}
	return (*r.s.Load()).ShouldSample(p)
}

var always = sdktrace.AlwaysSample()

func (r *ratio) Description() string { return "tracing.sample" }

// queue bounds the spans between their end and their export: it lets a
// kept span into the SDK's batch processor only while fewer than max are
// there or being exported, and counts the others dropped. (The SDK's
// processor drops past its own queue without saying.)
type queue struct {
	sdktrace.SpanProcessor // the SDK's batch processor, over an exporter
	*exporter
}

// OnEnd lets s in, or drops it when the queue is full.
func (q *queue) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	if q.pending.Add(1) > q.max {
		q.pending.Add(-1)
		q.m.dropped.WithLabelValues("queue_full").Inc()
		return
	}
	q.SpanProcessor.OnEnd(s)
}

// Shutdown is the processor's (which flushes, then shuts the exporter
// down).
func (q *queue) Shutdown(ctx context.Context) error { return q.SpanProcessor.Shutdown(ctx) }

// exporter is the OTLP exporter, counting what it sends and what fails.
type exporter struct {
	sdktrace.SpanExporter
	max     int64        // tracing.max_queue
	pending atomic.Int64 // spans let in and not exported yet
	m       *Metrics
	log     *slog.Logger
	logs    logthrottle.Throttle[string] // a line a minute of failed exports
}

// ExportSpans sends a batch to the collector; one that fails is counted
// and logged, and not returned to the processor (which would hand it to
// otel's global error handler, outside the gateway's log).
func (e *exporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	defer e.pending.Add(-int64(len(spans)))
	if err := e.SpanExporter.ExportSpans(ctx, spans); err != nil {
		e.m.dropped.WithLabelValues("export_failed").Add(float64(len(spans)))
		if n, ok := e.logs.Allow("export", time.Now()); ok {
			e.log.Warn("tracing: the collector did not take a batch of spans; dropped", "spans", len(spans), "err", err, "suppressed", n)
		}
		return nil
	}
	e.m.exported.Add(float64(len(spans)))
	return nil
}

// The W3C trace context fields, in net/http's canonical spelling.
const (
	traceparent = "Traceparent"
	tracestate  = "Tracestate"
)

var (
	propagator = propagation.TraceContext{}
	serverKind = trace.WithSpanKind(trace.SpanKindServer) // made once: an option is an interface value
)

// StartRequest starts the span of a client request and sets in r.Header
// the trace context the upstream is sent: the trace of a trusted hop
// (trusted: r's peer is in server.trusted_proxies) continued when its
// traceparent is valid; otherwise, and for every other peer, whose
// traceparent and tracestate are removed, a new trace. The span is
// recording only when it is kept; the caller sets its attributes and ends
// it.
func (t *Tracer) StartRequest(r *http.Request, trusted bool) (context.Context, trace.Span) {
	ctx := r.Context()
	if trusted {
		ctx = propagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	delete(r.Header, traceparent)
	delete(r.Header, tracestate)
	ctx, span := t.tracer.Start(ctx, spanName(r.Method), serverKind)
	inject(span.SpanContext(), r.Header)
	return ctx, span
}

// inject sets h's trace context to the span context sc, as the W3C
// propagator writes it (version 00), by the canonical names, which
// Header.Set would canonicalize anew on every request: two allocations
// where the propagator takes five.
func inject(sc trace.SpanContext, h http.Header) {
	if !sc.IsValid() {
		return
	}
	var b [55]byte // 00-<trace id>-<span id>-<flags>
	tid, sid := sc.TraceID(), sc.SpanID()
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags() & trace.FlagsSampled)})
	h[traceparent] = []string{string(b[:])}
	if ts := sc.TraceState(); ts.Len() > 0 {
		h[tracestate] = []string{ts.String()}
	}
}

// spanName is a request span's name: its method, one of HTTP's, else
// "HTTP" (a client's made-up methods must not make new names).
func spanName(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodTrace, http.MethodConnect:
		return m
	}
	return "HTTP"
}

// Upstream wraps the proxy of the pool named pool: a request whose span
// is kept gets a child span for its time at the upstream (from the
// proxy's call to its return: connecting, retries on another target, the
// answer's body), and the upstream is sent that span as its parent. Any
// other request passes as it came.
func (t *Tracer) Upstream(pool string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !trace.SpanFromContext(r.Context()).IsRecording() {
			next.ServeHTTP(w, r)
			return
		}
		ctx, span := t.tracer.Start(r.Context(), "upstream", trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("linkgate.pool", pool)))
		inject(span.SpanContext(), r.Header)
		sw := &ongoing.Recorder{ResponseWriter: w}
		defer func() {
			code := sw.Status()
			span.SetAttributes(attribute.Int("http.response.status_code", code))
			switch {
			case code == 0:
				span.SetStatus(codes.Error, "no answer")
			case code >= 500:
				span.SetStatus(codes.Error, "the upstream answered "+strconv.Itoa(code))
			}
			span.End()
		}()
		next.ServeHTTP(sw, r.WithContext(ctx))
	})
}
