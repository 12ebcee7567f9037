package visitclass

import (
	_ "embed"
	"strings"
)

// stacks is the list of HTTP libraries' TLS stacks; see stacks.txt.
//
//go:embed stacks.txt
var stacks string

// libraryCiphers holds the JA4_b parts of stacks.txt.
var libraryCiphers = parseStacks(stacks)

func parseStacks(s string) map[string]bool {
	m := map[string]bool{}
	for line := range strings.Lines(s) {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			m[f[0]] = true
		}
	}
	return m
}

// LibraryStacks returns the JA4_b parts of the HTTP libraries' TLS stacks
// Classify knows (stacks.txt).
func LibraryStacks() []string {
	out := make([]string, 0, len(libraryCiphers))
	for k := range libraryCiphers {
		out = append(out, k)
	}
	return out
}

// claimsBrowser reports whether the User-Agent ua is a browser's: Mozilla/5.0
// and a browser's product token. (The unfurlers whose User-Agents read so
// were matched before.)
func claimsBrowser(ua string) bool {
	if !strings.HasPrefix(ua, "Mozilla/5.0 ") {
		return false
	}
	for _, tok := range []string{"Chrome/", "Firefox/", "Safari/", "CriOS/", "FxiOS/", "Edg/", "OPR/"} {
		if strings.Contains(ua, tok) {
			return true
		}
	}
	return false
}

// browserTLS reports whether the JA4 fingerprint fp may be a browser's: it
// offers an ALPN protocol (every browser offers h2 and http/1.1) and its
// cipher part is no HTTP library's. A fingerprint not in JA4's form is
// given the benefit of the doubt.
func browserTLS(fp string) bool {
	// t13d1516h2_8daaf6152771_e5627efa2ab1: a is 10 bytes, b and c 12.
	if len(fp) != 36 || fp[10] != '_' || fp[23] != '_' {
		return true
	}
	if fp[8:10] == "00" {
		return false
	}
	return !libraryCiphers[fp[11:23]]
}
