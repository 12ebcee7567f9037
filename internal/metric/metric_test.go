package metric_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/linkgate/linkgate/internal/metric"
)

// TestSetRegisters: every collector a Set makes is registered with its
// name, help, type, labels and buckets as declared; a Set of no registerer
// makes working collectors that no registry holds.
func TestSetRegisters(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := metric.With(reg)
	s.Counter("t_counter_total", "A counter.").Add(2)
	s.CounterVec("t_counter_vec_total", "A counter by kind.", "kind").WithLabelValues("a").Inc()
	s.Gauge("t_gauge", "A gauge.").Set(3)
	s.GaugeVec("t_gauge_vec", "A gauge by kind.", "kind").WithLabelValues("b").Set(4)
	s.GaugeFunc("t_gauge_func", "A gauge read at scrape.", func() float64 { return 5 })
	s.Histogram("t_hist_seconds", "A histogram.", []float64{1, 2}).Observe(1.5)
	s.HistogramVec("t_hist_vec_seconds", "A histogram by kind.", []float64{1}, "kind").WithLabelValues("c").Observe(0.5)

	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range fams {
		m := f.GetMetric()[0]
		var labels []string
		for _, l := range m.GetLabel() {
			labels = append(labels, l.GetName()+"="+l.GetValue())
		}
		var value string
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			value = fmt.Sprint(m.GetCounter().GetValue())
		case dto.MetricType_GAUGE:
			value = fmt.Sprint(m.GetGauge().GetValue())
		case dto.MetricType_HISTOGRAM:
			for _, b := range m.GetHistogram().GetBucket() {
				value += fmt.Sprintf("le%v:%d ", b.GetUpperBound(), b.GetCumulativeCount())
			}
		}
		got[f.GetName()] = fmt.Sprintf("%s|%s|%s|%s", f.GetHelp(), f.GetType(), strings.Join(labels, ","), strings.TrimSpace(value))
	}
	want := map[string]string{
		"t_counter_total":     "A counter.|COUNTER||2",
		"t_counter_vec_total": "A counter by kind.|COUNTER|kind=a|1",
		"t_gauge":             "A gauge.|GAUGE||3",
		"t_gauge_vec":         "A gauge by kind.|GAUGE|kind=b|4",
		"t_gauge_func":        "A gauge read at scrape.|GAUGE||5",
		"t_hist_seconds":      "A histogram.|HISTOGRAM||le1:0 le2:1",
		"t_hist_vec_seconds":  "A histogram by kind.|HISTOGRAM|kind=c|le1:1",
	}
	if len(got) != len(want) {
		t.Errorf("%d families registered, want %d: %v", len(got), len(want), got)
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %q, want %q", name, got[name], w)
		}
	}

	c := metric.With(nil).Counter("t_counter_total", "A counter.")
	c.Inc()
	var m dto.Metric
	if err := c.Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Errorf("a counter of no registry: %v %v, want 1", m.GetCounter().GetValue(), err)
	}
}

// TestSetTwiceNamed: a name registered twice panics, as MustRegister does.
func TestSetTwiceNamed(t *testing.T) {
	s := metric.With(prometheus.NewRegistry())
	s.Counter("t_total", "A counter.")
	defer func() {
		if recover() == nil {
			t.Error("a second collector of the same name registered without a panic")
		}
	}()
	s.Counter("t_total", "A counter.")
}
