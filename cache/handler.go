package cache

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/linkgate/linkgate/h1wire"
	"github.com/linkgate/linkgate/ongoing"
)

// PurgeField is the field by which the upstream purges: on any answer, a
// comma-separated list of paths on the request's host, each purging that
// key with its query strings and variants; a path ending in "*" purges
// every key it starts. It is removed before the client sees the answer,
// and the purge reaches the fleet as an admin purge does.
const PurgeField = "Linkgate-Purge"

// Result is what the cache did with a request, as the access log
// (cache=) and linkgate_cache_requests_total name it.
type Result uint8

const (
	Hit       Result = iota + 1 // served from the cache, fresh
	Miss                        // sent upstream
	Stale                       // served past freshness: the upstream failing, or renewing in the background
	Coalesced                   // served the answer another request of the same key fetched meanwhile
	Bypass                      // not cacheable: method, credentials, body, or the cache off
	numResults
)

var resultNames = [numResults]string{"", "hit", "miss", "stale", "coalesced", "bypass"}

func (r Result) String() string {
	if r < numResults {
		return resultNames[r]
	}
	return ""
}

type resultKey struct{}

// WithResult returns ctx carrying res, where the cache notes what it
// did with the request (the access log reads it).
func WithResult(ctx context.Context, res *Result) context.Context {
	return context.WithValue(ctx, resultKey{}, res)
}

func note(r *http.Request, res Result, m *Metrics) {
	m.result(res)
	if p, ok := r.Context().Value(resultKey{}).(*Result); ok {
		*p = res
	}
}

// renewTimeout bounds a renewal in the background: past it the stale
// answer stays until its stale-while-revalidate ends.
const renewTimeout = 30 * time.Second

// passFor is how long a key whose last answer was not kept (the upstream
// did not ask for it: no default_ttl, no targeted field, or no-store) is
// passed through: its requests go upstream at once, each, instead of
// waiting for one another's answer, which none of them could be served.
// Without it every concurrent visit of a popular link the upstream does
// not let the gateway keep would wait for the round trip of the visit
// before it. Each answer is still looked at: the first that may be kept
// is, and ends the pass (Varnish's hit-for-miss).
const passFor = time.Minute

// passKey is the key of the note that key is passed through: no request
// target holds a NUL, and no purge by prefix matches it.
func passKey(key string) string { return "\x00pass " + key }

// Handler returns next behind the cache: p's policy (nil: the cache is
// off, and the gateway's own fields are still removed from the answers),
// with defaultTTL the route's default_ttl. next is the pool's proxy; the
// limiter and the visit counter go in front of the handler, so that they
// see every request.
func (s *Store) Handler(p *Plan, defaultTTL time.Duration, next http.Handler) http.Handler {
	return &handler{s: s, p: p, ttl: defaultTTL, next: next}
}

type handler struct {
	s    *Store
	p    *Plan
	ttl  time.Duration
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.p == nil || !h.p.cfg.Enabled || !cacheable(r) {
		note(r, Bypass, h.s.m)
		h.next.ServeHTTP(&recorder{ResponseWriter: w, h: h, r: r, direct: true}, r)
		return
	}
	key := Key(r)
	e, k := h.lookup(key, r)
	now := h.s.now()
	if e != nil {
		switch {
		case now.Before(e.fresh):
			h.serve(w, r, e, now, Hit)
			return
		case now.Before(e.swr):
			h.serve(w, r, e, now, Stale)
			h.renew(k, key, r)
			return
		case !now.Before(e.sie):
			e = nil // too old to serve even when the upstream fails
		}
	}
	if e == nil {
		if p := h.s.get(passKey(key)); p != nil && now.Before(p.fresh) {
			h.forward(w, r, key, nil, true)
			return
		}
	}
	fl, lead := h.s.flights.join(k)
	if !lead {
		select {
		case <-fl.done:
		case <-r.Context().Done():
			return // the client left; nothing to count
		}
		if c, _ := h.lookup(key, r); c != nil && h.s.now().Before(c.fresh) {
			h.serve(w, r, c, h.s.now(), Coalesced)
			return
		}
		if fl.failed && e != nil {
			h.serve(w, r, e, h.s.now(), Stale)
			return
		}
		h.forward(w, r, key, e, false) // nothing kept: this request goes itself
		return
	}
	failed := false
	defer func() {
		fl.failed = failed
		h.s.flights.land(k, fl)
	}()
	// The flight before may have landed between the lookup and the join:
	// what it kept is fresh.
	if c, _ := h.lookup(key, r); c != nil && h.s.now().Before(c.fresh) {
		h.serve(w, r, c, h.s.now(), Hit)
		return
	}
	failed = h.forward(w, r, key, e, false)
}

// forward sends r upstream, passing the answer on and keeping it when it
// may be kept; an answer not kept notes that key is passed through,
// unless passing (the note is there, fresh). With stale set, an upstream
// failure (500, 502, 503, 504: RFC 5861 section 4) is not passed on:
// stale is served instead, and failed is true.
func (h *handler) forward(w http.ResponseWriter, r *http.Request, key string, stale *entry, passing bool) (failed bool) {
	rw := &recorder{ResponseWriter: w, h: h, r: r, hold: stale != nil, start: h.s.now()}
	defer func() {
		if !rw.failed {
			note(r, Miss, h.s.m) // even when the proxy ends the answer with a panic
		}
	}()
	h.next.ServeHTTP(rw, r)
	if rw.failed {
		h.serve(w, r, stale, h.s.now(), Stale)
		return true
	}
	switch {
	case h.keep(rw, key) != nil:
		if passing {
			h.s.c.Invalidate(passKey(key))
		}
	case rw.status != 0 && !passing: // an answer, not to be kept: pass the key through
		h.s.set(passKey(key), &entry{fresh: h.s.now().Add(passFor), weight: uint32(len(key)) + entryOverhead})
	}
	return false
}

// renew fetches key again in the background, once at a time per key, the
// client having been served the stale answer: stale-while-revalidate. An
// upstream failure keeps the stale answer.
func (h *handler) renew(k, key string, r *http.Request) {
	fl, lead := h.s.renew.join(k)
	if !lead {
		return
	}
	// The renewal before may have landed between the caller's lookup and
	// the join: what it kept is fresh, and a second renewal would ask the
	// upstream again.
	if c, _ := h.lookup(key, r); c != nil && h.s.now().Before(c.fresh) {
		h.s.renew.land(k, fl)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), renewTimeout)
	rr := r.Clone(ctx) // no visit, no access record: the context is not the client's
	go func() {
		defer func() {
			cancel()
			h.s.renew.land(k, fl)
			if v := recover(); v != nil && !errors.Is(asError(v), http.ErrAbortHandler) {
				panic(v)
			}
		}()
		rw := &recorder{ResponseWriter: discard{}, h: h, r: rr, hold: true, start: h.s.now()}
		h.next.ServeHTTP(rw, rr)
		if !rw.failed {
			h.keep(rw, key)
		}
	}()
}

func asError(v any) error {
	err, _ := v.(error)
	return err
}

// lookup returns the entry of key for r, and the key it is (or would be)
// kept under: the entry of r's full key, else the one its path's
// No-Vary-Search note points to, following a varying key's note to r's
// variant.
func (h *handler) lookup(key string, r *http.Request) (*entry, string) {
	e := h.s.get(key)
	if e == nil {
		nk := searchNoteKey(r)
		if n := h.s.get(nk); n != nil && n.search != nil {
			key = searchKey(nk, n, r)
			e = h.s.get(key)
		}
	}
	if e == nil || e.vary == nil {
		return e, key
	}
	vk := variantKey(key, e, r)
	return h.s.get(vk), vk
}

// serve answers r with e: its status, fields and body, and its Age (RFC
// 9111 section 5.1).
func (h *handler) serve(w http.ResponseWriter, r *http.Request, e *entry, now time.Time, res Result) {
	note(r, res, h.s.m)
	hdr := w.Header()
	for _, f := range e.fields {
		hdr[f.name] = f.values
	}
	hdr["Age"] = e.age(int64((e.arrivedAge + now.Sub(e.stored)) / time.Second))
	w.WriteHeader(e.status)
	if r.Method != http.MethodHead {
		w.Write(e.body)
	}
}

// keep stores the answer rw recorded when it may be kept, returning its
// entry.
func (h *handler) keep(rw *recorder, key string) *entry {
	if !rw.keep || rw.status == 0 {
		return nil
	}
	e := rw.entry
	e.body = rw.body
	if int64(len(e.body))+fieldBytes(e.fields) > h.p.cfg.MaxEntryBytes {
		return nil
	}
	if e.search != nil {
		key = h.keepSearch(rw.r, key, e)
	}
	e.weight = uint32(int64(len(key)) + int64(len(e.body)) + fieldBytes(e.fields) + entryOverhead)
	if len(e.vary) == 0 {
		h.s.set(key, e)
		return e
	}
	// A varying answer: its note at key, the answer under r's variant.
	vary := e.vary
	e.vary = nil
	n := h.s.get(key)
	gen := uint64(0)
	if n != nil && n.vary != nil && slices.Equal(n.vary, vary) {
		gen = n.gen
	} else {
		gen = h.s.gen.Add(1)
	}
	exp := e.expires()
	if n != nil && n.vary != nil && n.expires().After(exp) {
		exp = n.expires()
	}
	h.s.set(key, &entry{vary: vary, gen: gen, fresh: exp, weight: uint32(len(key)) + entryOverhead})
	h.s.set(variantKey(key, &entry{vary: vary, gen: gen}, rw.r), e)
	return e
}

// keepSearch keeps (or renews) the note that the answers of r's path
// carry e's No-Vary-Search, and returns the key e is kept under (the
// note's). The entry of key, r's full key, is dropped: the note answers
// r now.
func (h *handler) keepSearch(r *http.Request, key string, e *entry) string {
	s := e.search
	e.search = nil // the answer, not a note
	nk := searchNoteKey(r)
	n := h.s.get(nk)
	exp := e.expires()
	var gen uint64
	if n != nil && n.search != nil && n.search.equal(s) {
		gen = n.gen
		if n.expires().After(exp) {
			exp = n.expires()
		}
	} else {
		gen = h.s.gen.Add(1)
	}
	n = &entry{search: s, gen: gen, fresh: exp, weight: uint32(len(nk)+s.bytes()) + entryOverhead}
	h.s.set(nk, n)
	h.s.c.Invalidate(key)
	return searchKey(nk, n, r)
}

// fieldOverhead is what a field value costs beyond its name and text:
// its string and slice headers and its share of the field slice.
const fieldOverhead = 64

// fieldBytes is what fs take in memory.
func fieldBytes(fs []field) int64 {
	n := int64(0)
	for _, f := range fs {
		for _, v := range f.values {
			n += int64(len(f.name) + len(v) + fieldOverhead)
		}
	}
	return n
}

// Key is the cache key of r: its host, in lower case, and its path and
// query as sent (RFC 9111 section 2: the target URI), like
// "sho.rt/abc?utm=x".
func Key(r *http.Request) string {
	path := r.URL.EscapedPath()
	if r.URL.RawQuery != "" || r.URL.ForceQuery {
		return strings.ToLower(r.Host) + path + "?" + r.URL.RawQuery
	}
	return strings.ToLower(r.Host) + path
}

// variantKey is the key of r's variant of a varying key: the key, the
// note's generation (a purge of the key, or a new Vary, leaves the old
// variants unreachable) and the values of the fields it varies on.
func variantKey(key string, n *entry, r *http.Request) string {
	var b strings.Builder
	b.WriteString(key)
	b.WriteByte(0)
	b.WriteString(strconv.FormatUint(n.gen, 10))
	for _, f := range n.vary {
		b.WriteByte(0)
		b.WriteString(strings.Join(r.Header[f], ","))
	}
	return b.String()
}

// cacheable reports whether r may be answered from the cache: a GET or
// HEAD without a body, credentials, an upgrade or a range. Authorization
// makes the answer the client's own (RFC 9111 section 3.5). The client's
// Cache-Control is not obeyed: a client must not make the gateway ask the
// upstream.
func cacheable(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		r.ContentLength <= 0 && len(r.TransferEncoding) == 0 &&
		len(r.Header["Authorization"]) == 0 && len(r.Header["Upgrade"]) == 0 && len(r.Header["Range"]) == 0
}

// keptStatus are the answers the cache keeps: the redirects, and 404 and
// 410 for cache.negative_ttl at most.
func keptStatus(code int) bool {
	switch code {
	case 301, 302, 303, 307, 308, 404, 410:
		return true
	}
	return false
}

// failure reports whether an upstream answer is the failure stale-if-error
// stands in for (RFC 5861 section 4).
func failure(code int) bool {
	return code == 500 || code == 502 || code == 503 || code == 504
}

// policy decides whether the answer r got, with status and fields hdr,
// is kept, and makes its entry (without the body) when it is.
func (h *handler) policy(r *http.Request, status int, hdr http.Header, start time.Time) *entry {
	if r.Method != http.MethodGet || !keptStatus(status) || len(hdr["Set-Cookie"]) > 0 {
		return nil
	}
	var vary []string
	for _, v := range hdr["Vary"] {
		for f := range strings.SplitSeq(v, ",") {
			f = http.CanonicalHeaderKey(strings.TrimSpace(f))
			switch {
			case f == "":
			case f == "*" || !h.p.vary[f]:
				return nil
			case !slices.Contains(vary, f):
				vary = append(vary, f)
			}
		}
	}
	slices.Sort(vary)
	c, ok := parseControl(hdr[OwnField])
	if !ok {
		c, ok = parseControl(hdr[CDNField])
	}
	cfg := h.p.cfg
	ttl, sie, swr := h.ttl, cfg.StaleIfError, cfg.StaleWhileRevalidate
	if ok {
		if c.noStore || c.maxAge < 0 {
			return nil
		}
		ttl = c.maxAge
		if c.staleIfError >= 0 {
			sie = c.staleIfError
		}
		if c.staleRevalid >= 0 {
			swr = c.staleRevalid
		}
	}
	if status == 404 || status == 410 {
		ttl, sie, swr = min(ttl, cfg.NegativeTTL), 0, 0
	}
	if ttl <= 0 {
		return nil
	}
	age := time.Duration(0)
	if a, err := strconv.ParseInt(strings.TrimSpace(firstOf(hdr["Age"])), 10, 64); err == nil && a >= 0 && a <= maxDirectiveSeconds {
		age = time.Duration(a) * time.Second
	}
	if age >= ttl {
		return nil
	}
	fresh := start.Add(ttl - age)
	e := &entry{status: status, stored: start, arrivedAge: age, fresh: fresh, swr: fresh.Add(swr), sie: fresh.Add(sie), vary: vary,
		search: parseSearch(hdr[SearchField])}
	e.fields = make([]field, 0, len(hdr))
	for k, v := range hdr {
		switch k {
		case OwnField, PurgeField, "Age":
		default:
			e.fields = append(e.fields, field{k, slices.Clip(slices.Clone(v))})
		}
	}
	return e
}

func firstOf(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// purge applies the upstream's PurgeField on r's host.
func (h *handler) purge(r *http.Request, values []string) {
	host := strings.ToLower(r.Host)
	for _, v := range values {
		for p := range strings.SplitSeq(v, ",") {
			p = strings.TrimSpace(p)
			if !strings.HasPrefix(p, "/") || !httpguts.ValidHeaderFieldValue(p) {
				continue
			}
			if pre, ok := strings.CutSuffix(p, "*"); ok {
				h.s.Apply(Purge{Prefix: host + pre}, "header")
			} else {
				h.s.Apply(Purge{Key: host + p}, "header")
			}
		}
	}
}

// recorder passes the upstream's answer on to the client, removing the
// gateway's own fields, and records it for the cache. With hold, it
// holds the answer back until its status is known, and drops it when it
// is a failure (stale-if-error). direct is the bypass: the client's
// fields from the start, nothing recorded.
type recorder struct {
	http.ResponseWriter
	h      *handler
	r      *http.Request
	start  time.Time
	hold   bool
	direct bool

	hdr    http.Header // the upstream's fields until WriteHeader
	status int
	passed bool // the head went to the client
	failed bool
	keep   bool
	entry  *entry
	body   []byte
}

// Header is the upstream's fields, apart from those middlewares in front
// set on the client's answer, until the head is written; then the
// client's (trailers).
func (rw *recorder) Header() http.Header {
	if rw.direct || rw.passed {
		return rw.ResponseWriter.Header()
	}
	if rw.hdr == nil {
		rw.hdr = http.Header{}
	}
	return rw.hdr
}

func (rw *recorder) WriteHeader(code int) { rw.writeHead(code, nil, false) }

// WriteHeaderFields is WriteHeader for a head of the header map's fields
// and fields, a relayed head's; only when TakesFields.
func (rw *recorder) WriteHeaderFields(code int, fields []h1wire.Field) {
	rw.writeHead(code, fields, true)
}

// writeHead writes the head of code: the header map's fields and, listed
// (a relayed head), fields. The answer is held back when it is a failure
// that stale stands in for, judged for keeping (policy), and passed on
// without the gateway's own fields (OwnField, PurgeField), the purge done.
func (rw *recorder) writeHead(code int, fields []h1wire.Field, listed bool) {
	pass := func() {
		if listed {
			rw.ResponseWriter.(ongoing.FieldWriter).WriteHeaderFields(code, fields)
		} else {
			rw.ResponseWriter.WriteHeader(code)
		}
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		if !rw.hold {
			pass()
		}
		return
	}
	if rw.status != 0 {
		return
	}
	rw.status = code
	if rw.hold && failure(code) {
		rw.failed = true
		return
	}
	hdr := rw.hdr // the upstream's fields set through the map; nil for none
	if rw.direct {
		hdr = rw.ResponseWriter.Header()
	}
	if !rw.direct && (!listed || rw.h.mayKeep(rw.r, code, hdr, fields)) {
		all := hdr
		if listed {
			all = withFields(hdr, fields)
		}
		if rw.entry = rw.h.policy(rw.r, code, all, rw.start); rw.entry != nil {
			rw.keep = true
		}
	}
	if listed {
		fields, hdr = withoutOwnFields(fields, hdr)
	}
	if v := hdr[PurgeField]; len(v) > 0 && rw.h.p != nil {
		rw.h.purge(rw.r, v)
	}
	delete(hdr, OwnField)
	delete(hdr, PurgeField)
	if !rw.direct {
		dst := rw.ResponseWriter.Header()
		for k, v := range hdr {
			dst[k] = v
		}
	}
	rw.passed = true
	pass()
}

// mayKeep reports whether policy may keep the answer to r of code whose
// head is hdr and fields: when it may not (the default: the link service
// asks nothing), the fields of a relayed head need no header map.
func (h *handler) mayKeep(r *http.Request, code int, hdr http.Header, fields []h1wire.Field) bool {
	if r.Method != http.MethodGet || !keptStatus(code) {
		return false
	}
	if h.ttl > 0 || len(hdr[OwnField]) > 0 || len(hdr[CDNField]) > 0 {
		return true
	}
	for _, f := range fields {
		if f.Name == OwnField || f.Name == CDNField {
			return true
		}
	}
	return false
}

// withFields is a header map of hdr's fields and then fields.
func withFields(hdr http.Header, fields []h1wire.Field) http.Header {
	all := make(http.Header, len(hdr)+len(fields))
	for k, v := range hdr {
		all[k] = slices.Clip(v)
	}
	for _, f := range fields {
		all[f.Name] = append(all[f.Name], f.Value)
	}
	return all
}

// withoutOwnFields returns fields without the gateway's own, and hdr with
// the PurgeField values among them added (made when nil). Rare: fields
// are copied only when they hold one.
func withoutOwnFields(fields []h1wire.Field, hdr http.Header) ([]h1wire.Field, http.Header) {
	own := false
	for _, f := range fields {
		own = own || f.Name == OwnField || f.Name == PurgeField
	}
	if !own {
		return fields, hdr
	}
	var kept []h1wire.Field
	for _, f := range fields {
		switch f.Name {
		case PurgeField:
			if hdr == nil {
				hdr = http.Header{}
			}
			hdr[PurgeField] = append(hdr[PurgeField], f.Value)
		case OwnField:
		default:
			kept = append(kept, f)
		}
	}
	return kept, hdr
}

func (rw *recorder) Write(b []byte) (int, error) {
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	if rw.failed {
		return len(b), nil
	}
	if rw.keep {
		if int64(len(rw.body)+len(b)) > rw.h.p.cfg.MaxEntryBytes {
			rw.keep, rw.body = false, nil
		} else {
			rw.body = append(rw.body, b...)
		}
	}
	return rw.ResponseWriter.Write(b)
}

// Flush sends the head and what is written so far.
func (rw *recorder) Flush() {
	if rw.status == 0 {
		rw.WriteHeader(http.StatusOK)
	}
	if !rw.failed {
		http.NewResponseController(rw.ResponseWriter).Flush()
	}
}

// Unwrap is the client's writer, for http.ResponseController.
func (rw *recorder) Unwrap() http.ResponseWriter { return rw.ResponseWriter }

// TakesFields: a recorder passes a relayed head on as a list when the
// client's writer takes one.
func (rw *recorder) TakesFields() bool {
	_, ok := ongoing.AsFieldWriter(rw.ResponseWriter)
	return ok
}

// HeadField is the first value of the named field of the head the client
// gets.
func (rw *recorder) HeadField(name string) string {
	if fw, ok := ongoing.AsFieldWriter(rw.ResponseWriter); ok {
		return fw.HeadField(name)
	}
	if v := rw.Header()[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// discard is the client of a renewal in the background.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}
