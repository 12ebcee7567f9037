package limit

import (
	"encoding/json"
	"net/http"
	"net/url"
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
	rules := make([]map[string]string, 0, len(l.rules))
	for _, ru := range l.rules {
		rules = append(rules, map[string]string{"name": ru.Name, "key": string(ru.Key)})
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

// normalize turns a value as a client sends it into the counter value.
func (l *Limiter) normalize(k Feature, v string) (string, bool) {
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
		Limits       []adminLimit `json:"limits"`
	}{Rule: ru.Name, Key: ru.Key, Value: value, Shadow: ru.Shadow, Limits: []adminLimit{}}
	at := func(s int64) *time.Time { t := time.Unix(s, 0).UTC(); return &t }
	for i, lim := range ru.plan.limits {
		n := ru.plan.sum(rs, i)
		al := adminLimit{Limit: ru.limitNames[i], Policy: ru.names[i], Quota: lim.N, Window: int64(lim.Window / time.Second), Count: n, Remaining: max(lim.N-n, 0)}
		if n > 0 {
			al.ResetsAt = at(ru.plan.nextFree(rs, i, sec))
		}
		if f := l.freeAt(r.Context(), ru, c, rs, i, lim.N-1); f > 0 {
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
