package analytics_test

import (
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
)

// TestErased: a link's erasure covers that link alone, in its tenant; a
// tenant's covers its links and its all-links total, not a tenant whose
// name starts the same, nor the default tenant's link of the same key;
// the latest erasure of a key decides.
func TestErased(t *testing.T) {
	t1 := monday.Add(time.Hour)
	t2 := t1.Add(time.Hour)
	s := analytics.NewErased([]analytics.Erasure{
		{Tenant: "acme", Key: "go", At: t1},
		{Tenant: "acme", At: t2},
		{Key: "gh", At: t1},
	})
	for _, c := range []struct {
		key  string
		end  time.Time // the bucket's end: a minute's
		want bool
	}{
		{"acme/go", t1, true},
		{"acme/go", t2, true}, // the tenant's, later
		{"acme/go", t2.Add(time.Minute), false},
		{"acme/x", t2, true},
		{"acme/", t2, true},
		{"acmex/go", t1, false},
		{"go", t1, false},
		{"gh", t1, true},
		{"gh", t1.Add(time.Minute), false},
		{"other/gh", t1, false},
		{analytics.AllLinks, t1, false},
	} {
		if got := s.Bucket(c.key, c.end.Add(-time.Minute), time.Minute); got != c.want {
			t.Errorf("Bucket(%q, ending %v) = %v, want %v", c.key, c.end.Sub(monday), got, c.want)
		}
	}
	b := analytics.Unerased(analytics.Batch{At: t2.Add(time.Second), Counts: []analytics.Count{
		{Key: "acme/go", Step: time.Minute, Start: t2.Add(-time.Minute), Visits: analytics.Visits{Human: 1}}, // ended by the tenant's erasure
		{Key: "acme/go", Step: time.Minute, Start: t2, Visits: analytics.Visits{Human: 1}},                   // after it
		{Key: "go", Step: time.Minute, Start: t1, Visits: analytics.Visits{Human: 1}},
	}}, s)
	if len(b.Counts) != 2 || !b.Counts[0].Start.Equal(t2) || b.Counts[1].Key != "go" {
		t.Errorf("Unerased kept %+v", b.Counts)
	}
	if b := analytics.Unerased(analytics.Batch{At: t1, Counts: []analytics.Count{{Key: "acme/x", Step: time.Minute, Start: t2}}}, s); len(b.Counts) != 0 {
		t.Errorf("a batch placed before the erasure kept %+v", b.Counts)
	}
}
