package stats_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/linkgate/linkgate/stats"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/pebblestore"
	"github.com/linkgate/linkgate/rollup"
)

// TestStatsExpired: the buckets a tier may have dropped are null, never
// zeros, with "expired_before" the first one kept, and the store is not
// read for them. Every point is checked against the rule stated on
// New (a bucket of step s in a tier kept for R is expired when
// start+s+R <= now), and two boundaries are worked out by hand.
func TestStatsExpired(t *testing.T) {
	tiers := rollup.DefaultTiers()
	retention := map[time.Duration]time.Duration{}
	for _, tr := range tiers {
		retention[tr.Step] = tr.Retention
	}
	for _, tc := range []struct {
		target string
		// expiredBefore is worked out by hand; zero: nothing expired.
		expiredBefore time.Time
	}{
		// The minute tier keeps 2 days: the bucket 10:16 two days ago ends
		// at 10:17, two days before 10:17:42 now, so it may be gone; the
		// one at 10:17 ends 18 seconds from now, two days on.
		{"/abc?step=1m&last=3d", time.Date(2026, 11, 21, 10, 17, 0, 0, time.UTC)},
		// The week tier keeps 5 × 365 days: the week of Monday 2021-11-15
		// ends on 11-22, 1,825 days before 2026-11-21, before now; the
		// next one ends 1,825 days before 2026-11-28, after now.
		{"/abc?last=6y", time.Date(2021, 11, 22, 0, 0, 0, 0, time.UTC)},
		{"/abc?last=6y&stitch=true", time.Date(2021, 11, 22, 0, 0, 0, 0, time.UTC)},
		// The day tier keeps 400 days: the day 2025-10-18 ends 400 days
		// before 2026-11-23 00:00, before now. All of 1970 is expired.
		{"/abc?from=0&to=1970-03-01T00:00:00Z&step=1d", time.Date(2025, 10, 19, 0, 0, 0, 0, time.UTC)},
		{"/abc?step=1m&last=2d", time.Time{}}, // its first bucket, 10:17, is kept
		{"/abc?last=1y", time.Time{}},
		{"/abc?last=5y&stitch=true", time.Time{}},
	} {
		t.Run(tc.target, func(t *testing.T) {
			r := newStatsReader()
			h := stats.New(r, tiers, stats.Options{Now: func() time.Time { return statsNow }})
			w := statsGet(t, h, tc.target)
			if w.Code != http.StatusOK {
				t.Fatalf("%d %s", w.Code, w.Body)
			}
			a := decodeStats(t, w)
			if a.Partial || a.Known == nil || !*a.Known {
				t.Errorf("partial %v, known %v: want a whole answer of a known key", a.Partial, a.Known)
			}
			switch {
			case tc.expiredBefore.IsZero() && a.ExpiredBefore != nil:
				t.Errorf("expired_before %d, want none", *a.ExpiredBefore)
			case !tc.expiredBefore.IsZero() && (a.ExpiredBefore == nil || *a.ExpiredBefore != tc.expiredBefore.Unix()):
				t.Errorf("expired_before %v, want %d (%v)", a.ExpiredBefore, tc.expiredBefore.Unix(), tc.expiredBefore)
			}
			var human, bot int64
			firstKept := int64(-1)
			for i, p := range a.Points {
				step := time.Duration(a.Step) * time.Second
				if a.Step == 0 {
					step = time.Duration(p[3]) * time.Second
				}
				start := time.Unix(p[0], 0).UTC()
				expired := !start.Add(step + retention[step]).After(statsNow)
				if a.nulls[i] != expired {
					t.Fatalf("point %d at %v (step %v): null %v, expired %v", i, start, step, a.nulls[i], expired)
				}
				if expired {
					continue
				}
				if firstKept < 0 {
					firstKept = p[0]
				}
				if want := statsVisits("abc", step, start); p[1] != want.Human || p[2] != want.Bot {
					t.Fatalf("point %d at %v = %v, stored %v", i, start, p, want)
				}
				human += p[1]
				bot += p[2]
			}
			if a.ExpiredBefore != nil && firstKept >= 0 && firstKept != *a.ExpiredBefore {
				t.Errorf("first kept point at %d, expired_before %d", firstKept, *a.ExpiredBefore)
			}
			if human != a.RangeTotal || bot != a.BotRangeTotal {
				t.Errorf("range totals %d, %d; the points not null add up to %d, %d", a.RangeTotal, a.BotRangeTotal, human, bot)
			}
			for _, c := range r.calls {
				if a.ExpiredBefore != nil && c.From.Unix() < *a.ExpiredBefore {
					t.Errorf("the store was read from %v, before expired_before", c.From)
				}
			}
			if tc.expiredBefore.IsZero() != (a.numNull() == 0) {
				t.Errorf("%d null points, expired_before %v", a.numNull(), tc.expiredBefore)
			}
			if len(r.calls) == 0 && a.numNull() < len(a.Points) {
				t.Error("points that are not null, and no read")
			}
		})
	}

	// CSV: empty cells for the same points, and the header.
	h := stats.New(newStatsReader(), tiers, stats.Options{Now: func() time.Time { return statsNow }})
	a := decodeStats(t, statsGet(t, h, "/abc?step=1m&last=3d"))
	w := statsGet(t, h, "/abc?step=1m&last=3d&format=csv")
	if got := w.Header().Get("Linkgate-Expired-Before"); got != fmt.Sprint(*a.ExpiredBefore) {
		t.Errorf("Linkgate-Expired-Before %q, want %d", got, *a.ExpiredBefore)
	}
	if got := strings.Count(w.Body.String(), ",,\n"); got != a.numNull() || got == 0 {
		t.Errorf("%d CSV rows with empty cells, %d null points in JSON", got, a.numNull())
	}
	if w := statsGet(t, h, "/abc?last=1y&format=csv"); w.Header().Get("Linkgate-Expired-Before") != "" || strings.Contains(w.Body.String(), ",,") {
		t.Errorf("a year of days: Linkgate-Expired-Before %q; want no header, no empty cells", w.Header().Get("Linkgate-Expired-Before"))
	}
	// Goldens, with tiers short enough to show every point.
	h = stats.New(newStatsReader(), smallTiers, stats.Options{Now: func() time.Time { return statsNow }})
	checkGolden(t, "link_3h_1m_expired.csv", statsGet(t, h, "/abc?last=3h&step=1m&format=csv").Body.Bytes())
	checkGolden(t, "all_2y_stitched_expired.json", statsGet(t, h, "/?last=2y&stitch=true").Body.Bytes())
}

// heldReader fails as a Flusher's Reader does when its store is down: with
// the counts it holds and an error matching ErrUnsavedOnly.
type heldReader struct {
	held  []analytics.Point
	total analytics.Visits
}

var errHeld = fmt.Errorf("store down: %w", analytics.ErrUnsavedOnly)

func (r heldReader) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]analytics.Point, error) {
	var out []analytics.Point
	for _, p := range r.held {
		if !p.Start.Before(from) && p.Start.Before(to) {
			out = append(out, p)
		}
	}
	return out, errHeld
}

func (r heldReader) Total(ctx context.Context, key string) (analytics.Visits, error) {
	return r.total, errHeld
}

// TestStatsPartialHeld: counts the Reader returns beside ErrUnsavedOnly
// are served where they fall, every other bucket is null.
func TestStatsPartialHeld(t *testing.T) {
	m := rollup.Align(statsNow, time.Minute)
	r := heldReader{
		held: []analytics.Point{
			{Start: m.Add(-2 * time.Minute), Visits: analytics.Visits{Human: 3}},
			{Start: m, Visits: analytics.Visits{Human: 1, Bot: 2}},
		},
		total: analytics.Visits{Human: 4, Bot: 2},
	}
	h := stats.New(r, rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return statsNow }})
	w := statsGet(t, h, "/abc?last=5m")
	checkGolden(t, "link_5m_partial.json", w.Body.Bytes())
	a := decodeStats(t, w)
	if !a.Partial || a.Known == nil || !*a.Known || a.Total != 4 || a.BotTotal != 2 || a.RangeTotal != 4 || a.BotRangeTotal != 2 {
		t.Errorf("%+v: want partial, known, totals 4 and 2", a)
	}
	for i, p := range a.Points {
		held := p[0] == m.Unix() || p[0] == m.Add(-2*time.Minute).Unix()
		if a.nulls[i] == held {
			t.Errorf("point %v: null %v, held %v", p, a.nulls[i], held)
		}
	}
}

// TestStatsPartialWhenStoreClosed runs the stats API on a Flusher's Reader
// over the embedded store, which is closed under it: the answer is a 200
// from the counts still in the recorder and those a failed flush kept,
// each in its bucket, everything else null (the stored counts too: they
// cannot be read), flagged partial; a key with nothing unsaved cannot be
// told known or unknown.
func TestStatsPartialWhenStoreClosed(t *testing.T) {
	ctx := t.Context()
	st, err := pebblestore.Open(filepath.Join(t.TempDir(), "db"), analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Minute)
	rec := analytics.NewRecorder(1000, nil)
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: func() time.Time { return now }}, nil, nil)
	h := stats.New(f.Reader(st), rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return now.Add(30 * time.Second) }})
	get := func(target string) (*statsAnswer, http.Header) {
		t.Helper()
		w := statsGet(t, h, target)
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", target, w.Code, w.Body)
		}
		a := decodeStats(t, w)
		return &a, w.Header()
	}
	record := func(key string, at time.Time, human, bot int) {
		for range human {
			rec.Record(key, at, false)
		}
		for range bot {
			rec.Record(key, at, true)
		}
	}
	record("abc", now.Add(-10*time.Minute), 5, 0)
	record("stored", now.Add(-20*time.Minute), 2, 0)
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if a, _ := get("/abc?last=1h"); a.Partial || a.Total != 5 || a.numNull() != 0 {
		t.Fatalf("store open: %+v; want a whole answer with 5 visits", a)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	record("abc", now.Add(-5*time.Minute), 2, 1)
	if err := f.Flush(ctx); err == nil {
		t.Fatal("Flush to a closed store: no error")
	}
	record("abc", now, 4, 0) // in the recorder

	a, hdr := get("/abc?last=1h")
	if !a.Partial || a.PartialReason != "store unreachable" || hdr.Get("Linkgate-Partial") != "store unreachable" {
		t.Errorf("partial %v %q, header %q", a.Partial, a.PartialReason, hdr.Get("Linkgate-Partial"))
	}
	if a.Total != 6 || a.BotTotal != 1 || a.RangeTotal != 6 || a.BotRangeTotal != 1 || a.Known == nil || !*a.Known {
		t.Errorf("totals %d, %d, range %d, %d, known %v; want the 6 and 1 unsaved, known", a.Total, a.BotTotal, a.RangeTotal, a.BotRangeTotal, a.Known)
	}
	want := map[int64][2]int64{now.Add(-5 * time.Minute).Unix(): {2, 1}, now.Unix(): {4, 0}}
	for i, p := range a.Points {
		w, held := want[p[0]]
		switch {
		case held && (a.nulls[i] || p[1] != w[0] || p[2] != w[1]):
			t.Errorf("point %v (null %v), want %v", p, a.nulls[i], w)
		case !held && !a.nulls[i]:
			t.Errorf("point %v is not null: nothing unsaved there, and the store was not read", p)
		}
	}
	if all, _ := get("/?last=1h&step=5m"); !all.Partial || all.Total != 6 || all.BotTotal != 1 {
		t.Errorf("all links: %+v; want partial, 6 and 1", all)
	}
	for _, key := range []string{"stored", "never-seen"} {
		a, hdr := get("/" + key + "?last=1h&format=json")
		if !a.Partial || a.Known != nil || a.Total != 0 || a.numNull() != len(a.Points) {
			t.Errorf("%s: partial %v, known %v, total %d, %d of %d null; want partial, known null, all null", key, a.Partial, a.Known, a.Total, a.numNull(), len(a.Points))
		}
		w := statsGet(t, h, "/"+key+"?format=csv")
		if hdr.Get("Linkgate-Known") != "unknown" || w.Header().Get("Linkgate-Partial") != "store unreachable" {
			t.Errorf("%s: Linkgate-Known %q, CSV Linkgate-Partial %q", key, hdr.Get("Linkgate-Known"), w.Header().Get("Linkgate-Partial"))
		}
	}
}

// TestReaderStoreDownUnsavedOnly checks Flusher.Reader itself: with its
// store closed, Points and Total return the unsaved counts (recorder and
// failed flush) with an error matching ErrUnsavedOnly and the store's
// error.
func TestReaderStoreDownUnsavedOnly(t *testing.T) {
	ctx := t.Context()
	st, err := pebblestore.Open(filepath.Join(t.TempDir(), "db"), analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Hour)
	rec := analytics.NewRecorder(1000, nil)
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: func() time.Time { return now }}, nil, nil)
	r := f.Reader(st)
	rec.Record("k", now.Add(time.Minute), false)
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st.Close()
	rec.Record("k", now.Add(2*time.Minute), true)
	if f.Flush(ctx) == nil {
		t.Fatal("Flush to a closed store: no error")
	}
	rec.Record("k", now.Add(7*time.Minute), false)

	pts, err := r.Points(ctx, "k", 5*time.Minute, now, now.Add(time.Hour))
	if !errors.Is(err, analytics.ErrUnsavedOnly) || !errors.Is(err, pebblestore.ErrClosed) {
		t.Fatalf("Points: %v; want ErrUnsavedOnly wrapping pebblestore.ErrClosed", err)
	}
	want := []analytics.Point{
		{Start: now, Visits: analytics.Visits{Bot: 1}},
		{Start: now.Add(5 * time.Minute), Visits: analytics.Visits{Human: 1}},
	}
	if fmt.Sprint(pts) != fmt.Sprint(want) {
		t.Errorf("Points = %v, want %v", pts, want)
	}
	v, err := r.Total(ctx, "k")
	if !errors.Is(err, analytics.ErrUnsavedOnly) || v != (analytics.Visits{Human: 1, Bot: 1}) {
		t.Errorf("Total = %v, %v; want {1 1} and ErrUnsavedOnly", v, err)
	}
}

// downSource fails every read while down is set, else reads s.
type downSource struct {
	rollup.Source
	down atomic.Bool
}

var errReadDown = errors.New("read refused")

func (s *downSource) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]analytics.Point, error) {
	if s.down.Load() {
		return nil, errReadDown
	}
	return s.Source.Points(ctx, key, step, from, to)
}

// TestStatsPartialThenWhole: reads of a real embedded store fail for a
// while (the store keeps taking writes): the answers are partial, from
// the unsaved counts only; once reads work again the same handler answers
// whole, stored and unsaved counts added, with no null point left.
func TestStatsPartialThenWhole(t *testing.T) {
	ctx := t.Context()
	st, err := pebblestore.Open(filepath.Join(t.TempDir(), "db"), analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	src := &downSource{Source: st}
	now := time.Now().UTC().Truncate(time.Minute)
	rec := analytics.NewRecorder(1000, nil)
	f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: func() time.Time { return now }}, nil, nil)
	h := stats.New(f.Reader(src), rollup.DefaultTiers(), stats.Options{Now: func() time.Time { return now.Add(30 * time.Second) }})
	for range 5 {
		rec.Record("abc", now.Add(-3*time.Minute), false)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rec.Record("abc", now, false)

	src.down.Store(true)
	a := decodeStats(t, statsGet(t, h, "/abc?last=10m"))
	if !a.Partial || a.Total != 1 || a.RangeTotal != 1 || a.numNull() != len(a.Points)-1 {
		t.Errorf("reads down: partial %v, total %d, range %d, %d of %d null; want partial, the 1 unsaved visit, all else null", a.Partial, a.Total, a.RangeTotal, a.numNull(), len(a.Points))
	}
	src.down.Store(false)
	a = decodeStats(t, statsGet(t, h, "/abc?last=10m"))
	if a.Partial || a.Total != 6 || a.RangeTotal != 6 || a.numNull() != 0 {
		t.Errorf("reads back: partial %v, total %d, range %d, %d null; want a whole answer of 6", a.Partial, a.Total, a.RangeTotal, a.numNull())
	}
}

// hangingSource is a store whose reads never answer: each returns only
// when its context is done, as a store whose coordinator waits for lost
// replicas does.
type hangingSource struct{ *analyticstest.Memory }

func (hangingSource) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]analytics.Point, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (hangingSource) Progress(ctx context.Context) (rollup.Progress, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestStatsAnswersWhenTheStoreHangs: with a store whose reads hang, a
// stats request answers at its read deadline (stats.read_timeout), partial,
// with the visits the gateway holds; and a second request is not held up
// by the first.
func TestStatsAnswersWhenTheStoreHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := hangingSource{analyticstest.NewMemory(analyticstest.DefaultPlan)}
		rec := analytics.NewRecorder(100, nil)
		f := analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, analytics.FlusherOptions{}, nil, nil)
		for range 3 {
			rec.Record("k", time.Now().Add(-30*time.Second), false)
		}
		h := stats.New(f.Reader(st), rollup.DefaultTiers(), stats.Options{ReadTimeout: 800 * time.Millisecond})
		for range 2 {
			began := time.Now()
			w := statsGet(t, h, "/k?last=1h")
			took := time.Since(began)
			a := decodeStats(t, w)
			if w.Code != http.StatusOK || !a.Partial || a.Total != 3 || a.RangeTotal != 3 {
				t.Errorf("answer %d partial %v totals %d, %d; want a partial 200 holding the 3 visits held", w.Code, a.Partial, a.Total, a.RangeTotal)
			}
			if took > time.Second {
				t.Errorf("answered in %v with read_timeout 800ms", took)
			}
		}
	})
}
