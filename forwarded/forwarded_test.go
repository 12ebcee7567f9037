package forwarded_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/linkgate/linkgate/forwarded"
)

func mustParse(t testing.TB, entries ...string) *forwarded.Trust {
	t.Helper()
	tr, err := forwarded.Parse(entries)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestParsePrefix(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "" means an error
	}{
		{"10.0.0.0/8", "10.0.0.0/8"},
		{"10.1.2.3/8", "10.0.0.0/8"},
		{"192.0.2.7", "192.0.2.7/32"},
		{" 192.0.2.7 ", "192.0.2.7/32"},
		{"2001:db8::1", "2001:db8::1/128"},
		{"2001:db8::/32", "2001:db8::/32"},
		{"::ffff:127.0.0.0/104", "127.0.0.0/8"},
		{"::ffff:192.0.2.7", "192.0.2.7/32"},
		{"::ffff:0:0/96", "0.0.0.0/0"},
		{"::ffff:0:0/95", ""},
		{"10.0.0.0/33", ""},
		{"not-a-cidr", ""},
		{"", ""},
		{"fe80::1%eth0", ""},
		{"10.0.0.0/", ""},
		{"10.0.0.0/8/8", ""},
	} {
		p, err := forwarded.ParsePrefix(tc.in)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("ParsePrefix(%q) = %v, want an error", tc.in, p)
		case tc.want != "" && err != nil:
			t.Errorf("ParsePrefix(%q): %v, want %s", tc.in, err, tc.want)
		case tc.want != "" && p.String() != tc.want:
			t.Errorf("ParsePrefix(%q) = %v, want %s", tc.in, p, tc.want)
		}
	}
}

// TestNormalize: an address is compared and returned unmapped and without
// a zone, and a normalized one is left alone.
func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7":             "192.0.2.7",
		"::ffff:192.0.2.7":      "192.0.2.7",
		"fe80::1%eth0":          "fe80::1",
		"::ffff:192.0.2.7%eth0": "192.0.2.7",
		"2001:db8::1":           "2001:db8::1",
	} {
		got := forwarded.Normalize(netip.MustParseAddr(in))
		if got.String() != want {
			t.Errorf("Normalize(%s) = %v, want %s", in, got, want)
		}
		if again := forwarded.Normalize(got); again != got {
			t.Errorf("Normalize(%v) = %v: not idempotent", got, again)
		}
	}
}

func TestParseNamesTheEntry(t *testing.T) {
	_, err := forwarded.Parse([]string{"127.0.0.1/32", "10.0.0.0/33"})
	if err == nil || !strings.HasPrefix(err.Error(), `[1]: "10.0.0.0/33"`) {
		t.Errorf("Parse error %v, want it to start with [1] and the entry", err)
	}
}

func request(peer string, hdr ...string) *http.Request {
	r := httptest.NewRequest("GET", "http://short.example/x", nil)
	r.RemoteAddr = peer
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	return r
}

func TestClient(t *testing.T) {
	tr := mustParse(t, "10.0.0.0/8", "2001:db8:ffff::/48", "::ffff:192.168.0.0/112")
	for _, tc := range []struct {
		name     string
		r        *http.Request
		want     string
		viaProxy bool
	}{
		{"untrusted peer, headers ignored", request("203.0.113.5:1234", "X-Forwarded-For", "1.1.1.1", "X-Real-Ip", "2.2.2.2"), "203.0.113.5", false},
		{"trusted peer, no headers", request("10.1.1.1:80"), "10.1.1.1", true},
		{"rightmost untrusted", request("10.1.1.1:80", "X-Forwarded-For", "6.6.6.6, 198.51.100.1, 10.2.2.2"), "198.51.100.1", true},
		{"several header lines", request("10.1.1.1:80", "X-Forwarded-For", "6.6.6.6", "X-Forwarded-For", "198.51.100.1", "X-Forwarded-For", "10.2.2.2, 10.3.3.3"), "198.51.100.1", true},
		{"all trusted: leftmost", request("10.1.1.1:80", "X-Forwarded-For", "10.9.9.9, 10.2.2.2"), "10.9.9.9", true},
		{"garbage left of the client is not read", request("10.1.1.1:80", "X-Forwarded-For", "bogus, 198.51.100.1, 10.2.2.2"), "198.51.100.1", true},
		{"empty entries skipped", request("10.1.1.1:80", "X-Forwarded-For", "198.51.100.9, , ,"), "198.51.100.9", true},
		{"port and brackets", request("10.1.1.1:80", "X-Forwarded-For", "[2001:db8:1:2::9]:443"), "2001:db8:1:2::9", true},
		{"x-real-ip from trusted peer", request("10.1.1.1:80", "X-Real-Ip", " 198.51.100.2 "), "198.51.100.2", true},
		{"xff wins over x-real-ip", request("10.1.1.1:80", "X-Forwarded-For", "198.51.100.3", "X-Real-Ip", "198.51.100.2"), "198.51.100.3", true},
		{"ipv6 zone dropped", request("[fe80::1%eth0]:9"), "fe80::1", false},
		{"ipv4-mapped peer unmapped", request("[::ffff:203.0.113.9]:9"), "203.0.113.9", false},
		{"ipv4-mapped trusted prefix, mapped peer", request("[::ffff:192.168.3.4]:9", "X-Forwarded-For", "::ffff:198.51.100.4"), "198.51.100.4", true},
		{"ipv4-mapped trusted prefix, plain peer", request("192.168.3.4:9", "X-Forwarded-For", "198.51.100.4"), "198.51.100.4", true},
		{"trusted ipv6 proxy", request("[2001:db8:ffff::1]:9", "X-Forwarded-For", "2001:db8:aaaa:bbbb:1::1"), "2001:db8:aaaa:bbbb:1::1", true},
		{"bare address as RemoteAddr", request("10.1.1.1", "X-Forwarded-For", "198.51.100.5"), "198.51.100.5", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := tr.Client(tc.r)
			if !ok {
				t.Fatal("no client")
			}
			if c.Addr.String() != tc.want || c.ViaProxy != tc.viaProxy {
				t.Errorf("got %s via proxy %v, want %s via proxy %v", c.Addr, c.ViaProxy, tc.want, tc.viaProxy)
			}
		})
	}
	if _, ok := tr.Client(request("@/run/gateway.sock")); ok {
		t.Error("a peer without an address gave a client")
	}
	// Where the client's address should be, something that is not one:
	// no client, never the proxy that passed it on.
	for _, r := range []*http.Request{
		request("10.1.1.1:80", "X-Forwarded-For", "6.6.6.6, bogus, 10.2.2.2"),
		request("10.1.1.1:80", "X-Forwarded-For", "unknown"),
		request("10.1.1.1:80", "X-Forwarded-For", "198.51.100.1", "X-Forwarded-For", "_hidden, 10.2.2.2"),
		request("10.1.1.1:80", "X-Real-Ip", "nope"),
	} {
		c, ok := tr.Client(r)
		if ok || c.Addr.IsValid() || c.Peer.String() != "10.1.1.1" || !c.ViaProxy {
			t.Errorf("%v: client %+v (ok %v), want none, with the peer 10.1.1.1 via a proxy", r.Header, c, ok)
		}
	}
}

// TestClientAllocatesNothing: the limiter and the proxy each ask who a
// request's client is; behind a trusted load balancer that sends no
// X-Real-IP, the absent header once cost six allocations per request
// (the parse errors of an empty value).
func TestClientAllocatesNothing(t *testing.T) {
	tr := mustParse(t, "10.0.0.0/8")
	for _, r := range []*http.Request{
		request("10.1.1.1:80"),
		request("10.1.1.1:80", "X-Forwarded-For", "198.51.100.1, 10.2.2.2"),
		request("10.1.1.1:80", "X-Real-Ip", "198.51.100.2"),
		request("203.0.113.5:1234"),
	} {
		if n := testing.AllocsPerRun(100, func() { tr.Client(r) }); n != 0 {
			t.Errorf("%s %v: %v allocations per Client, want 0", r.RemoteAddr, r.Header, n)
		}
	}
}

// TestPeerText: the peer's text is the address's own spelling, taken from
// RemoteAddr without allocating when RemoteAddr spells it so.
func TestPeerText(t *testing.T) {
	for _, tc := range []struct{ remote, want string }{
		{"203.0.113.5:1234", "203.0.113.5"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"[2001:DB8:0::1]:443", "2001:db8::1"},     // not as netip spells it
		{"[::ffff:203.0.113.5]:80", "203.0.113.5"}, // normalized to IPv4
		{"[fe80::1%eth0]:80", "fe80::1"},           // Normalize drops the zone
		{"203.0.113.5", "203.0.113.5"},             // no port
	} {
		r := request(tc.remote)
		a, ok := forwarded.Peer(r)
		if !ok {
			t.Fatalf("%s: no peer", tc.remote)
		}
		if got := forwarded.PeerText(r, a); got != tc.want || got != a.String() {
			t.Errorf("PeerText(%s) = %q, want %q (a.String() %q)", tc.remote, got, tc.want, a.String())
		}
	}
	r := request("203.0.113.5:1234")
	a, _ := forwarded.Peer(r)
	if n := testing.AllocsPerRun(100, func() { forwarded.PeerText(r, a) }); n != 0 {
		t.Errorf("%v allocations per PeerText of %s, want 0", n, r.RemoteAddr)
	}
}

// TestMappedPrefixSameEverywhere is the case that once split the limiter
// and the proxy: with trusted_proxies ["::ffff:127.0.0.0/104"] and a peer
// of 127.0.0.1, both the client address and the forwarded headers must
// treat the peer as trusted.
func TestMappedPrefixSameEverywhere(t *testing.T) {
	tr := mustParse(t, "::ffff:127.0.0.0/104")
	r := request("127.0.0.1:5555", "X-Forwarded-For", "198.51.100.7", "X-User-Id", "alice")
	c, _ := tr.Client(r)
	if !c.ViaProxy || c.Addr.String() != "198.51.100.7" {
		t.Errorf("client %+v, want 198.51.100.7 via a trusted proxy", c)
	}
	out := http.Header{"X-User-Id": {"alice"}}
	tr.SetHeaders(out, r, forwarded.NewPolicy([]string{"X-User-ID"}, false))
	if got := out.Get("X-Forwarded-For"); got != "198.51.100.7, 127.0.0.1" {
		t.Errorf("X-Forwarded-For %q, want the chain kept", got)
	}
	if out.Get("X-User-Id") != "alice" {
		t.Error("the user header of a trusted proxy was removed")
	}
}

func TestSetHeaders(t *testing.T) {
	tr := mustParse(t, "127.0.0.1")
	forged := []string{
		"X-Forwarded-For", "203.0.113.7", "X-Forwarded-Proto", "https", "X-Forwarded-Host", "short.example",
		"X-Real-Ip", "203.0.113.8", "Forwarded", "for=203.0.113.9", "X-User-Id", "admin",
		// the client's address as other hops name it, and URL overrides:
		// removed whoever sent them
		"X-Client-Ip", "203.0.113.10", "True-Client-Ip", "203.0.113.11", "Cf-Connecting-Ip", "203.0.113.12",
		"X-Cluster-Client-Ip", "203.0.113.13", "Fastly-Client-Ip", "203.0.113.14", "X-Original-Forwarded-For", "203.0.113.15",
		"X-Original-Url", "/admin", "X-Rewrite-Url", "/admin",
		// forwarding details and proxies' users: only from a trusted proxy
		"X-Forwarded-Port", "443", "X-Forwarded-Server", "edge", "X-Forwarded-Prefix", "/evil", "X-Forwarded-Ssl", "on",
		"X-Forwarded-User", "root", "X-Auth-Request-Email", "root@example.com", "Remote-User", "root",
		// names with '_': dropped by default
		"X-User_id", "admin", "Transfer_encoding", "chunked", "X-Custom_header", "v",
		// passed on
		"X-Http-Method-Override", "PUT", "Accept", "*/*",
	}
	trustedKeeps := http.Header{
		"X-Forwarded-Proto": {"https"}, "X-Forwarded-Host": {"short.example"}, "X-User-Id": {"admin"},
		"X-Forwarded-Port": {"443"}, "X-Forwarded-Server": {"edge"}, "X-Forwarded-Prefix": {"/evil"}, "X-Forwarded-Ssl": {"on"},
		"X-Forwarded-User": {"root"}, "X-Auth-Request-Email": {"root@example.com"}, "Remote-User": {"root"},
		"X-Http-Method-Override": {"PUT"}, "Accept": {"*/*"},
	}
	with := func(h http.Header, kv ...string) http.Header {
		h = h.Clone()
		for i := 0; i+1 < len(kv); i += 2 {
			h[kv[i]] = []string{kv[i+1]}
		}
		return h
	}
	drop := forwarded.NewPolicy([]string{"X-User-ID"}, false)
	pass := forwarded.NewPolicy([]string{"X-User-ID"}, true)
	for _, tc := range []struct {
		name string
		r    *http.Request
		pol  forwarded.Policy
		want http.Header
	}{
		{"trusted peer", request("127.0.0.1:4000", forged...), drop,
			with(trustedKeeps, "X-Forwarded-For", "203.0.113.7, 127.0.0.1", "X-Real-Ip", "203.0.113.7")},
		{"untrusted peer", request("192.0.2.1:4000", forged...), drop, http.Header{
			"X-Forwarded-For": {"192.0.2.1"}, "X-Forwarded-Proto": {"http"}, "X-Forwarded-Host": {"short.example"},
			"X-Real-Ip": {"192.0.2.1"}, "X-Http-Method-Override": {"PUT"}, "Accept": {"*/*"},
		}},
		{"untrusted peer, no headers", request("192.0.2.1:4000"), drop, http.Header{
			"X-Forwarded-For": {"192.0.2.1"}, "X-Forwarded-Proto": {"http"}, "X-Forwarded-Host": {"short.example"},
			"X-Real-Ip": {"192.0.2.1"},
		}},
		// Underscores passed on: only those that name no other header.
		{"untrusted peer, underscores passed", request("192.0.2.1:4000", forged...), pass, http.Header{
			"X-Forwarded-For": {"192.0.2.1"}, "X-Forwarded-Proto": {"http"}, "X-Forwarded-Host": {"short.example"},
			"X-Real-Ip": {"192.0.2.1"}, "X-Http-Method-Override": {"PUT"}, "Accept": {"*/*"}, "X-Custom_header": {"v"},
		}},
		{"trusted peer, underscores passed", request("127.0.0.1:4000", forged...), pass,
			with(trustedKeeps, "X-Forwarded-For", "203.0.113.7, 127.0.0.1", "X-Real-Ip", "203.0.113.7", "X-Custom_header", "v")},
		{"underscore twins of every kind, underscores passed", request("192.0.2.1:4000",
			"X_Forwarded_For", "6.6.6.6", "X_Real_IP", "6.6.6.6", "X_Client_IP", "6.6.6.6", "X_Forwarded_Port", "1",
			"X_HTTP_Method_Override", "DELETE", "Content_Length", "5", "Accept-Language", "en", "Accept_Language", "x",
			"My_Header", "kept"), pass, http.Header{
			"X-Forwarded-For": {"192.0.2.1"}, "X-Forwarded-Proto": {"http"}, "X-Forwarded-Host": {"short.example"},
			"X-Real-Ip": {"192.0.2.1"}, "Accept-Language": {"en"}, "My_header": {"kept"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// out starts as a copy of the client's headers, as the proxy's
			// outgoing request does before its Rewrite.
			out := tc.r.Header.Clone()
			tr.SetHeaders(out, tc.r, tc.pol)
			if diff := cmp.Diff(tc.want, out); diff != "" {
				t.Errorf("outgoing headers (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEveryNamedHeader: each header the table of docs/security.md names, as
// the page spells it, is removed from everyone, or passed on from a
// trusted proxy only.
func TestEveryNamedHeader(t *testing.T) {
	removed := []string{
		"X-Client-IP", "Client-IP", "True-Client-IP", "CF-Connecting-IP", "CF-Connecting-IPv6", "CF-Pseudo-IPv4",
		"Fastly-Client-IP", "X-Cluster-Client-IP", "X-Original-Forwarded-For", "X-Forwarded", "Forwarded-For",
		"X-Originating-IP", "X-Remote-IP", "X-Remote-Addr", "X-AppEngine-User-IP", "X-Envoy-External-Address", "Forwarded",
		"X-Original-URL", "X-Rewrite-URL", "X-Original-URI",
	}
	fromProxy := []string{
		"X-Forwarded-Port", "X-Forwarded-Server", "X-Forwarded-Prefix", "X-Forwarded-Uri", "X-Forwarded-Scheme",
		"X-Forwarded-Ssl", "X-Forwarded-Protocol", "X-Url-Scheme", "Front-End-Https", "X-Host", "X-Original-Host",
		"X-Forwarded-User", "X-Forwarded-Email", "X-Forwarded-Preferred-Username", "X-Forwarded-Groups",
		"X-Forwarded-Access-Token", "X-Auth-Request-User", "X-Auth-Request-Email", "X-Auth-Request-Preferred-Username",
		"X-Auth-Request-Groups", "X-Auth-Request-Access-Token", "X-Remote-User", "Remote-User", "X-Forwarded-Client-Cert",
		"X-Client-Cert", "X-SSL-Client-Cert", "SSL-Client-Cert", "X-Client-Verify", "X-SSL-Client-Verify",
		"X-SSL-Client-DN", "X-SSL-Client-S-DN",
	}
	tr := mustParse(t, "127.0.0.1")
	pol := forwarded.NewPolicy(nil, false)
	for _, peer := range []string{"127.0.0.1:1", "192.0.2.1:1"} {
		trusted := peer == "127.0.0.1:1"
		for _, h := range append(removed, fromProxy...) {
			r := request(peer, h, "x")
			out := r.Header.Clone()
			tr.SetHeaders(out, r, pol)
			want := trusted && slices.Contains(fromProxy, h)
			if got := out.Get(h) == "x"; got != want {
				t.Errorf("%s from %s: passed on %v, want %v", h, peer, got, want)
			}
		}
	}
}

func TestPolicyEqual(t *testing.T) {
	a := forwarded.NewPolicy([]string{"X-User-ID"}, false)
	if !a.Equal(forwarded.NewPolicy([]string{"x-user-id"}, false)) {
		t.Error("the same header in another case makes a different policy")
	}
	if a.Equal(forwarded.NewPolicy([]string{"X-User-ID"}, true)) || a.Equal(forwarded.NewPolicy(nil, false)) {
		t.Error("different policies are equal")
	}
}

func TestNilTrustTrustsNoOne(t *testing.T) {
	var tr *forwarded.Trust
	c, ok := tr.Client(request("127.0.0.1:1", "X-Forwarded-For", "203.0.113.7"))
	if !ok || c.ViaProxy || c.Addr != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("nil Trust: %+v", c)
	}
	if !tr.Equal(&forwarded.Trust{}) || tr.Equal(mustParse(t, "127.0.0.1")) {
		t.Error("Equal of nil and empty Trusts")
	}
}

// FuzzClient checks that any peer and headers give a valid address that is
// the peer itself unless the peer is trusted, and that nothing panics.
func FuzzClient(f *testing.F) {
	f.Add("10.1.1.1:80", "6.6.6.6, 198.51.100.1, 10.2.2.2", "")
	f.Add("[::ffff:10.0.0.1]:1", "[2001:db8::1]:443", "198.51.100.2")
	f.Add("203.0.113.5:1", ",,,", "x")
	tr := mustParse(f, "10.0.0.0/8", "::ffff:192.168.0.0/112")
	f.Fuzz(func(t *testing.T, peer, xff, realIP string) {
		r := request(peer, "X-Forwarded-For", xff, "X-Real-Ip", realIP)
		c, ok := tr.Client(r)
		if !ok {
			return
		}
		if !c.Addr.IsValid() || c.Addr.Is4In6() || c.Addr.Zone() != "" {
			t.Fatalf("client address %v is not a plain address", c.Addr)
		}
		if c.ViaProxy != tr.Contains(c.Peer) {
			t.Fatalf("ViaProxy %v for peer %v", c.ViaProxy, c.Peer)
		}
		if !c.ViaProxy && c.Addr != c.Peer {
			t.Fatalf("untrusted peer %v, but client %v", c.Peer, c.Addr)
		}
		out := http.Header{}
		tr.SetHeaders(out, r, forwarded.NewPolicy([]string{"X-User-ID"}, false))
		if got := out.Get("X-Real-Ip"); got != c.Addr.String() {
			t.Fatalf("X-Real-Ip %q, client %v", got, c.Addr)
		}
	})
}

// TestPeerAgreesWithNetip: Peer's IPv4 fast path gives what netip's
// parsers give (the reference below) for every input, valid or not, and
// takes every IPv4 address with a port that net.Conn spells.
func TestPeerAgreesWithNetip(t *testing.T) {
	ref := func(s string) (netip.Addr, bool) {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return forwarded.Normalize(ap.Addr()), true
		}
		if a, err := netip.ParseAddr(s); err == nil {
			return forwarded.Normalize(a), true
		}
		return netip.Addr{}, false
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"0", "1", "9", "00", "01", "10", "99", "100", "199", "255", "256", "999", "1000", "65535", "65536", "", ".", ":", "a", " ", "-", "+", "[", "]", "::1", "%"}
	valid, fast := 0, 0
	for i := 0; i < 300000; i++ {
		var s string
		if i%2 == 0 { // an address's shape, its parts random
			s = fmt.Sprintf("%d.%d.%d.%d:%d", rng.IntN(300), rng.IntN(300), rng.IntN(300), rng.IntN(300), rng.IntN(70000))
			if rng.IntN(3) == 0 { // then one byte changed, dropped or doubled
				j := rng.IntN(len(s))
				switch rng.IntN(3) {
				case 0:
					s = s[:j] + pieces[rng.IntN(len(pieces))] + s[j+1:]
				case 1:
					s = s[:j] + s[j+1:]
				default:
					s = s[:j] + s[j:j+1] + s[j:]
				}
			}
		} else {
			for n := rng.IntN(12); n > 0; n-- {
				s += pieces[rng.IntN(len(pieces))]
			}
		}
		want, wantOK := ref(s)
		got, gotOK := forwarded.Peer(request(s))
		if got != want || gotOK != wantOK {
			t.Fatalf("Peer(%q) = %v %v, netip gives %v %v", s, got, gotOK, want, wantOK)
		}
		if a, host, ok := forwarded.ParseIPv4Port(s); ok {
			fast++
			if a != want || host != a.String() {
				t.Fatalf("the fast path took %q as %v (host %q), netip as %v", s, a, host, want)
			}
		}
		if ap, err := netip.ParseAddrPort(s); err == nil && ap.Addr().Is4() && ap.Addr().String()+":"+strconv.Itoa(int(ap.Port())) == s {
			valid++
			if _, _, ok := forwarded.ParseIPv4Port(s); !ok {
				t.Fatalf("the fast path refused %q", s)
			}
		}
	}
	if valid < 10000 || fast < valid {
		t.Fatalf("%d addresses as net.Conn spells them, %d taken by the fast path: the inputs miss the point", valid, fast)
	}
}
