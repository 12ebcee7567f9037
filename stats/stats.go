// Package stats is the read side of link analytics: the /stats API (one
// link's totals and curve, or all links'), its query parameters, the JSON
// and CSV encoders, compression and the chart page. It reads through a
// Reader (analytics.Reader: the store, read tier-correctly by a
// rollup.Reader, plus the counts the gateway has not written yet) and
// chooses and stitches tiers with package rollup. The gateway mounts it
// under stats.prefix.
package stats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/bearer"
	"github.com/linkgate/linkgate/logthrottle"
	"github.com/linkgate/linkgate/problem"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
)

// Reader is what the API reads: every tier of a link complete, and its
// all-time total. analytics.Reader, the store's counts plus those not
// written yet, is one.
type Reader interface {
	// Points returns the buckets of key in the tier of the given step whose
	// Start lies in [from, to), in time order; buckets without visits may be
	// left out. On an error matching analytics.ErrUnsavedOnly the points
	// returned beside it are what the gateway holds unsaved: the answer is
	// partial, not empty.
	Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]rollup.Point, error)
	// Total returns key's all-time visits, with the same errors as Points.
	Total(ctx context.Context, key string) (rollup.Visits, error)
}

// TopReader is what the API reads for top lists (top=N): analytics.Reader
// is one.
type TopReader interface {
	// Top returns the n links with the most human visits over the UTC days
	// whose start lies in [from, to), most visited first.
	Top(ctx context.Context, from, to time.Time, n int) ([]analytics.TopLink, error)
}

// UniqueReader is what the API reads for unique visitors: analytics.Reader
// is one.
type UniqueReader interface {
	// Uniques returns the union of key's unique-visitor sketches of the
	// UTC days whose start lies in [from, to), with the same errors as
	// Points.
	Uniques(ctx context.Context, key string, from, to time.Time) (*hll.Sketch, error)
}

// DimReader is what the API reads for breakdowns (by=): analytics.Reader
// is one. A Reader without it answers by= with a 400.
type DimReader interface {
	// Dims returns key's visits per value of dim over the UTC days whose
	// start lies in [from, to), with the same errors as Points.
	Dims(ctx context.Context, key string, dim visitor.Dim, from, to time.Time) ([]analytics.DimValue, error)
}

// API is the stats API: one link's all-time totals and its curve over a
// range, or those of all links together. Build it with New; it is safe for
// concurrent use and holds no state between requests.
type API struct {
	r        Reader
	tiers    []rollup.Tier
	earliest time.Time // where curves begin: the coarsest tier's first bucket from 1970
	o        Options
	partial  logthrottle.Throttle[struct{}] // the line of reads that fell back to unsaved counts
}

// Options are what an API needs besides its Reader and tiers. The zero
// value is an open API without a read deadline, on the wall clock, that
// logs nothing.
type Options struct {
	// Token, when not empty, is the bearer token data answers require.
	Token string
	// ReadTimeout bounds the store reads of one request (stats.read_timeout):
	// past it the answer is partial, from the counts the gateway holds.
	// 0: none but the request's own.
	ReadTimeout time.Duration
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// Log receives a line when reads fall back to the unsaved counts, at
	// most one a second per API (with the number held back). Nil: none.
	Log *slog.Logger
	// MaxValues is how many values of a breakdown an answer lists; the
	// rest are added to "other" (analytics.dimensions.max_values). 0:
	// breakdowns are off, and by= is a 400.
	MaxValues int
	// Uniques says whether unique visitors are counted (a secret is set):
	// every data answer then has them.
	Uniques bool
	// Live is what the live stream (format=events) reads, and Streams
	// bounds the streams; both outlive the API (they are the process's).
	// Nil: no live view (format=events is a 404).
	Live    LiveSource
	Streams *Streams
	// StreamLimits are the limits Streams takes when it is given this API
	// (Streams.Use): stats.live.
	StreamLimits LiveConfig
	// ClientKey returns the key of r's client that stats.live.per_client
	// counts under (its address, an IPv6 prefix), "" when it has none.
	// Nil: streams are not counted per client.
	ClientKey func(r *http.Request) string
	// Share checks share tokens (the share parameter, or a bearer token
	// that is one). Its zero value accepts none.
	Share Sharer
	// FrameAncestors are the CSP sources (stats.embed.frame_ancestors)
	// that may frame the embed view (format=embed). Empty: none may.
	FrameAncestors []string
	// Prefix is where the gateway serves the API (stats.prefix): the
	// paths of the share tokens it makes start with it.
	Prefix string
}

// New returns the stats API reading from r, whose tiers are tiers (the
// analytics retention, as a compiled Plan holds it: valid, finest first). The gateway mounts it at the stats prefix with the
// prefix stripped:
//
//	mux.Handle("/stats/", http.StripPrefix("/stats", stats.New(...)))
//	mux.Handle("/stats", http.StripPrefix("/stats", ...))
//
// so it serves "/" (or "") for all links together (the AllLinks key) and
// "/{short_key}" for one link. Only GET and HEAD are allowed.
//
// The query parameters are those of parseQuery: last or from/to, step,
// stitch, format, by (breakdowns), top (the most visited links, all links
// only), compare (previous or year) and tz (local day and week buckets);
// any other is a 400 naming it. Breakdowns, unique visitors (present when
// o.Uniques) and top lists are per UTC day: the days that overlap the
// range ("breakdown_from", "breakdown_to"). A range starting before
// 1970 (from=0) starts at the coarsest tier's first bucket after the unix
// epoch (1970-01-05, a Monday, with weekly tiers), as the answer's "from"
// shows. The answer is JSON unless format or the Accept header asks for CSV
// or for the chart page (HTML):
//
//	{"short_key": "abc",   // "" for all links together
//	 "known": true,        // see below
//	 "partial": false,     // see below
//	 "total": 1234,        // all-time human visits
//	 "bot_total": 56,      // all-time visits of known bots and link-preview fetchers
//	 "range_total": 78,    // human visits in the points below: the sum of those not null
//	 "bot_range_total": 9,
//	 "from": 1763769600,   // unix seconds: the start of the first bucket (from aligned down)
//	 "to": 1763856000,     // unix seconds: the end of the range asked for
//	 "step": 60,           // seconds; 0 for a stitched curve
//	 "expired_before": 1763600000,  // only when some points are expired: see below
//	 "points": [[1763769600, 3, 0], [1763769660, null, null], ...]}  // [start, humans, bots], every bucket
//
// A stitched curve's points carry their own step: [start, humans, bots,
// step]. The last bucket is whole: it may hold visits after "to". CSV has
// the header "unix_seconds,count,bot_count" (",step" when stitched) and one
// row per point, a null point's counts left empty.
//
// A point is a number (zero included) only when the answer knows it; it is
// null when its bucket has expired or when the store could not be read:
//
//   - Expired: a bucket of a tier is kept at least until its end plus the
//     tier's retention (Cassandra's TTL counts from there; the embedded
//     store deletes it after that, hourly), and no other tier can answer
//     it (finer tiers keep less, coarser ones cannot be split), so a bucket
//     of step s in a tier kept for R is null when start+s+R <= now: the
//     store may have dropped it, and a zero would read as "no visits".
//     "expired_before" is then the first bucket start that is kept; the
//     store is not read before it. A stitched curve uses the finest tier
//     that keeps each part, so only a part older than the coarsest tier's
//     retention is expired.
//   - Partial: when a Reader read fails (the store down, not open yet,
//     still connecting: any error), the answer is still a 200, from what
//     the Reader returned beside the error (analytics.ErrUnsavedOnly: the counts
//     the gateway holds and has not stored), with "partial": true and
//     "partial_reason": "store unreachable", and the header
//     "Linkgate-Partial: store unreachable" (for CSV). Buckets holding such
//     counts show them, every other bucket of the failed read is null, and
//     the totals are those counts: lower bounds, not the truth.
//
// "known" says whether the key has ever been counted: true when its
// all-time total (bots included) or the range is not zero, false when
// both are zero in a whole answer, null in a partial answer with nothing
// counted. The gateway has no list of the upstream's links, so false means
// "no visit counted since counting began": a link that exists but was never
// visited, or never existed (see the README). CSV answers carry it as the
// header "Linkgate-Known: true|false|unknown", and "expired_before" as
// "Linkgate-Expired-Before" (unix seconds).
//
// JSON and CSV answers of at least gzipMinBytes are gzip-compressed when the
// request's Accept-Encoding allows it (a stitched year's 118 KB of JSON
// shrinks to 19-33 KB); every answer past the parameter check carries one
// "Vary: Accept, Accept-Encoding" header either way.
//
// A bad parameter is a 400 problem naming it. When o.Token is not empty,
// data answers require "Authorization: Bearer <token>" (401 otherwise); the
// chart page itself holds no data and is served to anyone: its script asks
// for the token when the JSON answer is 401. The reads of one request end
// at o.ReadTimeout: a store that hangs gets a partial answer within it.
func New(r Reader, tiers []rollup.Tier, o Options) *API {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Prefix == "" {
		o.Prefix = "/stats"
	}
	return &API{r: r, tiers: tiers, earliest: epochStart(tiers[len(tiers)-1].Step), o: o}
}

// ServeHTTP answers one stats request.
func (s *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rest, ok := strings.CutPrefix(r.URL.Path, "/graphite/"); ok {
		// No short key holds a "/": the path is the Graphite API's.
		s.serveGraphite(w, r, "/"+rest)
		return
	}
	if r.URL.Path == "/tokens/share" {
		s.serveMakeShare(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		problem.Write(w, http.StatusMethodNotAllowed, "the stats API is read-only: use GET or HEAD")
		return
	}
	shortKey := strings.TrimPrefix(r.URL.Path, "/")
	if strings.Contains(shortKey, "/") {
		problem.Write(w, http.StatusNotFound, "no stats at this path: ask for / (all links) or /{short_key}")
		return
	}
	now := s.o.Now()
	v := r.URL.Query()
	q, err := s.parseQuery(v, now)
	if err != nil {
		writeParamError(w, err)
		return
	}
	// One Vary for every answer below: the format follows Accept, and a
	// data answer's coding follows Accept-Encoding (writeBody).
	w.Header().Set("Vary", "Accept, Accept-Encoding")
	format := q.format
	if format == "" {
		format = negotiate(r.Header.Get("Accept"))
	}
	if format == formatHTML || format == formatEmbed {
		serveChart(w, format == formatEmbed, s.o.FrameAncestors)
		return
	}
	sc, key, d := s.check(r, v, shortKey, now)
	if d != nil {
		writeRefusal(w, r, sc, d)
		return
	}
	q.scope = sc
	if format == formatEvents {
		s.serveLive(w, r, key, shortKey, sc)
		return
	}
	ctx, cancel := s.readContext(r)
	defer cancel()
	c, err := s.curve(ctx, key, q, now)
	if err != nil {
		writeParamError(w, err)
		return
	}
	if c.readErr != nil && r.Context().Err() == nil {
		if n, ok := s.partial.Allow(struct{}{}, time.Now()); ok {
			s.o.Log.Warn("stats: store not read; answering from unsaved counts", "key", key, "err", c.readErr, "suppressed", n)
		}
	}
	c.shortKey, c.tenant = shortKey, sc.tenant
	if c.compare != nil {
		c.compare.shortKey, c.compare.tenant = shortKey, sc.tenant
	}
	writeCurve(w, r, c, format)
}

// writeCurve writes the answer c in format (JSON or CSV), with the headers
// that say what it holds.
func writeCurve(w http.ResponseWriter, r *http.Request, c *curve, format string) {
	h := w.Header()
	h.Set("Cache-Control", "no-store") // counts change at every flush
	h.Set("Linkgate-Known", c.known())
	if c.partial() {
		h.Set("Linkgate-Partial", partialReason)
	}
	if !c.expiredBefore.IsZero() {
		h.Set("Linkgate-Expired-Before", strconv.FormatInt(c.expiredBefore.Unix(), 10))
	}
	if c.uniques != nil {
		h.Set("Linkgate-Uniques", strconv.FormatInt(c.uniques.count, 10))
	}
	if format == formatCSV {
		h.Set("Content-Type", "text/csv; charset=utf-8")
		if len(c.breakdown) > 0 {
			writeBody(w, r, c.appendBreakdownCSV(nil))
			return
		}
		if c.hasTop {
			writeBody(w, r, c.appendTopCSV(nil))
			return
		}
		writeBody(w, r, c.appendCSV(make([]byte, 0, 32+len(c.points)*32)))
		return
	}
	h.Set("Content-Type", "application/json")
	writeBody(w, r, c.appendJSON(make([]byte, 0, 256+len(c.points)*32)))
}

// parseQuery is parseQuery with last=all: everything the store keeps (the
// coarsest tier's retention), which v is changed to say as from.
func (s *API) parseQuery(v url.Values, now time.Time) (query, error) {
	if v.Get("last") == "all" {
		if v.Has("from") || v.Has("to") {
			return query{}, badParam("last", "cannot be combined with from or to")
		}
		v.Del("last")
		v.Set("from", strconv.FormatInt(s.keptFrom(now).Unix(), 10))
	}
	return parseQuery(v, now, s.earliest)
}

// partialReason is the "partial_reason" of a partial answer and the value
// of its Linkgate-Partial header. A partial answer comes from any failed
// read, whatever the store's state: the read's error decides.
const partialReason = "store unreachable"

// authorized says whether r carries the bearer token, when one is required.
func (s *API) authorized(r *http.Request) bool {
	return s.o.Token == "" || bearer.Match(r, s.o.Token)
}

// bearerToken returns the token of r's Authorization header, if it has
// one of the Bearer scheme (case-insensitive, RFC 6750 section 2.1).
func bearerToken(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// needsToken is the detail of a 401 for a request without the stats token.
const needsToken = "the stats API needs Authorization: Bearer <token>"

// writeUnauthorized answers 401 with the RFC 6750 challenge.
func writeUnauthorized(w http.ResponseWriter, r *http.Request) {
	bearer.Challenge(w, r, "linkgate stats")
	problem.Write(w, http.StatusUnauthorized, needsToken)
}

// writeParamError answers 400 naming the bad parameter, in the shape of RFC
// 9457's "invalid-params" example.
func writeParamError(w http.ResponseWriter, err error) {
	problem.WriteDetails(w, *paramProblem(err))
}

// paramProblem is the 400 of err, naming its parameter when it is a
// paramError.
func paramProblem(err error) *problem.Details {
	d := &problem.Details{Status: http.StatusBadRequest, Detail: err.Error()}
	var pe *paramError
	if errors.As(err, &pe) {
		d.Extra = map[string]any{"invalid-params": []map[string]string{{"name": pe.param, "reason": pe.reason}}}
	}
	return d
}

// curve is the answer to one stats query.
type curve struct {
	shortKey   string
	tenant     string // the tenant of the link, or of all links; "": the default
	total      rollup.Visits
	rangeTotal rollup.Visits // of the points not null
	from, to   time.Time
	step       time.Duration // 0 when stitched
	stitched   bool
	points     []curvePoint
	// expiredBefore is the start of the first bucket kept, when points
	// before it are null because their tier has dropped them; zero when no
	// point is expired.
	expiredBefore time.Time
	// readErr is the first Reader error: the answer is partial.
	readErr error
	// breakdown is the answer's breakdowns, in the order asked (by=);
	// their days are [dimFrom, dimTo).
	breakdown      []dimAnswer
	dimFrom, dimTo time.Time
	// daily is one breakdown value's visits per UTC day (daily=).
	daily *dailyAnswer
	// top is the most visited links (top=N), each with its curve.
	top    []topAnswer
	hasTop bool
	// uniques is the estimate of unique visitors over the breakdown days,
	// when they are counted.
	uniques *uniquesAnswer
	// tz names the zone the buckets start in when tz= was asked;
	// tzAsked the zone asked for, when the answer could not use it.
	tz, tzAsked string
	// compare is the answer for the earlier range (compare=), of its kind.
	compare     *curve
	compareKind string
}

// uniquesAnswer is the unique visitors of an answer.
type uniquesAnswer struct {
	count int64
	days  int
}

// topAnswer is one link of a top list: its visits over the breakdown days
// and its curve over the answer's buckets.
type topAnswer struct {
	key    string // the short key
	tenant string // the link's tenant, in the default tenant's list (which lists every tenant's links)
	visits int64
	points []curvePoint
	// rangeTotal is the human visits of points (not null);
	// compareTotal those of the earlier range, when compare= was asked.
	rangeTotal   int64
	compareTotal *int64
}

// dailyAnswer is one value of a breakdown per UTC day: counts[i] are the
// visits of the day starting at from + i days.
type dailyAnswer struct {
	dim    visitor.Dim
	value  string
	from   time.Time
	counts []int64
}

// dimAnswer is one breakdown of an answer.
type dimAnswer struct {
	dim    visitor.Dim
	values []analytics.DimValue // sorted by count, largest first
}

// curvePoint is one bucket of a curve.
type curvePoint struct {
	start int64 // unix seconds
	step  int64 // seconds
	rollup.Visits
	null bool // unknown: expired, or not read
}

// partial reports whether a read failed, so that c holds only what the
// Reader returned beside its error.
func (c *curve) partial() bool { return c.readErr != nil }

// known is "true" when c counted a visit, "false" when a whole answer
// counted none, "unknown" when a partial one counted none.
func (c *curve) known() string {
	switch {
	case c.total != rollup.Visits{} || c.rangeTotal != rollup.Visits{}:
		return "true"
	case c.partial():
		return "unknown"
	}
	return "false"
}

// keptFrom returns the start of what the store keeps at now (last=all):
// the first bucket of the coarsest tier not expired, or where curves begin
// when it never expires.
func (s *API) keptFrom(now time.Time) time.Time {
	t := s.tiers[len(s.tiers)-1]
	if eb := expiredBefore(t, now); !eb.IsZero() && eb.After(s.earliest) && now.Sub(eb) < maxRange {
		return eb
	}
	return s.earliest
}

// expiredBefore returns the start of the first bucket of t kept at now:
// buckets are kept at least until their end plus the retention (see
// New), so one starting at or before now - retention - step may be
// gone. The zero time when t never expires.
func expiredBefore(t rollup.Tier, now time.Time) time.Time {
	if !t.Expires() {
		return time.Time{}
	}
	cut := now.Add(-t.Retention).Add(-t.Step) // two steps: a retention of centuries must not overflow
	return rollup.Align(cut, t.Step).Add(t.Step)
}

// curve reads key's totals and its curve for q at now: one Reader range per
// tier segment (one segment unless stitched), every bucket present, zeros
// where the store has none, null where the bucket has expired or the read
// failed. A failed read does not fail the curve: it is kept in readErr, and
// what the Reader returned beside it (ErrUnsavedOnly) is used. The only
// error returned is a *paramError.
func (s *API) curve(ctx context.Context, key string, q query, now time.Time) (*curve, error) {
	c, err := s.points(ctx, key, q, now)
	if err != nil {
		return nil, err
	}
	return s.finish(ctx, c, key, q, now)
}

// points is curve without what finish adds (breakdowns, top list,
// comparison, uniques, the all-time total): the curve alone, as a top
// list's links and the Graphite API need it.
func (s *API) points(ctx context.Context, key string, q query, now time.Time) (*curve, error) {
	segs, err := s.segments(q, now)
	if err != nil {
		return nil, err
	}
	if q.tz != nil && !q.stitch && segs[0].Tier.Step >= rollup.Day {
		lc, ok, err := s.localCurve(ctx, key, q, segs[0].Tier.Step, now)
		if err != nil {
			return nil, err
		}
		if ok {
			return lc, nil
		}
	}
	n := 0
	for _, sg := range segs {
		n += rollup.NumBuckets(sg.From, sg.To, sg.Tier.Step)
	}
	if n > maxPoints {
		name := "step"
		if q.stitch {
			name = "stitch"
		}
		return nil, badParam(name, "the range has %d points, more than %d: choose a coarser step or a shorter range", n, maxPoints)
	}
	c := &curve{
		from: rollup.Align(segs[0].From, segs[0].Tier.Step), to: q.to,
		stitched: q.stitch, points: make([]curvePoint, 0, n),
	}
	if !q.stitch {
		c.step = segs[0].Tier.Step
	}
	for _, sg := range segs {
		s.readSegment(ctx, c, key, sg, now)
	}
	if q.tz != nil {
		c.tz = "UTC"
		if q.tz.String() != "UTC" {
			c.tzAsked = q.tz.String()
		}
		if step := segs[0].Tier.Step; step < rollup.Day && !q.stitch && onStep(q.tz, q.from, q.to, step) {
			// Minutes and hours are the same instants in a zone whose
			// offset is a whole number of steps (a zone 5:30 from UTC
			// has hours of its own: those buckets are UTC's).
			c.tz, c.tzAsked = q.tz.String(), ""
		}
	}
	return c, nil
}

// segments returns the tier segments q's curve reads: one, at the step
// asked or chosen, or those of a stitched curve.
func (s *API) segments(q query, now time.Time) ([]rollup.Segment, error) {
	switch {
	case q.stitch:
		segs, err := rollup.Stitch(s.tiers, q.from, q.to, now)
		if err != nil {
			return nil, badParam("from", "%v", err)
		}
		return segs, nil
	case q.step != 0:
		t, err := rollup.WithStep(s.tiers, q.step)
		if err != nil {
			return nil, badParam("step", "%v", strings.TrimPrefix(err.Error(), "rollup: "))
		}
		return []rollup.Segment{{Tier: t, From: q.from, To: q.to}}, nil
	default:
		t, err := rollup.Choose(s.tiers, q.from, q.to, now, rollup.MaxPoints)
		if err != nil {
			return nil, badParam("from", "%v", err)
		}
		return []rollup.Segment{{Tier: t, From: q.from, To: q.to}}, nil
	}
}

// readSegment appends the buckets of sg to c's points, read from the
// store: zeros where it has none, null where the tier expired them or the
// read failed (kept in c.readErr, with what the Reader returned beside
// it, ErrUnsavedOnly, used).
func (s *API) readSegment(ctx context.Context, c *curve, key string, sg rollup.Segment, now time.Time) {
	step := sg.Tier.Step
	start := rollup.Align(sg.From, step)
	t0, sec := start.Unix(), int64(step/time.Second)
	// Buckets before kept are expired: null, and not read.
	kept := start
	if eb := expiredBefore(sg.Tier, now); kept.Before(eb) {
		kept = eb
		c.expiredBefore = eb
	}
	var pts []rollup.Point
	failed := false
	if kept.Before(sg.To) {
		var err error
		pts, err = s.r.Points(ctx, key, step, kept, sg.To)
		if err != nil {
			failed = true
			if c.readErr == nil {
				c.readErr = fmt.Errorf("stats: points of %q at %v: %w", key, step, err)
			}
			if !errors.Is(err, analytics.ErrUnsavedOnly) {
				pts = nil // nothing but the error
			}
		}
	}
	// Fill the segment's buckets (zeros, or null when expired or not
	// read), then add each point read to its bucket; a store may return
	// them unaligned or more than once (one per writer): they add up.
	base, keptUnix := len(c.points), kept.Unix()
	nb := rollup.NumBuckets(sg.From, sg.To, step)
	for i := range int64(nb) {
		t := t0 + i*sec
		c.points = append(c.points, curvePoint{start: t, step: sec, null: failed || t < keptUnix})
	}
	seg := c.points[base:]
	for _, p := range pts {
		// start is bucket-aligned, so flooring the distance in seconds
		// finds the bucket of an unaligned point too.
		d := p.Start.Unix() - t0
		if d < 0 || d/sec >= int64(len(seg)) {
			continue
		}
		b := &seg[d/sec]
		if b.start < keptUnix {
			continue // a count the tier no longer keeps: not a whole bucket
		}
		b.null = false
		b.Visits = b.Visits.Add(p.Visits)
		c.rangeTotal = c.rangeTotal.Add(p.Visits)
	}
}

// finish adds to c what every answer has beside its points: breakdowns,
// top list, comparison, uniques and the all-time total.
func (s *API) finish(ctx context.Context, c *curve, key string, q query, now time.Time) (*curve, error) {
	if len(q.by) > 0 {
		if err := s.breakdowns(ctx, c, key, q); err != nil {
			return nil, err
		}
	}
	if q.dailyValue != "" {
		if err := s.dailyValues(ctx, c, key, q); err != nil {
			return nil, err
		}
	}
	if q.top > 0 {
		if err := s.topLinks(ctx, c, key, q, now); err != nil {
			return nil, err
		}
	}
	if q.compare != "" {
		if err := s.compareWith(ctx, c, key, q, now); err != nil {
			return nil, err
		}
	}
	if ur, ok := s.r.(UniqueReader); ok && s.o.Uniques {
		c.dimFrom, c.dimTo = rollup.Align(q.from, rollup.Day), rollup.AlignUp(q.to, rollup.Day)
		sk, err := ur.Uniques(ctx, key, c.dimFrom, q.to)
		if err != nil {
			if c.readErr == nil {
				c.readErr = fmt.Errorf("stats: uniques of %q: %w", key, err)
			}
			if !errors.Is(err, analytics.ErrUnsavedOnly) {
				sk = nil
			}
		}
		c.uniques = &uniquesAnswer{days: int(c.dimTo.Sub(c.dimFrom) / rollup.Day)}
		if sk != nil {
			c.uniques.count = sk.Estimate()
		}
	}
	total, err := s.r.Total(ctx, key)
	if err != nil {
		if c.readErr == nil {
			c.readErr = fmt.Errorf("stats: total of %q: %w", key, err)
		}
		if !errors.Is(err, analytics.ErrUnsavedOnly) {
			total = rollup.Visits{}
		}
	}
	c.total = total
	return c, nil
}

// breakdowns reads the breakdowns q asks for into c: the UTC days that
// overlap the range, each breakdown cut to MaxValues values, the rest
// added to "other".
func (s *API) breakdowns(ctx context.Context, c *curve, key string, q query) error {
	dr, ok := s.r.(DimReader)
	if !ok || s.o.MaxValues <= 0 {
		return badParam("by", "breakdowns are off on this gateway (analytics.dimensions.max_values is 0)")
	}
	c.dimFrom, c.dimTo = rollup.Align(q.from, rollup.Day), rollup.AlignUp(q.to, rollup.Day)
	for _, d := range q.by {
		vals, err := dr.Dims(ctx, key, d, c.dimFrom, q.to)
		if err != nil {
			if c.readErr == nil {
				c.readErr = fmt.Errorf("stats: breakdown of %q by %v: %w", key, d, err)
			}
			if !errors.Is(err, analytics.ErrUnsavedOnly) {
				vals = nil
			}
		}
		c.breakdown = append(c.breakdown, dimAnswer{d, capValues(vals, s.o.MaxValues)})
	}
	return nil
}

// maxDailyDays bounds the days a daily= answer reads, one breakdown read
// each: a year and a month.
const maxDailyDays = 400

// dailyValues reads q's daily value per UTC day of the range into c: what
// the per-day breakdowns can answer of one value, a read of each day.
func (s *API) dailyValues(ctx context.Context, c *curve, key string, q query) error {
	dr, ok := s.r.(DimReader)
	if !ok || s.o.MaxValues <= 0 {
		return badParam("daily", "breakdowns are off on this gateway (analytics.dimensions.max_values is 0)")
	}
	from, to := rollup.Align(q.from, rollup.Day), rollup.AlignUp(q.to, rollup.Day)
	days := int(to.Sub(from) / rollup.Day)
	if days > maxDailyDays {
		return badParam("daily", "the range has %d UTC days; daily= reads at most %d", days, maxDailyDays)
	}
	c.dimFrom, c.dimTo = from, to
	a := &dailyAnswer{dim: q.daily, value: q.dailyValue, from: from, counts: make([]int64, days)}
	for i := range days {
		day := from.Add(time.Duration(i) * rollup.Day)
		vals, err := dr.Dims(ctx, key, q.daily, day, day.Add(rollup.Day))
		if err != nil {
			if c.readErr == nil {
				c.readErr = fmt.Errorf("stats: %v %q of %q per day: %w", q.daily, q.dailyValue, key, err)
			}
			if !errors.Is(err, analytics.ErrUnsavedOnly) {
				continue
			}
		}
		for _, v := range vals {
			if v.Value == q.dailyValue {
				a.counts[i] += v.Count
			}
		}
	}
	c.daily = a
	return nil
}

// capValues returns vals sorted by count, largest first, at most max of
// them, the visits of the others added to visitor.Other.
func capValues(vals []analytics.DimValue, max int) []analytics.DimValue {
	vals = slices.Clone(vals)
	analytics.SortDims(vals)
	var other int64
	out := vals[:0]
	for _, v := range vals {
		switch {
		case v.Value == visitor.Other:
			other += v.Count
		case len(out) < max:
			out = append(out, v)
		default:
			other += v.Count
		}
	}
	if other > 0 {
		out = append(out, analytics.DimValue{Value: visitor.Other, Count: other})
		analytics.SortDims(out)
	}
	return out
}

// topLinks reads the q.top most visited links of the range's UTC days into
// c, each with its curve at c's buckets. Only the all-links answer has one.
func (s *API) topLinks(ctx context.Context, c *curve, key string, q query, now time.Time) error {
	if _, short := analytics.SplitKey(key); short != "" {
		return badParam("top", "top lists are of all links: ask /stats?top=N")
	}
	if !s.hasTop(q.scope) {
		return badParam("top", "this gateway keeps no top lists")
	}
	c.hasTop = true
	c.dimFrom, c.dimTo = rollup.Align(q.from, rollup.Day), rollup.AlignUp(q.to, rollup.Day)
	links, err := s.topOf(ctx, q.scope, c.dimFrom, q.to, q.top)
	if err != nil {
		if c.readErr == nil {
			c.readErr = fmt.Errorf("stats: top links: %w", err)
		}
		return nil
	}
	sub := q
	sub.by, sub.top, sub.compare = nil, 0, ""
	var early query
	if q.compare != "" {
		if early, err = s.earlier(q, c.step, c.stitched, now); err != nil {
			return err
		}
		early.by, early.top, early.compare = nil, 0, ""
	}
	for _, l := range links {
		lc, err := s.points(ctx, l.Key, sub, now)
		if err != nil {
			return err
		}
		if lc.readErr != nil && c.readErr == nil {
			c.readErr = lc.readErr
		}
		t, short := analytics.SplitKey(l.Key)
		ta := topAnswer{key: short, visits: l.Visits, points: lc.points, rangeTotal: lc.rangeTotal.Human}
		if t != q.scope.tenant {
			ta.tenant = t
		}
		if q.compare != "" {
			ec, err := s.points(ctx, l.Key, early, now)
			if err != nil {
				return badParam("compare", "the earlier range: %v", err)
			}
			if ec.readErr != nil && c.readErr == nil {
				c.readErr = ec.readErr
			}
			ta.compareTotal = &ec.rangeTotal.Human
		}
		c.top = append(c.top, ta)
	}
	return nil
}

// compareWith answers q's earlier range into c.compare: the period of the
// same length just before it (previous), or the same dates a year earlier
// (year), at the same step while its tier keeps the earlier range (else at
// the step a query of that range gets), with the same breakdowns and
// uniques.
func (s *API) compareWith(ctx context.Context, c *curve, key string, q query, now time.Time) error {
	e, err := s.earlier(q, c.step, c.stitched, now)
	if err != nil {
		return err
	}
	ec, err := s.curve(ctx, key, e, now)
	if err != nil {
		var pe *paramError
		if errors.As(err, &pe) {
			return badParam("compare", "the earlier range: %s", pe.Error())
		}
		return err
	}
	if ec.readErr != nil && c.readErr == nil {
		c.readErr = ec.readErr
	}
	c.compare, c.compareKind = ec, q.compare
	return nil
}

// earlier returns the query of q's earlier range (q.compare), at step
// (the answer's, unless stitched) while its tier keeps that range, else
// at the step a query of it gets.
func (s *API) earlier(q query, step time.Duration, stitched bool, now time.Time) (query, error) {
	e := q
	e.compare, e.top = "", 0
	switch q.compare {
	case "previous":
		e.from, e.to = q.from.Add(-q.to.Sub(q.from)), q.from
	case "year":
		e.from, e.to = q.from.AddDate(-1, 0, 0), q.to.AddDate(-1, 0, 0)
	}
	if !stitched {
		// The same buckets, point for point, while the tier still keeps
		// the earlier range; else the finest that does.
		e.step = 0
		if t, err := rollup.WithStep(s.tiers, step); err == nil && !e.from.Before(now.Add(-t.Retention)) {
			e.step = step
		}
	}
	if e.from.Before(s.earliest) {
		return query{}, badParam("compare", "the earlier range starts before %s, where curves begin", s.earliest.Format(time.RFC3339))
	}
	return e, nil
}

// onStep says whether loc's offset from UTC is a whole number of steps
// throughout [from, to] (checked at both ends and at every change between
// them, which time.Location gives by ZoneBounds).
func onStep(loc *time.Location, from, to time.Time, step time.Duration) bool {
	for t := from; ; {
		_, off := t.In(loc).Zone()
		if time.Duration(off)*time.Second%step != 0 {
			return false
		}
		_, end := t.In(loc).ZoneBounds()
		if end.IsZero() || !end.Before(to) {
			return true
		}
		t = end
	}
}

// readContext is r's context bounded by stats.read_timeout: the store
// reads of one request stop there, and the answer is partial.
func (s *API) readContext(r *http.Request) (context.Context, context.CancelFunc) {
	if s.o.ReadTimeout > 0 {
		return context.WithTimeout(r.Context(), s.o.ReadTimeout)
	}
	return r.Context(), func() {}
}
