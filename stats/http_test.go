package stats_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/stats"

	"github.com/google/go-cmp/cmp"
	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// checkGolden compares got with testdata/file, rewriting it under -update.
func checkGolden(t *testing.T, file string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", file)
	if *updateGolden {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("answer differs from %s (-want +got):\n%s", path, d)
	}
}

// TestStatsUnknownParam: a misspelt parameter is a 400 naming it, not the
// default range answered as if the parameter had been read.
func TestStatsUnknownParam(t *testing.T) {
	r := newStatsReader()
	h := stats.New(r, rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return statsNow }})
	w := statsGet(t, h, "/abc?lst=1h")
	if w.Code != http.StatusBadRequest {
		t.Fatalf("GET /abc?lst=1h: %d %s, want 400", w.Code, w.Body)
	}
	p := decodeProblem(t, w)
	if len(p.InvalidParams) != 1 || p.InvalidParams[0].Name != "lst" || !strings.Contains(p.InvalidParams[0].Reason, "did you mean last?") {
		t.Errorf("problem %+v: want invalid-params naming lst with a guess", p)
	}
	if len(r.calls) != 0 {
		t.Errorf("the store was read for a bad request: %v", r.calls)
	}
	checkGolden(t, "bad_param_lst.json", w.Body.Bytes())

	// The chart page's own parameters are the API's: a bad one is refused
	// there too, rather than drawing the default range.
	if w := statsGet(t, h, "/abc?format=html&range=1d"); w.Code != http.StatusBadRequest {
		t.Errorf("chart page with range=1d: %d, want 400", w.Code)
	}
}

// TestStatsNeverBefore1970: from=0 (and anything that reaches before the
// epoch) starts at the first Monday of 1970, the first week bucket after the
// epoch, so that no point of any curve starts before 1970.
func TestStatsNeverBefore1970(t *testing.T) {
	h := stats.New(newStatsReader(), rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return statsNow }})
	const monday = 345600 // 1970-01-05T00:00:00Z
	for _, target := range []string{"/abc?from=0", "/abc?from=0&stitch=true", "/abc?last=60y", "/?from=1&to=1970-03-01T00:00:00Z&step=1d", "/abc?from=0&to=1000000&step=1m"} {
		a := decodeStats(t, statsGet(t, h, target))
		if a.From != monday || len(a.Points) == 0 || a.Points[0][0] != monday {
			t.Errorf("GET %s: from %d, first point %v; want both at %d", target, a.From, a.Points[:min(1, len(a.Points))], monday)
		}
		for _, p := range a.Points {
			if p[0] < 0 {
				t.Fatalf("GET %s: point %v before 1970", target, p)
			}
		}
	}
	w := statsGet(t, h, "/?from=0&to=1970-03-01T00:00:00Z&step=1w")
	if w.Code != http.StatusOK {
		t.Fatalf("from=0 weekly: %d %s", w.Code, w.Body)
	}
	checkGolden(t, "all_from_0_1w.json", w.Body.Bytes())

	// A range that ends before curves begin has nothing to answer.
	w = statsGet(t, h, "/abc?from=0&to=86400")
	if p := decodeProblem(t, w); w.Code != http.StatusBadRequest || len(p.InvalidParams) != 1 || p.InvalidParams[0].Name != "to" {
		t.Errorf("range ending 1970-01-02: %d %+v, want 400 naming to", w.Code, p)
	}

	// With tiers no coarser than a day, curves begin at the epoch itself.
	days := []rollup.Tier{{Step: time.Hour, Retention: 40 * rollup.Day}, {Step: rollup.Day, Retention: 400 * rollup.Day}}
	h = stats.New(newStatsReader(), days, stats.Options{Now: func() time.Time { return statsNow }})
	if a := decodeStats(t, statsGet(t, h, "/abc?from=0&to=864000")); a.From != 0 || a.Points[0][0] != 0 {
		t.Errorf("daily tiers, from=0: from %d first point %v, want 0", a.From, a.Points[0])
	}
}

// statsRandomReader answers every bucket with pseudo-random counts, like a
// busy link: the synthetic pattern of statsReader compresses better than
// real curves do, which would flatter the gzip figures.
type statsRandomReader struct{}

func (statsRandomReader) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]analytics.Point, error) {
	var out []analytics.Point
	for t := rollup.Align(from, step); t.Before(to); t = t.Add(step) {
		rng := rand.New(rand.NewPCG(uint64(t.Unix()), uint64(step)))
		scale := int64(step / time.Minute)
		out = append(out, analytics.Point{Start: t, Visits: analytics.Visits{Human: rng.Int64N(20 * scale), Bot: rng.Int64N(3 * scale)}})
	}
	return out, nil
}

func (statsRandomReader) Total(ctx context.Context, key string) (analytics.Visits, error) {
	return analytics.Visits{Human: 98765432, Bot: 1234567}, nil
}

// TestStatsGzip drives the stats API over real HTTP: a client that accepts
// gzip gets the same answer compressed, one that does not (or refuses it
// with q=0) gets it as it is, and HEAD gets a GET's headers with no body.
func TestStatsGzip(t *testing.T) {
	h := stats.New(statsRandomReader{}, rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return statsNow }})
	srv := httptest.NewServer(h)
	defer srv.Close()
	// A transport that leaves Content-Encoding to the test.
	raw := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	get := func(method, target, acceptEncoding string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+target, nil)
		if err != nil {
			t.Fatal(err)
		}
		if acceptEncoding != "" {
			req.Header.Set("Accept-Encoding", acceptEncoding)
		}
		resp, err := raw.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}
	for _, target := range []string{"/abc?last=1y&stitch=true", "/abc?last=1y&stitch=true&format=csv", "/?last=3d"} {
		plainResp, plain := get("GET", target, "")
		if plainResp.StatusCode != http.StatusOK || plainResp.Header.Get("Content-Encoding") != "" {
			t.Fatalf("GET %s without Accept-Encoding: %d, Content-Encoding %q", target, plainResp.StatusCode, plainResp.Header.Get("Content-Encoding"))
		}
		if cl := plainResp.Header.Get("Content-Length"); cl != strconv.Itoa(len(plain)) {
			t.Errorf("GET %s: Content-Length %q for %d bytes", target, cl, len(plain))
		}
		zResp, z := get("GET", target, "br;q=1.0, gzip;q=0.8, *;q=0.1")
		if zResp.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("GET %s accepting gzip: Content-Encoding %q", target, zResp.Header.Get("Content-Encoding"))
		}
		for _, resp := range []*http.Response{plainResp, zResp} {
			if vary := resp.Header.Values("Vary"); len(vary) != 1 || vary[0] != "Accept, Accept-Encoding" {
				t.Errorf("GET %s: Vary %q, want one header naming Accept and Accept-Encoding", target, vary)
			}
		}
		zr, err := gzip.NewReader(bytes.NewReader(z))
		if err != nil {
			t.Fatal(err)
		}
		unz, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("GET %s: gzip body: %v", target, err)
		}
		if !bytes.Equal(unz, plain) {
			t.Errorf("GET %s: the gzip body decompresses to %d bytes differing from the plain %d", target, len(unz), len(plain))
		}
		if len(z)*2 > len(plain) {
			t.Errorf("GET %s: gzip %d bytes, plain %d: less than half saved", target, len(z), len(plain))
		}
		t.Logf("GET %s: %d bytes, %d gzipped (%.1f×)", target, len(plain), len(z), float64(len(plain))/float64(len(z)))

		// Refused explicitly: sent as it is.
		if resp, body := get("GET", target, "gzip;q=0, identity"); resp.Header.Get("Content-Encoding") != "" || !bytes.Equal(body, plain) {
			t.Errorf("GET %s with gzip;q=0: Content-Encoding %q, %d bytes", target, resp.Header.Get("Content-Encoding"), len(body))
		}
		// HEAD: the headers of the GET, no body to compress.
		if resp, body := get("HEAD", target, "gzip"); resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "gzip" || len(body) != 0 {
			t.Errorf("HEAD %s accepting gzip: %d, Content-Encoding %q, %d body bytes; want 200 gzip and none", target, resp.StatusCode, resp.Header.Get("Content-Encoding"), len(body))
		}
	}

	// Small answers and problems are not compressed.
	if resp, body := get("GET", "/abc?last=30m", "gzip"); resp.Header.Get("Content-Encoding") != "" || len(body) >= 1024 {
		t.Errorf("a %d-byte answer: Content-Encoding %q, want none below 1 KiB", len(body), resp.Header.Get("Content-Encoding"))
	}
	if resp, _ := get("GET", "/abc?lst=1h", "gzip"); resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Content-Encoding") != "" {
		t.Errorf("a problem answer: %d Content-Encoding %q", resp.StatusCode, resp.Header.Get("Content-Encoding"))
	}

	// Go's own client asks for gzip and undoes it: the answer reads the same.
	resp, err := http.Get(srv.URL + "/abc?last=1y&stitch=true")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	viaGo, _ := io.ReadAll(resp.Body)
	_, plain := get("GET", "/abc?last=1y&stitch=true", "")
	if !resp.Uncompressed || !bytes.Equal(viaGo, plain) {
		t.Errorf("Go client: uncompressed %v, %d bytes; want the plain %d", resp.Uncompressed, len(viaGo), len(plain))
	}
}

// BenchmarkStatsGzip measures a stitched year of a busy link (one JSON
// answer of about 5,700 points) as it is and gzipped at the level the
// handler uses; bytes/answer is the size sent.
func BenchmarkStatsGzip(b *testing.B) {
	h := stats.New(statsRandomReader{}, rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return statsNow }})
	for _, tc := range []struct{ name, acceptEncoding string }{{"identity", ""}, {"gzip", "gzip"}} {
		b.Run(tc.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/abc?last=1y&stitch=true", nil)
			if tc.acceptEncoding != "" {
				req.Header.Set("Accept-Encoding", tc.acceptEncoding)
			}
			b.ReportAllocs()
			var n int
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatal(w.Code)
				}
				n = w.Body.Len()
			}
			b.ReportMetric(float64(n), "bytes/answer")
		})
	}
}
