package analytics_test

import (
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

func TestRollupGrace(t *testing.T) {
	c := analytics.DefaultConfig()
	if _, err := analytics.Compile(c); err != nil || c.RollupGrace != rollup.DefaultGrace || c.Grace() != 5*time.Minute {
		t.Fatalf("defaults: grace %v in force %v, %v; want 5m", c.RollupGrace, c.Grace(), err)
	}
	// A long flush interval raises the grace in force: a flush may take
	// three intervals to land, and is late after half the grace.
	c.FlushInterval = time.Hour
	if _, err := analytics.Compile(c); err != nil || c.Grace() != 6*time.Hour {
		t.Errorf("flush_interval 1h: grace in force %v, %v; want 6h", c.Grace(), err)
	}
	for _, bad := range []struct {
		name   string
		mutate func(*analytics.Config)
		field  string
	}{
		{"zero grace", func(c *analytics.Config) { c.RollupGrace = 0 }, "analytics.rollup_grace"},
		{"grace beyond what the minutes are kept", func(c *analytics.Config) {
			c.RollupGrace = 24 * time.Hour // the longest grace; the minutes kept 12h
			c.Retention = append([]rollup.Tier{{Step: time.Minute, Retention: 12 * time.Hour}}, c.Retention[1:]...)
		}, "analytics.retention"},
		{"no tier to roll all-time totals from", func(c *analytics.Config) {
			c.Retention = []rollup.Tier{{Step: time.Minute, Retention: 3 * time.Minute}}
		}, "analytics.retention"},
	} {
		c := analytics.DefaultConfig()
		bad.mutate(&c)
		_, err := analytics.Compile(c)
		if err == nil || !strings.HasPrefix(err.Error(), bad.field) {
			t.Errorf("%s: Compile = %v, want an error naming %s", bad.name, err, bad.field)
		}
	}
}

// TestJournalConfig: the journal's settings are checked by Compile, each
// error naming its field.
func TestJournalConfig(t *testing.T) {
	if c := analytics.DefaultConfig(); c.Journal.MaxBytes != 256<<20 || c.Journal.Path != "" {
		t.Errorf("journal defaults %+v, want 256 MiB beside the embedded store", c.Journal)
	}
	for _, bad := range []struct {
		name   string
		mutate func(*analytics.Config)
		field  string
	}{
		{"no cap", func(c *analytics.Config) { c.Journal.MaxBytes = 0 }, "analytics.journal.max_bytes: 0 is less than"},
		{"tiny cap", func(c *analytics.Config) { c.Journal.MaxBytes = 64 << 10 }, "analytics.journal.max_bytes"},
		{"blank path", func(c *analytics.Config) { c.Journal.Path = "  " }, "analytics.journal.path: blank"},
		{"the store's own folder", func(c *analytics.Config) { c.Journal.Path = c.Embedded.Path + "/" }, "analytics.journal.path"},
	} {
		c := analytics.DefaultConfig()
		bad.mutate(&c)
		_, err := analytics.Compile(c)
		if err == nil || !strings.HasPrefix(err.Error(), bad.field) {
			t.Errorf("%s: Compile = %v, want an error starting %q", bad.name, err, bad.field)
		}
	}
	c := analytics.DefaultConfig()
	c.Journal = analytics.JournalConfig{Path: "/var/spool/linkgate", MaxBytes: 1 << 20}
	if _, err := analytics.Compile(c); err != nil {
		t.Errorf("a journal of 1 MiB elsewhere: %v", err)
	}
}
