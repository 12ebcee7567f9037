package rollup_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/rollup"
)

func TestTotalTier(t *testing.T) {
	for _, c := range []struct {
		name  string
		tiers []rollup.Tier
		want  time.Duration // 0: an error
	}{
		{"default", rollup.DefaultTiers(), 52 * rollup.Week},
		{"a year of weeks", []rollup.Tier{{time.Minute, rollup.Day}, {rollup.Week, rollup.Year}}, 26 * rollup.Week},
		{"days only", []rollup.Tier{{time.Minute, rollup.Day}, {rollup.Day, 16 * rollup.Day}}, rollup.Week},
		{"days kept too briefly for weeks", []rollup.Tier{{time.Minute, rollup.Day}, {rollup.Day, 8 * rollup.Day}}, 0},
		{"two-week steps", []rollup.Tier{{2 * rollup.Week, 5 * rollup.Year}}, 52 * rollup.Week},
		{"minutes only", []rollup.Tier{{time.Minute, 2 * rollup.Day}}, rollup.Day},
		{"too short", []rollup.Tier{{time.Minute, 3 * time.Minute}}, 0},
		{"none", nil, 0},
	} {
		got, err := rollup.TotalTier(c.tiers)
		switch {
		case c.want == 0 && err == nil:
			t.Errorf("%s: TotalTier = %v, want an error", c.name, got)
		case c.want != 0 && (err != nil || got.Step != c.want || got.Expires()):
			t.Errorf("%s: TotalTier = %v, %v; want %v kept forever", c.name, got, err, rollup.FormatDuration(c.want))
		}
	}
}

// TestPlanBatches checks the batch periods of the default tiers and that
// every batch period is whole buckets of its tier and fits its source's
// retention.
func TestPlanBatches(t *testing.T) {
	p, err := rollup.NewPlan(rollup.DefaultTiers(), rollup.DefaultGrace)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, time.Hour, rollup.Day, rollup.Week, rollup.Week, 52 * rollup.Week}
	tiers := p.Tiers()
	if len(tiers) != len(want) || tiers[len(tiers)-1] != p.Total() {
		t.Fatalf("Tiers = %v, want the 5 default tiers and the all-time one", tiers)
	}
	for i := 1; i < len(tiers); i++ {
		if got := p.Batch(i); got != want[i] {
			t.Errorf("Batch(%d) of %v = %v, want %v", i, tiers[i], rollup.FormatDuration(got), rollup.FormatDuration(want[i]))
		}
		if p.Batch(i)%tiers[i].Step != 0 || p.Batch(i)+p.Grace() > tiers[i-1].Retention {
			t.Errorf("Batch(%d) = %v: not whole %v buckets, or longer than the source keeps", i, p.Batch(i), tiers[i].Step)
		}
	}
	if p.MarkPeriod() != time.Hour {
		t.Errorf("MarkPeriod = %v, want 1h", p.MarkPeriod())
	}
	// A grace the finest tier cannot wait out is refused, naming the tier.
	short := []rollup.Tier{{time.Minute, 2 * time.Hour}, {5 * time.Minute, rollup.Day}, {time.Hour, rollup.Week}}
	if _, err := rollup.NewPlan(short, 3*time.Hour); err == nil || !strings.Contains(err.Error(), "5m") {
		t.Errorf("NewPlan with a grace longer than the 1m tier keeps: %v", err)
	}
	if _, err := rollup.NewPlan(short, time.Minute); err != nil {
		t.Errorf("NewPlan(%v, 1m): %v", short, err)
	}
}

// TestLate checks Late against its definition at the edges: a count of a
// minute is late once its hour ended half the grace ago.
func TestLate(t *testing.T) {
	p, err := rollup.NewPlan(rollup.DefaultTiers(), 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	m := time.Date(2026, 11, 23, 9, 59, 0, 0, time.UTC) // the hour's last minute
	for _, c := range []struct {
		at   time.Time
		want bool
	}{
		{m.Add(30 * time.Second), false},
		{m.Add(time.Minute + 5*time.Minute - time.Nanosecond), false},
		{m.Add(time.Minute + 5*time.Minute), true},
		{m.Add(3 * time.Hour), true},
	} {
		if got := p.Late(0, m, c.at); got != c.want {
			t.Errorf("Late(1m, %v, %v) = %v, want %v", m.Format("15:04"), c.at.Format("15:04:05.999"), got, c.want)
		}
	}
	if p.Late(len(p.Tiers())-1, m, m.Add(100*rollup.Year)) {
		t.Error("the all-time tier is never late: nothing is rolled from it")
	}
}

// TestPlace checks Place against a brute-force reading of its contract for
// random counts: the tier chosen keeps the bucket until its roll into the
// next (its period's, or the marks period's after at), and no finer tier
// does.
func TestPlace(t *testing.T) {
	p, err := rollup.NewPlan(rollup.DefaultTiers(), rollup.DefaultGrace)
	if err != nil {
		t.Fatal(err)
	}
	tiers := p.Tiers()
	now := time.Date(2026, 11, 23, 10, 17, 42, 0, time.UTC)
	keeps := func(j int, start, at time.Time) bool {
		if j == len(tiers)-1 {
			return true
		}
		expires := rollup.Align(start, tiers[j].Step).Add(tiers[j].Step + tiers[j].Retention)
		roll := p.Period(j+1, start).Add(p.Batch(j + 1))
		if m := rollup.Align(at, p.MarkPeriod()).Add(2 * p.MarkPeriod()); m.After(roll) {
			roll = m
		}
		return !roll.Add(p.Grace()).After(expires)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10_000 {
		age := time.Duration(rng.Int64N(int64(8 * rollup.Year)))
		start := rollup.Align(now.Add(-age), time.Minute)
		got := p.Place(0, start, now)
		if !keeps(got, start, now) {
			t.Fatalf("Place(%v old) = tier %v, which drops it before it is rolled", age, tiers[got])
		}
		for j := range got {
			if keeps(j, start, now) {
				t.Fatalf("Place(%v old) = tier %v, but the finer %v keeps it long enough", age, tiers[got], tiers[j])
			}
		}
	}
	if got := p.Place(0, now.Add(-time.Minute), now); got != 0 {
		t.Errorf("a count of the last minute goes to tier %d, want the finest", got)
	}
	if got := p.Place(0, now.AddDate(-20, 0, 0), now); got != len(tiers)-1 {
		t.Errorf("a count 20 years old goes to tier %d, want the all-time tier", got)
	}
}

func TestTierForever(t *testing.T) {
	total, _ := rollup.TotalTier(rollup.DefaultTiers())
	if total.Expires() || rollup.DefaultTiers()[0].Expires() == false {
		t.Error("Expires: want the all-time tier kept forever and the others expiring")
	}
	if got := total.String(); got != "52w:forever" {
		t.Errorf("String() = %q", got)
	}
}
