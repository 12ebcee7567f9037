package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// TestEraseTwoGatewaysOnNode: two gateways share a Cassandra keyspace
// (CASSANDRA_HOSTS). acme's go is visited through both and flushed; it is
// erased through the first gateway's POST /admin/erase; one visit later
// through the second, whose breakdowns and top-list counts of its writer
// generation still held the visits from before, both gateways read 1
// visit of it: total, breakdown and top list. Another link keeps its
// counts.
func TestEraseTwoGatewaysOnNode(t *testing.T) {
	hosts := testkit.CassandraHosts(t)
	ks := testkit.CassandraKeyspace(t, hosts, "linkgate_erase_e2e")
	up := tinyURL(t)
	cfg := func() string {
		return withAdmin(nodeConfig(t, up.URL, hosts, ks, "300ms")) + "tenants:\n  - {name: acme, hosts: [go.acme.test]}\n"
	}
	a, b := start(t, cfg()), start(t, cfg())
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	visit := func(gw *running, key string, n int) {
		t.Helper()
		for range n {
			req, _ := http.NewRequest("GET", gw.url("/"+key), nil)
			req.Host = "go.acme.test"
			req.Header.Set("Referer", "https://news.example/")
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 302 {
				t.Fatalf("visit of %s: %d", key, resp.StatusCode)
			}
		}
	}
	// read returns what gw reads of acme's key: its total, its breakdown
	// by referrer and its place in acme's top list, once the store
	// answered.
	read := func(gw *running, key string) (total, referred, top int64, ok bool) {
		resp, body := testkit.Do(t, "GET", gw.url("/stats/"+key+"?last=1h&tenant=acme"), nil, "Accept", "application/json")
		var s statsAnswer
		if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &s) != nil || s.Partial {
			return 0, 0, 0, false
		}
		resp, body = testkit.Do(t, "GET", gw.url("/stats/"+key+"?last=1h&tenant=acme&by=referrer"), nil, "Accept", "application/json")
		var by struct {
			Partial   bool `json:"partial"`
			Breakdown map[string][]struct {
				Value string `json:"value"`
				Count int64  `json:"count"`
			} `json:"breakdown"`
		}
		if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &by) != nil || by.Partial {
			return 0, 0, 0, false
		}
		for _, v := range by.Breakdown["referrer"] {
			referred += v.Count
		}
		resp, body = testkit.Do(t, "GET", gw.url("/stats?last=1h&top=10&tenant=acme"), nil, "Accept", "application/json")
		var tops struct {
			Partial bool `json:"partial"`
			Top     []struct {
				Key   string `json:"short_key"`
				Total int64  `json:"total"`
			} `json:"top"`
		}
		if resp.StatusCode != 200 || json.Unmarshal([]byte(body), &tops) != nil || tops.Partial {
			return 0, 0, 0, false
		}
		for _, l := range tops.Top {
			if l.Key == key {
				top = l.Total
			}
		}
		return s.Total, referred, top, true
	}
	until := func(what string, gw *running, key string, want int64) {
		t.Helper()
		var last string
		defer func() {
			if t.Failed() {
				t.Logf("%s: last read %s", what, last)
			}
		}()
		testkit.Eventually(t, 60*time.Second, what, func() bool {
			total, referred, top, ok := read(gw, key)
			last = fmt.Sprintf("total %d, referred %d, in the top list %d, answered %v", total, referred, top, ok)
			return ok && total == want && referred == want && top == want
		})
	}
	visit(a, "go", 3)
	visit(b, "go", 4)
	visit(b, "gh", 2)
	until("both gateways' visits stored", a, "go", 7)
	until("both gateways' visits stored", b, "go", 7)

	resp, body := testkit.Do(t, "POST", a.admin("/admin/erase"), strings.NewReader(`{"tenant": "acme", "short_key": "go"}`),
		"Authorization", "Bearer "+testkit.AdminToken, "Content-Type", "application/json")
	if resp.StatusCode != 200 || !strings.Contains(body, `"erased_at"`) {
		t.Fatalf("POST /admin/erase acme's go on Cassandra: %d %s", resp.StatusCode, body)
	}
	visit(b, "go", 1)
	until("the visit after the erasure alone, through the gateway that erased", a, "go", 1)
	until("the visit after the erasure alone, through the other gateway", b, "go", 1)
	until("the other link kept", a, "gh", 2)
}
