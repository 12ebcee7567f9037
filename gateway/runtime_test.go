package gateway_test

import (
	"math"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/linkgate/linkgate/config"
	"github.com/linkgate/linkgate/gateway"
	"github.com/linkgate/linkgate/internal/testkit"
)

// TestRuntimeSettings: the garbage collector is set from the runtime
// section at start and again on reload, and values it cannot mean are
// refused by the compile every start and reload runs.
func TestRuntimeSettings(t *testing.T) {
	gcPercent := func() int { p := debug.SetGCPercent(100); debug.SetGCPercent(p); return p }
	memLimit := func() int64 { return debug.SetMemoryLimit(-1) } // a negative limit only reads it
	defer debug.SetGCPercent(gcPercent())
	defer debug.SetMemoryLimit(memLimit())

	a := testkit.Named(t, "A")
	gw := start(t, testkit.BaseConfig(a.URL))
	if got := gcPercent(); got != config.DefaultGOGC {
		t.Errorf("GOGC at start = %d, want the default %d", got, config.DefaultGOGC)
	}
	if got := memLimit(); got != math.MaxInt64 {
		t.Errorf("memory limit at start = %d, want none", got)
	}
	testkit.WriteFile(t, gw.path, testkit.BaseConfig(a.URL)+"runtime: {gogc: 150, memory_limit: 536870912}\n")
	if resp, msg := reloadEndpoint(t, gw); resp.StatusCode != 200 {
		t.Fatalf("reload: %d %s", resp.StatusCode, msg)
	}
	if p, l := gcPercent(), memLimit(); p != 150 || l != 512<<20 {
		t.Errorf("after reload GOGC %d, memory limit %d; want 150 and %d", p, l, 512<<20)
	}

	for _, tc := range []struct{ yaml, field string }{
		{"runtime: {gogc: -2}", "runtime.gogc"},
		{"runtime: {gogc: -1}", "runtime.gogc"}, // off without a limit
		{"runtime: {memory_limit: -1}", "runtime.memory_limit"},
		{"runtime: {memory_limit: 1048576}", "runtime.memory_limit"},       // a gateway cannot run in 1 MiB
		{"runtime: {memory_limit: 134217727}", "runtime.memory_limit"},     // a byte under the floor
		{"runtime: {memory_limit: 2000000000000}", "runtime.memory_limit"}, // a typo
	} {
		cfg, err := config.Parse([]byte(testkit.BaseConfig(a.URL) + tc.yaml + "\n"))
		if err != nil {
			t.Fatalf("%s: %v", tc.yaml, err)
		}
		_, err = gateway.Compile(cfg, getenv)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: Compile error %v, want one naming %s", tc.yaml, err, tc.field)
		}
		if tc.field == "runtime.memory_limit" && !strings.Contains(err.Error(), "134217728 to 1099511627776 (128 MiB to 1 TiB)") {
			t.Errorf("%s: %v, want the range named", tc.yaml, err)
		}
	}
	for _, ok := range []string{"{gogc: -1, memory_limit: 1073741824}", "{memory_limit: 134217728}", "{memory_limit: 1099511627776}"} {
		cfg, err := config.Parse([]byte(testkit.BaseConfig(a.URL) + "runtime: " + ok + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gateway.Compile(cfg, getenv); err != nil {
			t.Errorf("runtime: %s: %v", ok, err)
		}
	}
}
