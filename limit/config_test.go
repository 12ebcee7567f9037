package limit_test

import (
	"strings"
	"testing"

	"github.com/linkgate/linkgate/limit"
	"github.com/linkgate/linkgate/route"
)

// TestValidateNamesTheField: the fields of the edge hardening are checked,
// and a bad value's error names the field.
func TestValidateNamesTheField(t *testing.T) {
	email := limit.Rule{Name: "e", Match: route.Match{Path: "/login"}, Key: limit.Email, Limits: limits(t, "5/m")}
	withPolicy := func(r limit.Rule, p string) limit.Rule { r.OnUnreadable = p; return r }
	ip := email
	ip.Key = limit.IP
	for _, p := range []string{"", "reject", "skip", "key_by_ip"} {
		if err := withPolicy(email, p).Validate(); err != nil {
			t.Errorf("email rule, on_unreadable %q: %v", p, err)
		}
	}
	fold := func(f ...string) limit.Identity { id := limit.DefaultIdentity(); id.EmailFold = f; return id }
	pool := func(n int) limit.Config { c := limit.DefaultConfig(); c.Memcached.MaxIdleConns = n; return c }
	if err := fold(limit.FoldPlusTag, limit.FoldGmailDots).Validate(); err != nil {
		t.Errorf("email_fold with both folds: %v", err)
	}
	if err := pool(1).Validate(); err != nil {
		t.Errorf("max_idle_conns 1: %v", err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"unknown policy", withPolicy(email, "drop").Validate(), `on_unreadable: "drop" is not reject, skip or key_by_ip`},
		{"policy on an ip rule", withPolicy(ip, "skip").Validate(), "on_unreadable: only email rules"},
		{"unknown fold", fold("plus_tag", "dots").Validate(), `email_fold[1]: "dots" is not plus_tag or gmail_dots`},
		{"no connections", pool(0).Validate(), "memcached.max_idle_conns: 0 is not between 1 and 1024"},
		{"too many connections", pool(5000).Validate(), "memcached.max_idle_conns: 5000"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, tc.err, tc.want)
		}
	}
}
