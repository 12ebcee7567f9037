package analytics_test

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/pebblestore"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitclass"
	"github.com/linkgate/linkgate/visitor"
)

// TestErasePebble erases one link, then one tenant, in the embedded store,
// with counts of them everywhere a count can be: stored and rolled, queued
// in the flusher with the store down, in the recorder, and journaled by
// the process's final flush. Every resolution, breakdown, unique count
// and top list of what was erased reads nothing, and stays so after a
// restart that replays the journal and after the rollup runs; visits after
// the erasure count, and the other links keep theirs.
func TestErasePebble(t *testing.T) {
	dir := t.TempDir()
	dbPath, journalPath := filepath.Join(dir, "db"), filepath.Join(dir, "journal")
	ctx := t.Context()
	plan, err := rollup.NewPlan(defTiers, rollup.DefaultGrace)
	if err != nil {
		t.Fatal(err)
	}
	clock := monday.Add(time.Hour)
	now := func() time.Time { return clock }
	st, err := pebblestore.Open(dbPath, analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	roll := func(st *pebblestore.Store) {
		t.Helper()
		clock = clock.Add(2 * rollup.Day)
		w := rollup.NewWorker(st, plan, rollup.WorkerOptions{Now: now, MaxJobs: 1 << 20})
		for range 10 {
			if _, err := w.RunOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	w := &downWriter{Writer: st}
	rec := analytics.NewRecorder(1000, nil)
	rec.SetMaxValues(50)
	opts := analytics.FlusherOptions{JournalPath: journalPath, Now: now}
	f := analytics.NewFlusher(rec, w, analyticstest.DefaultPlan, opts, nil, nil)
	var uniq uint64
	visit := func(rec *analytics.Recorder, tenant, short string, n int) {
		for range n {
			uniq++
			fe := visitor.Features{visitor.Referrer: "news.example"}
			rec.RecordTenantVisit(tenant, short, clock, visitclass.Human, &fe, uniq*0x9e3779b97f4a7c15)
		}
	}
	flush := func(f *analytics.Flusher) {
		t.Helper()
		if err := f.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Stored, rolled, queued, in memory.
	visit(rec, "acme", "go", 3)
	visit(rec, "acme", "x", 2)
	visit(rec, "", "go", 4)
	flush(f)
	roll(st)
	visit(rec, "acme", "go", 2)
	w.down.Store(true)
	if err := f.Flush(ctx); err == nil {
		t.Fatal("a flush to a store that is down passed")
	}
	visit(rec, "acme", "go", 1)
	clock = clock.Add(time.Minute)
	e, err := f.Erase(ctx, st, "acme", "go")
	if err != nil {
		t.Fatal(err)
	}
	if e.Tenant != "acme" || e.Key != "go" || e.At.Before(clock) {
		t.Fatalf("erasure %+v", e)
	}
	kept := map[string]analytics.Visits{"acme/x": {Human: 2}, "go": {Human: 4}}
	checkErased(t, st, "acme", []string{"acme/go"}, kept)
	if err := f.Close(ctx); err != nil { // journals what waits
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// A restart replays the journal: what it holds of acme/go was placed
	// before the erasure.
	st, err = pebblestore.Open(dbPath, analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec = analytics.NewRecorder(1000, nil)
	rec.SetMaxValues(50)
	f = analytics.NewFlusher(rec, st, analyticstest.DefaultPlan, opts, nil, nil)
	flush(f)
	checkErased(t, st, "acme", []string{"acme/go"}, kept)
	roll(st)
	checkErased(t, st, "acme", []string{"acme/go"}, kept)

	// Visits after the erasure count.
	visit(rec, "acme", "go", 1)
	flush(f)
	roll(st)
	kept["acme/go"] = analytics.Visits{Human: 1}
	checkErased(t, st, "acme", nil, kept)

	// The whole tenant, with counts of it journaled again.
	visit(rec, "acme", "x", 5)
	w = &downWriter{Writer: st}
	w.down.Store(true)
	f2 := analytics.NewFlusher(rec, w, analyticstest.DefaultPlan, analytics.FlusherOptions{JournalPath: filepath.Join(dir, "journal2"), Now: now}, nil, nil)
	if err := f2.Flush(ctx); err == nil {
		t.Fatal("a flush to a store that is down passed")
	}
	if _, err := f2.Erase(ctx, st, "acme", ""); err != nil {
		t.Fatal(err)
	}
	if err := f2.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	gone := []string{"acme/go", "acme/x", analytics.TenantAll("acme")}
	kept = map[string]analytics.Visits{"go": {Human: 4}}
	checkErased(t, st, "acme", gone, kept)
	f2 = analytics.NewFlusher(analytics.NewRecorder(10, nil), st, analyticstest.DefaultPlan, analytics.FlusherOptions{JournalPath: filepath.Join(dir, "journal2"), Now: now}, nil, nil)
	flush(f2)
	roll(st)
	checkErased(t, st, "acme", gone, kept)
	if err := f2.Close(ctx); err != nil {
		t.Fatal(err)
	}

	if _, err := f2.Erase(ctx, st, "", ""); err == nil {
		t.Error("the default tenant was erased whole")
	}
}

// checkErased checks that st holds nothing of the keys gone (every tier,
// the breakdowns, the unique visitors, the top lists of the service and
// of tenant) and exactly kept of the others, in every tier.
func checkErased(t *testing.T, st *pebblestore.Store, tenant string, gone []string, kept map[string]analytics.Visits) {
	t.Helper()
	ctx := t.Context()
	want := map[string]analytics.Visits{}
	for _, k := range gone {
		want[k] = analytics.Visits{}
	}
	for k, v := range kept {
		want[k] = v
	}
	checkStored(t, exact(st), defTiers, want)
	from, to := time.Unix(0, 0), time.Now().Add(rollup.Year)
	top, err := st.Top(ctx, from, to, 100)
	if err != nil {
		t.Fatal(err)
	}
	ttop, err := st.TenantTop(ctx, tenant, from, to, 100)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		dims, err := st.Dims(ctx, k, visitor.Referrer, from, to)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, d := range dims {
			n += d.Count
		}
		if n != v.Human {
			t.Errorf("%q: breakdown of %d visits, want %d", k, n, v.Human)
		}
		sk, err := st.Uniques(ctx, k, from, to)
		if err != nil {
			t.Fatal(err)
		}
		if u := sk.Estimate(); (u == 0) != (v.Human == 0) {
			t.Errorf("%q: %d unique visitors, with %d visits", k, u, v.Human)
		}
		if k == analytics.TenantAll(tenant) {
			continue
		}
		listed := slices.ContainsFunc(top, func(l analytics.TopLink) bool { return l.Key == k })
		if listed != (v.Human > 0) {
			t.Errorf("%q (%d visits) in the top list: %v; list %v", k, v.Human, listed, top)
		}
		if s, _ := analytics.SplitKey(k); s == tenant {
			listed = slices.ContainsFunc(ttop, func(l analytics.TopLink) bool { return l.Key == k })
			if listed != (v.Human > 0) {
				t.Errorf("%q (%d visits) in %s's top list: %v; list %v", k, v.Human, tenant, listed, ttop)
			}
		}
	}
}
