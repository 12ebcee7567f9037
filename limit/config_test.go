package limit_test

import (
	"strings"
	"testing"

	"github.com/linkgate/linkgate/limit"
)

// TestCompileEdgeFields: the fields of the edge hardening are checked, and
// a bad value's error names the field.
func TestCompileEdgeFields(t *testing.T) {
	email := limit.Rule{Name: "e", Match: limit.Match{Path: "/login"}, Key: limit.Email, Limits: limits(t, "5/m")}
	withPolicy := func(r limit.Rule, p string) []limit.Rule { r.OnUnreadable = p; return []limit.Rule{r} }
	ip := email
	ip.Key = limit.IP
	fold := func(f ...string) limit.Identity { id := limit.DefaultIdentity(); id.EmailFold = f; return id }
	pool := func(n int) limit.Config { c := limit.DefaultConfig(); c.Memcached.MaxIdleConns = n; return c }
	compile := func(rules []limit.Rule, id limit.Identity, cfg limit.Config) error {
		_, err := limit.Compile(rules, id, cfg, nil)
		return err
	}
	for _, p := range []string{"", "reject", "skip", "key_by_ip"} {
		if err := compile(withPolicy(email, p), limit.DefaultIdentity(), limit.DefaultConfig()); err != nil {
			t.Errorf("email rule, on_unreadable %q: %v", p, err)
		}
	}
	if err := compile(nil, fold(limit.FoldPlusTag, limit.FoldGmailDots), limit.DefaultConfig()); err != nil {
		t.Errorf("email_fold with both folds: %v", err)
	}
	if err := compile(nil, limit.DefaultIdentity(), pool(1)); err != nil {
		t.Errorf("max_idle_conns 1: %v", err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"unknown policy", compile(withPolicy(email, "drop"), limit.DefaultIdentity(), limit.DefaultConfig()), `rules[0].on_unreadable: "drop" is not reject, skip or key_by_ip`},
		{"policy on an ip rule", compile(withPolicy(ip, "skip"), limit.DefaultIdentity(), limit.DefaultConfig()), "rules[0].on_unreadable: only email rules"},
		{"unknown fold", compile(nil, fold("plus_tag", "dots"), limit.DefaultConfig()), `identity.email_fold[1]: "dots" is not plus_tag or gmail_dots`},
		{"no connections", compile(nil, limit.DefaultIdentity(), pool(0)), "limiter.memcached.max_idle_conns: 0 is less than 1; it can be 1 to 1024"},
		{"too many connections", compile(nil, limit.DefaultIdentity(), pool(5000)), "limiter.memcached.max_idle_conns: 5000"},
	} {
		if tc.err == nil || !strings.HasPrefix(tc.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one starting with %q", tc.name, tc.err, tc.want)
		}
	}
}
