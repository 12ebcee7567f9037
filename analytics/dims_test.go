package analytics_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/pebblestore"
	"github.com/linkgate/linkgate/forwarded"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
	"github.com/linkgate/linkgate/visitor/visitortest"
)

// dimRef is a brute-force reference: every visit's features, counted.
type dimRef map[string]map[visitor.Dim]map[string]int64 // key → dim → value → visits

func (r dimRef) add(key string, f visitor.Features) {
	for _, k := range []string{key, analytics.AllLinks} {
		if r[k] == nil {
			r[k] = map[visitor.Dim]map[string]int64{}
		}
		for d, v := range f {
			if v == "" {
				continue
			}
			if r[k][visitor.Dim(d)] == nil {
				r[k][visitor.Dim(d)] = map[string]int64{}
			}
			r[k][visitor.Dim(d)][v]++
		}
	}
}

func (r dimRef) want(key string, d visitor.Dim) []analytics.DimValue {
	var out []analytics.DimValue
	for v, n := range r[key][d] {
		out = append(out, analytics.DimValue{Value: v, Count: n})
	}
	analytics.SortDims(out)
	return out
}

var (
	refs      = []string{"direct", "news.example", "blog.example", "mail.example", "t.co", "forum.example"}
	countries = []string{"DE", "FR", "JP", "unknown"}
	devices   = []string{"desktop", "mobile", "tablet", "bot"}
	browsers  = []string{"Chrome", "Firefox", "Safari"}
	campaigns = []string{"spring sale", "launch"}
	classes   = []string{"human", "scanner", "preview"}
)

func randomFeatures(rnd *rand.Rand) visitor.Features {
	ref := refs[rnd.IntN(len(refs))]
	src := ref
	if rnd.IntN(4) == 0 {
		src = "qr"
	}
	f := visitor.Features{ref, src, countries[rnd.IntN(len(countries))], devices[rnd.IntN(len(devices))],
		browsers[rnd.IntN(len(browsers))], "iOS"}
	if rnd.IntN(3) == 0 {
		f[visitor.Medium], f[visitor.Campaign] = "email", campaigns[rnd.IntN(len(campaigns))]
	}
	f[visitor.Class] = classes[rnd.IntN(len(classes))]
	return f
}

// TestDimsExact records visits with features on 30 links over two UTC days
// in several intervals, from two cores' worth of goroutines, and reads every
// breakdown back through the Reader from the embedded store's stand-in:
// each is exactly the reference, for each link and for all links.
func TestDimsExact(t *testing.T) {
	rec := analytics.NewRecorder(1000, nil)
	rec.SetMaxValues(100)
	st := analyticstest.NewMemory(analyticstest.DefaultPlan)
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{}, nil, nil)
	rnd := rand.New(rand.NewPCG(1, 2))
	ref := dimRef{}
	day0 := rollup.Align(time.Now().UTC(), rollup.Day).Add(-rollup.Day)
	for round := range 6 {
		for range 500 {
			key := fmt.Sprintf("k%d", rnd.IntN(30))
			fe := randomFeatures(rnd)
			ref.add(key, fe)
			at := day0.Add(time.Duration(rnd.IntN(47*60)) * time.Minute)
			rec.RecordVisit(key, at, fe[visitor.Device] == "bot", &fe, 0)
		}
		if round%2 == 1 {
			if err := f.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := f.Reader(st)
	from, to := day0, day0.Add(2*rollup.Day)
	for _, key := range []string{"k0", "k7", "k29", analytics.AllLinks} {
		for _, d := range visitor.Dims() {
			got, err := r.Dims(t.Context(), key, d, from, to)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ref.want(key, d), got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s by %v (-want +got):\n%s", key, d, diff)
			}
		}
	}
	// Only the second day.
	got, _ := r.Dims(t.Context(), "k0", visitor.OS, day0.Add(rollup.Day), to)
	all, _ := r.Dims(t.Context(), "k0", visitor.OS, from, to)
	if len(got) != 1 || got[0].Count >= all[0].Count || got[0].Count == 0 {
		t.Errorf("k0's OS on the second day = %v, of %v over both: want a part", got, all)
	}
}

// TestDimsCap: past max_values values of a (link, day, dimension), visits
// count as "other", across flushes; the total stays exact.
func TestDimsCap(t *testing.T) {
	rec := analytics.NewRecorder(1000, nil)
	rec.SetMaxValues(3)
	st := analyticstest.NewMemory(analyticstest.DefaultPlan)
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{}, nil, nil)
	now := time.Now().UTC()
	visit := func(ref string, n int) {
		for range n {
			fe := visitor.Features{visitor.Referrer: ref}
			rec.RecordVisit("k", now, false, &fe, 0)
		}
	}
	visit("a.example", 5)
	visit("b.example", 4)
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	visit("c.example", 3)
	visit("d.example", 2) // the fourth value of the day
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	visit("e.example", 1)
	visit("a.example", 1)
	if err := f.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	got, err := f.Reader(st).Dims(t.Context(), "k", visitor.Referrer, now.Add(-rollup.Day), now.Add(rollup.Day))
	if err != nil {
		t.Fatal(err)
	}
	want := []analytics.DimValue{{"a.example", 6}, {"b.example", 4}, {"c.example", 3}, {"other", 3}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("capped breakdown (-want +got):\n%s", diff)
	}
}

// TestDimsJournalReplay: while the store refuses writes the breakdowns go to
// the journal with the counts, a read adds them to the store's, and after a
// crash a new process writes them once.
func TestDimsJournalReplay(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "journal")
	st := analyticstest.NewMemory(analyticstest.DefaultPlan)
	st.Fail = func(string) error { return errDown }
	rec := analytics.NewRecorder(1000, nil)
	rec.SetMaxValues(100)
	opts := analytics.FlusherOptions{JournalPath: dir}
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, opts, nil, nil)
	rnd := rand.New(rand.NewPCG(3, 4))
	ref := dimRef{}
	now := time.Now().UTC()
	for range 3 {
		for range 200 {
			key := fmt.Sprintf("k%d", rnd.IntN(5))
			fe := randomFeatures(rnd)
			ref.add(key, fe)
			rec.RecordVisit(key, now, false, &fe, 0)
		}
		if err := f.Flush(t.Context()); err == nil {
			t.Fatal("Flush with the store down succeeded")
		}
	}
	day, next := rollup.Align(now, rollup.Day), rollup.Align(now, rollup.Day).Add(rollup.Day)
	got, err := f.Reader(st).Dims(t.Context(), "k1", visitor.Referrer, day, next)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ref.want("k1", visitor.Referrer), got); diff != "" {
		t.Errorf("breakdown read from the journal (-want +got):\n%s", diff)
	}
	analytics.Crash(f)

	st.Fail = nil
	f2 := analytics.NewFlusher(analytics.NewRecorder(1000, nil), st, analyticstest.DefaultPlan, opts, nil, nil)
	if err := f2.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := f2.Flush(t.Context()); err != nil { // a second replay finds nothing
		t.Fatal(err)
	}
	for _, key := range []string{"k0", "k1", "k4", analytics.AllLinks} {
		for _, d := range visitor.Dims() {
			got, err := st.Dims(t.Context(), key, d, day, next)
			if err != nil {
				t.Fatal(err)
			}
			analytics.SortDims(got)
			if diff := cmp.Diff(ref.want(key, d), got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s by %v after the replay (-want +got):\n%s", key, d, diff)
			}
		}
	}
}

// TestMiddlewareCountsFeatures: the middleware reads a visit's features
// with the gateway's trusted proxies and the configured database.
func TestMiddlewareCountsFeatures(t *testing.T) {
	cfg := analytics.DefaultConfig()
	cfg.GeoIP.Path = visitortest.CountryDB(t, visitortest.IPLocationDB, map[string]string{"198.51.100.0/24": "FR"})
	trust, _ := forwarded.Parse([]string{"127.0.0.1"})
	plan, err := analytics.CompileEnv(cfg, analytics.Env{Trust: trust})
	if err != nil {
		t.Fatal(err)
	}
	rec := analytics.NewRecorder(100, nil)
	rec.SetMaxValues(cfg.Dimensions.MaxValues)
	st := analyticstest.NewMemory(analyticstest.DefaultPlan)
	fl := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{}, nil, nil)
	h := analytics.NewMiddleware(plan, rec)(http.RedirectHandler("https://example.org/", http.StatusFound))
	for _, tc := range []struct{ target, xff, ref string }{
		{"/k?src=qr", "198.51.100.4", ""},
		{"/k", "198.51.100.5", "https://www.news.example/a"},
		{"/k?utm_source=mail", "203.0.113.1", "https://news.example/"},
	} {
		r := httptest.NewRequest("GET", tc.target, nil)
		r.RemoteAddr = "127.0.0.1:999"
		r.Header.Set("X-Forwarded-For", tc.xff)
		r.Header.Set("Referer", tc.ref)
		r.Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	now := time.Now()
	for _, tc := range []struct {
		dim  visitor.Dim
		want []analytics.DimValue
	}{
		{visitor.Referrer, []analytics.DimValue{{"news.example", 2}, {"direct", 1}}},
		{visitor.Source, []analytics.DimValue{{"mail", 1}, {"news.example", 1}, {"qr", 1}}},
		{visitor.Country, []analytics.DimValue{{"FR", 2}, {"unknown", 1}}},
		{visitor.Device, []analytics.DimValue{{"desktop", 3}}},
		{visitor.Browser, []analytics.DimValue{{"Firefox", 3}}},
		{visitor.OS, []analytics.DimValue{{"Linux", 3}}},
	} {
		got, err := fl.Reader(st).Dims(context.Background(), "k", tc.dim, now.Add(-rollup.Day), now.Add(rollup.Day))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("by %v (-want +got):\n%s", tc.dim, diff)
		}
	}
}

// BenchmarkMiddlewareFeatures measures what counting where a visit comes
// from adds on the request's path: "off" is the middleware without
// dimensions or uniques, "dims" with the dimensions (a warm User-Agent
// cache and a country lookup), "dims+uniques" with the visitor's hash
// added to its link's sketch too. The difference must stay under 1 µs,
// with no allocation.
func BenchmarkMiddlewareFeatures(b *testing.B) {
	geo := visitortest.CountryDB(b, visitortest.GeoLite2, map[string]string{"203.0.113.0/24": "DE"})
	for _, mode := range []string{"off", "dims", "dims+uniques"} {
		b.Run(mode, func(b *testing.B) {
			cfg := analytics.DefaultConfig()
			cfg.GeoIP.Path = geo
			if mode == "off" {
				cfg.Dimensions.MaxValues = 0
			}
			env := analytics.Env{Getenv: func(string) string { return "" }}
			if mode == "dims+uniques" {
				env.Getenv = func(string) string { return "a-secret-of-32-bytes-for-testing" }
			}
			plan, err := analytics.CompileEnv(cfg, env)
			if err != nil {
				b.Fatal(err)
			}
			rec := analytics.NewRecorder(100, nil)
			rec.SetMaxValues(cfg.Dimensions.MaxValues)
			h := analytics.NewMiddleware(plan, rec)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusFound)
			}))
			req := httptest.NewRequest("GET", "/abc123?utm_source=newsletter", nil)
			req.RemoteAddr = "203.0.113.7:5555"
			req.Header.Set("User-Agent", "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1")
			req.Header.Set("Referer", "https://news.example/article")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, req)
			}
		})
	}
}

// TestDimsBeyondMaxKeys: a visit to a link past max_keys is not counted
// per link, but its features and its visitor still count for all links.
func TestDimsBeyondMaxKeys(t *testing.T) {
	rec := analytics.NewRecorder(1, nil)
	rec.SetMaxValues(10)
	st := analyticstest.NewMemory(analyticstest.DefaultPlan)
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{}, nil, nil)
	now := time.Now().UTC()
	for i, key := range []string{"a", "b", "b", "a"} { // b is beyond max_keys
		fe := visitor.Features{visitor.Referrer: key + ".example"}
		rec.RecordVisit(key, now, false, &fe, uint64(i+1)*0x9E3779B97F4A7C15)
	}
	day, next := rollup.Align(now, rollup.Day), rollup.Align(now, rollup.Day).Add(rollup.Day)
	for _, flushed := range []bool{false, true} {
		if flushed {
			if err := f.Flush(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		got, err := f.Reader(st).Dims(t.Context(), analytics.AllLinks, visitor.Referrer, day, next)
		if err != nil {
			t.Fatal(err)
		}
		want := []analytics.DimValue{{"a.example", 2}, {"b.example", 2}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("flushed %v: all links by referrer (-want +got):\n%s", flushed, diff)
		}
		sk, err := f.Reader(st).Uniques(t.Context(), analytics.AllLinks, day, next)
		if err != nil || sk.Estimate() != 4 {
			t.Errorf("flushed %v: all links' uniques %v, %v; want 4", flushed, sk.Estimate(), err)
		}
	}
}

// TestTopWithUnsaved: the Reader's top list is exact at every moment,
// whether the visits are stored or still in memory: a link with stored
// visits overtaken by one whose visits are not flushed yet, a link only in
// memory, and ties, against a count of every visit.
func TestTopWithUnsaved(t *testing.T) {
	for _, st := range []analytics.Store{analyticstest.NewMemory(analyticstest.DefaultPlan), openPebble(t)} {
		rec := analytics.NewRecorder(1000, nil)
		f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{}, nil, nil)
		now := time.Now().UTC()
		ref := map[string]int64{}
		visit := func(key string, n int) {
			for range n {
				rec.Record(key, now, false)
				ref[key]++
			}
			rec.Record(key, now, true) // bots never rank
		}
		check := func(when string, n int) {
			t.Helper()
			want := analyticstest.TopOf(ref, n)
			got, err := f.Reader(st).Top(t.Context(), now.Add(-rollup.Day), now.Add(rollup.Day), n)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%T %s: top %d (-want +got):\n%s", st, when, n, diff)
			}
		}
		for i := range 20 {
			visit(fmt.Sprintf("l%02d", i), 40-i)
		}
		check("all in memory", 5)
		if err := f.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		check("all stored", 5)
		visit("l10", 30) // stored 30, now 60: first
		visit("new", 35) // only in memory
		visit("l04", 1)  // 36 + 1
		check("some unsaved", 5)
		check("some unsaved", 3)
		check("some unsaved", 25)
		if err := f.Flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		check("flushed again", 5)
	}
}

func openPebble(t *testing.T) analytics.Store {
	s, err := pebblestore.Open(t.TempDir(), analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
