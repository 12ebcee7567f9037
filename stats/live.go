package stats

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
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
}

// Streams bounds the live streams of a process: at most SetMax at once
// (stats.live.max_streams), and Close ends them all. It outlives config
// reloads, as the streams do. Safe for concurrent use; create it with
// NewStreams.
type Streams struct {
	max       atomic.Int64
	open      atomic.Int64
	done      chan struct{}
	closeOnce sync.Once
}

// DefaultMaxStreams is the default of stats.live.max_streams.
const DefaultMaxStreams = 100

// MaxStreamsLimit is the most stats.live.max_streams may be.
const MaxStreamsLimit = 10_000

// NewStreams returns Streams allowing max at once.
func NewStreams(max int) *Streams {
	s := &Streams{done: make(chan struct{})}
	s.SetMax(max)
	return s
}

// SetMax sets how many streams may be open at once; 0 refuses every new
// one. Streams open beyond a lowered max go on.
func (s *Streams) SetMax(n int) { s.max.Store(int64(max(n, 0))) }

// Open returns the number of streams open now.
func (s *Streams) Open() int { return int(s.open.Load()) }

// Close ends every stream and refuses new ones: the gateway calls it when
// it shuts down, since a stream never goes idle for the drain to finish.
func (s *Streams) Close() { s.closeOnce.Do(func() { close(s.done) }) }

// acquire takes a stream's place, false when none is free or s is closed.
func (s *Streams) acquire() bool {
	select {
	case <-s.done:
		return false
	default:
	}
	if s.open.Add(1) > s.max.Load() {
		s.open.Add(-1)
		return false
	}
	return true
}

func (s *Streams) release() { s.open.Add(-1) }

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
//	       "range_total":12,"bot_range_total":1,"points":[[1795413330,0,0],...]}
//
// "complete" is false when the gateway could not follow every link
// (analytics.live.max_links reached): the link's counts are then lower
// bounds. The stream ends when the client goes, or when the gateway shuts
// down (the client reconnects after the "retry" delay).
func (s *API) serveLive(w http.ResponseWriter, r *http.Request, key, shortKey string) {
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
	if !s.o.Streams.acquire() {
		w.Header().Set("Retry-After", "10")
		problem.Write(w, http.StatusServiceUnavailable, "too many live streams open on this gateway (stats.live.max_streams): try again later")
		return
	}
	defer s.o.Streams.release()
	// A stream is a response that lasts: the server's write deadline
	// (server.write_timeout) gives way to one per event.
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy in front must not hold events back
	w.WriteHeader(http.StatusOK)

	b := []byte("retry: " + strconv.Itoa(liveRetry) + "\n\n")
	var lastFrom, lastTotal int64 = -1, -1
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
			lastFrom, lastTotal = from, total
			b = appendLiveEvent(b, shortKey, pts, complete, s.o.Now())
			_ = rc.SetWriteDeadline(time.Now().Add(liveWriteTimeout))
			if _, err := w.Write(b); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			b = b[:0]
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.o.Streams.done:
			return
		case <-tick.C:
		}
	}
}

// appendLiveEvent appends one "live" event of the buckets pts.
func appendLiveEvent(b []byte, shortKey string, pts []rollup.Point, complete bool, now time.Time) []byte {
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
	var v rollup.Visits
	for _, p := range pts {
		v = v.Add(p.Visits)
	}
	b = appendField(b, "range_total", v.Human)
	b = appendField(b, "bot_range_total", v.Bot)
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
	return append(b, "]}\n\n"...)
}
