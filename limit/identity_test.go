package limit

import (
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/forwarded"
)

func testIdentifier(t testing.TB) *identifier {
	tr, err := forwarded.Parse([]string{"10.0.0.0/8", "2001:db8:ffff::/48", "::ffff:192.168.0.0/112"})
	if err != nil {
		t.Fatal(err)
	}
	return &identifier{trust: tr, ipv6Prefix: 64}
}

// TestIPValue checks the counter value of a client: who the client is is
// forwarded's to decide (its tests cover the headers); the limiter groups
// IPv6 clients by identity.ipv6_prefix.
func TestIPValue(t *testing.T) {
	id := testIdentifier(t)
	for _, tc := range []struct {
		name, peer, xff, want string
	}{
		{"ipv4", "203.0.113.5:1234", "", "203.0.113.5"},
		{"ipv6 grouped by /64", "[2001:db8:1:2:3:4:5:6]:9", "", "2001:db8:1:2::/64"},
		{"ipv6 zone dropped", "[fe80::1%eth0]:9", "", "fe80::/64"},
		{"ipv4-mapped unmapped", "[::ffff:203.0.113.9]:9", "", "203.0.113.9"},
		{"forwarded ipv6 client grouped", "10.1.1.1:80", "[2001:db8:1:2::9]:443", "2001:db8:1:2::/64"},
		{"ipv4-mapped trusted prefix", "[::ffff:192.168.3.4]:9", "::ffff:198.51.100.4", "198.51.100.4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tc.peer
			if tc.xff != "" {
				r.Header.Set("X-Forwarded-For", tc.xff)
			}
			c, ok := id.trust.Client(r)
			if !ok {
				t.Fatal("no address")
			}
			if got := id.ipValue(c.Addr); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestNormalizeIP(t *testing.T) {
	id := testIdentifier(t)
	for in, want := range map[string]string{
		"203.0.113.7":          "203.0.113.7",
		" 2001:db8:1:2::77 ":   "2001:db8:1:2::/64",
		"2001:db8:1:2::/64":    "2001:db8:1:2::/64",
		"2001:db8:1:2:ff::/80": "2001:db8:1:2::/64",
		"::ffff:10.0.0.1":      "10.0.0.1",
	} {
		if got, ok := id.normalizeIP(in); !ok || got != want {
			t.Errorf("normalizeIP(%q) = %q, %v, want %q", in, got, ok, want)
		}
	}
	if _, ok := id.normalizeIP("nope"); ok {
		t.Error("normalizeIP accepted nope")
	}
}

// FuzzIdentity checks that address extraction never panics and always
// yields a normalized value: an IPv4 address or an IPv6 /64, parseable,
// unmapped, without zone.
func FuzzIdentity(f *testing.F) {
	f.Add("10.1.1.1:80", "6.6.6.6, 198.51.100.1, 10.2.2.2", "")
	f.Add("[::ffff:10.0.0.1]:1", "[2001:db8::1]:80,,", "1.2.3.4")
	f.Add("garbage", "", "")
	f.Add("10.0.0.1:1", ",,,  ,\x00", "fe80::1%eth0")
	id := testIdentifier(f)
	f.Fuzz(func(t *testing.T, peer, xff, realIP string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = peer
		if xff != "" {
			r.Header["X-Forwarded-For"] = strings.Split(xff, "\n")
		}
		if realIP != "" {
			r.Header["X-Real-Ip"] = []string{realIP}
		}
		c, ok := id.trust.Client(r)
		if !ok {
			return
		}
		a := c.Addr
		if a.Zone() != "" || a.Is4In6() {
			t.Fatalf("address %v not normalized", a)
		}
		v := id.ipValue(a)
		if a.Is4() {
			if b, err := netip.ParseAddr(v); err != nil || b != a {
				t.Fatalf("IPv4 value %q for %v", v, a)
			}
			return
		}
		pf, err := netip.ParsePrefix(v)
		if err != nil || pf.Bits() != 64 || pf.Masked() != pf || !pf.Contains(a) {
			t.Fatalf("IPv6 value %q for %v", v, a)
		}
		if v2, ok := id.normalizeIP(v); !ok || v2 != v {
			t.Fatalf("normalizeIP(%q) = %q: not idempotent", v, v2)
		}
	})
}

// FuzzParseLimit checks that ParseLimit never panics and that what it
// accepts prints back to the same limit.
func FuzzParseLimit(f *testing.F) {
	for _, s := range []string{"5/m", "100/15m", "2/s", "10/7d", "0/s", "1/0m", "-1/h", "9223372036854775807/1s", "1/99999999999d", " 3/h ", "3/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLimit(s)
		if err != nil {
			return
		}
		if l.N <= 0 || l.Window <= 0 || l.Window > MaxWindow || l.Window%time.Second != 0 {
			t.Fatalf("ParseLimit(%q) = %+v: out of range", s, l)
		}
		l2, err := ParseLimit(l.String())
		if err != nil || l2 != l {
			t.Fatalf("ParseLimit(%q).String() = %q reparses to %+v, %v", s, l.String(), l2, err)
		}
		// Every valid limit gets a plan and a policy name.
		p := newBucketPlan([]Limit{l}, Bucketed)
		if n := p.lv[p.lim[0].level].n; n < 1 || n > 168 {
			t.Fatalf("%v reads %d buckets", l, n)
		}
		if windowName(l.Window) == "" {
			t.Fatal("empty window name")
		}
	})
}
