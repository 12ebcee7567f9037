package h1wire

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// TestAppendValue: a value goes on the wire as http.Header.Write writes
// it: trimmed of whitespace at both ends (RFC 9110 section 5.5: a field
// value has none), its CRs and LFs made spaces. Both directions wrote it
// before each in its own way, and disagreed on the trimming.
func TestAppendValue(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"text/html", "text/html"},
		{"", ""},
		{"  a b  ", "a b"},
		{"\ta\t", "a"},
		{"a\r\nb", "a  b"},
		{"a\nb", "a b"},
		{"\r\na\r\n", "a"},
		{" \r\n ", ""},
		{"a\x00b", "a\x00b"}, // not a line break: net/http writes it as it is too
		{"\xff\xfe", "\xff\xfe"},
	} {
		got := string(AppendValue([]byte("x"), tc.in))
		if got != "x"+tc.want {
			t.Errorf("AppendValue(%q) = %q, want %q", tc.in, got[1:], tc.want)
		}
		if w := netHTTPValue(tc.in); w != tc.want {
			t.Errorf("http.Header.Write writes %q as %q, the table says %q", tc.in, w, tc.want)
		}
	}
}

// netHTTPValue is v as http.Header.Write writes it.
func netHTTPValue(v string) string {
	var b bytes.Buffer
	http.Header{"X": {v}}.Write(&b)
	return strings.TrimSuffix(strings.TrimPrefix(b.String(), "X: "), "\r\n")
}

// TestAppendValueAgreesWithNetHTTP: over random values of the bytes that
// matter, AppendValue writes what http.Header.Write writes.
func TestAppendValueAgreesWithNetHTTP(t *testing.T) {
	alphabet := []byte(" \t\r\nab,\x00\x7f\xff")
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		v := make([]byte, rng.IntN(8))
		for i := range v {
			v[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if got, want := string(AppendValue(nil, string(v))), netHTTPValue(string(v)); got != want {
			t.Fatalf("AppendValue(%q) = %q, http.Header.Write writes %q", v, got, want)
		}
	}
}

// TestGrammarIsHttpguts: the name and value rules are httpguts's, byte by
// byte.
func TestGrammarIsHttpguts(t *testing.T) {
	for c := range 256 {
		b := []byte{byte(c)}
		if got, want := ValidName(b), httpguts.ValidHeaderFieldName(string(b)); got != want {
			t.Errorf("ValidName(%q) = %v, httpguts says %v", b, got, want)
		}
		if got, want := ValidValue(b), httpguts.ValidHeaderFieldValue(string(b)); got != want {
			t.Errorf("ValidValue(%q) = %v, httpguts says %v", b, got, want)
		}
	}
	if ValidName(nil) {
		t.Error("an empty name is valid")
	}
}

func TestParseFieldLine(t *testing.T) {
	for _, tc := range []struct {
		line, name, value string
		ok                bool
	}{
		{"Host: a", "Host", "a", true},
		{"x-a:b", "x-a", "b", true},
		{"X: \t v \t", "X", "v", true},
		{"X:", "X", "", true},
		{"X: a:b", "X", "a:b", true},
		{"X: \x80\xff", "X", "\x80\xff", true},
		{"X : a", "", "", false},   // a space before the colon
		{" X: a", "", "", false},   // obs-fold
		{": a", "", "", false},     // no name
		{"X a", "", "", false},     // no colon
		{"X: a\rb", "", "", false}, // a CR in the value
		{"X: a\x7f", "", "", false},
		{"X(: a", "", "", false}, // a separator in the name
	} {
		name, value, ok := ParseFieldLine([]byte(tc.line))
		if ok != tc.ok || string(name) != tc.name || string(value) != tc.value {
			t.Errorf("ParseFieldLine(%q) = %q, %q, %v; want %q, %q, %v", tc.line, name, value, ok, tc.name, tc.value, tc.ok)
		}
	}
}

// TestCanonicalKey: the canonical form is textproto's, for common names
// (shared strings) and others, short and long.
func TestCanonicalKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	names := []string{"host", "HOST", "content-type", "x-forwarded-for", "a", "-a-", "x--y", "ETAG", "www-authenticate",
		strings.Repeat("long-name-", 10)}
	tokens := []byte("abcXYZ-0_9.~!")
	for range 2000 {
		n := make([]byte, 1+rng.IntN(12))
		for i := range n {
			n[i] = tokens[rng.IntN(len(tokens))]
		}
		names = append(names, string(n))
	}
	for _, n := range names {
		if got, want := CanonicalKey([]byte(n)), textproto.CanonicalMIMEHeaderKey(n); got != want {
			t.Errorf("CanonicalKey(%q) = %q, textproto says %q", n, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { CanonicalKey([]byte("user-agent")) }); n != 0 {
		t.Errorf("CanonicalKey of a common name: %v allocations, want 0", n)
	}
}
