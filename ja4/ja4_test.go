package ja4_test

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/edge/edgetest"
	"github.com/linkgate/linkgate/ja4"
)

// reference holds ClientHellos of FoxIO's reference test captures
// (python/test/testdata of github.com/FoxIO-LLC/ja4: tls-sni, latest, tls3,
// macos_tcp_flags, ssh2, tls-non-ascii-alpn, socks-https-example,
// tls-alpn-h2, badcurveball, tls12), each as the reference prints it in its
// raw original-order form (JA4_ro: the lists in the order sent, GREASE
// left out), with the JA4 it printed for it.
var reference = []struct{ ro, want string }{
	{ // Chrome, the specification's own example
		"t13d1516h2_1301,1302,1303,c02b,c02f,c02c,c030,cca9,cca8,c013,c014,009c,009d,002f,0035_001b,0000,0033,0010,4469,0017,002d,000d,0005,0023,0012,002b,ff01,000b,000a,0015_0403,0804,0401,0503,0805,0501,0806,0601",
		"t13d1516h2_8daaf6152771_e5627efa2ab1",
	},
	{ // the same client, extensions in another order (Chrome shuffles them)
		"t13d1516h2_1301,1302,1303,c02b,c02f,c02c,c030,cca9,cca8,c013,c014,009c,009d,002f,0035_0023,0033,ff01,000a,0012,0005,0017,4469,0000,001b,000d,002d,000b,002b,0010,0015_0403,0804,0401,0503,0805,0501,0806,0601",
		"t13d1516h2_8daaf6152771_e5627efa2ab1",
	},
	{ // http/1.1 as the first ALPN value
		"t13d1516h1_1301,1302,1303,c02b,c02f,c02c,c030,cca9,cca8,c013,c014,009c,009d,002f,0035_000d,0033,0000,ff01,002b,0023,002d,0005,0012,000b,0017,4469,0010,001b,000a,0015_0403,0804,0401,0503,0805,0501,0806,0601",
		"t13d1516h1_8daaf6152771_e5627efa2ab1",
	},
	{ // no ALPN
		"t13d151400_1301,1302,1303,c02b,c02f,c02c,c030,cca9,cca8,c013,c014,009c,009d,002f,0035_0033,002b,001b,0000,0012,002d,000d,000a,0005,0023,0017,ff01,000b,0015_0403,0804,0401,0503,0805,0501,0806,0601",
		"t13d151400_8daaf6152771_de4a06bb82e3",
	},
	{ // pre_shared_key (0029) on a resumption
		"t13d1516h2_1301,1302,1303,c02b,c02f,c02c,c030,cca9,cca8,c013,c014,009c,009d,002f,0035_000d,0010,0000,000b,0023,4469,ff01,0033,000a,002d,002b,0005,0017,0012,001b,0029_0403,0804,0401,0503,0805,0501,0806,0601",
		"t13d1516h2_8daaf6152771_9b887d9acb53",
	},
	{ // TLS 1.2 without ALPN (WinINET, and Go's listed as such)
		"t12d190800_c02c,c02b,c030,c02f,c024,c023,c028,c027,c00a,c009,c014,c013,009d,009c,003d,003c,0035,002f,000a_0000,0005,000a,000b,000d,0023,0017,ff01_0804,0805,0806,0401,0501,0201,0403,0503,0203,0202,0601,0603",
		"t12d190800_d83cc789557e_7af1ed941c26",
	},
	{ // macOS: a signature algorithm listed twice stays twice
		"t13d2613h2_1301,1302,1303,c02c,c02b,c024,c023,c00a,c009,cca9,c030,c02f,c028,c027,c014,c013,cca8,009d,009c,003d,003c,0035,002f,c008,c012,000a_ff01,0000,0017,000d,0005,0012,0010,000b,0033,002d,002b,000a,0015_0403,0804,0401,0503,0203,0805,0805,0501,0806,0601,0201",
		"t13d2613h2_2802a3db6c62_845d286b0d67",
	},
	{ // Firefox
		"t13d1715h2_1301,1303,1302,c02b,c02f,cca9,cca8,c02c,c030,c00a,c009,c013,c014,009c,009d,002f,0035_0000,0017,ff01,000a,000b,0023,0010,0005,0022,0033,002b,000d,002d,001c,0015_0403,0503,0603,0804,0805,0806,0401,0501,0601,0203,0201",
		"t13d1715h2_5b57614c22b0_3d5424432f57",
	},
	{ // TLS 1.0, no signature algorithms: the hash ends without "_"
		"t10d230100_0039,0038,0035,0016,0013,000a,0033,0032,002f,009a,0099,0096,0005,0004,0015,0012,0009,0014,0011,0008,0006,0003,00ff_0000",
		"t10d230100_6a57a6f57151_000000000000",
	},
	{ // 46 ciphers, private-use signature algorithms kept
		"t12d4605h2_c030,c02c,c028,c024,c014,c00a,009f,006b,0039,cca9,cca8,ccaa,ff85,00c4,0088,0081,009d,003d,0035,00c0,0084,c02f,c02b,c027,c023,c013,c009,009e,0067,0033,00be,0045,009c,003c,002f,00ba,0041,c011,c007,0005,0004,c012,c008,0016,000a,00ff_0000,000b,000a,000d,0010_0601,0603,efef,0501,0503,0401,0403,eeee,eded,0301,0303,0201,0203",
		"t12d4605h2_85626a9a5f7f_aaf95bb78ec9",
	},
	{ // a first ALPN value that is not alphanumeric: its hex form's ends
		"t13d151699_1301,1302,1303,c02b,c02f,c02c,c030,cca9,cca8,c013,c014,009c,009d,002f,0035_ff01,0033,002d,0005,4469,000d,0010,0023,001b,002b,0000,0012,000a,0017,000b,0015_0403,0804,0401,0503,0805,0501,0806,0601",
		"t13d151699_8daaf6152771_e5627efa2ab1",
	},
}

// parseRO turns a JA4_ro line back into a Hello, with GREASE values added
// where clients put them, which Fingerprint must skip.
func parseRO(t *testing.T, ro string) ja4.Hello {
	t.Helper()
	parts := strings.Split(ro, "_")
	a := parts[0]
	var h ja4.Hello
	switch a[1:3] {
	case "13":
		h.Versions = []uint16{0x3a3a, 0x0304, 0x0303}
	case "12":
		h.Versions = []uint16{0x0303}
	case "10":
		h.Versions = []uint16{0x0301}
	default:
		t.Fatalf("version %q", a[1:3])
	}
	switch a[8:] {
	case "h2":
		h.ALPN = "h2"
	case "h1":
		h.ALPN = "http/1.1"
	case "99":
		h.ALPN = "\x99"
	case "00":
	default:
		t.Fatalf("alpn %q", a[8:])
	}
	list := func(s string) []uint16 {
		var out []uint16
		for f := range strings.SplitSeq(s, ",") {
			v, err := strconv.ParseUint(f, 16, 16)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, uint16(v))
		}
		return out
	}
	h.Ciphers = append([]uint16{0xdada}, list(parts[1])...)
	h.Extensions = append(append([]uint16{0x2a2a}, list(parts[2])...), 0x9a9a)
	if len(parts) > 3 {
		h.SignatureAlgorithms = list(parts[3])
	}
	return h
}

func TestReference(t *testing.T) {
	for _, tt := range reference {
		if got := ja4.Fingerprint(parseRO(t, tt.ro)); got != tt.want {
			t.Errorf("Fingerprint(%s)\n = %s\nwant %s", tt.ro, got, tt.want)
		}
	}
}

// TestSpecification checks the rules of JA4.md that the captures do not
// reach: the ALPN examples, empty lists, counts past 99, no SNI.
func TestSpecification(t *testing.T) {
	for _, tt := range []struct{ alpn, want string }{
		{"\xab", "ab"}, {" ", "20"}, {"\xab\xcd", "ad"}, {" a", "21"}, {"0\xab", "3b"},
		{"a ", "60"}, {"01\xab\xcd", "3d"}, {"0\xab\xcd1", "01"}, {"h", "hh"}, {"", "00"},
		{"http/1.1", "h1"}, {"h3", "h3"},
	} {
		fp := ja4.Fingerprint(ja4.Hello{ALPN: tt.alpn})
		if got := fp[8:10]; got != tt.want {
			t.Errorf("ALPN %q: %s, want %s", tt.alpn, got, tt.want)
		}
	}
	if got, want := ja4.Fingerprint(ja4.Hello{}), "t00i000000_000000000000_000000000000"; got != want {
		t.Errorf("empty hello: %s, want %s", got, want)
	}
	many := make([]uint16, 120)
	for i := range many {
		many[i] = uint16(i + 1)
	}
	if got := ja4.Fingerprint(ja4.Hello{Ciphers: many, Extensions: many})[4:8]; got != "9999" {
		t.Errorf("120 ciphers and extensions counted %s, want 9999", got)
	}
	for v := range 1 << 16 {
		want := v>>8 == v&0xff && v&0x0f == 0x0a // RFC 8701 section 2: 0x0a0a, 0x1a1a, … 0xfafa
		if got := ja4.IsGREASE(uint16(v)); got != want {
			t.Errorf("IsGREASE(%#04x) = %v, want %v", v, got, want)
		}
	}
}

// TestGoClient fingerprints a real handshake: Go's own client against a
// crypto/tls server, read from the ClientHelloInfo as the edge reads it.
func TestGoClient(t *testing.T) {
	certPEM, keyPEM := edgetest.NewCA(t).Issue(t, "example.com")
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	srvCfg := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			got <- ja4.Fingerprint(ja4.FromClientHello(h))
			return nil, nil
		}}
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	go tls.Server(c2, srvCfg).Handshake()
	cli := tls.Client(c1, &tls.Config{ServerName: "example.com", InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}})
	go cli.Handshake()
	select {
	case fp := <-got:
		// Go 1.26's client: TLS 1.3, SNI, h2 first; its cipher list
		// (TLS 1.3's three and TLS 1.2's ECDHE suites) is FoxIO's
		// "GoLang" hash.
		if !strings.HasPrefix(fp, "t13d") || fp[8:10] != "h2" {
			t.Errorf("Go client: %s", fp)
		}
		if ja4.Fingerprint(ja4.Hello{}) == fp {
			t.Errorf("Go client fingerprinted as an empty hello")
		}
		t.Logf("Go client: %s", fp)
	case <-time.After(time.Minute):
		t.Fatal("no ClientHello within a minute")
	}
}

func TestContext(t *testing.T) {
	if got := ja4.FromContext(context.Background()); got != "" {
		t.Errorf("empty context: %q", got)
	}
	ctx := ja4.NewContext(context.Background(), "t13d1516h2_8daaf6152771_e5627efa2ab1")
	if got := ja4.FromContext(ctx); got != "t13d1516h2_8daaf6152771_e5627efa2ab1" {
		t.Errorf("FromContext = %q", got)
	}
}

func BenchmarkFingerprint(b *testing.B) {
	h := ja4.Hello{
		Versions:            []uint16{0x3a3a, 0x0304, 0x0303},
		Ciphers:             []uint16{0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014, 0x009c, 0x009d, 0x002f, 0x0035},
		Extensions:          []uint16{0x001b, 0x0000, 0x0033, 0x0010, 0x4469, 0x0017, 0x002d, 0x000d, 0x0005, 0x0023, 0x0012, 0x002b, 0xff01, 0x000b, 0x000a, 0x0015},
		ALPN:                "h2",
		SignatureAlgorithms: []uint16{0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601},
	}
	b.ReportAllocs()
	for b.Loop() {
		ja4.Fingerprint(h)
	}
}
