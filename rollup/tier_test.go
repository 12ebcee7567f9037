package rollup_test

import (
	"testing"
	"time"

	"github.com/linkgate/linkgate/rollup"
)

func TestAlignWeekStartsMonday(t *testing.T) {
	for d := 0; d < 800; d++ {
		ts := time.Date(2026, 1, 1, 13, 7, 0, 0, time.UTC).Add(time.Duration(d) * rollup.Day)
		got := rollup.Align(ts, rollup.Week)
		if got.Weekday() != time.Monday || got.Hour() != 0 || got.Minute() != 0 || ts.Sub(got) >= rollup.Week || ts.Before(got) {
			t.Fatalf("Align(%v, week) = %v", ts, got)
		}
	}
	ts := time.Date(2026, 11, 22, 23, 59, 0, 0, time.FixedZone("X", 5*3600))
	if got, want := rollup.Align(ts, rollup.Day), time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC); !got.Equal(want) || got.Location() != time.UTC {
		t.Errorf("Align(%v, day) = %v, want %v UTC", ts, got, want)
	}
}

func TestParseTier(t *testing.T) {
	good := map[string]rollup.Tier{
		"1m:2d": {time.Minute, 2 * rollup.Day}, "5m:8d": {5 * time.Minute, 8 * rollup.Day},
		"1h:40d": {time.Hour, 40 * rollup.Day}, "1d:400d": {rollup.Day, 400 * rollup.Day}, "1w:5y": {rollup.Week, 5 * rollup.Year},
	}
	for s, want := range good {
		got, err := rollup.ParseTier(s)
		if err != nil || got != want || got.String() != s {
			t.Errorf("ParseTier(%q) = %v (%s), %v; want %v", s, got, got, err, want)
		}
	}
	for _, s := range []string{"", "1m", "1m:", ":2d", "30s:2d", "7m:2d", "2d:8d", "1h:30m", "0m:1d", "-1m:2d", "1x:2d", "1m:2q", "1w:293y", "1w:4294967295y", "1d:15251w"} {
		if got, err := rollup.ParseTier(s); err == nil {
			t.Errorf("ParseTier(%q) = %v, want error", s, got)
		}
	}
	if err := rollup.ValidateTiers(rollup.DefaultTiers()); err != nil {
		t.Errorf("default tiers: %v", err)
	}
}
