package gateway_test

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/internal/testkit"
)

// The metrics table of docs/operations.md is checked here against the registry of a
// real gateway: a metric or a label added without its row fails.

// metricRow is a row of the metrics table.
type metricRow struct {
	typ string // counter, gauge, histogram or summary
	// labels maps each label to its documented values; nil for a label
	// whose values are free (a target, a rule's name).
	labels        map[string][]string
	memcachedOnly bool // applies to limiter.store: memcached only
}

// onlySpans is a label description that lists values: "`ok`, `failed`".
var onlySpans = regexp.MustCompile("^(\\s*`[^`]+`\\s*,?)+\\s*$")

// docMetrics reads the metrics table of docs/operations.md. The labels cell lists
// labels separated by ";", each "`name`" or "`name`: description", the
// description being its values when it is only code spans ("`ok`,
// `failed`").
func docMetrics(t *testing.T) map[string]metricRow {
	t.Helper()
	rows := docTable(t, "operations.md", "| metric | type | labels | what it counts | applies to |")
	out := map[string]metricRow{}
	for _, c := range rows {
		if len(c) != 5 {
			t.Errorf("docs/operations.md metrics table: row %q has %d cells, want 5", c, len(c))
			continue
		}
		names := spans(c[0])
		if len(names) != 1 || "`"+names[0]+"`" != c[0] {
			t.Errorf("docs/operations.md metrics table: the first cell %q must be one metric name in backquotes", c[0])
			continue
		}
		row := metricRow{typ: c[1], labels: map[string][]string{}, memcachedOnly: strings.Contains(c[4], "`limiter.store: memcached`")}
		if !slices.Contains([]string{"counter", "gauge", "histogram", "summary"}, row.typ) {
			t.Errorf("docs/operations.md metrics table: %s has type %q, want counter, gauge, histogram or summary", names[0], row.typ)
		}
		if c[2] != "" {
			for _, part := range strings.Split(c[2], ";") {
				part = strings.TrimSpace(part)
				label := spans(part)
				if len(label) == 0 || !strings.HasPrefix(part, "`"+label[0]+"`") {
					t.Errorf("docs/operations.md metrics table: %s: label %q must start with its name in backquotes", names[0], part)
					continue
				}
				desc := strings.TrimPrefix(part, "`"+label[0]+"`")
				var values []string
				if d, ok := strings.CutPrefix(desc, ":"); ok && onlySpans.MatchString(d) {
					values = spans(d)
				}
				row.labels[label[0]] = values
			}
		}
		if _, dup := out[names[0]]; dup {
			t.Errorf("docs/operations.md metrics table: %s has two rows", names[0])
		}
		out[names[0]] = row
	}
	return out
}

// descPattern reads a Desc's String: its name and variable labels.
var descPattern = regexp.MustCompile(`^Desc\{fqName: "([^"]*)", .*variableLabels: \{([^}]*)\}\}$`)

// registered returns every collector's metric name and label names in
// reg, the Go runtime's and the process's excepted.
func registered(t *testing.T, reg *prometheus.Registry) map[string][]string {
	t.Helper()
	ch := make(chan *prometheus.Desc)
	go func() { reg.Describe(ch); close(ch) }()
	out := map[string][]string{}
	for d := range ch {
		m := descPattern.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the descriptor %s", d)
		}
		if strings.HasPrefix(m[1], "go_") || strings.HasPrefix(m[1], "process_") {
			continue
		}
		labels := []string{}
		for l := range strings.SplitSeq(m[2], ",") {
			if l != "" {
				labels = append(labels, strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"))
			}
		}
		slices.Sort(labels)
		out[m[1]] = labels
	}
	return out
}

// metricsGateway runs a gateway with limiter (the limiter section's body)
// in front of up, with one rule and analytics on, sends it a human visit
// and a bot visit, calls then (when not nil) and sends a request that the
// rule checks but that is not a visit, and shuts it down (the final flush
// records the visits). It returns the series gathered while it ran and
// after it stopped: a proxy's target series go when it closes.
func metricsGateway(t *testing.T, up, limiter string, then func()) (registry *prometheus.Registry, running, stopped map[string][]testkit.Sample) {
	t.Helper()
	analytics := "analytics:\n  enabled: true\n  embedded: {path: " + t.TempDir() + "}\n"
	gw := start(t, strings.Replace(testkit.BaseConfig(up), "analytics:\n  enabled: false\n", analytics, 1)+fmt.Sprintf(`limiter:
%s
rules:
  - name: visits_ip
    match: {path: "/{short_key}"}
    key: ip
    limits: [1000/s]
`, limiter))
	for _, ua := range []string{"curl/8.5.0", "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)"} {
		if resp, _ := testkit.Do(t, "GET", gw.url("/go"), nil, "User-Agent", ua); resp.StatusCode != http.StatusFound {
			t.Fatalf("GET /go as %s: %d, want 302", ua, resp.StatusCode)
		}
	}
	if then != nil {
		then()
	}
	if resp, _ := testkit.Do(t, "GET", gw.url("/nope"), nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /nope: %d, want the upstream's 404", resp.StatusCode)
	}
	running = testkit.Samples(t, gw.g.Registry())
	if err := gw.shutdown(); err != nil {
		t.Fatal(err)
	}
	return gw.g.Registry(), running, testkit.Samples(t, gw.g.Registry())
}

// TestMetricsTable: the metrics table of docs/operations.md names exactly the metrics
// and labels a gateway registers (with the memcached store, so that every
// collector is in use), with their types and label values; and the
// metrics it says apply to memcached only stay at zero with the
// in-process store under the same traffic, while they move with memcached.
// memcached is stopped before the last request, so that its error counter
// has a series too.
func TestMetricsTable(t *testing.T) {
	doc := docMetrics(t)
	mc := testkit.StartMemcached(t)
	up := tinyURL(t)
	reg, mcRunning, mcStopped := metricsGateway(t, up.URL, memcachedStore(mc.Addr, "allow"), mc.Kill)
	_, memRunning, memStopped := metricsGateway(t, up.URL, "  store: memory", nil)

	got := registered(t, reg)
	if len(got) < 20 {
		t.Fatalf("only %d linkgate collectors registered: %v", len(got), got)
	}
	for name, labels := range got {
		row, ok := doc[name]
		if !ok {
			t.Errorf("docs/operations.md metrics table: no row for %s (labels %v)", name, labels)
			continue
		}
		var documented []string
		for l := range row.labels {
			documented = append(documented, l)
		}
		slices.Sort(documented)
		if !slices.Equal(documented, labels) {
			t.Errorf("docs/operations.md metrics table: %s has the labels %v, registered with %v", name, documented, labels)
		}
	}
	for name := range doc {
		if _, ok := got[name]; !ok {
			t.Errorf("docs/operations.md metrics table: %s is not registered", name)
		}
	}

	typed := map[string]bool{}
	reported := map[string]bool{} // a problem once, not once per series
	report := func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !reported[msg] {
			reported[msg] = true
			t.Error(msg)
		}
	}
	for _, series := range []map[string][]testkit.Sample{mcRunning, mcStopped, memRunning, memStopped} {
		for name, ss := range series {
			row, ok := doc[name]
			if !ok {
				continue // reported above
			}
			typed[name] = true
			for _, s := range ss {
				if s.Type != row.typ {
					report("docs/operations.md metrics table: %s is a %s, registered as a %s", name, row.typ, s.Type)
				}
				for l, v := range s.Labels {
					if values := row.labels[l]; values != nil && !slices.Contains(values, v) {
						report("docs/operations.md metrics table: %s{%s=%q}: the value is not among the documented %v", name, l, v, values)
					}
				}
			}
		}
	}
	var untyped []string
	for name := range doc {
		if !typed[name] {
			untyped = append(untyped, name)
		}
	}
	slices.Sort(untyped)
	if len(untyped) > 0 {
		t.Logf("without series under this traffic, so type and label values unchecked: %v", untyped)
	}
	kinds := map[string]bool{}
	for _, s := range mcStopped["linkgate_visits_recorded_total"] {
		kinds[s.Labels["kind"]] = s.Value == 1
	}
	if !kinds["human"] || !kinds["bot"] {
		t.Errorf("after one human and one bot visit, linkgate_visits_recorded_total by kind = %v, want one of each", mcStopped["linkgate_visits_recorded_total"])
	}

	moved := func(series ...map[string][]testkit.Sample) []string {
		var out []string
		for name, row := range doc {
			if !row.memcachedOnly {
				continue
			}
			for _, ss := range series {
				if slices.ContainsFunc(ss[name], func(s testkit.Sample) bool { return s.Value != 0 }) && !slices.Contains(out, name) {
					out = append(out, name)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	if m := moved(memRunning, memStopped); len(m) > 0 {
		t.Errorf("with the in-process store, metrics docs/operations.md says apply to memcached only moved: %v", m)
	}
	if m := moved(mcRunning); !slices.Contains(m, "linkgate_limit_store_duration_seconds") || !slices.Contains(m, "linkgate_memcached_ops_total") {
		t.Errorf("with memcached, the memcached-only metrics that moved are %v; want linkgate_limit_store_duration_seconds and linkgate_memcached_ops_total among them", m)
	}
}
