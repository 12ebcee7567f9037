package limit

import "testing"

// compileT compiles rules with the default identity, trusting no proxy.
func compileT(t testing.TB, rules []Rule, cfg Config) *Plan {
	t.Helper()
	p, err := Compile(rules, DefaultIdentity(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
