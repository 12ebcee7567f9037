package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// liveEvent is one "live" event of the live stream.
type liveEvent struct {
	ShortKey      string    `json:"short_key"`
	Complete      bool      `json:"complete"`
	Step          int64     `json:"step"`
	From          int64     `json:"from"`
	To            int64     `json:"to"`
	RangeTotal    int64     `json:"range_total"`
	BotRangeTotal int64     `json:"bot_range_total"`
	Points        [][]int64 `json:"points"`
}

// liveStream is an open live stream.
type liveStream struct {
	resp   *http.Response
	events chan liveEvent
	cancel context.CancelFunc
}

// openLive opens the live stream at url with the headers hdr (name, value
// pairs) and reads its events in the background.
func openLive(t *testing.T, url string, hdr ...string) *liveStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", url, err)
	}
	s := &liveStream{resp: resp, events: make(chan liveEvent, 100), cancel: cancel}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	if resp.StatusCode != 200 {
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
				if event == "live" {
					var e liveEvent
					if err := json.Unmarshal([]byte(data), &e); err != nil {
						t.Errorf("live event %q: %v", data, err)
						return
					}
					s.events <- e
				}
				event, data = "", ""
			}
		}
	}()
	return s
}

// next returns the next event that satisfies ok, failing after within.
func (s *liveStream) next(t *testing.T, within time.Duration, what string, ok func(liveEvent) bool) liveEvent {
	t.Helper()
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
	cfg := analyticsConfig(up.URL, embeddedStore(t.TempDir()), "1h") +
		"stats:\n  token_env: LG_TEST_LIVE_TOKEN\n  live: {max_streams: 1}\n"
	cfg = strings.Replace(cfg, "server:\n  listen: 127.0.0.1:0\n", "server:\n  listen: 127.0.0.1:0\n  write_timeout: 1s\n", 1)
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
	time.Sleep(1200 * time.Millisecond)
	visit := func(ua string) {
		t.Helper()
		if r, _ := testkit.Do(t, "GET", gw.url("/go"), nil, "User-Agent", ua); r.StatusCode != 302 {
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

	// Shutdown ends the stream at once: the drain does not wait for it.
	began := time.Now()
	if err := gw.shutdown(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("shutdown took %v with a live stream open", d)
	}
	select {
	case _, open := <-s.events:
		for open {
			_, open = <-s.events
		}
	case <-time.After(5 * time.Second):
		t.Errorf("the live stream did not end at shutdown")
	}
}
