package stats

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/problem"
	"github.com/linkgate/linkgate/rollup"
)

// LiveSource is what the live stream reads: a link's visits of the last 15
// minutes in 10-second buckets, from the gateway's memory.
// analytics.Pipeline is one.
type LiveSource interface {
	// Live returns key's buckets ending with the one holding now, oldest
	// first, every bucket present, and whether they are complete (see
	// analytics.Recorder.Live).
	Live(key string, now time.Time) ([]rollup.Point, bool)
	// LiveSince returns when the process began counting: the buckets
	// before it are empty for want of counting, not of visits.
	LiveSince() time.Time
}

// Streams bounds the live streams of a process and divides them, so that
// no holder of a share token can take the operator's (stats.live): at most
// MaxStreams at once; of them ReservedStreams only for streams opened with
// the stats token (when one is required); at most PerShareToken on one
// share token, PerTenant on the tokens of one tenant and PerClient from
// one client address (the stats token's streams aside). It outlives config reloads, as the streams do: Use gives
// it each new API, whose limits it takes and whose credentials every open
// stream is held to again (a share key rotated, a stats token changed, a
// lower max_ttl end the streams they no longer allow). Close ends them all.
// Safe for concurrent use; create it with NewStreams.
type Streams struct {
	mu        sync.Mutex
	limits    LiveConfig
	reserve   int            // ReservedStreams while a stats token is required, else 0
	open      int            // every stream
	others    int            // the streams not opened with the stats token
	perShare  map[string]int // open streams per share token
	perClient map[string]int // open streams per client key, the stats token's aside
	perTenant map[string]int // open streams per tenant of a share or tenant token
	cur       *API           // the API streams are held to; nil before Use
	changed   chan struct{}  // closed by Use, then replaced

	done      chan struct{}
	closeOnce sync.Once
}

// DefaultMaxStreams is the default of stats.live.max_streams.
const DefaultMaxStreams = 100

// MaxStreamsLimit is the most stats.live.max_streams may be.
const MaxStreamsLimit = 10_000

// Defaults of the other stats.live fields: a tenth of the streams kept for
// the operator, a few per share token and per address (a page open in a
// few tabs).
const (
	DefaultReservedStreams = 10
	DefaultPerShareToken   = 3
	DefaultPerClient       = 5
	DefaultPerTenant       = 20
)

// NewStreams returns Streams with the limits of c, and the reserve held
// (as for an API with a stats token) until Use says otherwise.
func NewStreams(c LiveConfig) *Streams {
	s := &Streams{done: make(chan struct{}), changed: make(chan struct{}),
		perShare: map[string]int{}, perClient: map[string]int{}, perTenant: map[string]int{}}
	s.setLimits(c, true)
	return s
}

func (s *Streams) setLimits(c LiveConfig, token bool) {
	s.limits, s.reserve = c, 0
	if token {
		s.reserve = min(c.ReservedStreams, c.MaxStreams)
	}
}

// Use takes a's limits (Options.StreamLimits; the reserve only when a
// requires a stats token) and holds every open stream to a's credentials
// from now on: a stream a would not open any more ends. The gateway calls
// it with the API of each config it swaps in. Streams open beyond lowered
// limits go on.
func (s *Streams) Use(a *API) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLimits(a.o.StreamLimits, a.o.Token != "")
	s.cur = a
	close(s.changed)
	s.changed = make(chan struct{})
}

// current returns the API of the last Use (nil before one) and the channel
// the next Use closes.
func (s *Streams) current() (*API, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur, s.changed
}

// Open returns the number of streams open now.
func (s *Streams) Open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

// Close ends every stream and refuses new ones: the gateway calls it when
// it shuts down, since a stream never goes idle for the drain to finish.
func (s *Streams) Close() { s.closeOnce.Do(func() { close(s.done) }) }

// ticket is a stream's claim on the limits: whether it was opened with the
// stats token, its share token and its client's key ("" for none).
type ticket struct {
	token  bool
	share  string
	tenant string // the tenant of a share or tenant token; "" for the default tenant's
	client string
}

// refusal is why acquire refused a stream: the field whose limit is
// reached, and whether it is the client's own (429) or the gateway's (503).
type refusal struct {
	field string
	own   bool
}

// acquire takes a stream's place for t. It refuses (with the limit that
// is reached) when t's share token or client holds its cap, when the
// streams not opened with the stats token fill all but the reserve, when
// every place is taken, or when s is closed.
func (s *Streams) acquire(t ticket) (refusal, bool) {
	select {
	case <-s.done:
		return refusal{field: "stats.live.max_streams"}, false
	default:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.limits
	switch {
	case t.share != "" && s.perShare[t.share] >= l.PerShareToken:
		return refusal{field: "stats.live.per_share_token", own: true}, false
	case t.tenant != "" && s.perTenant[t.tenant] >= l.PerTenant:
		return refusal{field: "stats.live.per_tenant", own: true}, false
	case !t.token && t.client != "" && s.perClient[t.client] >= l.PerClient:
		return refusal{field: "stats.live.per_client", own: true}, false
	case s.open >= l.MaxStreams:
		return refusal{field: "stats.live.max_streams"}, false
	case !t.token && s.others >= l.MaxStreams-s.reserve:
		return refusal{field: "stats.live.reserved_streams"}, false
	}
	s.open++
	if t.share != "" {
		s.perShare[t.share]++
	}
	if t.tenant != "" {
		s.perTenant[t.tenant]++
	}
	if !t.token {
		s.others++
		if t.client != "" {
			s.perClient[t.client]++
		}
	}
	return refusal{}, true
}

// release gives back the place acquire took for t.
func (s *Streams) release(t ticket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open--
	if t.share != "" {
		if s.perShare[t.share]--; s.perShare[t.share] <= 0 {
			delete(s.perShare, t.share)
		}
	}
	if t.tenant != "" {
		if s.perTenant[t.tenant]--; s.perTenant[t.tenant] <= 0 {
			delete(s.perTenant, t.tenant)
		}
	}
	if !t.token {
		s.others--
		if t.client != "" {
			if s.perClient[t.client]--; s.perClient[t.client] <= 0 {
				delete(s.perClient, t.client)
			}
		}
	}
}

// livePoll is how often a stream looks at the live buckets: a visit shows
// within it. Reading them takes each core's shard lock for a moment. (A
// variable for the tests.)
var livePoll = time.Second

// liveWriteTimeout is how long a client has to take one event: one that
// stops reading (its connection open, its window full) is let go with its
// place, rather than holding a stream and a blocked handler for ever. (A
// variable for the tests.)
var liveWriteTimeout = 30 * time.Second

// liveRetry is the reconnection delay the stream asks EventSource clients
// for (the "retry" field), in milliseconds.
const liveRetry = 5000

// liveParams are the parameters of a data answer the live stream has no use
// for: it is always the last 15 minutes in 10-second buckets.
var liveParams = [...]string{"last", "from", "to", "step", "stitch", "by", "top", "compare"}

// serveLive streams key's live buckets as Server-Sent Events
// (text/event-stream, WHATWG HTML section 9.2): an event "live" at once,
// then whenever a visit arrives (looked at every livePoll) and whenever
// the window moves on by a bucket, each the whole window:
//
//	event: live
//	data: {"short_key":"go","complete":true,"step":10,"from":1795413330,"to":1795414231,
//	       "since":1795413700,"range_total":12,"bot_range_total":1,"points":[[1795413330,0,0],...],
//	       "stored":{"step":60,"range_total":30,"bot_range_total":2,"points":[[1795413360,5,0],...]}}
//
// "complete" is false when the gateway could not follow every link
// (analytics.live.max_links reached): the link's counts are then lower
// bounds. "since" is when this process began counting; while the window
// begins before it, "stored" holds what the window's buckets before it
// lack, read from the store once (see readStored). The stream ends when
// the client goes, when the gateway shuts
// down (the client reconnects after the "retry" delay), when the share
// token it was opened with expires, and when a config swapped in (Use)
// would no longer let r read key: then an event "end" says why,
//
//	event: end
//	data: {"reason":"the share token has expired"}
//
// and a reconnection is refused as any new request would be.
func (s *API) serveLive(w http.ResponseWriter, r *http.Request, key, shortKey string, sc scope) {
	for _, name := range liveParams {
		if r.URL.Query().Has(name) {
			writeParamError(w, badParam(name, "the live stream is always the last 15 minutes in 10-second buckets"))
			return
		}
	}
	if s.o.Live == nil || s.o.Streams == nil {
		problem.Write(w, http.StatusNotFound, "this gateway has no live view")
		return
	}
	t := ticket{token: sc.token, share: sc.shareTok}
	if !sc.token {
		t.tenant = sc.tenant // the operator's streams of a tenant count as the operator's
	}
	if s.o.ClientKey != nil {
		t.client = s.o.ClientKey(r)
	}
	if why, ok := s.o.Streams.acquire(t); !ok {
		writeStreamsRefused(w, why)
		return
	}
	defer s.o.Streams.release(t)
	// A stream is a response that lasts: the server's write deadline
	// (server.write_timeout) gives way to one per event.
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy in front must not hold events back
	w.WriteHeader(http.StatusOK)
	s.streamLive(w, r, rc, key, shortKey, sc)
}

// streamLive writes serveLive's events until the stream ends, as
// serveLive says.
func (s *API) streamLive(w http.ResponseWriter, r *http.Request, rc *http.ResponseController, key, shortKey string, sc scope) {
	var expired <-chan time.Time
	if !sc.expires.IsZero() {
		timer := time.NewTimer(sc.expires.Sub(s.o.Now()))
		defer timer.Stop()
		expired = timer.C
	}
	_, changed := s.o.Streams.current()
	b := []byte("retry: " + strconv.Itoa(liveRetry) + "\n\n")
	var lastFrom, lastTotal int64 = -1, -1
	since := s.o.Live.LiveSince()
	var stored *storedPart // read once, tried again as the window moves while it could not be
	tick := time.NewTicker(livePoll)
	defer tick.Stop()
	for {
		pts, complete := s.o.Live.Live(key, s.o.Now())
		from, total := int64(0), int64(0)
		if len(pts) > 0 {
			from = pts[0].Start.Unix()
		}
		for _, p := range pts {
			total += p.Human + p.Bot
		}
		if from != lastFrom || total != lastTotal {
			if stored == nil && from != lastFrom && len(pts) > 0 && since.After(pts[0].Start) {
				stored = s.readStored(r.Context(), key, pts, since)
			}
			lastFrom, lastTotal = from, total
			b = appendLiveEvent(b, shortKey, pts, complete, s.o.Now(), since, stored)
			if !writeEvent(w, rc, b) {
				return
			}
			b = b[:0]
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.o.Streams.done:
			return
		case <-expired:
			why := ErrShareExpired
			if sc.byTenant() {
				why = errTenantExpired
			}
			writeEvent(w, rc, appendEndEvent(b, why))
			return
		case <-changed:
			var cur *API
			cur, changed = s.o.Streams.current()
			if cur == nil {
				continue
			}
			if _, k, d := cur.check(r, r.URL.Query(), shortKey, cur.o.Now()); d != nil || k != key {
				why := "the stream's credentials no longer read this link"
				if d != nil {
					why = d.Detail
				}
				writeEvent(w, rc, appendEndEvent(b, errors.New(why)))
				return
			}
		case <-tick.C:
		}
	}
}

// writeEvent writes b, an event or more, and flushes it, within
// liveWriteTimeout; false when the client is gone or too slow.
func writeEvent(w http.ResponseWriter, rc *http.ResponseController, b []byte) bool {
	_ = rc.SetWriteDeadline(time.Now().Add(liveWriteTimeout))
	if _, err := w.Write(b); err != nil {
		return false
	}
	return rc.Flush() == nil
}

// appendEndEvent appends the event "end", whose reason is why's text.
func appendEndEvent(b []byte, why error) []byte {
	reason, _ := json.Marshal(strings.TrimPrefix(why.Error(), "stats: ")) // a string always marshals
	b = append(b, "event: end\ndata: {\"reason\":"...)
	b = append(b, reason...)
	return append(b, "}\n\n"...)
}

// writeStreamsRefused answers a stream acquire refused: 429 when the
// client's own cap is reached (its share token's, its address's), 503 when
// the gateway's places are taken, both with Retry-After and the field.
func writeStreamsRefused(w http.ResponseWriter, why refusal) {
	w.Header().Set("Retry-After", "10")
	status, detail := http.StatusServiceUnavailable, "too many live streams open on this gateway ("+why.field+"): try again later"
	if why.own {
		holder := "this address"
		if why.field == "stats.live.per_share_token" {
			holder = "this share token"
		}
		status, detail = http.StatusTooManyRequests, holder+" holds as many live streams as it may ("+why.field+"): close one first"
	}
	problem.WriteDetails(w, problem.Details{Status: status, Detail: detail, Extra: map[string]any{"limit": why.field}})
}

// storedPart is what the live window holds from the store: the finest
// tier's buckets before the process began counting.
type storedPart struct {
	step   time.Duration
	points []rollup.Point
}

// readStored returns what the live window of pts lacks before since: the
// finest tier's buckets of key that start in the window before since, read
// from the store (with the counts not written yet, as every read). They
// are the visits of every gateway of the fleet, this one's before it
// started among them; the bucket holding since also has this process's
// visits after since, which pts holds, so those are taken off it. A bucket
// that began before the window is left out, so that the strip stays the
// window's. Nil when the store cannot be read (within stats.read_timeout):
// the stream tries again as the window moves.
func (s *API) readStored(ctx context.Context, key string, pts []rollup.Point, since time.Time) *storedPart {
	step := s.tiers[0].Step
	from := pts[0].Start
	lo := rollup.Align(from, step)
	if lo.Before(from) {
		lo = lo.Add(step)
	}
	part := &storedPart{step: step}
	if !lo.Before(since) {
		return part
	}
	if s.o.ReadTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.o.ReadTimeout)
		defer cancel()
	}
	got, err := s.r.Points(ctx, key, step, lo, since)
	if err != nil {
		return nil
	}
	edge := rollup.Align(since, step)
	for _, p := range got {
		if p.Start.Equal(edge) {
			for _, l := range pts {
				if l.Start.Add(analytics.LiveStep).After(since) && l.Start.Before(edge.Add(step)) {
					p.Human, p.Bot = max(p.Human-l.Human, 0), max(p.Bot-l.Bot, 0)
				}
			}
		}
		part.points = append(part.points, p)
	}
	return part
}

// appendStored appends "stored": the buckets of part that start in the
// window (at or after from), with their totals.
func appendStored(b []byte, part *storedPart, from time.Time) []byte {
	var v rollup.Visits
	pts := part.points
	for len(pts) > 0 && pts[0].Start.Before(from) {
		pts = pts[1:]
	}
	for _, p := range pts {
		v.Human += p.Human
		v.Bot += p.Bot
	}
	b = append(b, `,"stored":{"step":`...)
	b = strconv.AppendInt(b, int64(part.step/time.Second), 10)
	b = appendField(b, "range_total", v.Human)
	b = appendField(b, "bot_range_total", v.Bot)
	return append(appendPoints(b, pts), '}')
}

// appendPoints appends "points": [start, humans, bots] of each of pts.
func appendPoints(b []byte, pts []rollup.Point) []byte {
	b = append(b, `,"points":[`...)
	for i, p := range pts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = strconv.AppendInt(b, p.Start.Unix(), 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, p.Human, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, p.Bot, 10)
		b = append(b, ']')
	}
	return append(b, ']')
}

// appendLiveEvent appends one "live" event of the buckets pts, with the
// store's part before since when the window begins before it (stored; nil
// when it could not be read).
func appendLiveEvent(b []byte, shortKey string, pts []rollup.Point, complete bool, now, since time.Time, stored *storedPart) []byte {
	key, _ := json.Marshal(shortKey) // a string always marshals
	b = append(b, "event: live\ndata: {\"short_key\":"...)
	b = append(b, key...)
	b = append(b, `,"complete":`...)
	b = strconv.AppendBool(b, complete)
	b = appendField(b, "step", int64(analytics.LiveStep/time.Second))
	var from int64
	if len(pts) > 0 {
		from = pts[0].Start.Unix()
	}
	b = appendField(b, "from", from)
	b = appendField(b, "to", now.Unix())
	b = appendField(b, "since", since.Unix())
	var v rollup.Visits
	for _, p := range pts {
		v = v.Add(p.Visits)
	}
	b = appendField(b, "range_total", v.Human)
	b = appendField(b, "bot_range_total", v.Bot)
	b = appendClassTotals(b, nil, v)
	b = appendClassPoints(b, v, len(pts), func(i int) (rollup.Visits, bool) { return pts[i].Visits, false })
	b = appendPoints(b, pts)
	if stored != nil && len(pts) > 0 && since.After(pts[0].Start) {
		b = appendStored(b, stored, pts[0].Start)
	}
	return append(b, "}\n\n"...)
}
