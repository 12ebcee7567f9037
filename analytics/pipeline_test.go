package analytics_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
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
	h := p.Middleware(plan, nil)(shortener)
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
	h := p.Middleware(plan, nil)(shortener)
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

// TestRestartOnlyDecidesEveryField: every field of analytics.Config, by its
// path in the file, is either applied by a reload (the list below: what
// each snapshot's Middleware and Pipeline.Apply read) or kept at its running
// value and named by RestartOnly. A new field fails here until it is put on
// one side.
func TestRestartOnlyDecidesEveryField(t *testing.T) {
	reloadable := []string{"match.methods", "match.path", "count_status", "bots", "max_key_bytes", "max_keys", "max_buffer_bytes",
		"geoip.path", "dimensions.max_values", "dimensions.source_params", "uniques.secret_env", "live.max_links",
		"asn.path", "classes.internal_networks", "classes.scanner_networks", "classes.cloud_networks", "classes.burst_window"}
	fields := yamlLeaves(reflect.TypeFor[analytics.Config](), "")
	for _, f := range reloadable {
		if !slices.Contains(fields, f) {
			t.Errorf("reloadable lists %s, which analytics.Config does not have", f)
		}
	}
	for _, f := range fields {
		t.Run(f, func(t *testing.T) {
			run, next := analytics.DefaultConfig(), analytics.DefaultConfig()
			changeField(t, reflect.ValueOf(&next).Elem(), f)
			eff, restart := analytics.RestartOnly(run, next)
			if slices.Contains(reloadable, f) {
				if len(restart) != 0 || !reflect.DeepEqual(eff, next) {
					t.Errorf("a reload that changes %s: restart %q, eff %+v; want no restart and the new value", f, restart, eff)
				}
				return
			}
			name := "analytics." + f
			if len(restart) != 1 || name != restart[0] && !strings.HasPrefix(name, restart[0]+".") {
				t.Fatalf("a reload that changes %s: restart %q; want it named (or its section), or %s listed as reloadable", f, restart, f)
			}
			if !reflect.DeepEqual(eff, run) {
				t.Errorf("a reload that changes %s: eff %+v, want the running value kept", f, eff)
			}
		})
	}
}

// yamlLeaves returns the paths of the fields of struct type t by their YAML
// names ("embedded.path"), down to the fields that are not structs.
func yamlLeaves(t reflect.Type, prefix string) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		if f.Type.Kind() == reflect.Struct {
			out = append(out, yamlLeaves(f.Type, prefix+name+".")...)
		} else {
			out = append(out, prefix+name)
		}
	}
	return out
}

// changeField gives the field at path f of v (a struct) a different value.
func changeField(t *testing.T, v reflect.Value, f string) {
	t.Helper()
	for _, name := range strings.Split(f, ".") {
		i := slices.IndexFunc(slices.Collect(v.Type().Fields()), func(sf reflect.StructField) bool {
			n, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
			return n == name
		})
		if i < 0 {
			t.Fatalf("no field %s in %s", name, v.Type())
		}
		v = v.Field(i)
	}
	switch v.Kind() {
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Int, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
	default:
		t.Fatalf("%s: cannot change a %s", f, v.Type())
	}
}
