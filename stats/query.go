package stats

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/suggest"
	"github.com/linkgate/linkgate/visitor"
)

// Limits on what one stats query may ask for.
const (
	defaultLast = 24 * time.Hour
	maxRange    = 100 * rollup.Year // keeps time.Duration arithmetic far from overflow
	maxPoints   = 50_000            // an explicit step or a stitched curve over a long range
)

// Answer formats.
const (
	formatJSON = "json"
	formatCSV  = "csv"
	formatHTML = "html"
	// formatEvents is the live stream (Server-Sent Events).
	formatEvents = "events"
	// formatEmbed is the chart page laid out for an iframe.
	formatEmbed = "embed"
)

// query is a parsed stats request. The zero step means "choose the tier";
// the empty format means "negotiate from the Accept header".
type query struct {
	from, to time.Time // UTC, from < to
	step     time.Duration
	stitch   bool
	format   string
	by       []visitor.Dim // breakdowns asked for, in the order asked
	top      int           // top=N: the N most visited links; 0: none
	compare  string        // "previous" or "year": the earlier range to answer beside; "": none
	// daily is the dimension and value (daily=referrer:news.example)
	// whose visits per UTC day the answer gives; dailyValue "" for none.
	daily      visitor.Dim
	dailyValue string
	tz         *time.Location // tz=: day and week buckets start at its midnights; nil: UTC
	// scope is what the request may read (its tenant), set by the
	// handler once it has checked the request's token.
	scope scope
}

// paramError is a bad query parameter; the 400 answer names it.
type paramError struct {
	param, reason string
}

func (e *paramError) Error() string { return e.param + ": " + e.reason }

func badParam(param, format string, args ...any) error {
	return &paramError{param, fmt.Sprintf(format, args...)}
}

// parseQuery reads the query parameters of a stats request at now:
//
//	last=90m|6h|3d|2w|2mo|1y  the range ending now (default 24h). m, h, d and
//	                          w (7 days) are fixed lengths; mo and y are
//	                          calendar months and years back from now in
//	                          UTC, so last=1mo on March 31 starts on
//	                          March 3 (Go's AddDate normalises February 31).
//	                          Go durations such as 1h30m are accepted too.
//	from=, to=                RFC 3339 or unix seconds; to defaults to now
//	                          and from to 24h before to; from < to. Not with last.
//	step=1m|5m|1h|1d|1w       the resolution; the handler checks it is a tier's
//	stitch=true               the mixed-resolution curve; not with step
//	format=json|csv|html|embed|events  the answer's format (embed: the
//	                          page for an iframe; events: the live stream);
//	                          otherwise the Accept header
//	by=referrer,source,...    breakdowns (any of visitor.Names), per UTC day
//	daily=DIM:VALUE           the visits of one value of a breakdown per UTC
//	                          day of the range (daily=referrer:news.example)
//
// Any other parameter is an error rather than ignored: a misspelt one
// (lst=1h) would otherwise answer the 24 h default as if it had been read.
//
// A range starting before earliest starts at earliest instead (the answer's
// "from" shows it), so that no bucket of a curve starts before 1970: from=0
// means "from the beginning". The stats API passes the first bucket start of
// its coarsest tier at or after the unix epoch (epochStart). A range that
// ends at or before earliest is an error.
//
// Every error is a *paramError naming the parameter.
func parseQuery(v url.Values, now, earliest time.Time) (query, error) {
	if err := checkParams(v); err != nil {
		return query{}, err
	}
	for _, name := range queryParams {
		if n := len(v[name]); n > 1 {
			return query{}, badParam(name, "given %d times", n)
		}
	}
	q, err := parseRange(v, now.UTC(), earliest)
	if err != nil {
		return query{}, err
	}
	if err := parseCurve(v, &q); err != nil {
		return query{}, err
	}
	if err := parseBreakdowns(v, &q); err != nil {
		return query{}, err
	}
	if err := parseAnswer(v, &q); err != nil {
		return query{}, err
	}
	return q, nil
}

// parseRange reads the range of v (last, or from and to), as parseQuery
// says.
func parseRange(v url.Values, now, earliest time.Time) (query, error) {
	var q query
	last, from, to := v.Get("last"), v.Get("from"), v.Get("to")
	switch {
	case last != "" && (from != "" || to != ""):
		return query{}, badParam("last", "cannot be combined with from or to")
	case last != "":
		f, err := parseLast(last, now)
		if err != nil {
			return query{}, badParam("last", "%v", err)
		}
		q.from, q.to = f, now
	default:
		q.to = now
		if to != "" {
			t, err := parseTime(to)
			if err != nil {
				return query{}, badParam("to", "%v", err)
			}
			q.to = t
		}
		q.from = q.to.Add(-defaultLast)
		if from != "" {
			t, err := parseTime(from)
			if err != nil {
				return query{}, badParam("from", "%v", err)
			}
			q.from = t
		}
		if !q.from.Before(q.to) {
			return query{}, badParam("from", "%s is not before to %s", q.from.Format(time.RFC3339), q.to.Format(time.RFC3339))
		}
	}
	if q.from.Before(earliest) {
		if !earliest.Before(q.to) {
			// With to absent the range ends now: only a clock set before
			// 1970 gets here.
			name := "to"
			switch {
			case to != "":
			case last != "":
				name = "last"
			default:
				name = "from"
			}
			return query{}, badParam(name, "the range ends at %s, not after %s, where the stats API's curves begin", q.to.Format(time.RFC3339), earliest.Format(time.RFC3339))
		}
		q.from = earliest
	}
	if q.to.Sub(q.from) > maxRange {
		name := "from"
		if last != "" {
			name = "last"
		}
		return query{}, badParam(name, "the range is longer than %s", rollup.FormatDuration(maxRange))
	}
	return q, nil
}

// parseCurve reads the curve's step and stitch into q.
func parseCurve(v url.Values, q *query) error {
	if s := v.Get("step"); s != "" {
		d, err := rollup.ParseDuration(s)
		if err != nil {
			return badParam("step", "%q is not a duration like 1m, 5m, 1h, 1d or 1w", s)
		}
		q.step = d
	}
	if s := v.Get("stitch"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			return badParam("stitch", "%q is not true or false", s)
		}
		q.stitch = b
	}
	if q.stitch && q.step != 0 {
		return badParam("stitch", "cannot be combined with step: a stitched curve has its own steps")
	}
	return nil
}

// parseBreakdowns reads by, daily and top into q.
func parseBreakdowns(v url.Values, q *query) error {
	if s := v.Get("by"); s != "" {
		for name := range strings.SplitSeq(s, ",") {
			name = strings.TrimSpace(name)
			d, ok := visitor.ParseDim(name)
			if !ok {
				reason := fmt.Sprintf("%q is not one of %s", name, strings.Join(visitor.Names(), ", "))
				if guess := suggest.Closest(name, visitor.Names()...); guess != "" {
					reason = fmt.Sprintf("%q is not one of %s (did you mean %s?)", name, strings.Join(visitor.Names(), ", "), guess)
				}
				return badParam("by", "%s", reason)
			}
			if !slices.Contains(q.by, d) {
				q.by = append(q.by, d)
			}
		}
	}
	if s := v.Get("daily"); s != "" {
		name, value, ok := strings.Cut(s, ":")
		d, known := visitor.ParseDim(name)
		if !ok || !known || value == "" {
			return badParam("daily", "%q is not a breakdown and a value, such as referrer:news.example (breakdowns: %s)", s, strings.Join(visitor.Names(), ", "))
		}
		q.daily, q.dailyValue = d, value
	}
	if s := v.Get("top"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxTop {
			return badParam("top", "%q is not a number of links from 1 to %d", s, maxTop)
		}
		q.top = n
	}
	return nil
}

// parseAnswer reads tz, compare and format into q.
func parseAnswer(v url.Values, q *query) error {
	if name := v.Get("tz"); name != "" {
		loc, err := time.LoadLocation(name)
		if err != nil || name == "Local" {
			return badParam("tz", "%q is not a time zone of the IANA database like Europe/Paris or America/New_York", name)
		}
		q.tz = loc
	}
	switch c := v.Get("compare"); c {
	case "", "previous", "year":
		q.compare = c
	default:
		return badParam("compare", "%q is not previous or year", c)
	}
	switch f := v.Get("format"); f {
	case "", formatJSON, formatCSV, formatHTML, formatEvents, formatEmbed:
		q.format = f
	default:
		return badParam("format", "%q is not json, csv, html, embed or events", f)
	}
	return nil
}

// queryParams are the parameters parseQuery reads.
var queryParams = [...]string{"last", "from", "to", "step", "stitch", "format", "by", "daily", "top", "compare", "tz", "share", "tenant"}

// maxTop is the longest top list one answer has.
const maxTop = 1000

// checkParams returns an error naming the first parameter of v, in sorted
// order, that parseQuery does not read, with the known one it is closest to
// when that is a likely typo.
func checkParams(v url.Values) error {
	var unknown []string
	for name := range v {
		if !slices.Contains(queryParams[:], name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	name := unknown[0]
	reason := "unknown parameter; the stats API reads " + strings.Join(queryParams[:], ", ")
	if guess := suggest.Closest(name, queryParams[:]...); guess != "" {
		reason = fmt.Sprintf("unknown parameter (did you mean %s?); the stats API reads %s", guess, strings.Join(queryParams[:], ", "))
	}
	return badParam(name, "%s", reason)
}

// epochStart returns the first bucket start of step at or after the unix
// epoch: 1970-01-05, a Monday, for weeks (rollup aligns weeks to Mondays and
// 1970-01-01 was a Thursday); the epoch itself for steps up to a day. Since
// every tier's step divides the coarsest one, it is a bucket start of every
// tier.
func epochStart(step time.Duration) time.Time {
	return rollup.AlignUp(time.Unix(0, 0).UTC(), step)
}

// parseLast returns the start of the range "last" ending at now.
func parseLast(s string, now time.Time) (time.Time, error) {
	if n, ok := strings.CutSuffix(s, "mo"); ok {
		m, err := strconv.ParseUint(n, 10, 16)
		if err != nil || m == 0 || m > 1200 {
			return time.Time{}, fmt.Errorf("%q is not a number of months like 2mo", s)
		}
		return now.AddDate(0, -int(m), 0), nil
	}
	if n, ok := strings.CutSuffix(s, "y"); ok {
		y, err := strconv.ParseUint(n, 10, 16)
		if err != nil || y == 0 || y > 100 {
			return time.Time{}, fmt.Errorf("%q is not a number of years like 1y", s)
		}
		return now.AddDate(-int(y), 0, 0), nil
	}
	d, err := rollup.ParseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a duration like 90m, 6h, 3d, 2w, 2mo or 1y", s)
	}
	if d > maxRange {
		return time.Time{}, fmt.Errorf("%q is longer than %s", s, rollup.FormatDuration(maxRange))
	}
	return now.Add(-d), nil
}

// Unix seconds accepted by from and to: 1970 to the end of 9999.
const maxUnix = 253402300799

// parseTime reads RFC 3339 or unix seconds, returning UTC.
func parseTime(s string) (time.Time, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 || n > maxUnix {
			return time.Time{}, fmt.Errorf("unix time %d is outside 1970 to 9999", n)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither RFC 3339 (2026-11-22T10:00:00Z) nor unix seconds", s)
	}
	if t.Year() < 1970 {
		return time.Time{}, fmt.Errorf("%q is before 1970", s)
	}
	return t.UTC(), nil
}

// negotiate picks the answer's format from an Accept header (RFC 9110
// section 12.5.1): the offer with the highest quality, JSON on a tie, so
// that a browser (text/html first, */* at q=0.8) gets the chart page and
// curl (*/*) gets JSON.
func negotiate(accept string) string {
	offers := [...]struct{ typ, format string }{
		{"application/json", formatJSON}, {"text/csv", formatCSV}, {"text/html", formatHTML},
		{"text/event-stream", formatEvents},
	}
	best, bestQ := formatJSON, 0.0
	for _, o := range offers {
		q := acceptQuality(accept, o.typ)
		if q > bestQ {
			best, bestQ = o.format, q
		}
	}
	return best
}

// acceptQuality returns the quality accept gives the media type typ: that
// of the most specific matching range, 0 when none matches.
func acceptQuality(accept, typ string) float64 {
	major, _, _ := strings.Cut(typ, "/")
	q, spec := 0.0, -1
	for r := range strings.SplitSeq(accept, ",") {
		mt, params, _ := strings.Cut(r, ";")
		mt = strings.ToLower(strings.TrimSpace(mt))
		s := -1
		switch mt {
		case typ:
			s = 2
		case major + "/*":
			s = 1
		case "*/*":
			s = 0
		}
		if s <= spec {
			continue
		}
		rq := 1.0
		for p := range strings.SplitSeq(params, ";") {
			k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
			if strings.EqualFold(k, "q") {
				if f, err := strconv.ParseFloat(val, 64); err == nil && f >= 0 && f <= 1 {
					rq = f
				}
			}
		}
		q, spec = rq, s
	}
	return q
}
