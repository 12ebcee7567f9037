package limit

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/linkgate/linkgate/problem"
)

// AdminHandler serves the counters of one (rule, feature value):
//
//	GET    {prefix}/{rule}/{value}   the count of each limit and when it frees up (JSON)
//	DELETE {prefix}/{rule}/{value}   resets the counter ("unblock this user"): 204
//
// The gateway mounts it at /admin/limits (chi Mount, http.StripPrefix or a
// plain pattern all work: the rule is the first path segment naming a
// rule). The value is given as a client would send it, URL-path-escaped
// ("2001:db8::1", "2001:db8:1:2::%2F64", "Alice%40Example.com") and is
// normalized the same way: emails as NormalizeEmail and identity.email_fold
// fold them, IPv6 grouped by identity.ipv6_prefix. An unknown rule is 404, a value that is not an
// address for an ip rule 400. A reset clears this gateway's memory of the
// client being blocked, not other gateways' (theirs expires by itself within
// the retry time).
func (l *Limiter) AdminHandler() http.Handler {
	mux := chi.NewRouter()
	h := func(w http.ResponseWriter, r *http.Request) {
		ru, value, ok := l.adminTarget(w, r, chi.URLParam(r, "*"))
		if !ok {
			return
		}
		if r.Method == http.MethodDelete {
			l.adminReset(w, r, ru, value)
			return
		}
		l.adminShow(w, r, ru, value)
	}
	mux.Get("/*", h)
	mux.Delete("/*", h)
	mux.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", "GET, DELETE")
		problem.Write(w, http.StatusMethodNotAllowed, "use GET or DELETE on {rule}/{value}")
	})
	mux.NotFound(l.adminUsage)
	return mux
}

// adminUsage answers 404 for a path that names no rule, listing the rules
// that can be asked about and how.
func (l *Limiter) adminUsage(w http.ResponseWriter, r *http.Request) {
	rules := make([]map[string]any, 0, len(l.rules))
	for _, ru := range l.rules {
		rules = append(rules, map[string]any{"name": ru.Name, "key": ru.Key})
	}
	problem.WriteDetails(w, problem.Details{
		Status: http.StatusNotFound,
		Detail: "ask GET (show) or DELETE (reset) /admin/limits/{rule}/{value}, the value as a client sends it: an address, a user id or an email",
		Extra:  map[string]any{"rules": rules},
	})
}

// adminTarget finds the rule and the normalized value in the escaped path
// rest, answering the error itself when it cannot.
func (l *Limiter) adminTarget(w http.ResponseWriter, r *http.Request, rest string) (*rule, string, bool) {
	if rest == "" {
		rest = r.URL.EscapedPath()
	}
	segs := strings.Split(strings.Trim(rest, "/"), "/")
	for i, s := range segs {
		name, err := url.PathUnescape(s)
		if err != nil {
			continue
		}
		ru := l.byName[name]
		if ru == nil {
			continue
		}
		raw, err := url.PathUnescape(strings.Join(segs[i+1:], "/"))
		if err != nil || raw == "" {
			problem.Write(w, http.StatusBadRequest, "missing or badly escaped value after rule "+name)
			return nil, "", false
		}
		v, ok := l.normalize(ru.Key, raw)
		if !ok {
			problem.Write(w, http.StatusBadRequest, "rule "+name+" is keyed by "+string(ru.Key)+": "+raw+" is not one")
			return nil, "", false
		}
		return ru, v, true
	}
	l.adminUsage(w, r)
	return nil, "", false
}

// normalize turns a value as a client sends it into the counter value; a
// pair's as its counter value writes it ("alice@example.com,203.0.113.7"),
// each part as a client sends it.
func (l *Limiter) normalize(k Feature, v string) (string, bool) {
	if p := k.Parts(); len(p) == 2 {
		a, b, ok := splitPair(v)
		if !ok {
			return "", false
		}
		if a, ok = l.normalize(p[0], a); !ok {
			return "", false
		}
		if b, ok = l.normalize(p[1], b); !ok {
			return "", false
		}
		return pairValue(a, b), true
	}
	switch k {
	case IP:
		return l.id.normalizeIP(v)
	case Email:
		v = l.id.emails.normalize(v)
	default:
		v = strings.TrimSpace(v)
	}
	return v, v != ""
}

// adminLimit is one limit's state in the GET answer.
type adminLimit struct {
	Limit     string     `json:"limit"`  // as configured: "5/m"
	Policy    string     `json:"policy"` // the RateLimit-Policy item name
	Quota     int64      `json:"quota"`
	Window    int64      `json:"window_seconds"`
	Count     int64      `json:"count"`
	Remaining int64      `json:"remaining"`
	ResetsAt  *time.Time `json:"resets_at,omitempty"` // when the count next drops
	FreeAt    *time.Time `json:"free_at,omitempty"`   // over the limit: when a request passes again
}

func (l *Limiter) adminShow(w http.ResponseWriter, r *http.Request, ru *rule, value string) {
	now := l.now()
	sec := now.Unix()
	c := Counter{Rule: ru.Name, Value: value}
	rs := new(readSet)
	ru.plan.reads(sec, rs)
	if err := l.store.Load(r.Context(), c, rs.buckets, rs.counts); err != nil {
		problem.Write(w, http.StatusServiceUnavailable, "limiter store: "+err.Error())
		return
	}
	out := struct {
		Rule         string       `json:"rule"`
		Key          Feature      `json:"key"`
		Value        string       `json:"value"`
		Shadow       bool         `json:"shadow,omitempty"`
		Limited      bool         `json:"limited"`
		BlockedUntil *time.Time   `json:"blocked_until,omitempty"` // this gateway's memory of the client being over
		Box          *adminBox    `json:"box,omitempty"`           // the penalty box, in it or kept for its trips
		Limits       []adminLimit `json:"limits"`
	}{Rule: ru.Name, Key: ru.Key, Value: value, Shadow: ru.Shadow, Limits: []adminLimit{}}
	at := func(s int64) *time.Time { t := time.Unix(s, 0).UTC(); return &t }
	if b := ru.plan.boxIn(rs); b.Until != 0 {
		out.Box = boxJSON(b, sec)
		out.Limited = b.In(sec)
	}
	for i, lim := range ru.plan.limits {
		n := ru.plan.sum(rs, i)
		al := adminLimit{Limit: ru.limitNames[i], Policy: ru.names[i], Quota: lim.N, Window: int64(lim.Window / time.Second), Count: n, Remaining: max(lim.N-n, 0)}
		if n > 0 {
			al.ResetsAt = at(ru.plan.nextFree(rs, i, sec))
		}
		if f := l.freeAt(r.Context(), &ru.windows, c, rs, i, lim.N-1); f > 0 {
			al.FreeAt = at(f)
			out.Limited = true
		}
		out.Limits = append(out.Limits, al)
	}
	if e, ok := l.blocked.get(c, sec); ok {
		out.BlockedUntil = at(e.until)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(out)
}

// adminReset resets the counters of (ru, value) and its penalty box.
func (l *Limiter) adminReset(w http.ResponseWriter, r *http.Request, ru *rule, value string) {
	c := Counter{Rule: ru.Name, Value: value}
	if err := l.store.Reset(r.Context(), c, ru.plan.resetBuckets(l.now().Unix())); err != nil {
		problem.Write(w, http.StatusServiceUnavailable, "limiter store: "+err.Error())
		return
	}
	l.blocked.del(c)
	l.log.Info("limit: counter reset", "rule", ru.Name, "value", value)
	w.WriteHeader(http.StatusNoContent)
}

// adminBox is a penalty box in the admin API's answers.
type adminBox struct {
	In    bool      `json:"in"`    // the client is kept out now
	Since time.Time `json:"since"` // the trip that put it there
	Until time.Time `json:"until"`
	Trips int       `json:"trips"` // trips within penalty.forget_after of each other, this box's included
}

func boxJSON(b Box, now int64) *adminBox {
	return &adminBox{In: b.In(now), Since: time.Unix(b.Start, 0).UTC(), Until: time.Unix(b.Until, 0).UTC(), Trips: b.Trips}
}

// countBoxes returns how many of the store's boxes that have not ended
// belong to each of l's rules with a penalty.
func (l *Limiter) countBoxes(ctx context.Context) (map[string]int, error) {
	n := map[string]int{}
	err := l.store.Boxes(ctx, l.now().Unix(), func(b Boxed) bool {
		if ru := l.byName[b.Rule]; ru != nil && ru.pen != nil {
			n[b.Rule]++
		}
		return true
	})
	return n, err
}

// The pages of GET /admin/boxed.
const (
	defaultBoxedPage = 100
	maxBoxedPage     = 1000
)

// BoxedHandler serves the penalty boxes:
//
//	GET    {prefix}?limit=N&after=C   the clients in a box now, by rule then value, N at a time
//	DELETE {prefix}/{rule}/{value}    lets the client out: 204
//
// The gateway mounts it at /admin/boxed. A page holds at most limit boxes
// (default 100, at most 1000) and, when there may be more, "next": the
// after of the next page. Each box is read from the store as it is listed,
// so that a box another gateway released or lengthened shows as the store
// has it. What the list holds is the store's: every box of the in-process
// store; with memcached, which cannot list its keys, the boxes this
// gateway put or met in its checks (limit/memcached: Boxes). Boxes of
// rules no longer in the config are not listed.
//
// DELETE takes the value as /admin/limits does (a pair's as it is
// listed, "alice%40example.com,203.0.113.7") and resets the client's
// counters under the rule with its box and trips, as
// DELETE /admin/limits/{rule}/{value} does: it comes back at a clean
// window with a first trip's penalty, on every gateway of the store
// within a second (their memory of the box, boxRecheck).
func (l *Limiter) BoxedHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		list := strings.Trim(r.URL.Path, "/") == ""
		switch {
		case list && (r.Method == http.MethodGet || r.Method == http.MethodHead):
			l.adminBoxed(w, r)
		case !list && r.Method == http.MethodDelete:
			ru, value, ok := l.adminTarget(w, r, "")
			if !ok {
				return
			}
			if ru.pen == nil {
				problem.Write(w, http.StatusNotFound, "rule "+ru.Name+" has no penalty: nobody is in its box")
				return
			}
			l.adminReset(w, r, ru, value)
		case list:
			w.Header().Set("Allow", "GET")
			problem.Write(w, http.StatusMethodNotAllowed, "GET lists the boxes; DELETE {rule}/{value} lets a client out")
		default:
			w.Header().Set("Allow", "DELETE")
			problem.Write(w, http.StatusMethodNotAllowed, "DELETE {rule}/{value} lets a client out; GET lists the boxes")
		}
	})
}

// boxedEntry is a box in GET /admin/boxed.
type boxedEntry struct {
	Rule  string    `json:"rule"`
	Key   Feature   `json:"key"`
	Value string    `json:"value"`
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	Trips int       `json:"trips"`
}

func (l *Limiter) adminBoxed(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	n := defaultBoxedPage
	if s := q.Get("limit"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > maxBoxedPage {
			problem.Write(w, http.StatusBadRequest, "limit: want a number from 1 to "+strconv.Itoa(maxBoxedPage))
			return
		}
		n = v
	}
	var after Counter
	if s := q.Get("after"); s != "" {
		rule, value, _ := strings.Cut(s, "/")
		var err1, err2 error
		after.Rule, err1 = url.PathUnescape(rule)
		after.Value, err2 = url.PathUnescape(value)
		if err1 != nil || err2 != nil {
			problem.Write(w, http.StatusBadRequest, "after: want the next of the page before: {rule}/{value}, escaped")
			return
		}
	}
	ctx := r.Context()
	now := l.now().Unix()
	var found []Counter
	err := l.store.Boxes(ctx, now, func(b Boxed) bool {
		if ru := l.byName[b.Rule]; ru != nil && ru.pen != nil && counterAfter(b.Counter, after) {
			found = append(found, b.Counter)
		}
		return true
	})
	if err != nil {
		problem.Write(w, http.StatusServiceUnavailable, "limiter store: "+err.Error())
		return
	}
	slices.SortFunc(found, func(a, b Counter) int { return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Value, b.Value)) })
	out := struct {
		Boxed []boxedEntry `json:"boxed"`
		Next  string       `json:"next,omitempty"`
	}{Boxed: []boxedEntry{}}
	var counts [1]int64
	for i, c := range found {
		if len(out.Boxed) == n {
			out.Next = url.PathEscape(found[i-1].Rule) + "/" + url.PathEscape(found[i-1].Value)
			break
		}
		// The box as the store has it now: another gateway may have
		// released or lengthened it since this one saw it.
		if err := l.store.Load(ctx, c, []Bucket{BoxBucket}, counts[:]); err != nil {
			problem.Write(w, http.StatusServiceUnavailable, "limiter store: "+err.Error())
			return
		}
		if b := UnpackBox(counts[0]); b.In(now) {
			out.Boxed = append(out.Boxed, boxedEntry{Rule: c.Rule, Key: l.byName[c.Rule].Key, Value: c.Value,
				Since: time.Unix(b.Start, 0).UTC(), Until: time.Unix(b.Until, 0).UTC(), Trips: b.Trips})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(out)
}

// counterAfter reports whether c comes after a in the order of
// GET /admin/boxed: by rule, then by value.
func counterAfter(c, a Counter) bool {
	return c.Rule > a.Rule || c.Rule == a.Rule && c.Value > a.Value
}
