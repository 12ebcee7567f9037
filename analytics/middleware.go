package analytics

import (
	"context"
	"net/http"
	"strings"

	"github.com/linkgate/linkgate/internal/header"
	"github.com/linkgate/linkgate/ja4"
	"github.com/linkgate/linkgate/ongoing"
	"github.com/linkgate/linkgate/visitclass"
	"github.com/linkgate/linkgate/visitor"
)

// NewMiddleware returns the middleware that counts visits: a request that
// matches the plan's route (its {short_key} names the link) and that the
// next handler answers with a status in count_status is recorded in rec,
// as a bot visit when its class (package visitclass) is not human and bots
// is "separate" (not at all with "ignore"; with "count", every visit is a
// human one and no class is decided); a request whose client left before
// its answer (ongoing.Recorder.Final: 499) is not.
// With dimensions on, the visit's features (package visitor: referrer,
// source, country, device, browser, OS) are counted with it. Anything
// else, a 404 for an unknown key above all, is not a visit, so
// random paths cannot grow memory or storage; nor is a request whose short
// key is longer than analytics.max_key_bytes (default 256), counted instead
// in linkgate_analytics_keys_too_long_total, so that made-up keys of tens
// of kilobytes cannot either.
//
// Build one per config snapshot; rec outlives them (a Pipeline builds it
// with Pipeline.Middleware). Usage:
//
//	handler := analytics.NewMiddleware(plan, rec)(proxyHandler)
func NewMiddleware(p *Plan, rec *Recorder) func(http.Handler) http.Handler {
	return NewTenantMiddleware(p, rec, nil)
}

// Tenants answers the tenant of a request's host (its Host, or
// :authority, or the host of an absolute request line: Request.Host), ""
// for the default tenant. tenant.Resolver is one.
type Tenants interface {
	Of(host string) string
}

// NewTenantMiddleware is NewMiddleware counting each visit as a visit to
// the link of its host's tenant (tenants; nil: every host is in the
// default tenant), see TenantKey. A short key holding a "/" (which only a
// pattern with a regular expression can match) is not counted: it could
// not be told from a tenant's link, nor be read.
func NewTenantMiddleware(p *Plan, rec *Recorder, tenants Tenants) func(http.Handler) http.Handler {
	mt, count, bots, maxKey, visit, uniques, classes := p.match, &p.count, p.bots, p.cfg.MaxKeyBytes, p.visit, p.uniques, p.classes
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, ok := mt.Param(r.Method, r.URL.Path, "short_key")
			if !ok || key == "" || strings.IndexByte(key, '/') >= 0 { // a pattern like {short_key:.*} must not count all links twice, nor a tenant's link
				next.ServeHTTP(w, r)
				return
			}
			if len(key) > maxKey {
				rec.m.keyTooLong()
				next.ServeHTTP(w, r)
				return
			}
			ww := ongoing.StatusWriter(w) // the gateway's, when there is one
			next.ServeHTTP(ww, r)
			status := ww.Final(r) // 499 when the client left before its answer: no visit
			if status == ongoing.StatusClientClosed || status >= len(count) || !count[status] {
				return
			}
			now := ongoing.Start(r.Context()) // the visit's time: when it began
			tenant := ""
			if tenants != nil {
				tenant = tenants.Of(r.Host)
			}
			client, known := p.trust.Client(r)
			bot, declared := false, false
			class, reason := visitclass.Human, visitclass.None
			if bots != BotsCount {
				v := visitclass.Visit{Key: TenantKey(tenant, key), Time: now}
				if known {
					v.Client = client.Addr
					if !client.ViaProxy { // a proxy's ClientHello says nothing of the client
						v.JA4 = ja4.FromContext(r.Context())
					}
				}
				class, reason = classes.Classify(r, v)
				rec.m.classified(reason)
				declared = reason == visitclass.BotUA || reason == visitclass.PreviewUA
				if class != visitclass.Human {
					if bots == BotsIgnore {
						return
					}
					bot = true
				}
			}
			var u uint64
			if uniques != nil && !bot && known {
				u = uniques.Hash(now, client.Addr, header.First(r.Header, "User-Agent"), key)
			}
			noteVisit(r, bot)
			if visit == nil {
				rec.RecordTenantVisit(tenant, key, now, class, nil, u)
				return
			}
			var f visitor.Features
			visit.Read(r, declared, &f)
			if bots != BotsCount {
				f[visitor.Class], f[visitor.Reason] = class.String(), reason.String()
			}
			f[visitor.Destination] = visitor.DestinationOf(ww.HeadField("Location"))
			rec.RecordTenantVisit(tenant, key, now, class, &f, u)
		})
	}
}

// Visit is what the visit counter did with a request: the gateway puts
// one in the context of a request it traces (WithVisit), and the
// middleware fills it in when it counts the request.
type Visit struct {
	Counted bool // recorded as a visit
	Bot     bool // as a bot's (bots: separate)
}

type visitKey struct{}

// WithVisit returns ctx holding v, for the middleware to fill in.
func WithVisit(ctx context.Context, v *Visit) context.Context {
	return context.WithValue(ctx, visitKey{}, v)
}

// noteVisit fills in the Visit r's context holds, if any.
func noteVisit(r *http.Request, bot bool) {
	if v, _ := r.Context().Value(visitKey{}).(*Visit); v != nil {
		*v = Visit{Counted: true, Bot: bot}
	}
}
