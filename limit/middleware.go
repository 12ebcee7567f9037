package limit

import (
	"context"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/linkgate/linkgate/problem"
)

// Middleware limits the requests to next by l's rules:
//
//	gw := l.Middleware(proxy)
//
// Every rule whose match fits the request is checked, in config order; the
// first one over its limit answers 429 (Retry-After, RateLimit-Policy,
// RateLimit and a problem body naming the rule and the limit) and the
// request goes no further. Only when every rule passes are the hits counted:
// a rejected request is not counted under any rule (Strict rules excepted,
// they count before checking). A rule with count_status is checked before
// the request is proxied and counts the hit only if the upstream answers
// one of its statuses. A rule in shadow mode counts and logs would-be
// rejections and blocks nothing. A request without a rule's feature (no
// email in its body, no user from a trusted proxy) skips that rule.
//
// When the store fails, on_store_error applies: allow lets the request
// through uncounted; deny answers 503 Service Unavailable with Retry-After: 1
// (the limiter, not the client, is at fault, so not 429). Allowed responses
// carry the RateLimit headers of ip and user rules, never of email rules,
// which would let anyone probe another person's failed logins, nor of rules
// in shadow mode, which must not change how clients behave.
func (l *Limiter) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf [8]*rule
		matched := buf[:0]
		for _, ru := range l.rules {
			if ru.match.Match(r.Method, r.URL.Path) {
				matched = append(matched, ru)
			}
		}
		if len(matched) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		now := l.now()
		ctx := context.WithoutCancel(r.Context())
		f := features{l: l, r: r}
		type hit struct {
			r     *rule
			value string
		}
		var pre, post [8]hit
		before, after := pre[:0], post[:0]
		var policies, states []string
		for _, ru := range matched {
			value, ok := f.get(ru.Key)
			if !ok {
				ru.metrics.inc(skipped)
				continue
			}
			if ru.allowlisted(value, f.addr) {
				ru.metrics.inc(allowed)
				continue
			}
			// A lone rule counting every request counts in the same store
			// operation as its check; otherwise hits are counted once every
			// rule has passed.
			alone := len(matched) == 1 && len(ru.CountStatus) == 0
			v := l.check(ctx, ru, value, now, alone)
			ru.metrics.inc(v.out)
			switch v.out {
			case limited:
				l.reject(w, ru, v)
				return
			case storeError:
				if n, ok := l.logs.allow(logKey{ru.Name, "store_error"}, now); ok {
					l.log.Warn("limit: store failed", "rule", ru.Name, "err", v.err, "policy", l.storePolicy(), "suppressed", n)
				}
				if !l.failOpen {
					w.Header().Set("Retry-After", "1")
					problem.WriteDetails(w, problem.Details{Status: http.StatusServiceUnavailable,
						Detail: "the rate limiter cannot reach its store", Extra: map[string]any{"rule": ru.Name}})
					return
				}
				continue
			case shadowLimited:
				if n, ok := l.logs.allow(logKey{ru.Name, "shadow_limited"}, now); ok {
					l.log.Info("limit: shadow rule would limit", "rule", ru.Name, "key", string(ru.Key), "value", value, "limit", ru.limitNames[v.limit], "suppressed", n)
				}
			}
			if ru.Strict || alone {
				// already counted
			} else if len(ru.CountStatus) == 0 {
				before = append(before, hit{ru, value})
			} else {
				after = append(after, hit{ru, value})
			}
			if ru.headers && v.limit >= 0 {
				policies = append(policies, ru.policy)
				states = append(states, ru.rateLimitItem(v.limit, v.remaining, v.reset))
			}
		}
		for _, h := range before {
			l.count(ctx, h.r, h.value, now)
		}
		if len(policies) > 0 {
			w.Header().Set("RateLimit-Policy", strings.Join(policies, ", "))
			w.Header().Set("RateLimit", strings.Join(states, ", "))
		}
		if len(after) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		returned := false
		// Deferred, so that a handler that aborts is counted too:
		// httputil.ReverseProxy panics with http.ErrAbortHandler when the
		// client hangs up while the upstream's body is being copied, and a
		// client that reads the status of a 401 and hangs up must still
		// have its wrong password counted.
		defer func() {
			status := ww.Status()
			if status == 0 {
				if !returned {
					return // aborted before answering: the upstream said nothing
				}
				status = http.StatusOK
			}
			for _, h := range after {
				if h.r.counts(status) {
					l.count(ctx, h.r, h.value, now)
				}
			}
		}()
		next.ServeHTTP(ww, r)
		returned = true
	})
}

// reject answers 429 for rule ru.
func (l *Limiter) reject(w http.ResponseWriter, ru *rule, v verdict) {
	retry := max(v.reset, 1)
	h := w.Header()
	h.Set("Retry-After", strconv.FormatInt(retry, 10))
	h.Set("RateLimit-Policy", ru.policy)
	h.Set("RateLimit", ru.rateLimitItem(v.limit, 0, retry))
	lim := ru.limitNames[v.limit]
	problem.WriteDetails(w, problem.Details{
		Status: http.StatusTooManyRequests,
		Detail: "rule " + ru.Name + " allows " + lim + " per " + string(ru.Key) + "; retry in " + strconv.FormatInt(retry, 10) + " s",
		Extra:  map[string]any{"rule": ru.Name, "limit": lim, "retry_after": retry},
	})
}

// features reads a request's features once each, on first use.
type features struct {
	l                 *Limiter
	r                 *http.Request
	addr              netip.Addr
	trusted, addrDone bool
	ip, user, email   string
	ipOK, userOK      bool
	emailOK           bool
	userDone          bool
	emailDone         bool
}

func (f *features) client() {
	if !f.addrDone {
		f.addrDone = true
		var ok bool
		f.addr, f.trusted, ok = f.l.id.clientAddr(f.r)
		if ok {
			f.ip, f.ipOK = f.l.id.ipValue(f.addr), true
		}
	}
}

func (f *features) get(k Feature) (string, bool) {
	switch k {
	case IP:
		f.client()
		return f.ip, f.ipOK
	case User:
		f.client()
		if !f.userDone {
			f.userDone = true
			f.user, f.userOK = f.l.id.user(f.r, f.trusted)
		}
		return f.user, f.userOK
	case Email:
		f.client() // for the allowlist's sake, no cost to speak of
		if !f.emailDone {
			f.emailDone = true
			f.email, f.emailOK = f.l.id.email(f.r)
		}
		return f.email, f.emailOK
	}
	return "", false
}

// storePolicy names on_store_error for the log.
func (l *Limiter) storePolicy() string {
	if l.failOpen {
		return "allow"
	}
	return "deny"
}
