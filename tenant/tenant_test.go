package tenant_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/linkgate/linkgate/tenant"
)

// TestCompile: a tenants list compiles into the tenant of each host (exact
// names before wildcards, a wildcard one label deep, any case and a port
// ignored); a bad list is an error naming the field.
func TestCompile(t *testing.T) {
	p, err := tenant.Compile([]tenant.Config{
		{Name: "acme", Hosts: []string{"go.acme.example", "*.acme.example"}},
		{Name: "other-1", Hosts: []string{"go.other.example", "x.acme.example"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]string{
		"go.acme.example":      "acme",
		"GO.ACME.EXAMPLE:8443": "acme",
		"b.acme.example":       "acme",
		"x.acme.example":       "other-1", // the exact name wins
		"go.other.example":     "other-1",
		"a.b.acme.example":     "",
		"acme.example":         "",
		"go.acme.example.evil": "",
		"":                     "",
	} {
		if got := tenant.NewResolver(p, nil).Of(host); got != want {
			t.Errorf("Of(%q) = %q, want %q", host, got, want)
		}
	}
	if !p.Declared("acme") || p.Declared("nobody") || p.Len() != 2 {
		t.Errorf("Declared/Len: %v %v %d", p.Declared("acme"), p.Declared("nobody"), p.Len())
	}
	for _, c := range []struct {
		list []tenant.Config
		want string
	}{
		{[]tenant.Config{{Name: "Acme", Hosts: []string{"a.example"}}}, "tenants[0].name"},
		{[]tenant.Config{{Name: "", Hosts: []string{"a.example"}}}, "tenants[0].name"},
		{[]tenant.Config{{Name: "a/b", Hosts: []string{"a.example"}}}, "tenants[0].name"},
		{[]tenant.Config{{Name: strings.Repeat("a", 64), Hosts: []string{"a.example"}}}, "tenants[0].name"},
		{[]tenant.Config{{Name: "a", Hosts: []string{"a.example"}}, {Name: "a", Hosts: []string{"b.example"}}}, "tenants[1].name"},
		{[]tenant.Config{{Name: "a"}}, "tenants[0].hosts"},
		{[]tenant.Config{{Name: "a", Hosts: []string{"a.example"}}, {Name: "b", Hosts: []string{"A.example"}}}, "tenants[1].hosts[0]"},
		{[]tenant.Config{{Name: "a", Hosts: []string{"a.example", "*.*.example"}}}, "tenants[0].hosts[1]"},
		{[]tenant.Config{{Name: "a", Hosts: []string{"https://a.example/"}}}, "tenants[0].hosts[0]"},
		{[]tenant.Config{{Name: "a", Hosts: []string{"a.example"}, Retention: "soon"}}, "tenants[0].retention"},
		{[]tenant.Config{{Name: "a", Hosts: []string{"a.example"}, Retention: "10m"}}, "tenants[0].retention"},
		{[]tenant.Config{{Name: "a", Hosts: []string{"a.example"}, Retention: "-1d"}}, "tenants[0].retention"},
	} {
		if _, err := tenant.Compile(c.list); err == nil || !strings.HasPrefix(err.Error(), c.want+":") {
			t.Errorf("Compile(%+v) = %v, want an error naming %s", c.list, err, c.want)
		}
	}
}

// TestLearned: the ask endpoint's answers put hosts in tenants after the
// config's; a denied or tenantless answer forgets a host; a name that is
// not a tenant's is refused; at most MaxLearned hosts are kept.
func TestLearned(t *testing.T) {
	p, _ := tenant.Compile([]tenant.Config{{Name: "acme", Hosts: []string{"go.acme.example"}}})
	var l tenant.Learned
	r := tenant.NewResolver(p, &l)
	if !l.Set("links.shop.example", "shop") || r.Of("LINKS.shop.example:443") != "shop" {
		t.Errorf("a learned host: %q", r.Of("links.shop.example"))
	}
	if !l.Set("go.acme.example", "shop") || r.Of("go.acme.example") != "acme" {
		t.Errorf("the config's tenant must win: %q", r.Of("go.acme.example"))
	}
	if l.Set("bad.example", "Bad Name") || r.Of("bad.example") != "" {
		t.Errorf("an invalid tenant name was learned")
	}
	if !l.Set("links.shop.example", "") || r.Of("links.shop.example") != "" || l.Len() != 1 {
		t.Errorf("a host taken out of its tenant: %q, %d known", r.Of("links.shop.example"), l.Len())
	}
	for i := l.Len(); i < tenant.MaxLearned; i++ {
		l.Set(fmt.Sprintf("h%d.example", i), "t")
	}
	if l.Set("one-too-many.example", "t") || r.Of("one-too-many.example") != "" || l.Len() != tenant.MaxLearned {
		t.Errorf("past MaxLearned: %d known", l.Len())
	}
	if !l.Set("h5.example", "u") || r.Of("h5.example") != "u" {
		t.Errorf("a known host moved to another tenant when full: %q", r.Of("h5.example"))
	}
}
