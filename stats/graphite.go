package stats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/problem"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitclass"
)

// The Graphite API
//
// Under <prefix>/graphite the stats API answers the part of graphite-web's
// HTTP API that Grafana's built-in Graphite data source uses, so that
// Grafana charts links without a plugin:
//
//	GET|POST /graphite/render?target=...&from=-24h&until=now&format=json&maxDataPoints=N
//	GET      /graphite/metrics/find?query=linkgate.links.*
//
// The metrics are
//
//	linkgate.links.<short_key>.visits|humans|bots|class_<class>   one link
//	linkgate.all.visits|humans|bots|class_<class>                 all links together
//
// visits being humans plus bots, and bots the sum of the classes
// class_bot (declared bots), class_preview, class_scanner, class_prefetch
// and class_internal. A short key holding anything but letters,
// digits, "_", "-" and "~" is percent-encoded in its node ("a.b" is
// a%2Eb), as graphite-web's find unquotes node names. A wildcard over the
// links (linkgate.links.*.visits) matches the links visited in the range,
// at most graphiteMaxLinks of them, most visited first: the gateway keeps
// no list of every link, only the top lists of each day.
//
// render answers graphite-web's documented JSON: a list of
// {"target": name, "datapoints": [[value, unix seconds], ...]}, a null
// value where the stats API has a null point. The resolution is the finest
// tier that keeps the range's start in at most maxDataPoints points; past
// that the points are consolidated (summed by default, see consolidateBy).

// graphiteMaxLinks caps the links a wildcard expands to.
const graphiteMaxLinks = 500

// graphiteFindRange is the range find lists the links of without from and
// until.
const graphiteFindRange = 30 * rollup.Day

// graphiteSeriesMax caps the series one render evaluates.
const graphiteSeriesMax = 2000

// serveGraphite answers a request under /graphite: rest is the path after
// it ("/render", "/metrics/find", with or without a trailing slash).
func (s *API) serveGraphite(w http.ResponseWriter, r *http.Request, rest string) {
	rest = strings.TrimSuffix(rest, "/")
	switch rest {
	case "/render", "/metrics/find", "/metrics":
	default:
		problem.Write(w, http.StatusNotFound, "the Graphite API here answers /render and /metrics/find")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, HEAD, POST")
		problem.Write(w, http.StatusMethodNotAllowed, "the Graphite API is read-only: use GET or POST")
		return
	}
	if _, ok := bearerToken(r); !ok && !s.authorized(r) {
		writeUnauthorized(w, r) // before reading a body
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
	if err := r.ParseForm(); err != nil {
		writeParamError(w, badParam("body", "%v", err))
		return
	}
	// The tree of one tenant: the stats token's (the default tenant, or
	// the one tenant= names, in the query or the body) or a tenant
	// token's; share tokens are not taken.
	sc, ok := s.scopeOf(w, r, r.Form, false)
	if !ok {
		return
	}
	ctx, cancel := s.readContext(r)
	defer cancel()
	var body []byte
	var err error
	if rest == "/render" {
		body, err = s.graphiteRender(ctx, sc, r.Form, s.o.Now())
	} else {
		body, err = s.graphiteFind(ctx, sc, r.Form, s.o.Now())
	}
	if err != nil {
		writeParamError(w, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Vary", "Accept-Encoding")
	writeBody(w, r, body)
}

// graphiteRenderParams are the parameters render reads or accepts.
var graphiteRenderParams = []string{"target", "from", "until", "format", "maxDataPoints", "cacheTimeout", "noCache", "tenant"}

// graphiteFindParams are those of metrics/find.
var graphiteFindParams = []string{"query", "format", "wildcards", "from", "until", "tenant"}

func checkGraphiteParams(v url.Values, known []string) error {
	var unknown []string
	for name := range v {
		if !slices.Contains(known, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return badParam(unknown[0], "unknown parameter; this Graphite API reads %s", strings.Join(known, ", "))
}

// graphiteRange reads from and until (graphite-web's forms) at now: the
// default range is the last def.
func graphiteRange(v url.Values, now time.Time, def time.Duration) (from, until time.Time, err error) {
	until = now
	if s := v.Get("until"); s != "" {
		if until, err = parseGraphiteTime(s, now); err != nil {
			return from, until, badParam("until", "%v", err)
		}
	}
	from = until.Add(-def)
	if s := v.Get("from"); s != "" {
		if from, err = parseGraphiteTime(s, now); err != nil {
			return from, until, badParam("from", "%v", err)
		}
	}
	if !from.Before(until) {
		return from, until, badParam("from", "%s is not before until %s", from.Format(time.RFC3339), until.Format(time.RFC3339))
	}
	if until.Sub(from) > maxRange {
		return from, until, badParam("from", "the range is longer than %s", rollup.FormatDuration(maxRange))
	}
	return from, until, nil
}

// graphiteUnits are graphite-web's relative time units: mon is 30 days and
// y 365, as its docs say.
var graphiteUnits = []struct {
	names []string
	d     time.Duration
}{
	{[]string{"s", "sec", "secs", "second", "seconds"}, time.Second},
	{[]string{"min", "mins", "minute", "minutes"}, time.Minute},
	{[]string{"h", "hour", "hours"}, time.Hour},
	{[]string{"d", "day", "days"}, 24 * time.Hour},
	{[]string{"w", "week", "weeks"}, 7 * 24 * time.Hour},
	{[]string{"mon", "month", "months"}, 30 * 24 * time.Hour},
	{[]string{"y", "year", "years"}, 365 * 24 * time.Hour},
}

var relTime = regexp.MustCompile(`^(?:now)?([+-])([0-9]{1,9})([a-z]+)$`)

// parseGraphiteTime reads a time as graphite-web's render API takes it:
// "now", a relative time ("-24h", "-7d", "-1mon", "now-6h", "+1h"), unix
// seconds, or an absolute "HH:MM_YYYYMMDD" or "YYYYMMDD" (UTC).
func parseGraphiteTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "now" {
		return now, nil
	}
	if m := relTime.FindStringSubmatch(strings.ToLower(s)); m != nil {
		n, _ := strconv.ParseInt(m[2], 10, 64)
		for _, u := range graphiteUnits {
			if slices.Contains(u.names, m[3]) {
				d := time.Duration(n) * u.d
				if d/u.d != time.Duration(n) || d > maxRange {
					return time.Time{}, fmt.Errorf("%q is too far from now", s)
				}
				if m[1] == "-" {
					d = -d
				}
				return now.Add(d), nil
			}
		}
		return time.Time{}, fmt.Errorf("%q: unit %q is not s, min, h, d, w, mon or y", s, m[3])
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && len(s) != 8 {
		if n < 0 || n > maxUnix {
			return time.Time{}, fmt.Errorf("unix time %d is outside 1970 to 9999", n)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	for _, layout := range []string{"15:04_20060102", "20060102"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not now, a relative time like -24h or -7d, unix seconds, HH:MM_YYYYMMDD or YYYYMMDD", s)
}

// gSeries is one series of a render.
type gSeries struct {
	name     string
	pathExpr string // the path expression it was fetched by, for the names of aggregates
	start    int64  // unix seconds of the first point
	step     int64  // seconds between points
	values   []float64
	null     []bool
	consol   string // how maxDataPoints consolidates it: sum, average, max or min
}

func (s *gSeries) clone() *gSeries {
	c := *s
	c.values, c.null = slices.Clone(s.values), slices.Clone(s.null)
	return &c
}

// gEval is the state of one render.
type gEval struct {
	api      *API
	sc       scope // the tenant whose tree the targets name
	ctx      context.Context
	from, to time.Time
	now      time.Time
	step     time.Duration
	fetched  int
	partial  bool
}

// graphiteRender answers /render.
func (s *API) graphiteRender(ctx context.Context, sc scope, v url.Values, now time.Time) ([]byte, error) {
	if err := checkGraphiteParams(v, graphiteRenderParams); err != nil {
		return nil, err
	}
	if f := v.Get("format"); f != "" && f != "json" {
		return nil, badParam("format", "%q: this Graphite API answers format=json only", f)
	}
	from, until, err := graphiteRange(v, now, defaultLast)
	if err != nil {
		return nil, err
	}
	if from.Before(s.earliest) {
		from = s.earliest
		if !from.Before(until) {
			return nil, badParam("until", "the range ends before %s, where curves begin", s.earliest.Format(time.RFC3339))
		}
	}
	maxPoints := 0
	if m := v.Get("maxDataPoints"); m != "" {
		n, err := strconv.Atoi(m)
		if err != nil || n < 1 || n > maxPoints2 {
			return nil, badParam("maxDataPoints", "%q is not a number from 1 to %d", m, maxPoints2)
		}
		maxPoints = n
	}
	tier, err := rollup.Choose(s.tiers, from, until, now, maxPoints) // 0: rollup.MaxPoints
	if err != nil {
		return nil, badParam("from", "%v", err)
	}
	if rollup.NumBuckets(from, until, tier.Step) > maxPoints2 {
		return nil, badParam("from", "the range has more than %d points at its coarsest step", maxPoints2)
	}
	for _, t := range v["target"] {
		if strings.Contains(t, "consolidateBy") {
			// Another consolidation than a sum needs the points a tier's
			// buckets would have summed: the finest tier, consolidated.
			if tier, err = rollup.Choose(s.tiers, from, until, now, 0); err != nil {
				return nil, badParam("from", "%v", err)
			}
			break
		}
	}
	e := &gEval{api: s, sc: sc, ctx: ctx, from: from, to: until, now: now, step: tier.Step}
	var out []*gSeries
	for _, t := range v["target"] {
		if strings.TrimSpace(t) == "" {
			continue
		}
		n, err := parseTarget(t)
		if err != nil {
			return nil, badParam("target", "%q: %v", t, err)
		}
		ss, err := e.eval(n)
		if err != nil {
			var pe *paramError
			if errors.As(err, &pe) {
				return nil, err
			}
			return nil, badParam("target", "%q: %v", t, err)
		}
		out = append(out, ss...)
	}
	b := []byte{'['}
	for i, sr := range out {
		if maxPoints > 0 {
			sr = consolidate(sr, maxPoints)
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = appendGraphiteSeries(b, sr)
	}
	return append(b, "]\n"...), nil
}

// maxPoints2 bounds maxDataPoints and the points of a range: the stats
// API's own bound.
const maxPoints2 = maxPoints

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// appendGraphiteSeries appends sr as graphite-web's JSON:
// {"target": name, "datapoints": [[value, unix seconds], ...]}.
func appendGraphiteSeries(b []byte, sr *gSeries) []byte {
	b = append(b, `{"target":`...)
	b = appendJSONString(b, sr.name)
	b = append(b, `,"datapoints":[`...)
	for i, v := range sr.values {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		if sr.null[i] || math.IsNaN(v) || math.IsInf(v, 0) {
			b = append(b, "null"...)
		} else {
			b = strconv.AppendFloat(b, v, 'f', -1, 64)
		}
		b = append(b, ',')
		b = strconv.AppendInt(b, sr.start+int64(i)*sr.step, 10)
		b = append(b, ']')
	}
	return append(b, "]}"...)
}

// consolidate returns sr with at most max points: each run of
// ceil(n/max) points made one, by sr.consol (graphite-web's
// valuesPerPoint), null where the whole run is.
func consolidate(sr *gSeries, max int) *gSeries {
	n := len(sr.values)
	if n <= max {
		return sr
	}
	per := (n + max - 1) / max
	c := &gSeries{name: sr.name, pathExpr: sr.pathExpr, start: sr.start, step: sr.step * int64(per), consol: sr.consol}
	for i := 0; i < n; i += per {
		vals := []float64{}
		for j := i; j < min(i+per, n); j++ {
			if !sr.null[j] {
				vals = append(vals, sr.values[j])
			}
		}
		v, null := aggregate(vals, cmp.Or(sr.consol, "sum"))
		c.values = append(c.values, v)
		c.null = append(c.null, null)
	}
	return c
}

// aggregate returns fn (sum, average, max, min) of vals, null when there
// are none.
func aggregate(vals []float64, fn string) (float64, bool) {
	if len(vals) == 0 {
		return 0, true
	}
	switch fn {
	case "average", "avg":
		var s float64
		for _, v := range vals {
			s += v
		}
		return s / float64(len(vals)), false
	case "max":
		return slices.Max(vals), false
	case "min":
		return slices.Min(vals), false
	}
	var s float64
	for _, v := range vals {
		s += v
	}
	return s, false
}

// eval evaluates n to a series list.
func (e *gEval) eval(n *gNode) ([]*gSeries, error) {
	switch n.kind {
	case gPath:
		return e.fetch(n.path)
	case gCall:
		f, ok := graphiteFuncs[n.fn]
		if !ok {
			return nil, fmt.Errorf("unknown function %s; this Graphite API has %s", n.fn, strings.Join(graphiteFuncNames(), ", "))
		}
		return f(e, n)
	}
	return nil, fmt.Errorf("%s is not a series", n)
}

// series evaluates the argument of call at i as a series list.
func (e *gEval) series(call *gNode, i int) ([]*gSeries, error) {
	if i >= len(call.args) {
		return nil, fmt.Errorf("%s() needs a series list as argument %d", call.fn, i+1)
	}
	return e.eval(call.args[i])
}

// intArg returns the argument at i (or named name) as an integer, def
// when absent.
func intArg(call *gNode, i int, name string, def int) (int, error) {
	a := arg(call, i, name)
	if a == nil {
		return def, nil
	}
	if a.kind != gNumber || a.num != math.Trunc(a.num) || math.Abs(a.num) > 1e6 {
		return 0, fmt.Errorf("%s(): %s is not an integer", call.fn, a)
	}
	return int(a.num), nil
}

func strArg(call *gNode, i int, name string, def string) (string, error) {
	a := arg(call, i, name)
	if a == nil {
		return def, nil
	}
	if a.kind != gString {
		return "", fmt.Errorf("%s(): %s is not a quoted string", call.fn, a)
	}
	return a.str, nil
}

func arg(call *gNode, i int, name string) *gNode {
	if i < len(call.args) {
		return call.args[i]
	}
	return call.kwargs[name]
}

// The metric tree.
const (
	gRoot  = "linkgate"
	gLinks = "links"
	gAll   = "all"
)

var gLeaves = func() []string {
	ls := []string{"visits", "humans", "bots"}
	for _, c := range botClasses {
		ls = append(ls, "class_"+c.String())
	}
	return ls
}()

// gLeafValue returns the value of leaf l (one of gLeaves) of v.
func gLeafValue(l string, v rollup.Visits) int64 {
	switch l {
	case "visits":
		return v.Human + v.Bot
	case "humans":
		return v.Human
	case "bots":
		return v.Bot
	}
	c, _ := visitclass.ParseClass(strings.TrimPrefix(l, "class_"))
	return analytics.ClassVisits(v, c)
}

// gLeafNodes are gLeaves as nodes of find's answer.
func gLeafNodes() []gFound {
	ns := make([]gFound, len(gLeaves))
	for i, l := range gLeaves {
		ns[i] = gFound{l, true}
	}
	return ns
}

// gFound is a node of the metric tree as find lists it.
type gFound struct {
	name string
	leaf bool
}

// encodeNode returns a short key as a node of a metric path.
func encodeNode(key string) string {
	var b strings.Builder
	for i := range len(key) {
		c := key[i]
		if isIdentByte(c) || c == '-' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// decodeNode returns the short key of a node.
func decodeNode(n string) (string, bool) {
	k, err := url.PathUnescape(n)
	return k, err == nil && k != "" && !strings.Contains(k, "/")
}

// glob returns a matcher of one node of a graphite path pattern: * (any
// run), ? (one character), [...] (a character of the set) and {a,b}
// (either), never across a dot; and whether the node has a wildcard.
func glob(pat string) (func(string) bool, bool, error) {
	if !strings.ContainsAny(pat, "*?[{") {
		return func(s string) bool { return s == pat }, false, nil
	}
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(pat); i++ {
		switch c := pat[i]; c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '[':
			end := strings.IndexByte(pat[i:], ']')
			if end < 0 {
				return nil, true, fmt.Errorf("unclosed [ in %q", pat)
			}
			set := pat[i+1 : i+end]
			if strings.ContainsAny(set, `\[`) || set == "" {
				return nil, true, fmt.Errorf("bad character set [%s]", set)
			}
			b.WriteString("[" + set + "]")
			i += end
		case '{':
			end := strings.IndexByte(pat[i:], '}')
			if end < 0 {
				return nil, true, fmt.Errorf("unclosed { in %q", pat)
			}
			alts := strings.Split(pat[i+1:i+end], ",")
			for j, a := range alts {
				alts[j] = regexp.QuoteMeta(a)
			}
			b.WriteString("(?:" + strings.Join(alts, "|") + ")")
			i += end
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, true, fmt.Errorf("bad pattern %q", pat)
	}
	return re.MatchString, true, nil
}

// braceList returns the alternatives of a node that is only a {a,b,...}
// list of literals (or a literal), so that it names links without listing
// the visited ones.
func braceList(pat string) ([]string, bool) {
	if !strings.ContainsAny(pat, "*?[{") {
		return []string{pat}, true
	}
	if strings.HasPrefix(pat, "{") && strings.HasSuffix(pat, "}") && !strings.ContainsAny(pat[1:len(pat)-1], "*?[{}") {
		return strings.Split(pat[1:len(pat)-1], ","), true
	}
	return nil, false
}

// links returns the nodes of the links of sc's tenant the pattern node
// matches: literals as they are, wildcards among the links visited in
// [from, to).
func (s *API) graphiteLinks(ctx context.Context, sc scope, pat string, from, to time.Time) ([]string, bool, error) {
	if alts, ok := braceList(pat); ok {
		var out []string
		for _, a := range alts {
			if _, ok := decodeNode(a); ok && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
		return out, false, nil
	}
	match, _, err := glob(pat)
	if err != nil {
		return nil, false, err
	}
	if !s.hasTop(sc) {
		return nil, false, nil
	}
	top, err := s.topOf(ctx, sc, rollup.Align(from, rollup.Day), to, graphiteMaxLinks)
	partial := err != nil
	var out []string
	for _, l := range top {
		// The default tenant's list holds every tenant's links: its tree
		// holds its own (another tenant's is in that tenant's tree).
		if t, short := analytics.SplitKey(l.Key); t == sc.tenant {
			if n := encodeNode(short); match(n) {
				out = append(out, n)
			}
		}
	}
	return out, partial, nil
}

// fetch returns the series of a path expression.
func (e *gEval) fetch(path string) ([]*gSeries, error) {
	nodes := strings.Split(path, ".")
	if len(nodes) < 3 || len(nodes) > 4 {
		return nil, nil // no such metric: graphite answers no series
	}
	root, _, err := glob(nodes[0])
	if err != nil {
		return nil, err
	}
	if !root(gRoot) {
		return nil, nil
	}
	kind, _, err := glob(nodes[1])
	if err != nil {
		return nil, err
	}
	type target struct{ key, name string }
	var keys []target
	var leafPat string
	switch {
	case len(nodes) == 3 && kind(gAll):
		keys, leafPat = []target{{e.sc.key(""), gRoot + "." + gAll}}, nodes[2]
	case len(nodes) == 4 && kind(gLinks):
		ls, partial, err := e.api.graphiteLinks(e.ctx, e.sc, nodes[2], e.from, e.to)
		if err != nil {
			return nil, err
		}
		e.partial = e.partial || partial
		for _, n := range ls {
			if k, ok := decodeNode(n); ok {
				keys = append(keys, target{e.sc.key(k), gRoot + "." + gLinks + "." + n})
			}
		}
		leafPat = nodes[3]
	default:
		return nil, nil
	}
	leaf, _, err := glob(leafPat)
	if err != nil {
		return nil, err
	}
	var out []*gSeries
	for _, k := range keys {
		var c *curve
		for _, l := range gLeaves {
			if !leaf(l) {
				continue
			}
			if e.fetched++; e.fetched > graphiteSeriesMax {
				return nil, fmt.Errorf("more than %d series", graphiteSeriesMax)
			}
			if c == nil {
				var err error
				c, err = e.api.points(e.ctx, k.key, query{from: e.from, to: e.to, step: e.step}, e.now)
				if err != nil {
					return nil, err
				}
				e.partial = e.partial || c.readErr != nil
			}
			sr := &gSeries{name: k.name + "." + l, pathExpr: path, start: c.from.Unix(), step: int64(c.step / time.Second)}
			for _, p := range c.points {
				sr.values = append(sr.values, float64(gLeafValue(l, p.Visits)))
				sr.null = append(sr.null, p.null)
			}
			out = append(out, sr)
		}
	}
	return out, nil
}

// graphiteFind answers /metrics/find: the nodes one level down that the
// query's last node matches, as graphite-web's treejson (the default) or
// completer format.
func (s *API) graphiteFind(ctx context.Context, sc scope, v url.Values, now time.Time) ([]byte, error) {
	if err := checkGraphiteParams(v, graphiteFindParams); err != nil {
		return nil, err
	}
	q := v.Get("query")
	if q == "" {
		return nil, badParam("query", "missing: a path like linkgate.links.*")
	}
	format := cmp.Or(v.Get("format"), "treejson")
	if format != "treejson" && format != "completer" {
		return nil, badParam("format", "%q is not treejson or completer", format)
	}
	from, until, err := graphiteRange(v, now, graphiteFindRange)
	if err != nil {
		return nil, err
	}
	nodes := strings.Split(q, ".")
	// Walk the tree: each level's children matched by the query's node.
	children := func(prefix []string) ([]gFound, error) {
		switch len(prefix) {
		case 0:
			return []gFound{{gRoot, false}}, nil
		case 1:
			return []gFound{{gLinks, false}, {gAll, false}}, nil
		case 2:
			if prefix[1] == gAll {
				return gLeafNodes(), nil
			}
			ls, _, err := s.graphiteLinks(ctx, sc, nodes[2], from, until)
			if err != nil {
				return nil, err
			}
			var fs []gFound
			for _, l := range ls {
				fs = append(fs, gFound{l, false})
			}
			return fs, nil
		case 3:
			if prefix[1] == gLinks {
				return gLeafNodes(), nil
			}
		}
		return nil, nil
	}
	out, err := gWalk(nodes, children)
	if err != nil {
		return nil, err
	}
	base := ""
	if i := strings.LastIndexByte(q, '.'); i >= 0 {
		base = q[:i+1]
	}
	if format == "completer" {
		return appendCompleter(nil, out), nil
	}
	wc := v.Get("wildcards")
	return appendTreeJSON(nil, out, base, (wc == "1" || wc == "true") && len(out) > 1), nil
}

// gWalk returns the nodes the query's nodes match, by their full paths,
// expanding every level but the last along the tree that children
// gives; as graphite-web lists them: the branches, then the leaves, each
// node name once.
func gWalk(nodes []string, children func(prefix []string) ([]gFound, error)) ([]gFound, error) {
	var out []gFound
	paths := [][]string{nil}
	for depth, pat := range nodes {
		match, _, err := glob(pat)
		if err != nil {
			return nil, badParam("query", "%v", err)
		}
		var next [][]string
		for _, p := range paths {
			cs, err := children(p)
			if err != nil {
				return nil, badParam("query", "%v", err)
			}
			for _, c := range cs {
				if !match(c.name) {
					continue
				}
				if depth == len(nodes)-1 {
					out = append(out, gFound{strings.Join(append(slices.Clone(p), c.name), "."), c.leaf})
				} else if !c.leaf {
					next = append(next, append(slices.Clone(p), c.name))
				}
			}
		}
		paths = next
	}
	slices.SortStableFunc(out, func(a, b gFound) int { return boolInt(a.leaf) - boolInt(b.leaf) })
	seen := map[string]bool{}
	return slices.DeleteFunc(out, func(f gFound) bool {
		n := f.name[strings.LastIndexByte(f.name, '.')+1:]
		dup := seen[n]
		seen[n] = true
		return dup
	}), nil
}

// appendCompleter appends find's answer in graphite-web's completer
// format.
func appendCompleter(b []byte, out []gFound) []byte {
	b = append(b, `{"metrics":[`...)
	for i, f := range out {
		if i > 0 {
			b = append(b, ',')
		}
		name := f.name[strings.LastIndexByte(f.name, '.')+1:]
		path := f.name
		if !f.leaf {
			path += "."
		}
		b = append(b, `{"is_leaf":`...)
		b = strconv.AppendInt(b, int64(boolInt(f.leaf)), 10)
		b = append(b, `,"name":`...)
		b = appendJSONString(b, name)
		b = append(b, `,"path":`...)
		b = appendJSONString(b, path)
		b = append(b, '}')
	}
	return append(b, "]}\n"...)
}

// appendTreeJSON appends find's answer in graphite-web's treejson, with
// ids of the query's parent path base (wildcards and all) and the name,
// first a "*" node for them all when wildcard.
func appendTreeJSON(b []byte, out []gFound, base string, wildcard bool) []byte {
	b = append(b, '[')
	if wildcard {
		allLeaves := !slices.ContainsFunc(out, func(f gFound) bool { return !f.leaf })
		b = appendTreeNode(b, "*", base+"*", allLeaves)
		if len(out) > 0 {
			b = append(b, ',')
		}
	}
	for i, f := range out {
		if i > 0 {
			b = append(b, ',')
		}
		name := f.name[strings.LastIndexByte(f.name, '.')+1:]
		b = appendTreeNode(b, name, base+name, f.leaf)
	}
	return append(b, "]\n"...)
}

// appendTreeNode appends one node of graphite-web's treejson.
func appendTreeNode(b []byte, text, id string, leaf bool) []byte {
	l := int64(boolInt(leaf))
	b = append(b, `{"allowChildren":`...)
	b = strconv.AppendInt(b, 1-l, 10)
	b = append(b, `,"expandable":`...)
	b = strconv.AppendInt(b, 1-l, 10)
	b = append(b, `,"id":`...)
	b = appendJSONString(b, id)
	b = append(b, `,"leaf":`...)
	b = strconv.AppendInt(b, l, 10)
	b = append(b, `,"text":`...)
	b = appendJSONString(b, text)
	return append(b, '}')
}
