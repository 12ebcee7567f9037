package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
	statsapi "github.com/linkgate/linkgate/stats"
)

// liveEvent is one "live" event of the live stream.
type liveEvent struct {
	ShortKey      string `json:"short_key"`
	Complete      bool   `json:"complete"`
	Step          int64  `json:"step"`
	From          int64  `json:"from"`
	To            int64  `json:"to"`
	RangeTotal    int64  `json:"range_total"`
	BotRangeTotal int64  `json:"bot_range_total"`
	Classes       map[string]struct {
		RangeTotal int64 `json:"range_total"`
	} `json:"classes"`
	ClassPoints map[string][]int64 `json:"class_points"`
	Points      [][]int64          `json:"points"`
	Since       int64              `json:"since"`
	Stored      *struct {
		Step          int64     `json:"step"`
		RangeTotal    int64     `json:"range_total"`
		BotRangeTotal int64     `json:"bot_range_total"`
		Points        [][]int64 `json:"points"`
	} `json:"stored"`
}

// liveStream is an open live stream.
type liveStream struct {
	resp   *http.Response
	events chan liveEvent
	ended  chan string // the reason of an "end" event, before events closes
	cancel context.CancelFunc
}

// openLive opens the live stream at url with the headers hdr (name, value
// pairs) and reads its events in the background.
func openLive(t *testing.T, url string, hdr ...string) *liveStream {
	t.Helper()
	return openLiveWith(t, http.DefaultClient, url, hdr...)
}

// openLiveWith is openLive through client.
func openLiveWith(t *testing.T, client *http.Client, url string, hdr ...string) *liveStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", url, err)
	}
	s := &liveStream{resp: resp, events: make(chan liveEvent, 100), ended: make(chan string, 1), cancel: cancel}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	if resp.StatusCode != 200 {
		resp.Body.Close()
		return s
	}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var event, data string
		for sc.Scan() {
			switch line := sc.Text(); {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimPrefix(line, "data: ")
			case line == "":
				switch event {
				case "live":
					var e liveEvent
					if err := json.Unmarshal([]byte(data), &e); err != nil {
						t.Errorf("live event %q: %v", data, err)
						return
					}
					s.events <- e
				case "end":
					var e struct{ Reason string }
					json.Unmarshal([]byte(data), &e)
					s.ended <- e.Reason
				}
				event, data = "", ""
			}
		}
	}()
	return s
}

// next returns the next event that satisfies ok, failing after within
// (stretched by the machine's pace).
func (s *liveStream) next(t *testing.T, within time.Duration, what string, ok func(liveEvent) bool) liveEvent {
	t.Helper()
	within = testkit.Slack(within)
	deadline := time.After(within)
	for {
		select {
		case e, open := <-s.events:
			if !open {
				t.Fatalf("the live stream ended before %s", what)
			}
			if ok(e) {
				return e
			}
		case <-deadline:
			t.Fatalf("no live event within %v with %s", within, what)
		}
	}
}

// TestLiveStream: the live stream of a link is Server-Sent Events behind
// the stats token, answers the last 15 minutes in 10-second buckets at
// once, moves within a second or two of a visit (humans and bots apart, the
// store never read: the flush interval is an hour), outlasts
// server.write_timeout, is capped by stats.live.max_streams (503 beyond
// it), refuses range parameters naming them, and ends when the gateway shuts
// down, without holding up the drain.
func TestLiveStream(t *testing.T) {
	t.Parallel()
	setenv(t, "LG_TEST_LIVE_TOKEN", "live-s3cret")
	up := tinyURL(t)
	cfg := withStats(analyticsConfig(up.URL, embeddedStore(t.TempDir()), "1h"), "  token_env: LG_TEST_LIVE_TOKEN\n  live: {max_streams: 1}\n")
	// A write timeout a visit's answer meets on a busy machine too.
	writeTimeout := testkit.Slack(time.Second)
	cfg = strings.Replace(cfg, "server:\n  listen: 127.0.0.1:0\n", fmt.Sprintf("server:\n  listen: 127.0.0.1:0\n  write_timeout: %v\n", writeTimeout), 1)
	gw := start(t, cfg)
	auth := []string{"Authorization", "Bearer live-s3cret"}

	resp, body := testkit.Do(t, "GET", gw.url("/stats/go?format=events"), nil)
	testkit.Problem(t, resp, body, http.StatusUnauthorized)
	resp, body = testkit.Do(t, "GET", gw.url("/stats/go?format=events&last=1h"), nil, auth...)
	if p := testkit.Problem(t, resp, body, http.StatusBadRequest); !strings.Contains(body, `"name":"last"`) {
		t.Errorf("format=events&last=1h: %v, want the problem to name last", p)
	}

	s := openLive(t, gw.url("/stats/go"), append([]string{"Accept", "text/event-stream"}, auth...)...)
	if s.resp.StatusCode != 200 || s.resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("live stream: %d %s", s.resp.StatusCode, s.resp.Header.Get("Content-Type"))
	}
	first := s.next(t, 5*time.Second, "the first event", func(liveEvent) bool { return true })
	if first.ShortKey != "go" || first.Step != 10 || len(first.Points) != 90 || first.RangeTotal != 0 || !first.Complete {
		t.Fatalf("first event %+v: want go, step 10, 90 points, no visits, complete", first)
	}
	if last := first.Points[89][0]; first.To < last || first.To >= last+10 || first.Points[0][0] != last-890 {
		t.Errorf("buckets %d to %d for to=%d: want 15 minutes of 10 s ending with the one holding to", first.Points[0][0], last, first.To)
	}

	// A second stream is one too many.
	resp, body = testkit.Do(t, "GET", gw.url("/stats?format=events"), nil, auth...)
	testkit.Problem(t, resp, body, http.StatusServiceUnavailable)
	if resp.Header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}

	// Past the write timeout, visits still arrive, each within the poll.
	time.Sleep(writeTimeout + 200*time.Millisecond)
	visit := func(ua string) {
		t.Helper()
		if r, _ := testkit.Do(t, "GET", gw.url("/go"), nil, testkit.Navigation(ua)...); r.StatusCode != 302 {
			t.Fatalf("GET /go: %d", r.StatusCode)
		}
	}
	visit("Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0")
	visit("Mozilla/5.0 (X11; Linux x86_64) Firefox/120.0")
	visit("Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)")
	e := s.next(t, 5*time.Second, "2 humans and a bot", func(e liveEvent) bool { return e.RangeTotal == 2 && e.BotRangeTotal == 1 })
	var h, b int64
	for _, p := range e.Points {
		h, b = h+p[1], b+p[2]
	}
	if h != 2 || b != 1 {
		t.Errorf("points add up to %d humans, %d bots; want 2, 1", h, b)
	}
	// The bot is an unfurler: class preview, with a curve of its own.
	if len(e.Classes) != 5 || e.Classes["preview"].RangeTotal != 1 || e.Classes["bot"].RangeTotal != 0 ||
		len(e.ClassPoints) != 1 || len(e.ClassPoints["preview"]) != len(e.Points) {
		t.Errorf("classes %+v, curves %v; want the preview alone, with a point per bucket", e.Classes, e.ClassPoints)
	} else {
		for i, p := range e.Points {
			if e.ClassPoints["preview"][i] != p[2] {
				t.Errorf("bucket %d: %d bots, %d previews", i, p[2], e.ClassPoints["preview"][i])
			}
		}
	}

	// Shutdown ends the stream at once: the drain does not wait for it.
	began := time.Now()
	if err := gw.shutdown(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > testkit.Slack(5*time.Second) { // shutdown_timeout is 30 s
		t.Errorf("shutdown took %v with a live stream open", d)
	}
	select {
	case _, open := <-s.events:
		for open {
			_, open = <-s.events
		}
	case <-time.After(testkit.Slack(5 * time.Second)):
		t.Errorf("the live stream did not end at shutdown")
	}
}

// ended waits for s to end, within, and returns the reason of its "end"
// event ("" for none).
func (s *liveStream) endedWithin(t *testing.T, within time.Duration) string {
	t.Helper()
	within = testkit.Slack(within)
	deadline := time.After(within)
	for {
		select {
		case _, open := <-s.events:
			if !open {
				select {
				case why := <-s.ended:
					return why
				default:
					return ""
				}
			}
		case <-deadline:
			t.Fatalf("the live stream did not end within %v", within)
		}
	}
}

// liveBoundsConfig is a gateway with the stats token stats-s3cret in the
// variable LG_TEST_LB_STATS_<id>, share tokens under the key
// live-bounds-key-0123456789 in LG_TEST_LB_KEY_<id>, and the stats.live
// section live. Each test has an id of its own: the variables a parallel
// test sets are gone once it ends, and a reload reads them again.
func liveBoundsConfig(t *testing.T, id, live string) string {
	setenv(t, "LG_TEST_LB_STATS_"+id, "stats-s3cret")
	setenv(t, "LG_TEST_LB_KEY_"+id, "live-bounds-key-0123456789")
	return withStats(analyticsConfig(tinyURL(t).URL, embeddedStore(t.TempDir()), "1h"),
		"  token_env: LG_TEST_LB_STATS_"+id+"\n  share: {key_env: LG_TEST_LB_KEY_"+id+"}\n  live: "+live+"\n")
}

// TestLiveShareTokenExpires: a live stream opened with a share token ends
// when the token expires (an "end" event saying so), not when its client
// hangs up, and the token opens no stream after.
func TestLiveShareTokenExpires(t *testing.T) {
	t.Parallel()
	gw := start(t, liveBoundsConfig(t, "EXPIRES", "{}"))
	now := time.Now().Truncate(time.Second)
	// A token of a minute with 2 to 3 s left, more on a busy machine: time
	// to open the stream and read its first event.
	left := min(testkit.Slack(2*time.Second), 50*time.Second).Truncate(time.Second)
	g := statsapi.Grant{Key: "go", Issued: now.Add(left - time.Minute), Expires: now.Add(left)}
	tok := statsapi.SignShare([]byte("live-bounds-key-0123456789"), g)
	s := openLive(t, gw.url("/stats/go?format=events&share="+tok))
	if s.resp.StatusCode != 200 {
		t.Fatalf("live stream with a share token: %d", s.resp.StatusCode)
	}
	s.next(t, 5*time.Second, "the first event", func(liveEvent) bool { return true })
	why := s.endedWithin(t, 30*time.Second+left)
	if time.Now().Before(g.Expires) {
		t.Errorf("the stream ended at %v, before the token expired at %v", time.Now(), g.Expires)
	}
	if !strings.Contains(why, "expired") {
		t.Errorf("end event %q, want it to say the token expired", why)
	}
	resp, body := testkit.Do(t, "GET", gw.url("/stats/go?format=events&share="+tok), nil)
	if testkit.Problem(t, resp, body, http.StatusUnauthorized); !strings.Contains(body, `"name":"share"`) {
		t.Errorf("reconnecting with the expired token: %s, want a 401 naming share", body)
	}
}

// TestLiveStreamsHeldToReloadedCredentials: a reload that rotates the
// share key (key_env naming another variable) ends the streams opened with
// tokens of the old key, and leaves the operator's; one that changes the
// stats token ends the streams opened with the old token.
func TestLiveStreamsHeldToReloadedCredentials(t *testing.T) {
	t.Parallel()
	setenv(t, "LG_TEST_LB_STATS_RELOAD2", "stats-s3cret-2")
	setenv(t, "LG_TEST_LB_KEY_RELOAD2", "live-bounds-key-rotated-9876")
	cfg := liveBoundsConfig(t, "RELOAD", "{}")
	gw := start(t, cfg)
	now := time.Now()
	tok := statsapi.SignShare([]byte("live-bounds-key-0123456789"), statsapi.Grant{Key: "go", Issued: now, Expires: now.Add(time.Hour)})
	shared := openLive(t, gw.url("/stats/go?format=events&share="+tok))
	operator := openLive(t, gw.url("/stats/go?format=events"), "Authorization", "Bearer stats-s3cret")
	for _, s := range []*liveStream{shared, operator} {
		if s.resp.StatusCode != 200 {
			t.Fatalf("live stream: %d", s.resp.StatusCode)
		}
		s.next(t, 5*time.Second, "the first event", func(liveEvent) bool { return true })
	}
	reload := func(cfg string) {
		t.Helper()
		testkit.WriteFile(t, gw.path, cfg)
		if _, err := gw.g.Reload("test"); err != nil {
			t.Fatal(err)
		}
	}

	reload(strings.Replace(cfg, "key_env: LG_TEST_LB_KEY_RELOAD}", "key_env: LG_TEST_LB_KEY_RELOAD2}", 1))
	if why := shared.endedWithin(t, 10*time.Second); !strings.Contains(why, "signature") {
		t.Errorf("the share-token stream ended with %q, want the signature named", why)
	}
	if r, b := testkit.Do(t, "GET", gw.url("/stats/go?format=events&share="+tok), nil); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("a token of the rotated key: %d %s, want 401", r.StatusCode, b)
	}
	if r, _ := testkit.Do(t, "GET", gw.url("/go"), nil); r.StatusCode != 302 {
		t.Fatalf("GET /go: %d", r.StatusCode)
	}
	operator.next(t, 5*time.Second, "the visit, on the operator's stream after the rotation", func(e liveEvent) bool { return e.RangeTotal == 1 })

	reload(strings.Replace(cfg, "token_env: LG_TEST_LB_STATS_RELOAD\n", "token_env: LG_TEST_LB_STATS_RELOAD2\n", 1))
	if why := operator.endedWithin(t, 10*time.Second); !strings.Contains(why, "Bearer") {
		t.Errorf("the operator's stream ended with %q after its token changed, want the token asked for", why)
	}
}

// fromAddr is a client whose connections leave from the loopback address
// local (127.0.0.2...): another client address to the gateway.
func fromAddr(local string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// TestLiveStreamCaps: the live streams are divided so that share tokens
// cannot take the operator's: a share token holds at most per_share_token
// streams, an address per_client (429, naming the limit), streams without
// the stats token leave reserved_streams free (503), and the operator's
// streams are served while the share-token holders sit on their caps, up to
// max_streams. A stream closed frees its place.
func TestLiveStreamCaps(t *testing.T) {
	t.Parallel()
	gw := start(t, liveBoundsConfig(t, "CAPS", "{max_streams: 6, reserved_streams: 2, per_share_token: 2, per_client: 3}"))
	now := time.Now()
	token := func(i int) string {
		// Tokens of one link, told apart by their issue time.
		g := statsapi.Grant{Key: "go", Issued: now.Add(-time.Duration(i) * time.Second), Expires: now.Add(time.Hour)}
		return statsapi.SignShare([]byte("live-bounds-key-0123456789"), g)
	}
	a, b, c := token(1), token(2), token(3)
	x, y := fromAddr("127.0.0.2"), fromAddr("127.0.0.3")
	opened := func(client *http.Client, hdr ...string) *liveStream {
		t.Helper()
		s := openLiveWith(t, client, gw.url("/stats/go?format=events"), hdr...)
		if s.resp.StatusCode != 200 {
			t.Fatalf("stream %v: %d, want 200", hdr, s.resp.StatusCode)
		}
		return s
	}
	refused := func(client *http.Client, status int, limit string, hdr ...string) {
		t.Helper()
		req, _ := http.NewRequest("GET", gw.url("/stats/go?format=events"), nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		p := testkit.Problem(t, resp, string(body), status)
		if p["limit"] != limit || resp.Header.Get("Retry-After") == "" {
			t.Errorf("stream %v: %v (Retry-After %q), want the limit %s named and Retry-After", hdr, p, resp.Header.Get("Retry-After"), limit)
		}
	}
	share := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	operator := []string{"Authorization", "Bearer stats-s3cret"}

	a1 := opened(x, share(a)...)
	opened(x, share(a)...)
	refused(x, http.StatusTooManyRequests, "stats.live.per_share_token", share(a)...)
	opened(x, share(b)...)
	refused(x, http.StatusTooManyRequests, "stats.live.per_client", share(b)...)
	opened(y, share(b)...)
	refused(y, http.StatusServiceUnavailable, "stats.live.reserved_streams", share(c)...)
	// The share-token holders sit on their caps; the operator is served.
	o := opened(http.DefaultClient, operator...)
	opened(http.DefaultClient, operator...)
	refused(http.DefaultClient, http.StatusServiceUnavailable, "stats.live.max_streams", operator...)
	o.next(t, 5*time.Second, "the operator's first event", func(liveEvent) bool { return true })

	a1.cancel()
	testkit.Eventually(t, 10*time.Second, "a stream of another token once one closed", func() bool {
		resp, err := y.Get(gw.url("/stats/go?format=events&share=" + c))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}
