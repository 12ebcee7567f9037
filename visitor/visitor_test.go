package visitor_test

import (
	"fmt"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/visitor"
	"github.com/linkgate/linkgate/visitor/visitortest"
)

const (
	chromeWindows = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36"
	safariIPhone  = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1"
	firefoxLinux  = "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0"
	safariIPad    = "Mozilla/5.0 (iPad; CPU OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1"
	googlebot     = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
)

func geo(t testing.TB, layout visitortest.Layout) *visitor.GeoIP {
	t.Helper()
	path := visitortest.CountryDB(t, layout, map[string]string{
		"203.0.113.0/24": "DE", "198.51.100.0/24": "FR", "2001:db8::/32": "JP", "127.0.0.0/8": "NL",
	})
	g, err := visitor.OpenGeoIP(path)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestReferrerDomain(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "direct"},
		{"not a url", "direct"},
		{"https://news.example/a/b?c=d", "news.example"},
		{"https://www.News.Example:8443/", "news.example"},
		{"http://user:pw@blog.example.org#frag", "blog.example.org"},
		{"https://[2001:db8::1]:443/x", "[2001:db8::1]"},
		{"android-app://com.google.android.gm/", "com.google.android.gm"},
		{"https://", "direct"},
		{"https://www./", "www"},
		{"https://a,b\"c.example/", "abc.example"},
	} {
		if got := visitor.ReferrerDomain(tc.in); got != tc.want {
			t.Errorf("ReferrerDomain(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	long := "https://" + string(make([]byte, 0)) + repeat("a", 300) + ".example/"
	if got := visitor.ReferrerDomain(long); len(got) != visitor.MaxValueBytes {
		t.Errorf("a 300-byte host gave %d bytes, want it cut to %d", len(got), visitor.MaxValueBytes)
	}
}

func repeat(s string, n int) string {
	b := make([]byte, 0, n*len(s))
	for range n {
		b = append(b, s...)
	}
	return string(b)
}

func TestRead(t *testing.T) {
	trust, err := forwarded.Parse([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	rd := visitor.New(visitor.Options{Trust: trust, GeoIP: geo(t, visitortest.GeoLite2), SourceParams: []string{"utm_source", "src"}})
	for _, tc := range []struct {
		name, target, peer, xff, referer, ua string
		bot                                  bool
		want                                 visitor.Features
	}{
		{"direct desktop from Germany", "/k", "203.0.113.9:1", "", "", chromeWindows, false,
			visitor.Features{"direct", "direct", "DE", "desktop", "Chrome", "Windows"}},
		{"referrer and iPhone", "/k", "198.51.100.1:1", "", "https://www.news.example/x", safariIPhone, false,
			visitor.Features{"news.example", "news.example", "FR", "mobile", "Safari", "iOS"}},
		{"utm_source wins for source", "/k?utm_source=Newsletter&x=1", "[2001:db8::5]:1", "", "https://mail.example/", firefoxLinux, false,
			visitor.Features{"mail.example", "newsletter", "JP", "desktop", "Firefox", "Linux"}},
		{"src=qr", "/k?src=qr", "192.0.2.1:1", "", "", safariIPad, false,
			visitor.Features{"direct", "qr", "unknown", "tablet", "Safari", "iOS"}},
		{"escaped source", "/k?src=&utm_source=a%20b+c", "192.0.2.1:1", "", "", "", false,
			visitor.Features{"direct", "a b c", "unknown", "other", "other", "other"}},
		{"a campaign's utm parameters", "/k?utm_source=news&utm_medium=Email&utm_campaign=spring%20sale&utm_term=&utm_content=hero;x=1", "192.0.2.1:1", "", "", chromeWindows, false,
			visitor.Features{"direct", "news", "unknown", "desktop", "Chrome", "Windows", "", "email", "spring sale", "", "hero"}},
		{"client through a trusted proxy", "/k", "127.0.0.1:1", "198.51.100.7", "", googlebot, false,
			visitor.Features{"direct", "direct", "FR", "bot", "other", "other"}},
		{"forged X-Forwarded-For from an untrusted peer", "/k", "203.0.113.1:1", "198.51.100.7", "", chromeWindows, true,
			visitor.Features{"direct", "direct", "DE", "bot", "Chrome", "Windows"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", tc.target, nil)
			r.RemoteAddr = tc.peer
			if tc.xff != "" {
				r.Header.Set("X-Forwarded-For", tc.xff)
			}
			if tc.referer != "" {
				r.Header.Set("Referer", tc.referer)
			}
			r.Header.Set("User-Agent", tc.ua)
			for round := range 2 { // parsed, then cached
				var f visitor.Features
				rd.Read(r, tc.bot, &f)
				if f != tc.want {
					t.Errorf("round %d: got %q, want %q", round, f, tc.want)
				}
			}
		})
	}
}

func TestCountryOff(t *testing.T) {
	rd := visitor.New(visitor.Options{})
	r := httptest.NewRequest("GET", "/k", nil)
	var f visitor.Features
	rd.Read(r, false, &f)
	if f[visitor.Country] != "" {
		t.Errorf("without a database the country is %q, want \"\" (off)", f[visitor.Country])
	}
}

func TestGeoIPLayouts(t *testing.T) {
	for _, l := range []visitortest.Layout{visitortest.GeoLite2, visitortest.IPLocationDB} {
		g := geo(t, l)
		for addr, want := range map[string]string{"203.0.113.200": "DE", "::ffff:198.51.100.3": "FR", "2001:db8:1::1": "JP", "8.8.8.8": "unknown", "127.0.0.1": "NL"} {
			for range 2 {
				if got := g.Country(netip.MustParseAddr(addr)); got != want {
					t.Errorf("layout %d: Country(%s) = %q, want %q", l, addr, got, want)
				}
			}
		}
	}
}

func TestOpenGeoIPRefusesGarbage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.mmdb")
	os.WriteFile(path, []byte("not a database"), 0o644)
	if _, err := visitor.OpenGeoIP(path); err == nil {
		t.Error("OpenGeoIP accepted a file that is not a MaxMind DB")
	}
	if _, err := visitor.OpenGeoIP(filepath.Join(t.TempDir(), "missing.mmdb")); err == nil {
		t.Error("OpenGeoIP accepted a missing file")
	}
}

func TestDestinationOf(t *testing.T) {
	long := "https://example.com/" + strings.Repeat("é", 60)
	for in, want := range map[string]string{
		"":                              "",
		" https://Go.dev/Blog?a=1 ":     "https://Go.dev/Blog?a=1",
		"https://x.example/a,b\"c\r\nd": "https://x.example/abcd",
		long:                            long[:len("https://example.com/")+80],
	} {
		if got := visitor.DestinationOf(in); got != want {
			t.Errorf("DestinationOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseDim(t *testing.T) {
	names, dims := visitor.Names(), visitor.Dims()
	if len(names) != len(dims) || len(dims) != int(visitor.NumDims)-1 {
		t.Fatalf("%d names, %d dims, want %d each", len(names), len(dims), visitor.NumDims-1)
	}
	for i, n := range names {
		d, ok := visitor.ParseDim(n)
		if !ok || d != dims[i] || d.String() != n {
			t.Errorf("ParseDim(%q) = %v, %v", n, d, ok)
		}
	}
	for _, n := range []string{"city", ""} {
		if _, ok := visitor.ParseDim(n); ok {
			t.Errorf("ParseDim(%q) succeeded", n)
		}
	}
	// The numbers are stored: they never change.
	for d, want := range map[visitor.Dim]uint8{visitor.Referrer: 0, visitor.OS: 5, visitor.Links: 6, visitor.Medium: 7, visitor.Content: 10, visitor.Class: 11, visitor.Reason: 12, visitor.Destination: 13} {
		if uint8(d) != want {
			t.Errorf("%v is %d, was %d", d, d, want)
		}
	}
}

// TestUACacheBounded: a flood of made-up User-Agents keeps the cache
// within its size and still answers each right.
func TestUACacheBounded(t *testing.T) {
	rd := visitor.New(visitor.Options{UACacheSize: 64})
	r := httptest.NewRequest("GET", "/k", nil)
	for i := range 5000 {
		r.Header.Set("User-Agent", strings.Replace(chromeWindows, "120.0.0.0", fmt.Sprintf("120.0.%d.0", i), 1))
		var f visitor.Features
		rd.Read(r, false, &f)
		if f[visitor.Browser] != "Chrome" || f[visitor.Device] != "desktop" {
			t.Fatalf("visit %d: %q", i, f)
		}
	}
}

// BenchmarkRead is the per-visit cost of reading the features with a warm
// User-Agent cache and a country lookup: it must not allocate.
func BenchmarkRead(b *testing.B) {
	trust, _ := forwarded.Parse([]string{"127.0.0.1"})
	rd := visitor.New(visitor.Options{Trust: trust, GeoIP: geo(b, visitortest.GeoLite2), SourceParams: []string{"utm_source", "src"}})
	r := httptest.NewRequest("GET", "/aB3xY9?utm_source=newsletter", nil)
	r.RemoteAddr = "203.0.113.9:4444"
	r.Header.Set("Referer", "https://news.example/article")
	r.Header.Set("User-Agent", safariIPhone)
	var f visitor.Features
	rd.Read(r, false, &f)
	b.ReportAllocs()
	for b.Loop() {
		rd.Read(r, false, &f)
	}
}

func TestUniques(t *testing.T) {
	u := visitor.NewUniques([]byte("0123456789abcdef-secret"))
	day := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	a, b := netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("203.0.113.2")
	h := u.Hash(day, a, "ua", "k")
	for _, tc := range []struct {
		name string
		same bool
		got  uint64
	}{
		{"same visitor later that day", true, u.Hash(day.Add(13*time.Hour), a, "ua", "k")},
		{"another gateway with the secret", true, visitor.NewUniques([]byte("0123456789abcdef-secret")).Hash(day, a, "ua", "k")},
		{"the next day", false, u.Hash(day.Add(24*time.Hour), a, "ua", "k")},
		{"another address", false, u.Hash(day, b, "ua", "k")},
		{"another User-Agent", false, u.Hash(day, a, "ua2", "k")},
		{"another link", false, u.Hash(day, a, "ua", "k2")},
		{"no field runs into the next", false, u.Hash(day, a, "uak", "")},
		{"another secret", false, visitor.NewUniques([]byte("0123456789abcdef-other")).Hash(day, a, "ua", "k")},
	} {
		if (tc.got == h) != tc.same {
			t.Errorf("%s: hash %x vs %x, want same=%v", tc.name, tc.got, h, tc.same)
		}
	}
	if k1, k2 := u.DayKey(day), u.DayKey(day.Add(time.Hour)); string(k1) != string(k2) || string(k1) == string(u.DayKey(day.Add(-24*time.Hour))) {
		t.Error("the day key is not one per UTC day")
	}
}

func BenchmarkUniquesHash(b *testing.B) {
	u := visitor.NewUniques([]byte("0123456789abcdef-secret"))
	now := time.Now()
	a := netip.MustParseAddr("203.0.113.1")
	b.ReportAllocs()
	for b.Loop() {
		u.Hash(now, a, safariIPhone, "aB3xY9")
	}
}
