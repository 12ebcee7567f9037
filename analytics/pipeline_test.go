package analytics_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/pebblestore"
	"github.com/linkgate/linkgate/rollup"
)

// TestPipelineLifecycle: a Pipeline records what its middleware counts,
// answers reads from memory before any flush, and on Close makes the final
// flush into its store and closes it; the counts are in the store when it
// is opened again.
func TestPipelineLifecycle(t *testing.T) {
	dir := t.TempDir()
	cfg := analytics.DefaultConfig()
	cfg.Embedded.Path = filepath.Join(dir, "db")
	cfg.FlushInterval = time.Hour // only Close flushes
	plan := compile(t, cfg)
	st, err := pebblestore.Open(cfg.Embedded.Path, plan.Rollup(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := analytics.NewPipeline(plan, st, analytics.NewMetrics(nil), nil)
	h := p.Middleware(plan)(shortener)
	for range 5 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/abc", nil))
	}
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/nope", nil)) // a 404: no visit
	ctx := context.Background()
	if v, err := p.Reader().Total(ctx, "abc"); err != nil || v.Human != 5 {
		t.Fatalf("before any flush: Total = %+v, %v; want 5 human visits", v, err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := st.Write(ctx, analytics.Batch{At: time.Now()}); !errors.Is(err, pebblestore.ErrClosed) {
		t.Errorf("the store is still open after Close: Write = %v", err)
	}
	st2, err := pebblestore.Open(cfg.Embedded.Path, plan.Rollup(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	r := rollup.NewReader(st2, plan.Rollup())
	if v, err := r.Total(ctx, "abc"); err != nil || v.Human != 5 {
		t.Errorf("after Close, the store holds %+v (%v), want 5 human visits", v, err)
	}
	if v, _ := r.Total(ctx, "nope"); v != (analytics.Visits{}) {
		t.Errorf("a 404 was stored: %+v", v)
	}
}

// TestPipelineApply: a reload's max_keys takes effect at once.
func TestPipelineApply(t *testing.T) {
	cfg := analytics.DefaultConfig()
	cfg.Embedded.Path = filepath.Join(t.TempDir(), "db")
	cfg.MaxKeys = 1
	plan := compile(t, cfg)
	st, err := pebblestore.Open(cfg.Embedded.Path, plan.Rollup(), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := analytics.NewPipeline(plan, st, nil, nil)
	defer p.Close(context.Background())
	h := p.Middleware(plan)(shortener)
	visit := func(path string) {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", path, nil))
	}
	visit("/abc")
	visit("/xyz") // over max_keys: the all-links total only
	cfg.MaxKeys = 2
	p.Apply(compile(t, cfg))
	visit("/xyz")
	ctx := context.Background()
	xyz, _ := p.Reader().Total(ctx, "xyz")
	all, _ := p.Reader().Total(ctx, analytics.AllLinks)
	if xyz.Human != 1 || all.Human != 3 {
		t.Errorf("xyz %+v, all links %+v; want 1 (the visit after max_keys went up) and 3", xyz, all)
	}
}
