package cassandra

import "testing"

// TestStoredKeys: a key never erased is stored as it is; an erased one
// under its epochs, read back as the same key and epochs; no key a
// gateway counts (a short key holds no "/", a tenant's name no "#") reads
// as one naming an epoch.
func TestStoredKeys(t *testing.T) {
	for _, k := range []string{"go", "#1.2", "#go", "acme/go", "acme/#1.2", "acme/", "/"} {
		if got := storedKey(k, epochs{}); got != k {
			t.Errorf("storedKey(%q, none) = %q", k, got)
		}
		if _, _, ok := parseStored(k); ok {
			t.Errorf("%q reads as a key naming an epoch", k)
		}
		for _, e := range []epochs{{0, 1}, {1795931460123456, 0}, {7, 1795931460123456}} {
			s := storedKey(k, e)
			if got, ge, ok := parseStored(s); !ok || got != k || ge != e {
				t.Errorf("parseStored(%q) = %q, %v, %v; want %q, %v", s, got, ge, ok, k, e)
			}
			if logicalKey(s) != k {
				t.Errorf("logicalKey(%q) = %q", s, logicalKey(s))
			}
		}
	}
	for _, s := range []string{"#/go", "#1/go", "#1.!/go", "#-1.2/go", "#1.2go"} {
		if _, _, ok := parseStored(s); ok {
			t.Errorf("%q reads as a key naming an epoch", s)
		}
	}
}
