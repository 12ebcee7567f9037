package limit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/limit"
)

// loadAddStore is a Memory reached through the Store interface alone, so
// that a check takes the general Load and Add path rather than Memory's
// own fast one.
type loadAddStore struct{ limit.Store }

// TestWindowsAllow: 3/m and 5/h for each value, on both paths a check can
// take. Three events pass and the fourth is refused (and not counted);
// another value counts apart; once the minute's events left its window,
// two more pass and the next is refused by the hour's limit.
func TestWindowsAllow(t *testing.T) {
	for _, st := range []struct {
		name  string
		store func(clock func() time.Time) limit.Store
	}{
		{"memory", func(c func() time.Time) limit.Store { return limit.NewMemoryAt(c) }},
		{"load and add", func(c func() time.Time) limit.Store { return loadAddStore{limit.NewMemoryAt(c)} }},
	} {
		t.Run(st.name, func(t *testing.T) {
			t0 := time.Date(2026, 3, 28, 10, 0, 0, 0, time.UTC)
			now := t0
			ws, err := limit.NewWindows("test/events", []limit.Limit{{N: 3, Window: time.Minute}, {N: 5, Window: time.Hour}}, st.store(func() time.Time { return now }))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for _, step := range []struct {
				at    time.Duration
				value string
				want  bool
			}{
				{0, "a", true}, {time.Second, "a", true}, {2 * time.Second, "a", true},
				{3 * time.Second, "a", false}, // the minute's fourth
				{3 * time.Second, "b", true},  // another value
				{62 * time.Second, "a", true}, // the first three left the minute: 4 in the hour, not 5
				{63 * time.Second, "a", true}, // 5 in the hour
				{64 * time.Second, "a", false},
				{64 * time.Second, "b", true},
			} {
				now = t0.Add(step.at)
				ok, err := ws.Allow(ctx, step.value, now)
				if err != nil || ok != step.want {
					t.Errorf("at +%v, %s: %v, %v; want %v", step.at, step.value, ok, err, step.want)
				}
			}
		})
	}
}

// TestWindowsShareAStore: two Windows of one name on one store (two
// gateways on one memcached) count together; one of another name counts
// apart.
func TestWindowsShareAStore(t *testing.T) {
	now := time.Date(2026, 3, 28, 10, 0, 0, 0, time.UTC)
	store := limit.NewMemoryAt(func() time.Time { return now })
	limits := []limit.Limit{{N: 2, Window: time.Minute}}
	a, _ := limit.NewWindows("test/shared", limits, store)
	b, _ := limit.NewWindows("test/shared", limits, store)
	other, _ := limit.NewWindows("test/other", limits, store)
	ctx := context.Background()
	a.Allow(ctx, "x", now)
	b.Allow(ctx, "x", now)
	if ok, _ := a.Allow(ctx, "x", now); ok {
		t.Errorf("a third event of x through either Windows of the name passed")
	}
	if ok, _ := other.Allow(ctx, "x", now); !ok {
		t.Errorf("the Windows of another name refused x's first event")
	}
}

// TestWindowsStoreError: an event checked against a store that fails is
// reported allowed with the store's error: the caller decides
// (failingStore is middleware_test.go's).
func TestWindowsStoreError(t *testing.T) {
	ws, err := limit.NewWindows("test/down", []limit.Limit{{N: 1, Window: time.Minute}}, &failingStore{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if ok, err := ws.Allow(context.Background(), "x", time.Now()); !ok || !errors.Is(err, errDown) {
			t.Fatalf("Allow on a failing store: %v, %v; want true and its error", ok, err)
		}
	}
}

// TestNewWindowsRefuses: no name, no limit, or a limit the buckets cannot
// count.
func TestNewWindowsRefuses(t *testing.T) {
	store := limit.NewMemory()
	for _, c := range []struct {
		name   string
		limits []limit.Limit
		want   string
	}{
		{"", []limit.Limit{{N: 1, Window: time.Minute}}, "no name"},
		{"w", nil, "no limit"},
		{"w", []limit.Limit{{N: 0, Window: time.Minute}}, "at least 1 per 1s"},
		{"w", []limit.Limit{{N: 1, Window: time.Millisecond}}, "at least 1 per 1s"},
		{"w", []limit.Limit{{N: 1, Window: limit.MaxWindow + time.Hour}}, "at least 1 per 1s"},
	} {
		if _, err := limit.NewWindows(c.name, c.limits, store); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewWindows(%q, %v): %v, want an error saying %q", c.name, c.limits, err, c.want)
		}
	}
}
