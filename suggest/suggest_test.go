package suggest_test

import (
	"testing"

	"github.com/linkgate/linkgate/suggest"
)

func TestClosest(t *testing.T) {
	params := []string{"last", "from", "to", "step", "stitch", "format"}
	fields := []string{"server", "admin", "upstream", "identity", "limiter", "rules", "analytics", "stats"}
	for _, tc := range []struct {
		name  string
		known []string
		want  string
	}{
		{"lst", params, "last"},
		{"LAST", params, "last"}, // case does not count
		{"fromm", params, "from"},
		{"stpe", params, "step"}, // a swap is two edits
		{"formt", params, "format"},
		{"servr", fields, "server"},
		{"rule", fields, "rules"},
		{"stat", fields, "stats"},
		{"limits", fields, "limiter"},
		{"xyz", params, ""}, // three edits from "to"
		{"upstreams_and_more", fields, ""},
		{"cache", fields, ""},
		{"q", nil, ""},
	} {
		if got := suggest.Closest(tc.name, tc.known...); got != tc.want {
			t.Errorf("Closest(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}
