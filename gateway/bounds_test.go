package gateway_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/gateway"
	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/tenant"
)

// TestBoundsCoverEveryDurationAndSize: every duration of the file and
// every size or count it caps (a max_* number) has a bound in the compile
// step: a field added without one fails here.
func TestBoundsCoverEveryDurationAndSize(t *testing.T) {
	bounded := map[string]bool{}
	for _, b := range gateway.Bounds() {
		bounded[b.Field] = true
	}
	c := config.Default()
	c.Rules = make([]limit.Rule, 1)
	c.Routes = make([]config.Route, 1)
	c.Tenants = make([]tenant.Config, 1)
	cfg := reflect.ValueOf(c).Elem()
	var missing []string
	for _, f := range configFields() {
		v := field(t, cfg, f)
		last := f[strings.LastIndex(f, ".")+1:]
		isDuration := v.Type() == reflect.TypeFor[time.Duration]()
		isCap := v.Kind() >= reflect.Int && v.Kind() <= reflect.Int64 && strings.HasPrefix(last, "max_")
		if (isDuration || isCap) && !bounded[f] {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		t.Errorf("no bound in the compile step of its section for %s", strings.Join(missing, ", "))
	}
}

// setField returns the smallest file that compiles with the field at path
// set to the YAML value v.
func setField(t *testing.T, path, v string) []byte {
	t.Helper()
	doc := docFor(path)
	m, name := parent(doc, path)
	var val any
	if err := yaml.Unmarshal([]byte(v), &val); err != nil {
		t.Fatal(err)
	}
	m[name] = val
	data, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestBoundsRefused: every duration and size just outside its range is
// refused by the compile step with an error naming the field, its line and
// the range (1ns health checks, a two-terabyte header limit), and every
// value at the edges of the range is accepted and builds a gateway.
func TestBoundsRefused(t *testing.T) {
	t.Parallel()
	for _, b := range gateway.Bounds() {
		t.Run(b.Field, func(t *testing.T) {
			bad := []int64{b.Max + 1, 2_000_000_000_000}
			if b.Min > 1 || !b.Zero {
				bad = append(bad, b.Min-1)
			}
			if b.Duration {
				bad = append(bad, 1) // 1ns
			}
			for _, v := range bad {
				if v == 0 && b.Zero || v >= b.Min && v <= b.Max {
					continue
				}
				cfg, err := config.Parse(setField(t, b.Field, b.YAML(v)))
				if err != nil {
					t.Fatalf("%s: %s: %v", b.Field, b.YAML(v), err)
				}
				_, err = gateway.Compile(cfg, getenv)
				var ce *config.Error
				if !errors.As(err, &ce) || ce.Path != strings.ReplaceAll(b.Field, "[]", "[0]") || ce.Line == 0 ||
					!strings.Contains(err.Error(), b.MinS+" to "+b.MaxS) {
					t.Errorf("%s: %s: %v; want an error naming the field, its line and the range %s to %s", b.Field, b.YAML(v), err, b.MinS, b.MaxS)
				}
			}
			good := []int64{b.Min, b.Max}
			if b.Zero {
				good = append(good, 0)
			}
			for _, v := range good {
				cfg, err := config.Parse(setField(t, b.Field, b.YAML(v)))
				if err != nil {
					t.Fatal(err)
				}
				// Analytics are built only for their own fields, on a store
				// in a folder of the test's.
				cfg.Analytics.Enabled = strings.HasPrefix(b.Field, "analytics.")
				cfg.Analytics.Embedded.Path = filepath.Join(t.TempDir(), "analytics")
				plan, err := gateway.Compile(cfg, getenv)
				if err != nil {
					t.Errorf("%s: %s refused: %v", b.Field, b.YAML(v), err)
					continue
				}
				g, err := gateway.New(plan, gateway.Options{})
				if err != nil {
					t.Errorf("%s: %s compiled but did not build: %v", b.Field, b.YAML(v), err)
					continue
				}
				g.Close(context.Background())
			}
		})
	}
}

// TestDocBounds: the configuration table of docs/configuration.md gives the range of
// every bounded field as the compile step has it: "`100ms` to `1h`", and
// "`0s`" where 0 (none) is accepted too.
func TestDocBounds(t *testing.T) {
	rows := docTable(t, "configuration.md", configTableHeader)
	for _, b := range gateway.Bounds() {
		i := slices.IndexFunc(rows, func(r []string) bool { return r[0] == "`"+b.Field+"`" })
		if i < 0 {
			t.Errorf("docs/configuration.md: no row for %s", b.Field)
			continue
		}
		meaning := rows[i][len(rows[i])-1]
		if want := "`" + b.MinS + "` to `" + b.MaxS + "`"; !strings.Contains(meaning, want) {
			t.Errorf("docs/configuration.md: the row of %s does not give its range %s: %q", b.Field, want, meaning)
		}
		zero := "`0`"
		if b.Duration {
			zero = "`0s`"
		}
		if b.Zero && !strings.Contains(meaning, zero) {
			t.Errorf("docs/configuration.md: the row of %s does not say what %s means: %q", b.Field, zero, meaning)
		}
	}
}
