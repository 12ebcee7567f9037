package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/internal/testkit"
)

// The tests here check the table of docs/durability.md against the
// real binary: kill -9 at a random moment of a store outage, a full disk at
// SIGTERM. Visits sent are counted from the upstream's 302 answers the
// client got; visits counted are what /stats says once the next process
// has written the journal.

const durableInterval = time.Second

// redirector is an upstream that answers 302 to every short key.
func redirector(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			return
		}
		http.Redirect(w, r, "https://example.com/", http.StatusFound)
	}))
	t.Cleanup(up.Close)
	return up
}

// analyticsGateway is a gateway in front of up with analytics settings
// (indented by two spaces) and flushes every durableInterval. Its
// stats.read_timeout is 5 s stretched by the machine's pace (within the
// field's bound of a minute): past it /stats answers from memory alone,
// which statsTotal does not take.
func analyticsGateway(up string, settings string) string {
	return strings.Replace(testkit.BaseConfig(up), "analytics:\n  enabled: false\n",
		fmt.Sprintf("stats:\n  read_timeout: %v\nanalytics:\n  flush_interval: %v\n%s",
			min(testkit.Slack(5*time.Second), time.Minute), durableInterval, settings), 1)
}

// visitor sends visits to 20 links until stopped, noting when each 302
// arrived. The visits come from three referrers in turn (one of them
// none: "direct"), so that a breakdown can be checked against the count.
type visitor struct {
	mu   sync.Mutex
	at   []time.Time
	stop chan struct{}
	done chan struct{}
}

func visit(url string) *visitor {
	v := &visitor{stop: make(chan struct{}), done: make(chan struct{})}
	c := &http.Client{Timeout: 2 * time.Second, CheckRedirect: testkit.Client.CheckRedirect}
	go func() {
		defer close(v.done)
		for i := 0; ; i++ {
			select {
			case <-v.stop:
				return
			default:
			}
			req, _ := http.NewRequest("GET", fmt.Sprintf("%s/link%02d", url, i%20), nil)
			if ref := referrers[i%len(referrers)]; ref != "" {
				req.Header.Set("Referer", ref)
			}
			resp, err := c.Do(req)
			if err != nil {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusFound {
				v.mu.Lock()
				v.at = append(v.at, time.Now())
				v.mu.Unlock()
			}
			time.Sleep(5 * time.Millisecond) // a steady load, light enough for tests running beside it
		}
	}()
	return v
}

// referrers are the Referer headers of the visitor's visits, in turn.
var referrers = []string{"https://news.example/story", "", "https://t.co/x"}

func (v *visitor) halt() {
	close(v.stop)
	<-v.done
}

// sent returns the visits answered 302, and those whose answer came after
// since.
func (v *visitor) sent(since time.Time) (all, after int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, at := range v.at {
		if at.After(since) {
			after++
		}
	}
	return len(v.at), after
}

// kill9 kills the process with SIGKILL and waits for it.
func (p *process) kill9() time.Time {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	return time.Now()
}

// statsTotal returns /stats' all-time total of all links (human + bot),
// false when it could not read the store's.
func statsTotal(t *testing.T, gw *process) (int, bool) {
	resp, err := testkit.Client.Get(gw.url("gateway", "/stats?last=1h"))
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	var a struct {
		Total, BotTotal int64
		Partial         bool
	}
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&a) != nil || a.Partial {
		return 0, false
	}
	return int(a.Total + a.BotTotal), true
}

// settle waits until /stats has at least want visits and is steady for
// three intervals (a replay writing twice would show), and returns it.
func settle(t *testing.T, gw *process, want int) int {
	t.Helper()
	return settleOn(t, want, func() (int, bool) { return statsTotal(t, gw) })
}

// settleOn is settle of the visits read counts (false: not read).
func settleOn(t *testing.T, want int, read func() (int, bool)) int {
	t.Helper()
	deadline := time.Now().Add(testkit.Slack(20 * time.Second))
	last, steady := -1, 0
	for time.Now().Before(deadline) {
		got, ok := read()
		if ok && got == last && got >= want {
			steady++
			if steady >= 3 {
				return got
			}
		} else {
			steady = 0
		}
		last = got
		time.Sleep(durableInterval)
	}
	return last
}

// checkLoss compares what was sent with what is counted: nothing counted
// twice, at most the visits answered after mayLoseAfter lost (after the
// newest batch stored or journaled before the kill: see watchStored and
// journaledUpTo).
func checkLoss(t *testing.T, row string, v *visitor, mayLoseAfter time.Time, counted int) {
	t.Helper()
	sent, mayLose := v.sent(mayLoseAfter)
	lost := sent - counted
	t.Logf("%s: sent %d, counted %d, lost %d (%d answered in the last interval, which the kill may lose)", row, sent, counted, lost, mayLose)
	if counted > sent {
		t.Errorf("%s: %d visits counted, %d sent: %d counted twice", row, counted, sent, counted-sent)
	}
	if lost > mayLose {
		t.Errorf("%s: %d visits lost, more than the %d answered in the last interval", row, lost, mayLose)
	}
}

// checkBreakdown checks that the referrer breakdown of all links holds as
// many visits as the counts, counted visits, from the three referrers:
// the journal and its replay keep a visit's features with its count.
func checkBreakdown(t *testing.T, row string, gw *process, counted int) {
	t.Helper()
	var a struct {
		Partial   bool
		Breakdown struct {
			Referrer []struct {
				Value string
				Count int
			}
		}
	}
	// A partial answer (the store not answering the read in time) holds
	// what the gateway has in memory only: read again.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(durableInterval) {
		resp, err := testkit.Client.Get(gw.url("gateway", "/stats?last=1h&by=referrer"))
		if err != nil {
			t.Fatal(err)
		}
		err = json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: /stats?by=referrer: %d %v", row, resp.StatusCode, err)
		}
		if !a.Partial {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: /stats?by=referrer answers partial for a minute", row)
		}
	}
	sum, values := 0, map[string]bool{}
	for _, r := range a.Breakdown.Referrer {
		sum += r.Count
		values[r.Value] = true
	}
	if sum != counted || len(values) != 3 || !values["news.example"] || !values["direct"] || !values["t.co"] {
		t.Errorf("%s: referrers %+v: %d visits, want %d from news.example, direct and t.co", row, a.Breakdown.Referrer, sum, counted)
	}
}

// rounds is how many random kills a test makes: LINKGATE_KILL_ROUNDS, or
// one. A round costs several seconds of real time, and one random moment
// per run of the suite is what a newcomer's run can afford; the
// measurement run of the durability table sets more
// (LINKGATE_KILL_ROUNDS=5 go test -race -run Kill9 ./cmd/gateway/).
func rounds(t *testing.T) int {
	v := os.Getenv("LINKGATE_KILL_ROUNDS")
	if v == "" {
		return 1
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("LINKGATE_KILL_ROUNDS=%q: want a whole number of rounds, at least 1", v)
	}
	return n
}

// TestKill9DuringCassandraOutage: a gateway whose Cassandra is absent (a
// closed loopback port) journals every interval; kill -9 at a random moment
// after its first failed flush; the next process, on the embedded store and
// the same journal, writes it all. What may be lost is read from the
// journal, not the clock: the visits answered after the time of its newest
// batch (analytics.JournalNewest), which is at most the last interval.
// Needs no privileges.
func TestKill9DuringCassandraOutage(t *testing.T) {
	t.Parallel()
	up := redirector(t)
	rng := seeded(t, 9)
	for r := range rounds(t) {
		dir := t.TempDir()
		journal := filepath.Join(dir, "journal")
		local := fmt.Sprintf("  embedded: {path: %s}\n  journal: {path: %s}\n", filepath.Join(dir, "analytics"), journal)
		down := fmt.Sprintf("  store: cassandra\n  cassandra: {hosts: [%s]}\n%s", testkit.DeadAddr(t), local)
		gw, _ := startGateway(t, analyticsGateway(up.URL, down))
		v := visit(gw.url("gateway", ""))
		testkit.Eventually(t, 20*time.Second, "a failed flush, journaled", func() bool { return gw.logs.Logged(flushFailed, nil) })
		killed := killAtRandom(rng, gw, v)
		what := fmt.Sprintf("cassandra down, round %d", r)
		recount(t, what, analyticsGateway(up.URL, "  store: embedded\n"+local), v, journaledUpTo(t, what, journal, killed))
	}
}

// journaledUpTo returns the time of the newest batch in the journal dir of
// a gateway killed at killed (analytics.JournalNewest): every visit
// answered before it is journaled or stored, and must be counted.
func journaledUpTo(t *testing.T, what, dir string, killed time.Time) time.Time {
	t.Helper()
	newest, err := analytics.JournalNewest(dir)
	if err != nil || newest.IsZero() {
		t.Fatalf("%s: the journal's newest batch after a failed flush: %v, %v", what, newest, err)
	}
	t.Logf("%s: the journal's newest batch was made %v before the kill", what, killed.Sub(newest).Round(time.Millisecond))
	return newest
}

// seeded returns a random source of a seed it logs, on stream.
func seeded(t *testing.T, stream uint64) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, stream))
}

// killAtRandom kills gw with SIGKILL 1.5 to 4 s from now, stops the
// visitor, and returns when it killed.
func killAtRandom(rng *rand.Rand, gw *process, v *visitor) (killed time.Time) {
	time.Sleep(1500*time.Millisecond + time.Duration(rng.IntN(2500))*time.Millisecond)
	killed = gw.kill9()
	v.halt()
	return killed
}

// recount starts the next process on cfg after a kill -9, waits until it
// counted what v sent but the visits answered after mayLoseAfter (which
// the kill may lose), and checks the loss and the breakdown.
func recount(t *testing.T, what, cfg string, v *visitor, mayLoseAfter time.Time) {
	t.Helper()
	gw2, _ := startGateway(t, cfg)
	sent, mayLose := v.sent(mayLoseAfter)
	counted := settle(t, gw2, sent-mayLose)
	checkLoss(t, what, v, mayLoseAfter, counted)
	checkBreakdown(t, what, gw2, counted)
	gw2.stop()
}

// stored waits until the gateway has written visits to its store: its
// first healthy flushes.
func stored(t *testing.T, gw *process) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, "a first flush to the store", func() bool {
		n, ok := statsTotal(t, gw)
		return ok && n > 0
	})
}

// TestKill9DuringPebbleOutage: the embedded store's disk fills up (below
// its free-space reserve: every write refused) while visits come in; the
// journal, on another disk, takes every interval; kill -9 at a random
// moment; space returns; the next process writes the journal. Needs root
// for the tmpfs (skipped loudly otherwise).
func TestKill9DuringPebbleOutage(t *testing.T) {
	t.Parallel()
	up := redirector(t)
	rng := seeded(t, 11)
	for r := range rounds(t) {
		disk := testkit.Tmpfs(t, 256<<20, "TestKill9DuringCassandraOutage covers the journal without privileges")
		journal := filepath.Join(t.TempDir(), "journal")
		cfg := analyticsGateway(up.URL, fmt.Sprintf("  embedded: {path: %s}\n  journal: {path: %s}\n",
			filepath.Join(disk, "analytics"), journal))
		killDuringFullDisk(t, rng, fmt.Sprintf("pebble disk full, round %d", r), cfg, disk, journal, 16<<20)
	}
}

// killDuringFullDisk starts a gateway on cfg, waits for its first flushes,
// fills disk up to free bytes while visits come in, kills it with -9 at a
// random moment, and gives the space back; the next process must count
// what was sent before the newest batch of the journal in journal
// (recount).
func killDuringFullDisk(t *testing.T, rng *rand.Rand, what, cfg, disk, journal string, free int64) {
	t.Helper()
	gw, _ := startGateway(t, cfg)
	v := visit(gw.url("gateway", ""))
	stored(t, gw) // healthy flushes first
	unfill := testkit.Fill(t, disk, free)
	killed := killAtRandom(rng, gw, v)
	if !gw.logs.Logged("analytics: flush failed; counts kept for a retry", nil) {
		t.Errorf("%s: no failed flush logged: the full disk did not stop the store\n%s", what, gw.logs.String())
	}
	unfill()
	recount(t, what, cfg, v, journaledUpTo(t, what, journal, killed))
}

// TestFullDiskSIGTERM: the volume of the embedded store and of its journal
// (in its default place, beside the store) fills up to the last block;
// flushes fail, and the journal goes on in the space it keeps allocated
// ahead: at SIGTERM the final flush is journaled too, the exit is 0, and
// the next process, with space back, counts every visit. (With the journal
// on another disk: TestFullDiskShutdownJournalElsewhere in package
// gateway; when nothing can keep them: TestLostVisitsSaid.)
func TestFullDiskSIGTERM(t *testing.T) {
	t.Parallel()
	up := redirector(t)
	disk := testkit.Tmpfs(t, 64<<20, "TestLostVisitsSaid covers the exit status without privileges")
	cfg := analyticsGateway(up.URL, fmt.Sprintf("  embedded: {path: %s}\n", filepath.Join(disk, "analytics")))
	gw, _ := startGateway(t, cfg, tokenEnv)
	testkit.Eventually(t, 10*time.Second, "the store open", func() bool {
		_, b := testkit.Do(t, "GET", gw.url("admin", "/admin/health"), nil, "Authorization", "Bearer "+testkit.AdminToken)
		return strings.Contains(b, `"state":"ok"`)
	})
	free := testkit.Fill(t, disk, 0)
	v := visit(gw.url("gateway", ""))
	testkit.Eventually(t, 10*time.Second, "a failed flush", func() bool {
		return gw.logs.Logged("analytics: flush failed; counts kept for a retry", nil)
	})
	time.Sleep(2 * durableInterval) // intervals journaled on the full disk
	v.halt()
	sent, _ := v.sent(time.Time{})
	if err := gw.stop(); err != nil || strings.Contains(gw.stderrText(), "lost") {
		t.Fatalf("exit = %v, stderr %q; want 0 and nothing lost\n%s", err, gw.stderrText(), gw.logs.String())
	}
	free()
	gw2, _ := startGateway(t, cfg)
	counted := settle(t, gw2, sent)
	t.Logf("full disk, journal beside the store: sent %d, counted %d after the restart", sent, counted)
	if counted != sent {
		t.Errorf("counted %d after the restart, sent %d", counted, sent)
	}
	gw2.stop()
}

// TestLostVisitsSaid: when neither the store (Cassandra absent) nor the
// journal (its path is a file) takes the visits, SIGTERM's final flush
// saves nothing: the exit status is 1 and stderr says how many visits were
// lost, exactly those sent. Needs no privileges.
func TestLostVisitsSaid(t *testing.T) {
	t.Parallel()
	up := redirector(t)
	dir := t.TempDir()
	notDir := filepath.Join(dir, "journal")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := analyticsGateway(up.URL, fmt.Sprintf("  store: cassandra\n  cassandra: {hosts: [%s]}\n  embedded: {path: %s}\n  journal: {path: %s}\n",
		testkit.DeadAddr(t), filepath.Join(dir, "analytics"), notDir))
	gw, _ := startGateway(t, cfg)
	v := visit(gw.url("gateway", ""))
	testkit.Eventually(t, 10*time.Second, "a failed flush", func() bool {
		return gw.logs.Logged("analytics: flush failed; counts kept for a retry", nil)
	})
	v.halt()
	sent, _ := v.sent(time.Time{})
	err := gw.stop()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit = %v, want status 1\n%s", err, gw.logs.String())
	}
	if want := fmt.Sprintf("%d visits lost", sent); !strings.Contains(gw.stderrText(), want) {
		t.Errorf("stderr %q does not say %q", gw.stderrText(), want)
	}
}

// TestKill9FullDiskDefaultLayout: the embedded store and its journal in
// their default places, on one volume that fills up to the last block
// while visits come in; kill -9 at a random moment; space back; the next
// process counts every visit but, at most, those of the last interval: the
// journal wrote the outage into the space it keeps allocated ahead.
func TestKill9FullDiskDefaultLayout(t *testing.T) {
	t.Parallel()
	up := redirector(t)
	rng := seeded(t, 17)
	for r := range rounds(t) {
		disk := testkit.Tmpfs(t, 64<<20, "TestKill9DuringCassandraOutage covers the journal without privileges")
		cfg := analyticsGateway(up.URL, fmt.Sprintf("  embedded: {path: %s}\n", filepath.Join(disk, "analytics")))
		killDuringFullDisk(t, rng, fmt.Sprintf("volume full, default layout, round %d", r), cfg, disk, filepath.Join(disk, "analytics-journal"), 0)
	}
}

// TestKill9StoreHealthy: kill -9 of a gateway whose embedded store takes
// every flush journals nothing and loses at most the visits answered after
// the newest batch the store took, as linkgate_analytics_stored_until_seconds
// said before the kill (every visit recorded before a batch's time is in it
// or an earlier one): at most the last interval, on a loaded machine too.
func TestKill9StoreHealthy(t *testing.T) {
	t.Parallel()
	up := redirector(t)
	rng := seeded(t, 13)
	for r := range rounds(t) {
		dir := t.TempDir()
		jdir := filepath.Join(dir, "journal")
		cfg := analyticsGateway(up.URL, fmt.Sprintf("  embedded: {path: %s}\n  journal: {path: %s}\n", filepath.Join(dir, "analytics"), jdir))
		gw, _ := startGateway(t, cfg)
		v := visit(gw.url("gateway", ""))
		watched := watchStored(gw)
		stored(t, gw)
		killed := killAtRandom(rng, gw, v)
		until := watched()
		segs, _ := filepath.Glob(filepath.Join(jdir, "seg-*"))
		if gw.logs.Logged("analytics: flush failed; counts kept for a retry", nil) || len(segs) > 0 {
			t.Errorf("round %d: a healthy store, yet a failed flush or journal segments %v", r, segs)
		}
		if until.IsZero() {
			t.Fatalf("round %d: no linkgate_analytics_stored_until_seconds read before the kill, after a first flush", r)
		}
		t.Logf("round %d: the newest batch stored was made %v before the kill", r, killed.Sub(until).Round(time.Millisecond))
		recount(t, fmt.Sprintf("store healthy, round %d", r), cfg, v, until)
	}
}

// watchStored reads gw's linkgate_analytics_stored_until_seconds until the
// function it returns is called (after gw is killed), which returns the
// newest time read: every visit recorded before it was stored.
func watchStored(gw *process) func() time.Time {
	stop, done := make(chan struct{}), make(chan struct{})
	var newest time.Time
	c := &http.Client{Timeout: 2 * time.Second}
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			resp, err := c.Get(gw.url("admin", "/metrics"))
			if err != nil {
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for line := range strings.Lines(string(body)) {
				if v, ok := strings.CutPrefix(line, "linkgate_analytics_stored_until_seconds "); ok {
					if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && f > 0 {
						// Less a microsecond: a float64 of unix
						// seconds keeps about a quarter of one.
						newest = time.Unix(0, int64(f*1e9)).Add(-time.Microsecond)
					}
				}
			}
		}
	}()
	return func() time.Time {
		close(stop)
		<-done
		return newest
	}
}
