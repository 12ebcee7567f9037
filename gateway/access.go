package gateway

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/cache"
	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/problem"
)

// requestIDHeader (X-Request-ID, in its canonical form, which costs no
// allocation to look up) carries a request's id to the upstream, as nginx's
// $request_id and most load balancers send it.
const requestIDHeader = "X-Request-Id"

// requestID gives every request an id in its X-Request-ID header, which
// the proxy passes on to the upstream and the access log writes. The id of
// a trusted proxy (server.trusted_proxies) is kept, so that one id follows
// the request from the edge through every hop; any other client's is
// replaced by a new one, so that a client cannot make its requests look
// like another's in the logs of the gateway and of the upstream. An id is
// never used for a decision: it only ties log lines together. A new id is
// 16 random bytes in hex (32 characters, as nginx's $request_id).
func requestID(trust *forwarded.Trust) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if ids := r.Header[requestIDHeader]; len(ids) != 1 || !validRequestID(ids[0]) || !fromTrustedProxy(trust, r) {
				r.Header[requestIDHeader] = []string{newRequestID()} // Set, without canonicalizing a canonical name
			}
			next.ServeHTTP(w, r)
		})
	}
}

// fromTrustedProxy reports whether r's peer is a trusted proxy.
func fromTrustedProxy(trust *forwarded.Trust, r *http.Request) bool {
	p, ok := forwarded.Peer(r)
	return ok && trust.Contains(p)
}

// refuseUnknownClient answers 400 to a request from a trusted proxy whose
// X-Forwarded-For holds, where the client's address should be, something
// that is not an address (or whose X-Real-IP is not one): the gateway
// cannot tell who the client is, so it can neither limit it nor tell the
// upstream, and it will not take the proxy for the client (forwarded's
// Client). A request from any other peer costs a parse of the peer's
// address and a lookup in the trusted prefixes.
func refuseUnknownClient(trust *forwarded.Trust) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c, ok := trust.Client(r); !ok && c.Peer.IsValid() {
				what := "X-Forwarded-For"
				if len(r.Header["X-Forwarded-For"]) == 0 {
					what = "X-Real-IP"
				}
				problem.WriteDetails(w, problem.Details{Status: http.StatusBadRequest,
					Detail: "the " + what + " field a trusted proxy sent holds something that is not an address where the client's should be",
					Extra:  map[string]any{"invalid-params": []map[string]string{{"name": what, "reason": "not an address where the client's should be"}}}})
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// validRequestID reports whether a trusted proxy's id can be kept: 1 to
// 128 visible ASCII characters other than quotes and backslashes, so that
// it stays one token in every log format.
func validRequestID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := range len(id) {
		if c := id[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// newRequestID returns 128 random bits in hex. An id needs to be unique,
// not secret (it decides nothing), so it comes from math/rand/v2's
// generator, seeded from the operating system per process, which costs no
// allocation, where crypto/rand's buffer escapes to the heap.
func newRequestID() string {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(b[8:], rand.Uint64())
	var h [32]byte
	hex.Encode(h[:], b[:])
	return string(h[:])
}

// accessLog writes the access log (server.access_log): one line per
// request, when it has been answered, with who sent it (the client as the
// trusted proxies make it, and the peer), what it asked (method, host,
// path without the query string, which may carry credentials or emails,
// protocol, User-Agent, Referer), its request id, and the answer (status,
// body bytes, total time, and the time the upstream took to send its
// response headers when it was proxied). It is a log/slog record like
// every other line: text, or JSON with -log-format json.
type accessLog struct {
	log   *slog.Logger
	trust *forwarded.Trust
}

// accessKey is the context key of a request's *accessRecord.
type accessKey struct{}

// accessRecord is what the handlers inside note for a request's access
// line and its span: one record serves both.
type accessRecord struct {
	proxied  bool
	upstream time.Duration   // until the upstream's first response headers
	refused  limit.Refusal   // the rule that answered 429, if one did
	cache    cache.Result    // what the cache did, if the request reached it
	route    string          // the pool ("upstream", "routes[2]") or "stats", noted when tracing
	visit    analytics.Visit // what the visit counter did, noted when tracing
}

// begin returns r with a record for upstreamTimer and the limiter to note
// in.
func (a *accessLog) begin(r *http.Request) (*http.Request, *accessRecord) {
	return record(r, false)
}

// record returns r with a record for the handlers inside to note in: the
// one r has when an outer middleware made it (the span's, for the access
// log), else a new one, which the visit counter notes in too when traced.
func record(r *http.Request, traced bool) (*http.Request, *accessRecord) {
	if rec, ok := r.Context().Value(accessKey{}).(*accessRecord); ok {
		return r, rec
	}
	rec := &accessRecord{}
	ctx := limit.WithRefusal(context.WithValue(r.Context(), accessKey{}, rec), &rec.refused)
	ctx = cache.WithResult(ctx, &rec.cache)
	if traced {
		ctx = analytics.WithVisit(ctx, &rec.visit)
	}
	return r.WithContext(ctx), rec
}

// write logs the line of a request answered with status and bytes in d.
func (a *accessLog) write(r *http.Request, rec *accessRecord, status, bytes int, d time.Duration) {
	attrs := make([]slog.Attr, 0, 16)
	attrs = append(attrs,
		slog.String("method", r.Method), slog.String("host", r.Host), slog.String("path", r.URL.Path),
		slog.String("proto", r.Proto), slog.Int("status", status), slog.Int("bytes", bytes),
		slog.Duration("duration", d))
	if rec.proxied {
		attrs = append(attrs, slog.Duration("upstream_duration", rec.upstream))
	}
	if rec.cache != 0 {
		attrs = append(attrs, slog.String("cache", rec.cache.String()))
	}
	if rec.refused.Rule != "" {
		attrs = append(attrs, slog.String("limit_rule", rec.refused.Rule), slog.Bool("boxed", rec.refused.Boxed))
	}
	client := ""
	if c, ok := a.trust.Client(r); ok {
		client = c.Addr.String()
	}
	attrs = append(attrs,
		slog.String("client", client), slog.String("peer", r.RemoteAddr),
		slog.String("request_id", r.Header.Get(requestIDHeader)),
		slog.String("user_agent", r.UserAgent()), slog.String("referer", r.Referer()))
	a.log.LogAttrs(r.Context(), slog.LevelInfo, "access", attrs...)
}

// upstreamTimer notes in the request's access record, when it has one,
// that the request went to the upstream and how long the upstream took to
// send its response headers (with connecting, and any retry on another
// target). Without a record it adds nothing: it is in the chain only when
// the access log is on.
func upstreamTimer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec, _ := r.Context().Value(accessKey{}).(*accessRecord)
		if rec == nil {
			next.ServeHTTP(w, r)
			return
		}
		rec.proxied = true
		hw := &headerTimer{ResponseWriter: w, rec: rec, start: time.Now()}
		next.ServeHTTP(hw, r)
		hw.headers() // nothing written: the time until the proxy gave up
	})
}

// headerTimer notes the time of the first response headers written
// through it. Flush, Hijack (upgrades) and the like reach the writer it
// wraps through Unwrap, as http.ResponseController and the reverse proxy
// look for them.
type headerTimer struct {
	http.ResponseWriter
	rec   *accessRecord
	start time.Time
	done  bool
}

func (h *headerTimer) headers() {
	if !h.done {
		h.done = true
		h.rec.upstream = time.Since(h.start)
	}
}

func (h *headerTimer) WriteHeader(code int) {
	h.headers()
	h.ResponseWriter.WriteHeader(code)
}

func (h *headerTimer) Write(b []byte) (int, error) {
	h.headers()
	return h.ResponseWriter.Write(b)
}

func (h *headerTimer) Unwrap() http.ResponseWriter { return h.ResponseWriter }
