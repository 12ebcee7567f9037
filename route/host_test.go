package route_test

import (
	"strings"
	"testing"

	"github.com/linkgate/linkgate/route"
)

func TestHostsLookup(t *testing.T) {
	var h route.Hosts[string]
	for p, v := range map[string]string{
		"sho.rt":            "own",
		"WWW.Sho.RT.":       "own-www",
		"*.links.example":   "links",
		"vip.links.example": "vip",
		"10.0.0.5":          "ip4",
		"[::1]":             "ip6",
		"bücher.example":    "idn",
	} {
		if err := h.Add(p, v); err != nil {
			t.Fatalf("Add(%q): %v", p, err)
		}
	}
	tests := []struct {
		host, want string // "" : no match
	}{
		{"sho.rt", "own"},
		{"sho.rt:443", "own"},
		{"SHO.rt:8080", "own"},
		{"sho.rt.", "own"},
		{"www.sho.rt", "own-www"},
		{"other.sho.rt", ""}, // no wildcard for sho.rt
		{"a.links.example", "links"},
		{"A.Links.Example:443", "links"},
		{"vip.links.example", "vip"}, // the exact name wins over the wildcard
		{"links.example", ""},        // a wildcard needs one label more
		{"a.b.links.example", ""},    // and only one
		{".links.example", ""},
		{"10.0.0.5", "ip4"},
		{"10.0.0.5:80", "ip4"},
		{"[::1]:8080", "ip6"},
		{"[::1]", "ip6"},
		{"xn--bcher-kva.example", "idn"},
		{"bücher.example", ""}, // a request's host is compared as sent: ASCII only
		{"", ""},
		{":443", ""},
		{"evil.com#sho.rt", ""},
	}
	for _, tt := range tests {
		got, ok := h.Lookup(tt.host)
		if ok != (tt.want != "") || got != tt.want {
			t.Errorf("Lookup(%q) = %q, %v; want %q", tt.host, got, ok, tt.want)
		}
	}
	var empty route.Hosts[int]
	if empty.Match("sho.rt") {
		t.Error("an empty Hosts matched")
	}
	var nilHosts *route.Hosts[int]
	if nilHosts.Match("sho.rt") {
		t.Error("a nil Hosts matched")
	}
}

func TestHostsAddRefuses(t *testing.T) {
	for _, p := range []string{"", "*", "*.", "*.*.x", "a.*.example", "sho.rt/path", "sho.rt:443", "user@sho.rt", "10.0.0", "*.0.0.1", "a..b", "-a.example", "fe80::1%eth0"} {
		var h route.Hosts[int]
		if err := h.Add(p, 1); err == nil {
			t.Errorf("Add(%q) accepted", p)
		} else if !strings.Contains(err.Error(), "not") {
			t.Errorf("Add(%q): %v; want it to say what the pattern is not", p, err)
		}
	}
	var h route.Hosts[int]
	h.Add("sho.rt", 1)
	if err := h.Add("SHO.rt.", 2); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("a name listed twice: %v", err)
	}
	h.Add("*.sho.rt", 3) // a wildcard beside the exact name is no duplicate
	if err := h.Add("*.Sho.rt", 4); err == nil {
		t.Error("a wildcard listed twice was accepted")
	}
}

// TestRequestHostAllocs: a lower-case host costs no allocation.
func TestRequestHostAllocs(t *testing.T) {
	var h route.Hosts[int]
	h.Add("*.links.example", 1)
	h.Add("sho.rt", 2)
	if n := testing.AllocsPerRun(100, func() {
		h.Lookup("a.links.example:443")
		h.Lookup("sho.rt")
		h.Lookup("unknown.example")
	}); n != 0 {
		t.Errorf("%v allocations per lookup of lower-case hosts, want 0", n)
	}
}

func FuzzRequestHost(f *testing.F) {
	for _, s := range []string{"sho.rt:443", "[::1]:80", "::1", "A.B.", "[", "]", ":", "[]:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h := route.RequestHost(s)
		if len(h) > len(s) {
			t.Errorf("RequestHost(%q) = %q: longer", s, h)
		}
		if strings.ContainsAny(h, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			t.Errorf("RequestHost(%q) = %q: not lower-case", s, h)
		}
	})
}
