package analytics_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/internal/testkit"
)

// stateStore is a memory store that says what the test sets of its state
// and fails its writes while fail is set.
type stateStore struct {
	*analyticstest.Memory
	mu    sync.Mutex
	state analytics.StoreState
	fail  error
}

func (s *stateStore) State() analytics.StoreState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

func (s *stateStore) set(st analytics.StoreState, fail error) {
	s.mu.Lock()
	s.state, s.fail = st, fail
	s.mu.Unlock()
}

func (s *stateStore) Write(ctx context.Context, b analytics.Batch) error {
	s.mu.Lock()
	fail := s.fail
	s.mu.Unlock()
	if fail != nil {
		return fail
	}
	return s.Memory.Write(ctx, b)
}

// stateMetric returns linkgate_analytics_state by state.
func stateMetric(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, s := range testkit.Samples(t, g)["linkgate_analytics_state"] {
		out[s.Labels["state"]] = s.Value
	}
	return out
}

// TestPipelineHealth walks a pipeline's store through opening, failing to
// open, open with writes failing, and healthy: Health and the state metric
// say each, with the reason, and the oldest visit not saved yet.
func TestPipelineHealth(t *testing.T) {
	cfg := analytics.DefaultConfig()
	cfg.FlushInterval = time.Hour                        // only the test flushes
	cfg.Embedded.Path = filepath.Join(t.TempDir(), "db") // a failed final flush spills beside it
	plan := compile(t, cfg)
	st := &stateStore{Memory: analyticstest.NewMemory(plan.Rollup())}
	st.set(analytics.StoreState{Err: errors.New("opening")}, nil)
	reg := prometheus.NewRegistry()
	if got := stateMetric(t, reg); len(got) != 0 {
		t.Fatalf("state metric before any registration: %v", got)
	}
	m := analytics.NewMetrics(reg)
	if got := stateMetric(t, reg); got["ok"]+got["starting"]+got["degraded"] != 0 || len(got) != 3 {
		t.Errorf("state metric without a pipeline = %v, want the three states at 0", got)
	}
	p := analytics.NewPipeline(plan, st, m, nil)
	defer p.Close(context.Background())

	check := func(step, state, reason string) analytics.Health {
		t.Helper()
		h := p.Health()
		if h.State != state || !strings.Contains(h.Reason, reason) || (reason == "") != (h.Reason == "") {
			t.Errorf("%s: Health = %+v, want state %q, reason with %q", step, h, state, reason)
		}
		want := map[string]float64{"ok": 0, "starting": 0, "degraded": 0}
		want[state] = 1
		if got := stateMetric(t, reg); got["ok"] != want["ok"] || got["starting"] != want["starting"] || got["degraded"] != want["degraded"] {
			t.Errorf("%s: state metric = %v, want %v", step, got, want)
		}
		return h
	}
	check("first attempt running", "starting", "opening")
	st.set(analytics.StoreState{Attempts: 3, Err: errors.New("open /data: read-only file system")}, errors.New("not open yet"))
	check("attempts failed", "degraded", "read-only file system")

	before := time.Now().Truncate(time.Minute)
	p.Middleware(plan, nil)(shortener).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/abc", nil))
	if err := p.Flush(t.Context()); err == nil {
		t.Fatal("Flush to a failing store succeeded")
	}
	h := check("store still not open", "degraded", "read-only file system")
	if h.OldestUnsaved == nil || h.OldestUnsaved.Before(before) || h.OldestUnsaved.After(time.Now()) {
		t.Errorf("OldestUnsaved = %v, want the minute of the visit, %v", h.OldestUnsaved, before)
	}

	st.set(analytics.StoreState{Open: true}, errors.New("disk almost full"))
	if err := p.Flush(t.Context()); err == nil {
		t.Fatal("Flush to a failing store succeeded")
	}
	check("open, the last write failed", "degraded", "the last write to the store failed: disk almost full")

	st.set(analytics.StoreState{Open: true}, nil)
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if h := check("healthy", "ok", ""); h.OldestUnsaved != nil || h.JournalBytes != 0 || h.DroppedVisits != 0 {
		t.Errorf("Health once all is written = %+v, want nothing waiting", h)
	}
	if v, err := p.Reader().Total(t.Context(), "abc"); err != nil || v.Human != 1 {
		t.Errorf("Total = %+v, %v; want the one visit, written once", v, err)
	}
}

// BenchmarkHealth measures Health (what /admin/health serves) and a
// gather of the state metric while 100,000 links wait for a store that
// fails: Health scans what waits for the oldest minute; the metric reads
// the state only.
func BenchmarkHealth(b *testing.B) {
	cfg := analytics.DefaultConfig()
	cfg.FlushInterval = time.Hour
	cfg.Embedded.Path = filepath.Join(b.TempDir(), "db") // the final flush spills beside it
	plan, err := analytics.Compile(cfg)
	if err != nil {
		b.Fatal(err)
	}
	st := &stateStore{Memory: analyticstest.NewMemory(plan.Rollup())}
	st.set(analytics.StoreState{Attempts: 1, Err: errors.New("read-only file system")}, errors.New("not open yet"))
	reg := prometheus.NewRegistry()
	m := analytics.NewMetrics(reg)
	p := analytics.NewPipeline(plan, st, m, nil)
	defer p.Close(context.Background())
	h := p.Middleware(plan, nil)(http.RedirectHandler("https://example.com/", http.StatusFound))
	for i := range 100_000 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/k"+strconv.Itoa(i), nil))
	}
	p.Flush(context.Background()) // fails: the counts wait in the flusher
	b.Run("health", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if p.Health().OldestUnsaved == nil {
				b.Fatal("nothing waiting")
			}
		}
	})
	b.Run("metrics", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
