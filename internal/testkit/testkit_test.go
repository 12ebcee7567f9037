package testkit_test

import (
	"errors"
	"go/parser"
	"go/token"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/internal/testkit"
)

// TestImportsNoLinkgatePackage: the tests of every package import testkit,
// so testkit importing one of them would be an import cycle for that
// package's own tests.
func TestImportsNoLinkgatePackage(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(p, "github.com/linkgate/linkgate/") {
				t.Errorf("%s imports %s", f, p)
			}
		}
	}
}

func TestMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"rule", "outcome"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "d_seconds", Help: "d"})
	reg.MustRegister(c, h)
	c.WithLabelValues("a", "allowed").Add(2)
	c.WithLabelValues("a", "limited").Add(3)
	c.WithLabelValues("b", "limited").Add(5)
	h.Observe(1)
	h.Observe(2)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
		has    bool
	}{
		{"x_total", []string{"rule", "a", "outcome", "limited"}, 3, true},
		{"x_total", []string{"outcome", "limited"}, 8, true},
		{"x_total", nil, 10, true},
		{"x_total", []string{"rule", "c"}, 0, false},
		{"d_seconds", nil, 2, true},
		{"absent", nil, 0, false},
	} {
		if got := testkit.Metric(t, reg, tc.name, tc.labels...); got != tc.want {
			t.Errorf("Metric(%s, %v) = %v, want %v", tc.name, tc.labels, got, tc.want)
		}
		if got := testkit.HasMetric(t, reg, tc.name, tc.labels...); got != tc.has {
			t.Errorf("HasMetric(%s, %v) = %v, want %v", tc.name, tc.labels, got, tc.has)
		}
	}
	if s := testkit.Samples(t, reg)["d_seconds"]; len(s) != 1 || s[0].Type != "histogram" {
		t.Errorf("Samples: d_seconds = %+v, want one histogram", s)
	}
}

func TestLogsHandler(t *testing.T) {
	var logs testkit.Logs
	log := slog.New(logs.Handler()).With("server", "admin")
	log.Info("listening", "addr", "127.0.0.1:1")
	log.WithGroup("g").Warn("slow", "n", 3)
	if !logs.Logged("listening", map[string]string{"server": "admin", "addr": "127.0.0.1:1", "level": "INFO"}) {
		t.Errorf("the record with its attributes is missing:\n%s", logs.String())
	}
	if r := logs.Records("", nil); len(r) != 2 || r[1]["n"] != "3" || r[1]["server"] != "admin" {
		t.Errorf("Records = %v, want both records, the group's attribute by its own key", r)
	}
	logs.Clear()
	if n := logs.Count("", nil); n != 0 {
		t.Errorf("%d records after Clear", n)
	}
}

// TestDeadAddrRefusesAndHoldsItsPort: a connection to DeadAddr is refused,
// and no server can take the port while the test runs.
func TestDeadAddrRefusesAndHoldsItsPort(t *testing.T) {
	addr := testkit.DeadAddr(t)
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Errorf("dial %s: %v, want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		l.Close()
		t.Errorf("a server could listen on %s", addr)
	}
}
