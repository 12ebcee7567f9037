package limit

import (
	"context"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/ongoing"
	"github.com/linkgate/linkgate/problem"
	"github.com/linkgate/linkgate/route"
)

// Middleware limits the requests to next by l's rules:
//
//	gw := l.Middleware(proxy)
//
// Every rule whose match fits the request is checked, in config order: its
// path as written or as lenient upstreams route it (route.Folding), under
// its method or one a method override names (see overrides); the
// first one over its limit answers 429 (Retry-After, RateLimit-Policy,
// RateLimit and a problem body naming the rule and the limit) and the
// request goes no further. Only when every rule passes are the hits counted:
// a rejected request is not counted under any rule (Strict rules excepted,
// they count before checking). A rule with count_status is checked before
// the request is proxied and counts the hit only if the upstream answers
// one of its statuses. A rule in shadow mode counts and logs would-be
// rejections and blocks nothing. A request without a rule's feature (no
// email in its query string or body, no user from a trusted proxy) skips
// that rule.
//
// An email rule that cannot tell the request's email (see Rule.OnUnreadable)
// answers by its on_unreadable policy: reject (the default) answers 400,
// 413 (body over identity.max_body_bytes) or 415 (a media type, charset or
// Content-Encoding the gateway cannot read) with a problem body naming the
// rule and what could not be read; skip passes the request on uncounted;
// key_by_ip checks and counts it by client address. A body that cannot be
// read at all is answered whatever the policy, shadow mode included: 408
// when it arrives too slowly (server.body_timeout, read_timeout), 400 when
// it is malformed. Answers that leave the body unread (408, 413, 400 for a
// malformed body) close the connection, so that they go out at once.
//
// What each on_store_error policy answers while the store fails: allow
// passes the request on to next, uncounted by the failing rule, so the
// client gets the upstream's answer; deny answers 503 Service Unavailable
// with Retry-After: 1 and a problem body naming the rule (the limiter, not
// the client, is at fault, so not 429), and next never sees the request.
// Either way the failure is counted in linkgate_limit_decisions_total
// (outcome store_error) and logged at most once a second per rule.
//
// Store operations run with r's context detached from its cancellation: a
// client that hangs up once it has the upstream's answer (a 401 to a wrong
// password) is still counted, and its hang-up is not a store error.
//
// Allowed responses carry the RateLimit headers of ip and user rules, never
// of email rules, which would let anyone probe another person's failed
// logins, nor of rules in shadow mode, which must not change how clients
// behave. Repeated log lines (store errors, shadow rejections, unreadable
// emails) are written at most once a second per rule and kind, with the
// number held back since the last; the metrics count every one.
func (l *Limiter) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf [8]*rule
		f := features{l: l, r: r}
		matched := l.matching(buf[:0], r, &f)
		if len(matched) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		now := l.requestTime(r)
		// Not the request's context: a client that leaves must not cut
		// the count short (the stores read no values from it).
		ctx := context.Background()
		var pre, post [8]hit
		before, after := pre[:0], post[:0]
		var policyBuf [8]string
		policies := policyBuf[:0]
		var stateBuf [128]byte
		states := stateBuf[:0] // the RateLimit field's items
		for _, ru := range matched {
			// A lone rule counting every request counts in the same store
			// operation as its check; otherwise hits are counted once every
			// rule has passed.
			alone := len(matched) == 1 && len(ru.CountStatus) == 0
			value, v, ok, answered := l.decide(ctx, w, r, ru, &f, now, alone)
			if answered {
				return
			}
			if !ok {
				continue
			}
			if ru.Strict || alone {
				// already counted
			} else if len(ru.CountStatus) == 0 {
				before = append(before, hit{ru, value})
			} else {
				after = append(after, hit{ru, value})
			}
			if ru.headers && v.limit >= 0 {
				if len(policies) > 0 {
					states = append(states, ", "...)
				}
				policies = append(policies, ru.policy)
				states = ru.appendRateLimitItem(states, v.limit, v.remaining, v.reset)
			}
		}
		for _, h := range before {
			l.count(ctx, h.r, h.value, now)
		}
		if len(policies) > 0 {
			setRateLimit(w.Header(), policies, states)
		}
		if len(after) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		l.serveCounting(ctx, w, r, next, after, now)
	})
}

// hit is a rule passed and the value it counts.
type hit struct {
	r     *rule
	value string
}

// matching appends to buf the rules whose hosts and routes match r.
func (l *Limiter) matching(buf []*rule, r *http.Request, f *features) []*rule {
	q := route.Folding{Method: r.Method, Path: r.URL.Path}
	host, hostDone := "", false
	for _, ru := range l.rules {
		if ru.hosts != nil {
			if !hostDone {
				host, hostDone = route.RequestHost(r.Host), true
			}
			if !ru.hosts.Match(host) {
				continue
			}
		}
		if q.Match(ru.match) || f.routedAs(&q, ru.match) {
			buf = append(buf, ru)
		}
	}
	return buf
}

// decide checks the request against rule ru, counting it when alone. It
// returns the value the rule counts, its verdict, ok when the request
// passed a rule that applies (not skipped, allowlisted or failed open),
// and answered when it wrote the answer (a rejection): then the request
// goes no further.
func (l *Limiter) decide(ctx context.Context, w http.ResponseWriter, r *http.Request, ru *rule, f *features, now time.Time, alone bool) (value string, v verdict, ok, answered bool) {
	value, parts, ok := f.value(ru)
	if !ok && ru.Key.has(Email) && f.emailErr != nil {
		if value, ok, answered = l.unreadable(w, ru, f, now); answered || !ok {
			return "", verdict{}, false, answered
		}
	} else if !ok {
		ru.metrics.inc(skipped)
		return "", verdict{}, false, false
	}
	if ru.allowlisted(value, parts, f.addr) {
		ru.metrics.inc(allowed)
		return "", verdict{}, false, false
	}
	v = l.check(ctx, &ru.windows, value, now, alone)
	ru.metrics.inc(v.out)
	switch v.out {
	case limited, boxed:
		l.reject(w, r, ru, v)
		return "", v, false, true
	case storeError:
		if n, ok := l.logs.allow(logKey{ru.Name, "store_error"}, now); ok {
			l.log.Warn("limit: store failed", "rule", ru.Name, "err", v.err, "policy", l.storePolicy(), "suppressed", n)
		}
		if !l.failOpen {
			w.Header().Set("Retry-After", "1")
			problem.WriteDetails(w, problem.Details{Status: http.StatusServiceUnavailable,
				Detail: "the rate limiter cannot reach its store", Extra: map[string]any{"rule": ru.Name}})
			return "", v, false, true
		}
		return "", v, false, false
	case shadowLimited:
		if n, ok := l.logs.allow(logKey{ru.Name, "shadow_limited"}, now); ok {
			l.log.Info("limit: shadow rule would limit", "rule", ru.Name, "key", string(ru.Key), "value", value, "limit", ru.limitNames[v.limit], "suppressed", n)
		}
	}
	return value, v, true, false
}

// setRateLimit sets the RateLimit-Policy and RateLimit fields by their
// canonical names: Header.Set would canonicalize "RateLimit-Policy" into
// a new string on every request. One array holds both values, each field
// a slice of its own element, as Header.Set would give it.
func setRateLimit(h http.Header, policies []string, states []byte) {
	vals := &[2]string{policies[0], string(states)}
	if len(policies) > 1 {
		vals[0] = strings.Join(policies, ", ")
	}
	h[hdrRateLimitPolicy] = vals[0:1:1]
	h[hdrRateLimit] = vals[1:2:2]
}

// serveCounting serves the request and then counts the hits of the rules
// that count by the answer's status.
func (l *Limiter) serveCounting(ctx context.Context, w http.ResponseWriter, r *http.Request, next http.Handler, after []hit, now time.Time) {
	ww := ongoing.StatusWriter(w) // the gateway's, when there is one
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
}

// The canonical names of the RateLimit headers (net/http's spelling).
var (
	hdrRateLimitPolicy = http.CanonicalHeaderKey("RateLimit-Policy")
	hdrRateLimit       = http.CanonicalHeaderKey("RateLimit")
)

// reject answers 429 for rule ru: the client went over a limit, or is in
// the rule's penalty box (the RateLimit item is then the rule's first
// limit's, with the box's end).
func (l *Limiter) reject(w http.ResponseWriter, r *http.Request, ru *rule, v verdict) {
	retry := max(v.reset, 1)
	inBox := v.box.Until != 0
	noteRefusal(r, ru.Name, inBox)
	h := w.Header()
	h.Set("Retry-After", strconv.FormatInt(retry, 10))
	h.Set("RateLimit-Policy", ru.policy)
	h.Set("RateLimit", string(ru.appendRateLimitItem(nil, v.limit, 0, retry)))
	lim := ru.limitNames[v.limit]
	d := problem.Details{
		Status: http.StatusTooManyRequests,
		Detail: "rule " + ru.Name + " allows " + lim + " per " + ru.keyName + "; retry in " + strconv.FormatInt(retry, 10) + " s",
		Extra:  map[string]any{"rule": ru.Name, "limit": lim, "retry_after": retry},
	}
	if inBox {
		d.Detail = "rule " + ru.Name + " has put this " + ru.keyName + " in its penalty box for going over its limits (" +
			strings.Join(ru.limitNames, ", ") + "); retry in " + strconv.FormatInt(retry, 10) + " s"
		d.Extra = map[string]any{"rule": ru.Name, "boxed": true, "until": time.Unix(v.box.Until, 0).UTC(), "retry_after": retry}
	}
	problem.WriteDetails(w, d)
}

// unreadable applies ru's on_unreadable policy to a request whose email
// cannot be told (f.emailErr). It returns the value to check the request
// under (key_by_ip), or ok false to go on without ru (skip, and reject in
// shadow mode, which blocks nothing), or answered true when it refused the
// request.
func (l *Limiter) unreadable(w http.ResponseWriter, ru *rule, f *features, now time.Time) (value string, ok, answered bool) {
	u := f.emailErr
	policy := ru.OnUnreadable
	if policy == "" || u.broken {
		// A body that cannot be read at all cannot go on to the upstream
		// either, whatever the policy: it is answered here.
		policy = OnUnreadableReject
	}
	if policy == OnUnreadableKeyByIP {
		f.client()
		if f.ipOK {
			value, ok = "ip:"+f.ip, true
		}
	}
	if !ok {
		ru.metrics.inc(unreadableEmail)
	}
	if n, logIt := l.logs.allow(logKey{ru.Name, "unreadable"}, now); logIt {
		l.log.Info("limit: cannot tell the email of a request", "rule", ru.Name, "reason", u.reason,
			"status", u.status, "policy", policy, "shadow", ru.Shadow, "suppressed", n)
	}
	if policy != OnUnreadableReject || ru.Shadow && !u.broken {
		return value, ok, false
	}
	if u.close {
		problem.CloseConnection(w, f.r)
	}
	problem.WriteDetails(w, problem.Details{
		Status: u.status,
		Detail: "rule " + ru.Name + " limits requests per email and cannot tell which email this request names: " + u.reason,
		Extra:  map[string]any{"rule": ru.Name},
	})
	return "", false, true
}

// features reads a request's features once each, on first use.
type features struct {
	l                 *Limiter
	r                 *http.Request
	addr              netip.Addr
	trusted, addrDone bool
	ip, user, email   string
	ipOK, userOK      bool
	emailErr          *unreadable // the email cannot be told
	parts             [2]string   // the values of the last pair read (value)
	userDone          bool
	emailDone         bool
	body              requestBody // read once for every reader of the body

	// Method overrides (see routedAs): those of the headers and query
	// string once looked for, those of the body once read, and whether the
	// body's could not be told.
	overridden, bodyOverridden, bodyUnknown bool
}

// routedAs reports whether the request, which does not match m under its
// own method, matches it under a method the upstream may route it as: one
// named by an override header (X-HTTP-Method-Override, X-HTTP-Method,
// X-Method-Override) or a "_method" field of the query string or of the
// body. The headers and query string are looked at once, on the first rule
// whose methods miss; the body only when m's path matches, read as the
// email reader reads it (up to identity.max_body_bytes), when it is a form
// (or has no Content-Type), multipart or JSON. A POST whose body of those
// kinds cannot be read that way (larger, encoded, not parsing) may name
// any method, as far as the gateway can tell, so it matches every rule of
// its path; a body of another method is looked in when it can be read,
// since the stacks that honour "_method" do so on POST.
func (f *features) routedAs(q *route.Folding, m *route.Matcher) bool {
	if !f.overridden {
		f.overridden = true
		if q.Also = overrides(f.r); len(q.Also) > 0 && q.Match(m) {
			return true
		}
	}
	r := f.r
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || !q.MatchPath(m) {
		return false
	}
	if !f.bodyOverridden {
		f.bodyOverridden = true
		switch kind, boundary := overrideBody(r); kind {
		case noOverrideBody:
		case unknownBody:
			f.bodyUnknown = true
		default:
			buf, u := f.requestBody().bytes()
			switch {
			case u != nil && u.broken:
				// Too slow or malformed: the request goes no further anyway
				// (an email rule answers it, else the proxy does).
			case u != nil:
				f.bodyUnknown = true // larger than max_body_bytes
			default:
				ms, ok := bodyOverrides(kind, boundary, buf)
				f.bodyUnknown = !ok
				q.Also = append(q.Also, ms...)
			}
		}
	}
	if f.bodyUnknown && strings.EqualFold(r.Method, http.MethodPost) {
		return true
	}
	return q.Match(m)
}

func (f *features) client() {
	if !f.addrDone {
		f.addrDone = true
		c, ok := f.l.id.trust.Client(f.r)
		f.addr, f.trusted = c.Addr, c.ViaProxy
		if ok {
			f.ipOK = true
			if f.addr == c.Peer && f.addr.Is4() {
				f.ip = forwarded.PeerText(f.r, f.addr) // ipValue's text, without allocating it
			} else {
				f.ip = f.l.id.ipValue(f.addr)
			}
		}
	}
}

// value returns the counter value of ru's key for the request: its
// feature's value, or its pair's two values joined (pairValue), parts
// then holding them. ok is false when the request lacks a feature.
func (f *features) value(ru *rule) (value string, parts []string, ok bool) {
	if !ru.isPair {
		value, ok = f.get(ru.Key)
		return value, nil, ok
	}
	a, ok := f.get(ru.pair[0])
	if !ok {
		return "", nil, false
	}
	b, ok := f.get(ru.pair[1])
	if !ok {
		return "", nil, false
	}
	f.parts = [2]string{a, b}
	return pairValue(a, b), f.parts[:], true
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
		if !f.emailDone {
			f.emailDone = true
			f.email, f.emailErr = f.l.id.emails.emailIn(f.r, f.requestBody())
		}
		return f.email, f.email != ""
	case Tenant:
		if f.l.id.tenant == nil {
			return "", false
		}
		t := f.l.id.tenant(f.r.Host)
		return t, t != ""
	}
	return "", false
}

// requestBody returns the request's body as the limiter reads it.
func (f *features) requestBody() *requestBody {
	if f.body.r == nil {
		f.body = requestBody{r: f.r, max: f.l.id.emails.maxBody}
	}
	return &f.body
}

// storePolicy names on_store_error for the log.
func (l *Limiter) storePolicy() string {
	if l.failOpen {
		return "allow"
	}
	return "deny"
}
