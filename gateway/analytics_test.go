package gateway_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// analyticsConfig puts the gateway in front of upstream with visit counting
// on, no limiter rules. Its stats section comes first, so that a test can
// add to it (withStats) and go on adding to the analytics section.
func analyticsConfig(upstream, store, flush string) string {
	return fmt.Sprintf(`server:
  listen: 127.0.0.1:0
admin:
  listen: 127.0.0.1:0
upstream:
  targets: [%s]
  health_check: {path: /healthz, interval: 100ms}
stats:
  read_timeout: %v
analytics:
  flush_interval: %s
%s
`, upstream, statsReadTimeout(), flush, store)
}

// statsReadTimeout is the stats.read_timeout of analyticsConfig: 5 s
// stretched by the machine's pace, within the field's bound of a minute,
// taken once per test binary. Past it /stats answers partially, from
// memory alone, which a loaded machine's store reads would otherwise make
// of the answers these tests count on.
var statsReadTimeout = sync.OnceValue(func() time.Duration { return min(testkit.Slack(5*time.Second), time.Minute) })

// withStats adds settings (lines indented by two spaces) to the stats
// section of an analyticsConfig.
func withStats(cfg, settings string) string { return within(cfg, "stats", settings) }

// withAdmin turns the admin API of an analyticsConfig on, with the token
// in LG_TEST_ADMIN_TOKEN.
func withAdmin(cfg string) string { return within(cfg, "admin", "  token_env: LG_TEST_ADMIN_TOKEN\n") }

// within adds settings (lines indented by two spaces) at the top of the
// section of cfg named section.
func within(cfg, section, settings string) string {
	return strings.Replace(cfg, section+":\n", section+":\n"+settings, 1)
}

// nodeConfig is analyticsConfig on the Cassandra keyspace ks of hosts.
// Each gateway has a journal of its own (a journal directory is held by
// one process): beside an embedded path of its own.
func nodeConfig(t *testing.T, upstream string, hosts []string, ks, flush string) string {
	store := fmt.Sprintf("  store: cassandra\n  cassandra: {hosts: [%s], keyspace: %s}\n  embedded: {path: %s}",
		strings.Join(hosts, ", "), ks, filepath.Join(t.TempDir(), "analytics"))
	return analyticsConfig(upstream, store, flush)
}

func embeddedStore(dir string) string {
	return "  store: embedded\n  embedded: {path: " + dir + "}"
}

type statsAnswer struct {
	Partial       bool      `json:"partial"` // the store not read in time: what memory holds only
	ShortKey      string    `json:"short_key"`
	Total         int64     `json:"total"`
	BotTotal      int64     `json:"bot_total"`
	RangeTotal    int64     `json:"range_total"`
	BotRangeTotal int64     `json:"bot_range_total"`
	Step          int64     `json:"step"`
	Points        [][]int64 `json:"points"`
}

func stats(t testing.TB, gw *running, path string) statsAnswer {
	t.Helper()
	return getJSON[statsAnswer](t, testkit.Client, gw.url(path), "Accept", "application/json")
}

func TestVisitsCounted(t *testing.T) {
	up := tinyURL(t)
	gw := start(t, analyticsConfig(up.URL, embeddedStore(t.TempDir()), "10s"))
	visit := func(method, path string, hdr ...string) int {
		resp, _ := testkit.Do(t, method, gw.url(path), nil, hdr...)
		return resp.StatusCode
	}
	for i := 0; i < 3; i++ {
		if got := visit("GET", "/go"); got != 302 {
			t.Fatalf("GET /go: %d", got)
		}
	}
	if got := visit("HEAD", "/go"); got != 302 {
		t.Fatalf("HEAD /go: %d", got)
	}
	if got := visit("GET", "/no-such-key"); got != 404 {
		t.Fatalf("unknown key: %d", got)
	}
	visit("GET", "/go", "User-Agent", "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)")
	visit("GET", "/go", "User-Agent", "Twitterbot/1.0")

	// Counts still in memory show up at once, without waiting for a flush.
	got := stats(t, gw, "/stats/go?last=1h")
	if got.Total != 4 || got.BotTotal != 2 || got.RangeTotal != 4 || got.BotRangeTotal != 2 {
		t.Errorf("/stats/go = %+v, want total 4, bot_total 2", got)
	}
	var sum int64
	for _, p := range got.Points {
		sum += p[1]
	}
	if sum != 4 || got.Step != 60 {
		t.Errorf("points sum %d step %d, want 4 per-minute visits", sum, got.Step)
	}
	if none := stats(t, gw, "/stats/no-such-key"); none.Total != 0 || none.RangeTotal != 0 {
		t.Errorf("a 404 was counted: %+v", none)
	}
	if all := stats(t, gw, "/stats?last=1h"); all.Total != 4 || all.BotTotal != 2 {
		t.Errorf("/stats (all links) = %+v", all)
	}
	resp, b := testkit.Do(t, "GET", gw.url("/stats/go?format=csv&last=1h"), nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(b, "unix_seconds,count") {
		t.Errorf("csv: %d %.200s", resp.StatusCode, b)
	}
	resp, b = testkit.Do(t, "GET", gw.url("/stats/go?last=banana"), nil)
	testkit.Problem(t, resp, b, 400)
}

func TestConcurrentVisitsExact(t *testing.T) {
	t.Parallel()
	up := tinyURL(t)
	gw := start(t, analyticsConfig(up.URL, embeddedStore(t.TempDir()), "200ms"))
	const workers, each = 16, 60
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			for i := 0; i < each; i++ {
				if resp, _ := testkit.Do(t, "GET", gw.url("/gh"), nil); resp.StatusCode != 302 {
					t.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
	}
	wg.Wait()
	const want = workers * each
	// A visit is recorded once its answer is written: the last ones may
	// come a moment after their client read them.
	testkit.Eventually(t, 5*time.Second, "every visit recorded", func() bool { return stats(t, gw, "/stats/gh?last=1h").Total >= want })
	// slowWrites counts the writes to the store that took over 256 ms:
	// past what a read's tries wait for one (100 ms each), so that a read
	// meanwhile may count part of its batch twice, as Flusher.Reader says
	// (a store that hangs; a busy machine's disk too).
	slowWrites := func() float64 {
		return metric(t, gw, "linkgate_analytics_flush_duration_seconds_count") -
			metric(t, gw, `linkgate_analytics_flush_duration_seconds_bucket{le="0.256"}`)
	}
	// Read while flushes run every 200ms: never less; never more, but
	// while such a write goes on.
	for i := 0; i < 10; i++ {
		before := slowWrites()
		got := stats(t, gw, "/stats/gh?last=1h")
		if got.Total < want || got.RangeTotal < want {
			t.Fatalf("read %d: total %d range_total %d, want %d", i, got.Total, got.RangeTotal, want)
		}
		if got.Total > want || got.RangeTotal > want {
			testkit.Eventually(t, 10*time.Second, fmt.Sprintf("read %d counted total %d range_total %d, want %d: a write slower than a read's tries to account for it", i, got.Total, got.RangeTotal, want),
				func() bool { return slowWrites() > before })
			t.Logf("read %d: total %d range_total %d while a write took over 256 ms: part of its batch counted twice", i, got.Total, got.RangeTotal)
		}
	}
}

// TestShutdownFlushesAndRestartKeeps: with a flush interval far away, only
// the flush at shutdown can write the visits; a new gateway on the same
// directory must serve them.
func TestShutdownFlushesAndRestartKeeps(t *testing.T) {
	t.Parallel()
	up := tinyURL(t)
	cfg := analyticsConfig(up.URL, embeddedStore(t.TempDir()), "1h")
	gw := start(t, cfg)
	for i := 0; i < 7; i++ {
		testkit.Do(t, "GET", gw.url("/ex"), nil)
	}
	if err := gw.shutdown(); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	gw2 := start(t, cfg)
	for _, q := range []string{"/stats/ex?last=1h", "/stats/ex?last=30d", "/stats/ex?last=1y&step=1w"} {
		if got := stats(t, gw2, q); got.Total != 7 || got.RangeTotal != 7 {
			t.Errorf("after restart %s: %+v, want 7", q, got)
		}
	}
}

// TestTwoGatewaysAddUpOnNode: two gateways on one Cassandra node
// (CASSANDRA_HOSTS), the store they share, count visits that add up, as a
// third gateway reads them.
func TestTwoGatewaysAddUpOnNode(t *testing.T) {
	hosts := testkit.CassandraHosts(t)
	ks := testkit.CassandraKeyspace(t, hosts, "linkgate_e2e")
	up := tinyURL(t)
	cfg := func() string { return nodeConfig(t, up.URL, hosts, ks, "500ms") }
	gw1 := start(t, cfg())
	gw2 := start(t, cfg())
	// The stores connect in the background, after "listening": wait
	// until both answer from the store (until then answers are partial).
	var before int64
	testkit.Eventually(t, 60*time.Second, "Cassandra connected", func() bool {
		resp, b := testkit.Do(t, "GET", gw1.url("/stats/go?last=1h"), nil)
		resp2, b2 := testkit.Do(t, "GET", gw2.url("/stats/go?last=1h"), nil)
		if resp.StatusCode == 200 && resp2.StatusCode == 200 && !strings.Contains(b+b2, `"partial":true`) {
			var a statsAnswer
			json.Unmarshal([]byte(b), &a)
			before = a.Total
			return true
		}
		return false
	})
	for i := 0; i < 25; i++ {
		testkit.Do(t, "GET", gw1.url("/go"), nil)
		testkit.Do(t, "GET", gw2.url("/go"), nil)
	}
	gw1.shutdown()
	gw2.shutdown()
	gw3 := start(t, cfg())
	testkit.Eventually(t, 60*time.Second, "the two gateways' visits add up", func() bool {
		resp, b := testkit.Do(t, "GET", gw3.url("/stats/go?last=1h"), nil)
		var a statsAnswer
		return resp.StatusCode == 200 && !strings.Contains(b, `"partial":true`) && json.Unmarshal([]byte(b), &a) == nil && a.Total == before+50
	})
}

// TestStoreOutageLosesNothing: a gateway whose store cannot be reached (a
// Cassandra address nothing listens on) keeps redirecting and counting,
// answers /stats from what it holds, flagged partial, and at shutdown
// journals what it could not write. The next gateway on a store that works
// (the embedded one, sharing the journal directory) writes the journal:
// every visit is there, once.
func TestStoreOutageLosesNothing(t *testing.T) {
	t.Parallel()
	up := tinyURL(t)
	dir := t.TempDir()
	embedded := "  embedded: {path: " + filepath.Join(dir, "analytics") + "}"
	down := fmt.Sprintf("  store: cassandra\n  cassandra: {hosts: [%s]}\n%s", testkit.DeadAddr(t), embedded)
	gw := start(t, analyticsConfig(up.URL, down, "200ms"))
	for i := 0; i < 9; i++ {
		if resp, _ := testkit.Do(t, "GET", gw.url("/go"), nil); resp.StatusCode != 302 {
			t.Fatalf("visit %d with the store down: %d", i, resp.StatusCode)
		}
	}
	testkit.Do(t, "GET", gw.url("/gh"), nil, "User-Agent", "Twitterbot/1.0")
	// /stats answers from memory, saying so (TestStatsPartialWhileStoreDown).
	if resp, b := testkit.Do(t, "GET", gw.url("/stats/go"), nil); resp.StatusCode != 200 || !strings.Contains(b, `"partial":true`) {
		t.Errorf("/stats/go with the store down: %d %s, want a 200 partial answer", resp.StatusCode, b)
	}
	testkit.Eventually(t, 5*time.Second, "failed flushes logged", func() bool {
		return gw.logs.Logged("analytics: flush failed; counts kept for a retry", nil)
	})
	if err := gw.shutdown(); err != nil {
		t.Fatalf("shutdown with the store down: %v", err)
	}

	gw2 := start(t, analyticsConfig(up.URL, "  store: embedded\n"+embedded, "200ms"))
	testkit.Eventually(t, 5*time.Second, "journaled visits written", func() bool {
		return stats(t, gw2, "/stats/go?last=1h").Total == 9
	})
	journalDone(t, gw2) // nothing may be written twice after
	if got := stats(t, gw2, "/stats/go?last=1h"); got.Total != 9 || got.RangeTotal != 9 {
		t.Errorf("/stats/go = %+v, want 9 visits", got)
	}
	if got := stats(t, gw2, "/stats?last=1h"); got.Total != 9 || got.BotTotal != 1 {
		t.Errorf("/stats = %+v, want 9 human visits and 1 bot visit", got)
	}
}

// TestFullDiskShutdownJournalElsewhere: the embedded store's disk is full
// when the gateway stops, but its journal is on another disk: the final
// flush journals what the store refuses, the shutdown reports no error
// (the process exits 0), and the next gateway, with space back, counts
// every visit once. (With the journal on the full disk too, the visits
// are lost and the exit says how many: TestFullDiskSIGTERM in
// cmd/gateway.)
func TestFullDiskShutdownJournalElsewhere(t *testing.T) {
	t.Parallel()
	disk := testkit.Tmpfs(t, 64<<20, "TestStoreOutageLosesNothing covers the journal at shutdown without privileges")
	up := tinyURL(t)
	cfg := healthConfig(up.URL, filepath.Join(disk, "analytics")) + "  journal: {path: " + filepath.Join(t.TempDir(), "journal") + "}\n"
	gw := start(t, cfg)
	testkit.Eventually(t, 10*time.Second, "the store open", func() bool { return health(t, gw).Analytics.State == "ok" })
	free := testkit.Fill(t, disk, 0)
	const visits = 30
	for i := range visits {
		if resp, _ := testkit.Do(t, "GET", gw.url("/go"), nil); resp.StatusCode != 302 {
			t.Fatalf("visit %d on a full disk: %d", i, resp.StatusCode)
		}
	}
	testkit.Eventually(t, 10*time.Second, "a failed flush", func() bool {
		return gw.logs.Logged("analytics: flush failed; counts kept for a retry", nil)
	})
	if err := gw.shutdown(); err != nil {
		t.Fatalf("shutdown with the journal writable: %v", err)
	}
	free()

	gw2 := start(t, cfg)
	testkit.Eventually(t, 10*time.Second, "the journaled visits written", func() bool {
		return stats(t, gw2, "/stats/go?last=1h").Total == visits
	})
	journalDone(t, gw2) // nothing may be written twice after
	if got := stats(t, gw2, "/stats/go?last=1h"); got.Total != visits || got.RangeTotal != visits {
		t.Errorf("/stats/go after the restart = %+v, want %d visits", got, visits)
	}
}

// journalDone waits until gw's journal holds no record: what it replayed
// is acknowledged, and nothing is left to write again.
func journalDone(t *testing.T, gw *running) {
	t.Helper()
	testkit.Eventually(t, 5*time.Second, "the journal replayed and emptied", func() bool {
		return metric(t, gw, "linkgate_analytics_journal_records") == 0
	})
}

// TestStatsToken: with stats.token_env naming a set variable, data answers
// need the bearer token, whatever the case of the scheme; the chart page
// itself holds no data and is served to anyone.
func TestStatsToken(t *testing.T) {
	setenv(t, "LG_TEST_STATS_TOKEN", "stats-s3cret")
	up := tinyURL(t)
	gw := start(t, withStats(analyticsConfig(up.URL, embeddedStore(t.TempDir()), "10s"), "  token_env: LG_TEST_STATS_TOKEN\n"))
	for _, tc := range []struct {
		auth   string
		status int
	}{
		{"", 401}, {"Bearer wrong", 401}, {"Basic stats-s3cret", 401},
		{"Bearer stats-s3cret", 200}, {"bearer stats-s3cret", 200}, {"BEARER  stats-s3cret", 200},
	} {
		var hdr []string
		if tc.auth != "" {
			hdr = []string{"Authorization", tc.auth}
		}
		resp, b := testkit.Do(t, "GET", gw.url("/stats/go?last=1h"), nil, append(hdr, "Accept", "application/json")...)
		if resp.StatusCode != tc.status {
			t.Errorf("Authorization %q: %d %s, want %d", tc.auth, resp.StatusCode, b, tc.status)
		}
		if tc.status == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer ") {
			t.Errorf("Authorization %q: 401 without a bearer challenge", tc.auth)
		}
	}
	if resp, _ := testkit.Do(t, "GET", gw.url("/stats/go"), nil, "Accept", "text/html"); resp.StatusCode != 200 {
		t.Errorf("the chart page without a token: %d, want 200", resp.StatusCode)
	}
}
