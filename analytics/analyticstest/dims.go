package analyticstest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
)

// dimc is a DimCount.
func dimc(key string, dim visitor.Dim, day time.Time, value string, n, cum int64, gen uint64) analytics.DimCount {
	return analytics.DimCount{Key: key, Dim: dim, Day: day, Value: value, N: n, Cum: cum, Gen: gen}
}

// dimWriter makes the batches of one writer as a Flusher does: N per
// batch, Cum the running sum per (key, dim, day, value, gen).
type dimWriter struct {
	writer string
	seq    uint64
	cum    map[string]int64
	e      *env
	last   time.Time
}

func (e *env) dimWriter(name string) *dimWriter {
	return &dimWriter{writer: e.key(name), cum: map[string]int64{}, e: e}
}

type dv struct {
	key   string
	dim   visitor.Dim
	day   time.Time
	value string
	n     int64
	gen   uint64
}

func (w *dimWriter) batch(vs ...dv) analytics.Batch {
	w.seq++
	// As a Flusher's, a writer's At grows to the microsecond (DimCount).
	at := w.e.at()
	for !at.Truncate(time.Microsecond).After(w.last.Truncate(time.Microsecond)) {
		at = w.e.at()
	}
	w.last = at
	b := analytics.Batch{Writer: w.writer, Seq: w.seq, At: at}
	for _, v := range vs {
		id := fmt.Sprint(v.key, v.dim, v.day.Unix(), v.value, v.gen)
		w.cum[id] += v.n
		b.Dims = append(b.Dims, dimc(v.key, v.dim, v.day, v.value, v.n, w.cum[id], v.gen))
	}
	slices.SortFunc(b.Dims, func(a, b analytics.DimCount) int {
		return strings.Compare(fmt.Sprint(a.Key, a.Dim, a.Day.Unix(), a.Value), fmt.Sprint(b.Key, b.Dim, b.Day.Unix(), b.Value))
	})
	return b
}

// dims reads a breakdown sorted by count, then value.
func dims(t *testing.T, s Store, key string, dim visitor.Dim, from, to time.Time) []analytics.DimValue {
	t.Helper()
	got, err := s.Dims(context.Background(), key, dim, from, to)
	if err != nil {
		t.Fatalf("Dims(%q, %v): %v", key, dim, err)
	}
	var out []analytics.DimValue
	for _, v := range got {
		if v.Count != 0 {
			out = append(out, v)
		}
	}
	analytics.SortDims(out)
	return out
}

func checkDims(t *testing.T, s Store, key string, dim visitor.Dim, from, to time.Time, want ...analytics.DimValue) {
	t.Helper()
	got := dims(t, s, key, dim, from, to)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Dims(%q, %v, %s, %s) (-want +got):\n%s", key, dim, from.Format(time.DateOnly), to.Format(time.DateOnly), diff)
	}
}

func val(v string, n int64) analytics.DimValue { return analytics.DimValue{Value: v, Count: n} }

// testDimsPerDay writes values of two dimensions over three days in
// several batches and reads ranges of days: each day is counted once,
// values add up over days and batches, other keys and dimensions stay
// apart, and a range counts the days whose start lies in it.
func testDimsPerDay(t *testing.T, e *env) {
	k, other := e.key("a"), e.key("ab")
	d0 := e.base().Add(-2 * rollup.Day)
	day := func(i int) time.Time { return d0.Add(time.Duration(i) * rollup.Day) }
	w := e.dimWriter("w")
	write(t, e.s, w.batch(
		dv{k, visitor.Referrer, day(0), "news.example", 3, 0}, dv{k, visitor.Referrer, day(0), "direct", 1, 0},
		dv{k, visitor.Country, day(0), "DE", 4, 0}, dv{other, visitor.Referrer, day(0), "news.example", 100, 0}))
	write(t, e.s, w.batch(
		dv{k, visitor.Referrer, day(1), "news.example", 2, 0}, dv{k, visitor.Referrer, day(0), "direct", 2, 0},
		dv{k, visitor.Country, day(1), "FR", 2, 0}))
	write(t, e.s, w.batch(dv{k, visitor.Referrer, day(2), "blog.example", 5, 0}, dv{analytics.AllLinks, visitor.OS, day(2), "iOS", 1, 0}))
	checkDims(t, e.s, k, visitor.Referrer, day(0), day(3), val("blog.example", 5), val("news.example", 5), val("direct", 3))
	checkDims(t, e.s, k, visitor.Referrer, day(0), day(1), val("direct", 3), val("news.example", 3))
	checkDims(t, e.s, k, visitor.Referrer, day(1), day(2), val("news.example", 2))
	// A range starting within a day leaves that day out.
	checkDims(t, e.s, k, visitor.Referrer, day(0).Add(time.Hour), day(3), val("blog.example", 5), val("news.example", 2))
	checkDims(t, e.s, k, visitor.Country, day(-30), day(30), val("DE", 4), val("FR", 2))
	checkDims(t, e.s, k, visitor.Device, day(-30), day(30))
	checkDims(t, e.s, other, visitor.Referrer, day(0), day(3), val("news.example", 100))
	checkDims(t, e.s, e.key("never"), visitor.Referrer, day(0), day(3))
	got := dims(t, e.s, analytics.AllLinks, visitor.OS, day(2), day(3))
	if !slices.ContainsFunc(got, func(v analytics.DimValue) bool { return v.Value == "iOS" && v.Count >= 1 }) {
		t.Errorf("all links' OS = %v, want iOS among them", got)
	}
}

// testDimsEvery writes a value of every dimension, those added after the
// first six (the utm parameters, the class and its reason) included: each
// reads back apart from the others; a dimension no version knows is
// refused, and the batch holding it leaves nothing.
func testDimsEvery(t *testing.T, e *env) {
	k := e.key("every")
	d0 := e.base().Add(-rollup.Day)
	w := e.dimWriter("w")
	var vs []dv
	for _, d := range visitor.Dims() {
		vs = append(vs, dv{k, d, d0, "v-" + d.String(), int64(d) + 1, 0})
	}
	write(t, e.s, w.batch(vs...))
	for _, d := range visitor.Dims() {
		checkDims(t, e.s, k, d, d0, d0.Add(rollup.Day), val("v-"+d.String(), int64(d)+1))
	}
	bad := e.key("bad")
	b := e.dimWriter("bad").batch(dv{bad, visitor.Referrer, d0, "ok", 1, 0}, dv{bad, visitor.NumDims, d0, "x", 1, 0})
	if err := e.s.Write(context.Background(), b); err == nil {
		t.Errorf("a batch with dimension %d was taken", visitor.NumDims)
	}
	checkDims(t, e.s, bad, visitor.Referrer, d0, d0.Add(rollup.Day))
}

// testDimsResentOnce follows the flusher: a failed Write is sent again,
// the batches are replayed after a reopen, in order and out of it: every
// batch counts once. A batch without identity counts each time.
func testDimsResentOnce(t *testing.T, e *env) {
	k := e.key("a")
	day := e.base()
	w := e.dimWriter("w")
	b1 := w.batch(dv{k, visitor.Browser, day, "Chrome", 2, 0}, dv{k, visitor.Browser, day, "Firefox", 1, 0})
	b2 := w.batch(dv{k, visitor.Browser, day, "Chrome", 3, 0})
	b3 := w.batch(dv{k, visitor.Browser, day, "Firefox", 4, 0}, dv{k, visitor.Browser, day, "Chrome", 1, 0})
	write(t, e.s, b1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.s.Write(ctx, b2); err == nil {
		t.Fatal("Write with a canceled context returned nil")
	}
	write(t, e.s, b2)
	write(t, e.s, b2)
	write(t, e.s, b3)
	want := []analytics.DimValue{val("Chrome", 6), val("Firefox", 5)}
	checkDims(t, e.s, k, visitor.Browser, day, day.Add(rollup.Day), want...)
	if e.h.Reopen != nil {
		e.s = e.h.Reopen()
	}
	for _, b := range []analytics.Batch{b1, b2, b3, b2, b1} {
		write(t, e.s, b)
	}
	checkDims(t, e.s, k, visitor.Browser, day, day.Add(rollup.Day), want...)
	// A later batch of the writer still counts, and so does a new
	// generation of its counts (a flusher that forgot them).
	write(t, e.s, w.batch(dv{k, visitor.Browser, day, "Chrome", 10, 0}, dv{k, visitor.Browser, day, "Chrome", 7, 1}))
	checkDims(t, e.s, k, visitor.Browser, day, day.Add(rollup.Day), val("Chrome", 23), val("Firefox", 5))
	anon := analytics.Batch{At: e.at(), Dims: []analytics.DimCount{dimc(k, visitor.Browser, day, "Edge", 1, 1, 0)}}
	write(t, e.s, anon)
	anon.At = e.at()
	write(t, e.s, anon)
	checkDims(t, e.s, k, visitor.Browser, day, day.Add(rollup.Day), val("Chrome", 23), val("Firefox", 5), val("Edge", 2))
}

// testDimsWriters writes through two writers, and through a second store
// when the backend has one: their counts add up.
func testDimsWriters(t *testing.T, e *env) {
	k := e.key("a")
	day := e.base()
	other := e.s
	if e.h.Another != nil {
		other = e.h.Another()
	}
	w1, w2 := e.dimWriter("w1"), e.dimWriter("w2")
	for range 5 {
		write(t, e.s, w1.batch(dv{k, visitor.Source, day, "qr", 1, 0}, dv{k, visitor.Source, day, "newsletter", 2, 0}))
		write(t, other, w2.batch(dv{k, visitor.Source, day, "qr", 3, 0}))
	}
	for i, s := range []Store{e.s, other} {
		t.Logf("reading through store %d", i)
		checkDims(t, s, k, visitor.Source, day, day.Add(rollup.Day), val("qr", 20), val("newsletter", 10))
	}
}

// testDimsExpiry moves the clock past the breakdowns' retention
// (analytics.DefaultDimRetentionDays): old days go, recent ones stay.
func testDimsExpiry(t *testing.T, e *env) {
	if expiresByTTL(t, e, testDimsExpiryByTTL) {
		return
	}
	k := e.key("a")
	old, young := e.base().Add(-5*rollup.Day), e.base()
	w := e.dimWriter("w")
	write(t, e.s, w.batch(dv{k, visitor.OS, old, "Linux", 1, 0}, dv{k, visitor.OS, young, "iOS", 2, 0},
		dv{analytics.AllLinks, analytics.DimLink, old, k, 7, 0}, dv{analytics.AllLinks, analytics.DimLink, young, k, 3, 0}))
	top := func() int64 {
		t.Helper()
		links, err := e.s.Top(context.Background(), old, young.Add(rollup.Day), 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links {
			if l.Key == k {
				return l.Visits
			}
		}
		return 0
	}
	keep := time.Duration(analytics.DefaultDimRetentionDays) * rollup.Day
	if err := e.h.Expire(old.Add(rollup.Day + keep - time.Hour)); err != nil {
		t.Fatal(err)
	}
	checkDims(t, e.s, k, visitor.OS, old, young.Add(rollup.Day), val("iOS", 2), val("Linux", 1))
	if n := top(); n != 10 {
		t.Errorf("top visits before expiry: %d, want 10", n)
	}
	if err := e.h.Expire(old.Add(rollup.Day + keep + time.Hour)); err != nil {
		t.Fatal(err)
	}
	checkDims(t, e.s, k, visitor.OS, old, young.Add(rollup.Day), val("iOS", 2))
	if n := top(); n != 3 {
		t.Errorf("top visits after the old day expired: %d, want 3", n)
	}
}

// testDimsExpiryByTTL is testDimsExpiry on a store that expires by
// itself: a link's breakdown, top-list count and unique visitors of the
// oldest day still kept, written with an At that leaves them Harness.TTL,
// go once the TTL ends; those of a recent day, written now, stay.
func testDimsExpiryByTTL(t *testing.T, e *env) {
	k := e.key("a")
	keep := time.Duration(analytics.DefaultDimRetentionDays) * rollup.Day
	days := [2]time.Time{rollup.Align(e.now.Add(-keep), rollup.Day), e.base()}
	var sk hll.Sketch
	for i := range 50 {
		sk.Add(uint64(i) * 0x9e3779b97f4a7c15)
	}
	for i, day := range days {
		b := e.dimWriter(fmt.Sprint("w", i)).batch(dv{k, visitor.OS, day, "Linux", int64(1 + i), 0},
			dv{analytics.AllLinks, analytics.DimLink, day, k, int64(7 + i), 0})
		b.Uniques = []analytics.UniqueSketch{{Key: k, Day: day, Sketch: sk.AppendBinary(nil)}}
		if i == 0 {
			b.At = day.Add(rollup.Day + keep - e.h.TTL)
		}
		write(t, e.s, b)
	}
	written := time.Now()
	// read returns what the store holds of each day: the breakdown's
	// visits, the link's top-list visits and its unique visitors.
	read := func() (vs, top, uniq [2]int64) {
		t.Helper()
		ctx := context.Background()
		for i, day := range days {
			for _, v := range dims(t, e.s, k, visitor.OS, day, day.Add(rollup.Day)) {
				vs[i] += v.Count
			}
			links, err := e.s.Top(ctx, day, day.Add(rollup.Day), 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range links {
				if l.Key == k {
					top[i] = l.Visits
				}
			}
			u, err := e.s.Uniques(ctx, k, day, day.Add(rollup.Day))
			if err != nil {
				t.Fatal(err)
			}
			uniq[i] = int64(u.Len())
		}
		return vs, top, uniq
	}
	untilExpired(t, e, written, func() (all, gone bool) {
		vs, top, uniq := read()
		return vs == [2]int64{1, 2} && top == [2]int64{7, 8} && uniq[0] == int64(sk.Len()) && uniq[1] == int64(sk.Len()),
			vs[0] == 0 && top[0] == 0 && uniq[0] == 0
	})
	if vs, top, uniq := read(); vs[1] != 2 || top[1] != 8 || uniq[1] != int64(sk.Len()) {
		t.Errorf("the recent day after the old one expired: %d visits by OS, %d in the top list, %d registers; want 2, 8 and %d",
			vs[1], top[1], uniq[1], sk.Len())
	}
}

// testDimsYear reads a year of a link's breakdown: 366 days of three
// values each, in one batch.
func testDimsYear(t *testing.T, e *env) {
	k := e.key("a")
	d0 := e.base().Add(-365 * rollup.Day)
	w := e.dimWriter("w")
	var vs []dv
	for i := range 366 {
		day := d0.Add(time.Duration(i) * rollup.Day)
		vs = append(vs, dv{k, visitor.Referrer, day, "a.example", 1, 0}, dv{k, visitor.Referrer, day, "b.example", 2, 0},
			dv{k, visitor.Referrer, day, fmt.Sprintf("d%d.example", i%7), 1, 0})
	}
	write(t, e.s, w.batch(vs...))
	got := dims(t, e.s, k, visitor.Referrer, d0, e.base().Add(rollup.Day))
	if len(got) != 9 || got[0] != val("b.example", 732) || got[1] != val("a.example", 366) {
		t.Errorf("a year's breakdown = %v, want b.example 732, a.example 366 and 7 others", got)
	}
}

// testTop writes the human visits of 60 links over four days (skewed: a
// few links take most visits, many tie) through two writers (and two
// stores, as two gateways, when the backend has them), in several
// batches, one replayed, and checks the most visited links of ranges of
// days against a count of everything written.
func testTop(t *testing.T, e *env) {
	d0 := e.base().Add(-3 * rollup.Day)
	day := func(i int) time.Time { return d0.Add(time.Duration(i) * rollup.Day) }
	ref := map[int]map[string]int64{} // day → link → visits
	writeRounds(t, e, 6, 2, func(round int) (vs []dv) {
		for i := range 60 {
			for di := range 4 {
				n := int64((60 - i) / (1 + i%7) * (1 + (round+di)%3))
				if i >= 40 {
					n = 1 // a long tail of ties
				}
				if (i+di+round)%5 == 0 {
					continue
				}
				k := e.key(fmt.Sprintf("l%02d", i))
				vs = append(vs, dv{analytics.AllLinks, analytics.DimLink, day(di), k, n, 0})
				if ref[di] == nil {
					ref[di] = map[string]int64{}
				}
				ref[di][k] += n
			}
		}
		return vs
	})
	want := func(lo, hi, n int) []analytics.TopLink {
		sums := map[string]int64{}
		for d := lo; d < hi; d++ {
			for k, v := range ref[d] {
				sums[k] += v
			}
		}
		return TopOf(sums, n)
	}
	for _, r := range []struct{ lo, hi, n int }{{0, 4, 10}, {0, 4, 50}, {1, 2, 5}, {2, 4, 1}, {0, 4, 100}, {3, 4, 45}} {
		got, err := e.s.Top(context.Background(), day(r.lo), day(r.hi), r.n)
		if err != nil {
			t.Fatal(err)
		}
		// Other runs' links share the all-links dimension: keep this one's.
		var mine []analytics.TopLink
		for _, l := range got {
			if strings.HasPrefix(l.Key, e.prefix) {
				mine = append(mine, l)
			}
		}
		if diff := cmp.Diff(want(r.lo, r.hi, r.n), mine); diff != "" {
			t.Errorf("Top(days %d to %d, %d) (-want +got):\n%s", r.lo, r.hi, r.n, diff)
		}
	}
	// TopCounts: a few links' visits, one never visited.
	keys := []string{e.key("l00"), e.key("l45"), e.key("l59"), e.key("never")}
	got, err := e.s.TopCounts(context.Background(), keys, day(1), day(3))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if w := ref[1][k] + ref[2][k]; got[k] != w {
			t.Errorf("TopCounts(%s, days 1 to 3) = %d, want %d", k, got[k], w)
		}
	}
}

// writeRounds writes each round's visits through two writers in turn (the
// second through a second store when the backend has one), and the batch
// of round replayed once more.
func writeRounds(t *testing.T, e *env, rounds, replayed int, visits func(round int) []dv) {
	ws := []*dimWriter{e.dimWriter("w1"), e.dimWriter("w2")}
	stores := []Store{e.s, e.s}
	if e.h.Another != nil {
		stores[1] = e.h.Another()
	}
	var replay analytics.Batch
	for round := range rounds {
		b := ws[round%2].batch(visits(round)...)
		write(t, stores[round%2], b)
		if round == replayed {
			replay = b
		}
	}
	write(t, e.s, replay)
}

// TopOf is the top list of at most n links of sums, in the order of
// analytics.CompareTop: what a store's or a reader's Top must answer for
// the visits sums counts.
func TopOf(sums map[string]int64, n int) []analytics.TopLink {
	var out []analytics.TopLink
	for k, v := range sums {
		out = append(out, analytics.TopLink{Key: k, Visits: v})
	}
	slices.SortFunc(out, analytics.CompareTop)
	return out[:min(n, len(out))]
}

// testUniques writes sketches of visitor hashes for two days, from two
// stores when the backend has them, some batches twice and out of order:
// a read is the sketch of every hash written for the days asked, as a
// reference sketch has it, register for register.
func testUniques(t *testing.T, e *env) {
	k := e.key("a")
	d0 := e.base().Add(-rollup.Day)
	other := e.s
	if e.h.Another != nil {
		other = e.h.Another()
	}
	rnd := rand.New(rand.NewPCG(5, 6))
	ref := [2]*hll.Sketch{new(hll.Sketch), new(hll.Sketch)}
	var batches []analytics.Batch
	for i := range 8 {
		b := analytics.Batch{At: e.at()}
		for day := range 2 {
			var sk hll.Sketch
			for range 50 + 300*i {
				h := rnd.Uint64()
				if i%3 == 2 {
					h = uint64(i) << 60 // repeated visitors
				}
				sk.Add(h)
				ref[day].Add(h)
			}
			b.Uniques = append(b.Uniques, analytics.UniqueSketch{Key: k, Day: d0.Add(time.Duration(day) * rollup.Day), Sketch: sk.AppendBinary(nil)})
		}
		batches = append(batches, b)
	}
	for i, b := range batches {
		s := e.s
		if i%2 == 1 {
			s = other
		}
		write(t, s, b)
	}
	write(t, e.s, batches[3]) // a resend
	write(t, other, batches[0])
	var both hll.Sketch
	both.Merge(ref[0])
	both.Merge(ref[1])
	for _, r := range []struct {
		name     string
		from, to time.Time
		want     *hll.Sketch
	}{
		{"first day", d0, d0.Add(rollup.Day), ref[0]},
		{"second day", d0.Add(rollup.Day), d0.Add(2 * rollup.Day), ref[1]},
		{"both", d0, d0.Add(2 * rollup.Day), &both},
		{"neither", d0.Add(-5 * rollup.Day), d0, new(hll.Sketch)},
	} {
		got, err := e.s.Uniques(context.Background(), k, r.from, r.to)
		if err != nil {
			t.Fatal(err)
		}
		if got.Estimate() != r.want.Estimate() || got.Len() != r.want.Len() {
			t.Errorf("%s: %d registers estimating %d, want %d estimating %d", r.name, got.Len(), got.Estimate(), r.want.Len(), r.want.Estimate())
		}
	}
	if got, _ := e.s.Uniques(context.Background(), e.key("b"), d0, d0.Add(2*rollup.Day)); got == nil || !got.Empty() {
		t.Errorf("another key's uniques: %v, want none", got)
	}
}

// testTenantTop writes the day counts of the links of two tenants and of
// the default tenant, from two writers, a batch twice: a tenant's top list
// holds its own links alone (as stored: TenantKeys), most visited first,
// exactly; the service's top list holds every link of every tenant, and
// TopCounts counts a tenant's link.
func testTenantTop(t *testing.T, e *env) {
	d0 := e.base().Add(-2 * rollup.Day)
	day := func(i int) time.Time { return d0.Add(time.Duration(i) * rollup.Day) }
	run := strings.ToLower(strings.TrimSuffix(e.prefix, "-"))
	tenants := []string{run + "-a", run + "-b", ""}
	ref := map[string]map[string]int64{} // tenant → link → visits of days 0 and 1
	writeRounds(t, e, 4, 1, func(round int) (vs []dv) {
		for ti, tn := range tenants {
			for i := range 30 {
				for di := range 2 {
					n := int64((30-i)*(1+ti) + round)
					short := fmt.Sprintf("%sl%02d", e.prefix, i) // the same short keys in every tenant
					k := analytics.TenantKey(tn, short)
					vs = append(vs, dv{analytics.AllLinks, analytics.DimLink, day(di), k, n, 0})
					if ref[tn] == nil {
						ref[tn] = map[string]int64{}
					}
					ref[tn][k] += n
				}
			}
		}
		return vs
	})
	for _, tn := range tenants[:2] {
		for _, n := range []int{1, 5, 30, 100} {
			got, err := e.s.TenantTop(context.Background(), tn, day(0), day(2), n)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(TopOf(ref[tn], n), got); diff != "" {
				t.Errorf("TenantTop(%s, %d) (-want +got):\n%s", tn, n, diff)
			}
		}
	}
	got, err := e.s.Top(context.Background(), day(0), day(2), 1000)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, l := range got {
		if tn, short := analytics.SplitKey(l.Key); strings.HasPrefix(short, e.prefix) {
			seen[tn]++
			if w := ref[tn][l.Key]; l.Visits != w {
				t.Errorf("Top: %s has %d visits, want %d", l.Key, l.Visits, w)
			}
		}
	}
	for _, tn := range tenants {
		if seen[tn] != 30 {
			t.Errorf("Top lists %d links of tenant %q, want all 30", seen[tn], tn)
		}
	}
	k := analytics.TenantKey(tenants[1], e.prefix+"l03")
	counts, err := e.s.TopCounts(context.Background(), []string{k}, day(0), day(2))
	if err != nil || counts[k] != ref[tenants[1]][k] {
		t.Errorf("TopCounts(%s) = %v, %v; want %d", k, counts, err, ref[tenants[1]][k])
	}
}
