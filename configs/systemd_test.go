package configs_test

import (
	"bufio"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/config"
)

// TestSystemdUnit checks linkgate.service against what docs/operations.md
// says a binary upgrade needs of it: systemd told of readiness by the new
// process too, SIGTERM to every process of the unit, a stop timeout that
// covers the drain and the final flush of the example config, and
// ExecReload as SIGHUP.
func TestSystemdUnit(t *testing.T) {
	f, err := os.Open("linkgate.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	unit := map[string]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#':
		case line[0] == '[':
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Errorf("a line that is not key=value: %q", line)
			}
			unit[section+"."+k] = v
		}
	}
	for key, want := range map[string]string{
		"Service.Type":         "notify",
		"Service.NotifyAccess": "all",
		"Service.KillMode":     "control-group",
		"Service.ExecReload":   "/bin/kill -HUP $MAINPID",
	} {
		if unit[key] != want {
			t.Errorf("%s = %q, want %q", key, unit[key], want)
		}
	}
	if !strings.Contains(unit["Service.ExecStart"], "-config /etc/linkgate/gateway.yaml") {
		t.Errorf("ExecStart = %q, want the config of the docs", unit["Service.ExecStart"])
	}
	stop, err := time.ParseDuration(unit["Service.TimeoutStopSec"])
	if err != nil {
		t.Fatalf("TimeoutStopSec: %v", err)
	}
	cfg, err := config.Load("gateway.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.Server.ShutdownTimeout; stop <= 2*d {
		t.Errorf("TimeoutStopSec = %v, want more than twice server.shutdown_timeout (%v): the drain, then the final flush", stop, d)
	}
}
