package gateway_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// partialAnswer is a /stats JSON answer with the fields that say how much
// it knows; a null count decodes as a nil pointer.
type partialAnswer struct {
	Known         *bool      `json:"known"`
	Partial       bool       `json:"partial"`
	PartialReason string     `json:"partial_reason"`
	Total         int64      `json:"total"`
	BotTotal      int64      `json:"bot_total"`
	RangeTotal    int64      `json:"range_total"`
	Step          int64      `json:"step"`
	Points        [][]*int64 `json:"points"`
}

// TestStatsPartialWhileStoreDown runs a gateway whose store cannot be
// reached (a Cassandra address nothing listens on): /stats still answers
// 200, from the visits it holds in memory and those its failed flushes
// kept, each in its minute, every other minute null rather than zero, and
// says it is partial (in JSON and, for CSV, in a header). A key with
// nothing in memory is neither known nor unknown.
func TestStatsPartialWhileStoreDown(t *testing.T) {
	t.Parallel()
	up := tinyURL(t)
	down := fmt.Sprintf("  store: cassandra\n  cassandra: {hosts: [%s]}\n  embedded: {path: %s}",
		testkit.DeadAddr(t), t.TempDir())
	gw := start(t, analyticsConfig(up.URL, down, "200ms"))
	get := func(path string) partialAnswer {
		t.Helper()
		return getJSON[partialAnswer](t, testkit.Client, gw.url(path), "Accept", "application/json")
	}
	visit := func(n int, key string, hdr ...string) {
		t.Helper()
		for range n {
			if resp, _ := testkit.Do(t, "GET", gw.url("/"+key), nil, hdr...); resp.StatusCode != 302 {
				t.Fatalf("visit /%s with the store down: %d", key, resp.StatusCode)
			}
		}
	}
	visit(6, "go")
	// Let flushes fail: those visits now wait in the retry queue.
	testkit.Eventually(t, 5*time.Second, "a failed flush logged", func() bool {
		return gw.logs.Logged("analytics: flush failed; counts kept for a retry", nil)
	})
	visit(3, "go")
	visit(1, "go", "User-Agent", "Twitterbot/1.0")

	a := get("/stats/go?last=1h")
	if !a.Partial || a.PartialReason != "store unreachable" || a.Known == nil || !*a.Known {
		t.Errorf("partial %v %q, known %v; want a partial answer of a known link", a.Partial, a.PartialReason, a.Known)
	}
	if a.Total != 9 || a.BotTotal != 1 || a.RangeTotal != 9 || a.Step != 60 {
		t.Errorf("totals %d, %d, range %d, step %d; want the 9 human and 1 bot visits held, per minute", a.Total, a.BotTotal, a.RangeTotal, a.Step)
	}
	var human, numbers int64
	for _, p := range a.Points {
		if p[1] == nil {
			continue
		}
		numbers++
		human += *p[1]
		if *p[1] == 0 && *p[2] == 0 {
			t.Errorf("point %d is a zero: with the store down a minute without held visits is unknown", *p[0])
		}
	}
	// The visits took a few seconds at most: one or two minutes hold them.
	if human != 9 || numbers < 1 || numbers > 2 || len(a.Points) != 61 {
		t.Errorf("%d of %d points are numbers, summing to %d; want 1 or 2 holding all 9", numbers, len(a.Points), human)
	}

	if ex := get("/stats/ex?last=1h"); !ex.Partial || ex.Known != nil || ex.Total != 0 || ex.Points[0][1] != nil {
		t.Errorf("/stats/ex: partial %v, known %v, total %d, first point %v; want partial, known null, nulls", ex.Partial, ex.Known, ex.Total, ex.Points[0])
	}
	if all := get("/stats?last=1h"); !all.Partial || all.Total != 9 || all.BotTotal != 1 {
		t.Errorf("/stats: partial %v, totals %d, %d; want partial, 9 and 1", all.Partial, all.Total, all.BotTotal)
	}
	resp, b := testkit.Do(t, "GET", gw.url("/stats/go?last=1h&format=csv"), nil)
	if resp.StatusCode != 200 || resp.Header.Get("Linkgate-Partial") != "store unreachable" || resp.Header.Get("Linkgate-Known") != "true" {
		t.Errorf("CSV: %d, Linkgate-Partial %q, Linkgate-Known %q", resp.StatusCode, resp.Header.Get("Linkgate-Partial"), resp.Header.Get("Linkgate-Known"))
	}
	if n := strings.Count(b, ",,\n"); n < 59 {
		t.Errorf("CSV: %d rows with empty cells, want 59 or more of 61:\n%s", n, b)
	}
	if !gw.logs.Logged("stats: store not read; answering from unsaved counts", map[string]string{"key": "go"}) {
		t.Error("the failed store read was not logged")
	}
}
