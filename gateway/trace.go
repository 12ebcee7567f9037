package gateway

import (
	"net/http"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/ongoing"
	"github.com/linkgate/linkgate/tracing"
)

// traced starts every request's span (tracing.Tracer.StartRequest: the
// trace of a trusted hop continued, any other peer's trace context
// replaced) and, for a span the sample keeps, says once the request is
// answered what the gateway did: its route, status, the limiter's
// decision and rule, whether the visit was counted, the cache's result,
// the client and its protocol. It is in the chain only when tracing is
// on, right inside the request id's. A span not kept costs its ids and
// the traceparent the upstream is sent, and nothing else.
func traced(t *tracing.Tracer, trust *forwarded.Trust) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, span := t.StartRequest(r, fromTrustedProxy(trust, r))
			if !span.IsRecording() {
				next.ServeHTTP(w, r)
				return
			}
			r, rec := record(r.WithContext(ctx), true)
			ww := ongoing.StatusWriter(w)
			defer func() {
				// Deferred: a request the proxy aborts (its client gone
				// mid-body) ends with a panic, and its span must end too.
				status := ww.Final(r)
				client := ""
				if c, ok := trust.Client(r); ok {
					client = c.Addr.String()
				}
				decision := "passed"
				if rec.refused.Rule != "" {
					decision = "refused"
				}
				span.SetAttributes(
					attribute.String("http.request.method", r.Method),
					attribute.String("url.path", r.URL.Path),
					attribute.String("server.address", r.Host),
					attribute.String("network.protocol.version", protocolVersion(r)),
					attribute.String("client.address", client),
					attribute.String("user_agent.original", r.UserAgent()),
					attribute.String("linkgate.request_id", r.Header.Get(requestIDHeader)),
					attribute.Int("http.response.status_code", status),
					attribute.String("linkgate.route", rec.route),
					attribute.String("linkgate.limit.decision", decision),
					attribute.Bool("linkgate.visit.counted", rec.visit.Counted),
				)
				if rec.refused.Rule != "" {
					span.SetAttributes(attribute.String("linkgate.limit.rule", rec.refused.Rule), attribute.Bool("linkgate.limit.boxed", rec.refused.Boxed))
				}
				if rec.visit.Counted {
					span.SetAttributes(attribute.Bool("linkgate.visit.bot", rec.visit.Bot))
				}
				if rec.cache != 0 {
					span.SetAttributes(attribute.String("linkgate.cache", rec.cache.String()))
				}
				if status >= 500 {
					span.SetStatus(codes.Error, "answered "+strconv.Itoa(status))
				}
				span.End()
			}()
			next.ServeHTTP(ww, r)
		})
	}
}

// protocolVersion is the version of HTTP r came by, as OpenTelemetry's
// network.protocol.version writes it: "1.1", "2", "3".
func protocolVersion(r *http.Request) string {
	switch r.ProtoMajor {
	case 2:
		return "2"
	case 3:
		return "3"
	}
	return "1." + strconv.Itoa(r.ProtoMinor)
}

// routeNote notes in the request's record, when it has one (a kept span),
// that name (a pool, or "stats") serves it.
func routeNote(name string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rec, ok := r.Context().Value(accessKey{}).(*accessRecord); ok {
			rec.route = name
		}
		next.ServeHTTP(w, r)
	})
}
