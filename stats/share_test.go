package stats_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/stats"
)

var shareKey = []byte("0123456789abcdef0123456789abcdef")

// TestShareTokens: a token verifies under its key until it expires, grants
// its link (or every link), and fails with its reason when altered, signed
// under another key (a rotated one), expired, or longer-lived than max_ttl.
func TestShareTokens(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	s := stats.Sharer{Key: shareKey, MaxTTL: 365 * 24 * time.Hour}
	tok, g, err := s.Make("go", 48*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tok, "lgs1.") || g.Key != "go" || !g.Expires.Equal(now.Add(48*time.Hour)) {
		t.Fatalf("Make = %q, %+v", tok, g)
	}
	got, err := s.Verify(tok, now.Add(47*time.Hour))
	if err != nil || got != g {
		t.Fatalf("Verify = %+v, %v; want %+v", got, err, g)
	}
	if !got.Allows("go") || got.Allows("gh") || got.Allows(analytics.AllLinks) {
		t.Errorf("a token for go: Allows(go, gh, all) = %v %v %v, want true false false", got.Allows("go"), got.Allows("gh"), got.Allows(analytics.AllLinks))
	}
	all, _, err := s.Make(analytics.AllLinks, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	if g, err := s.Verify(all, now.Add(29*24*time.Hour)); err != nil || !g.Allows("gh") || !g.Allows(analytics.AllLinks) {
		t.Errorf("a token for all links (default ttl 30 days) 29 days on: %+v, %v", g, err)
	}

	// Another link's payload under this token's signature.
	payload, sig, _ := strings.Cut(strings.TrimPrefix(tok, "lgs1."), ".")
	raw, _ := base64.RawURLEncoding.DecodeString(payload)
	forged := "lgs1." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(raw), ":go", ":gh", 1))) + "." + sig
	rotated := stats.Sharer{Key: []byte("another key, rotated, 32 bytes!!"), MaxTTL: s.MaxTTL}
	for _, c := range []struct {
		name string
		tok  string
		s    stats.Sharer
		at   time.Time
		want error
	}{
		{"altered", forged, s, now, stats.ErrShareSignature},
		{"rotated key", tok, rotated, now, stats.ErrShareSignature},
		{"expired", tok, s, now.Add(48 * time.Hour), stats.ErrShareExpired},
		{"max_ttl lowered", tok, stats.Sharer{Key: shareKey, MaxTTL: 24 * time.Hour}, now, stats.ErrShareTooLong},
		{"not a token", "hello", s, now, stats.ErrShareMalformed},
		{"no signature", "lgs1." + payload, s, now, stats.ErrShareMalformed},
		{"sharing off", tok, stats.Sharer{}, now, stats.ErrSharingOff},
	} {
		if _, err := c.s.Verify(c.tok, c.at); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	for _, c := range []struct {
		key string
		ttl time.Duration
	}{{"", 0}, {"a/b/c", 0}, {"Acme/x", 0}, {"go", 400 * 24 * time.Hour}, {"go", time.Millisecond}} {
		if _, _, err := s.Make(c.key, c.ttl, now); err == nil {
			t.Errorf("Make(%q, %v): no error", c.key, c.ttl)
		}
	}
	if _, _, err := (stats.Sharer{}).Make("go", 0, now); !errors.Is(err, stats.ErrSharingOff) {
		t.Errorf("Make without a key: %v, want ErrSharingOff", err)
	}
}

// FuzzVerifyShare: no input makes VerifyShare panic, and what it accepts
// was signed under its key.
func FuzzVerifyShare(f *testing.F) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	tok, _, _ := stats.Sharer{Key: shareKey}.Make("go", time.Hour, now)
	f.Add(tok)
	f.Add("lgs1.MTox.abc")
	f.Add("lgs1..")
	f.Fuzz(func(t *testing.T, s string) {
		g, err := stats.VerifyShare(shareKey, s, now, 0)
		if err == nil && stats.SignShare(shareKey, g) != s {
			t.Errorf("accepted %q, which is not what its grant signs to", s)
		}
	})
}

// TestShareParam: with the stats token required, a share token in the
// share parameter (or as the bearer token) opens its link's JSON, CSV and
// live stream, an all-links token every link and all links together;
// another link's token is a 403 and a bad one a 401, both naming share.
func TestShareParam(t *testing.T) {
	s := stats.Sharer{Key: shareKey, MaxTTL: 365 * 24 * time.Hour}
	h := stats.New(newStatsReader(), rollup.DefaultTiers(), stats.Options{Token: "t0ken", Share: s, Now: func() time.Time { return statsNow }})
	srv := httptest.NewServer(http.StripPrefix("/stats", h))
	defer srv.Close()
	goTok, _, _ := s.Make("abc", time.Hour, statsNow)
	allTok, _, _ := s.Make(analytics.AllLinks, time.Hour, statsNow)
	expired, _, _ := s.Make("abc", time.Hour, statsNow.Add(-2*time.Hour))
	get := func(path string, hdr ...string) (int, string) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, b.String()
	}
	for _, c := range []struct {
		path   string
		hdr    []string
		status int
		want   string
	}{
		{"/stats/abc?last=1h", nil, 401, ""},
		{"/stats/abc?last=1h&share=" + goTok, nil, 200, `"short_key":"abc"`},
		{"/stats/abc?last=1h&format=csv&share=" + goTok, nil, 200, "unix_seconds,count,bot_count,class_bot,"},
		{"/stats/abc?last=1h", []string{"Authorization", "Bearer " + goTok}, 200, `"total":123456`},
		{"/stats/xyz?last=1h&share=" + goTok, nil, 403, `"name":"share"`},
		{"/stats?last=1h&share=" + goTok, nil, 403, `"name":"share"`},
		{"/stats?last=1h&share=" + allTok, nil, 200, `"short_key":""`},
		{"/stats/xyz?last=1h&share=" + allTok, nil, 200, `"short_key":"xyz"`},
		{"/stats/abc?last=1h&share=" + expired, nil, 401, "expired"},
		{"/stats/abc?last=1h&share=lgs1.x.y", nil, 401, `"name":"share"`},
		{"/stats/abc?share=" + goTok, []string{"Accept", "text/html"}, 200, "<!doctype html>"},
	} {
		status, body := get(c.path, c.hdr...)
		if status != c.status || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d %.200s; want %d with %q", c.path, status, body, c.status, c.want)
		}
	}
}
