package configs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/gateway"
)

// alertRules is the part of Prometheus's rule file format alerts.yml uses.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

var (
	metricName = regexp.MustCompile(`\blinkgate_[a-z0-9_]+`)
	// selector is a metric with label matchers: name{a="x", b=~"y|z"}.
	selector = regexp.MustCompile(`\b(linkgate_[a-z0-9_]+)\{([^}]*)\}`)
	matcher  = regexp.MustCompile(`^\s*([a-z_]+)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*$`)
	grouping = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	descText = regexp.MustCompile(`^Desc\{fqName: "([^"]*)", .*variableLabels: \{([^}]*)\}\}$`)
	code     = regexp.MustCompile("`([^`]*)`")
)

// servedMetrics returns the name and label names of every metric a gateway
// registers, from its registry's descriptors (a metric vector has a
// descriptor before it has a series).
func servedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	cfg, err := config.Parse([]byte("upstream: {targets: [http://127.0.0.1:1]}\nserver: {listen: 127.0.0.1:0}\nadmin: {listen: 127.0.0.1:0}\nanalytics: {enabled: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := gateway.Compile(cfg, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(plan, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(t.Context())
	ch := make(chan *prometheus.Desc)
	go func() { g.Registry().Describe(ch); close(ch) }()
	out := map[string][]string{}
	for d := range ch {
		m := descText.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the descriptor %s", d)
		}
		var labels []string
		for l := range strings.SplitSeq(m[2], ",") {
			if l != "" {
				labels = append(labels, strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"))
			}
		}
		out[m[1]] = labels
	}
	return out
}

// docMetricLabels returns the metrics table of docs/operations.md: each
// metric's labels, with the text that describes each (its values in
// backquotes).
func docMetricLabels(t *testing.T) map[string]map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	in := false
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case strings.HasPrefix(l, "| metric | type | labels |"):
			in = true
		case in && !strings.HasPrefix(l, "|"):
			in = false
		case in && !strings.HasPrefix(l, "|---"):
			cells := strings.Split(l, "|")
			name := strings.Trim(strings.TrimSpace(cells[1]), "`")
			labels := map[string]string{}
			for part := range strings.SplitSeq(cells[3], ";") {
				if m := code.FindStringSubmatch(part); m != nil {
					labels[m[1]] = part[strings.Index(part, m[0])+len(m[0]):]
				}
			}
			out[name] = labels
		}
	}
	if len(out) < 20 {
		t.Fatalf("docs/operations.md: only %d rows in the metrics table", len(out))
	}
	return out
}

// TestAlertRules: configs/alerts.yml is a Prometheus rule file whose every
// rule has a name, an expression, a severity and a summary; every metric
// it names is one the gateway registers and the metrics table of
// docs/operations.md documents, every label it selects or groups by is one
// of that metric's, and every value it selects is one the table lists for
// the label. With promtool installed (Debian's prometheus package),
// promtool accepts it.
func TestAlertRules(t *testing.T) {
	path := filepath.Join(root, "configs", "alerts.yml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f alertRules
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	served, table := servedMetrics(t), docMetricLabels(t)
	rules := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			rules++
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %q: want alert, expr, labels.severity and annotations.summary", r.Alert)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("rule %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			names := metricName.FindAllString(r.Expr, -1)
			if len(names) == 0 {
				t.Errorf("rule %s names no linkgate metric", r.Alert)
			}
			var labels []string // of every metric the rule names
			for _, n := range names {
				if _, ok := served[n]; !ok {
					t.Errorf("rule %s: %s is not a metric the gateway registers", r.Alert, n)
				}
				if _, ok := table[n]; !ok {
					t.Errorf("rule %s: %s is not in the metrics table of docs/operations.md", r.Alert, n)
				}
				labels = append(labels, served[n]...)
			}
			for _, m := range grouping.FindAllStringSubmatch(r.Expr, -1) {
				for l := range strings.SplitSeq(m[1], ",") {
					if l = strings.TrimSpace(l); l != "instance" && l != "job" && !slices.Contains(labels, l) {
						t.Errorf("rule %s groups by %q, a label none of its metrics has", r.Alert, l)
					}
				}
			}
			for _, sel := range selector.FindAllStringSubmatch(r.Expr, -1) {
				name := sel[1]
				for ms := range strings.SplitSeq(sel[2], ",") {
					m := matcher.FindStringSubmatch(ms)
					if m == nil {
						t.Errorf("rule %s: cannot read the matcher %q", r.Alert, ms)
						continue
					}
					if !slices.Contains(served[name], m[1]) {
						t.Errorf("rule %s: %s has no label %q (it has %v)", r.Alert, name, m[1], served[name])
						continue
					}
					if m[2] != "=" && m[2] != "=~" {
						continue
					}
					documented := code.FindAllStringSubmatch(table[name][m[1]], -1)
					for v := range strings.SplitSeq(m[3], "|") {
						if !slices.ContainsFunc(documented, func(d []string) bool { return d[1] == v }) {
							t.Errorf("rule %s: %s{%s=%q}: docs/operations.md lists no such value of %s", r.Alert, name, m[1], v, m[1])
						}
					}
				}
			}
		}
	}
	if rules < 10 {
		t.Errorf("%d rules, want at least 10", rules)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Logf("promtool not installed (apt-get install prometheus): the rules' PromQL is not parsed")
		return
	}
	if out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules: %v\n%s", err, out)
	}
}
