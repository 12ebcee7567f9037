package analytics

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
)

type discardStore struct{}

func (discardStore) Write(context.Context, Batch) error { return nil }

// TestDimStateMemory flushes 20,000 links visited with six features, three
// times in a day: the flusher keeps one generation (its state is not
// forgotten), and what it counts of its state's memory is at least what
// the heap holds for it (the median of three measures), at most twice; and
// dimStateMaxBytes holds the links its comment says.
func TestDimStateMemory(t *testing.T) {
	const links = 20_000
	keys := make([]string, links)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
	}
	plan, err := rollup.NewPlan(rollup.DefaultTiers(), rollup.DefaultGrace)
	if err != nil {
		t.Fatal(err)
	}
	var per []float64
	for range 3 {
		rec := NewRecorder(2*links, nil)
		rec.SetMaxValues(100)
		rec.SetMaxBytes(1 << 30)
		at := time.Date(2026, 11, 23, 1, 0, 0, 0, time.UTC)
		f := NewFlusher(rec, discardStore{}, plan, FlusherOptions{Now: func() time.Time { return at }}, nil, nil)
		refs := []string{"news.example", "direct", "t.co"}
		for range 3 {
			for i, k := range keys {
				fe := visitor.Features{refs[i%3], refs[i%3], "DE", "mobile", "Safari", "iOS"}
				rec.RecordVisit(k, at, false, &fe, uint64(i)*0x9e3779b97f4a7c15)
			}
			if err := f.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			at = at.Add(10 * time.Second)
		}
		if f.dims.gen != 0 {
			t.Fatalf("generation %d after three flushes of a day, want 0: the state was forgotten", f.dims.gen)
		}
		groups, accounted := groupCount(&f.dims), f.dims.bytes
		with := settledHeap()
		f.dims = dimState{}
		without := settledHeap()
		heap := float64(int64(with)-int64(without)) / float64(groups)
		t.Logf("%d groups: %.0f bytes of heap a group, %.0f counted", groups, heap, float64(accounted)/float64(groups))
		per = append(per, heap/(float64(accounted)/float64(groups)))
		runtime.KeepAlive(rec)
		runtime.KeepAlive(f)
	}
	slices.Sort(per)
	if r := per[1]; r > 1 || r < 0.5 {
		t.Errorf("the heap holds %.2f times what the state counts of itself (median of %.2f), want 0.5 to 1", r, per)
	}
	// Links of a key of 7 bytes, with a value of 6 bytes in each of six
	// dimensions: twice the 100,000 links of the flush docs/analytics.md
	// measures.
	if n := dimStateMaxBytes / (7 + dimLinkOverhead + 6*(dimGroupOverhead+6+dimValueOverhead)); n < 200_000 {
		t.Errorf("dimStateMaxBytes holds %d links of six dimensions, want 200,000", n)
	}
}

// groupCount is how many (link, day, dimension) groups st holds.
func groupCount(st *dimState) int {
	n := 0
	for _, ls := range st.links {
		n += len(ls.groups)
	}
	return n
}

// settledHeap collects garbage until the heap stops shrinking (the last
// batch a flush wrote outlives the first collection), at most five times,
// and returns what it holds.
func settledHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	for range 4 {
		before := ms.HeapAlloc
		runtime.GC()
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc >= before {
			break
		}
	}
	return ms.HeapAlloc
}

// TestDimBatchSorted: a batch's DimCounts come sorted by link, dimension,
// day and value, all links' ("/") among the links whose keys sort around
// it, a tenant's entry ("t/") too; and a link counted in two shards (its
// visits on two Ps) has each value once, its counts added up.
func TestDimBatchSorted(t *testing.T) {
	at := time.Date(2026, 11, 23, 23, 59, 59, 0, time.UTC) // the visits over two days
	swap := func() snapshot {
		rec := NewRecorder(100, nil)
		rec.SetMaxValues(100)
		for _, k := range []string{"z", "0a", "-a", ".b", "t/", "A"} {
			for i, ref := range []string{"b.example", "a.example", "c.example"} {
				fe := visitor.Features{ref, ref, "DE", "mobile", "Safari", "iOS"}
				rec.RecordVisit(k, at.Add(time.Duration(i)*time.Second), false, &fe, uint64(i+1))
			}
		}
		return rec.swap()
	}
	batch := func(s snapshot) []DimCount {
		p := newPending()
		p.addDims(s)
		var st dimState
		out := st.batch(p.dims, 100, unixDay(at))
		if !slices.IsSortedFunc(out, compareDims) {
			t.Errorf("not sorted: %v", out)
		}
		for i := 1; i < len(out); i++ {
			if compareDims(out[i-1], out[i]) == 0 {
				t.Errorf("%v twice", out[i])
			}
		}
		return out
	}
	once := batch(swap())
	keys := map[string]bool{}
	for _, d := range once {
		keys[d.Key] = true
	}
	if len(keys) != 7 || !keys[AllLinks] {
		t.Errorf("links %v, want the six and all links", keys)
	}
	twice := swap()
	twice.links = append(twice.links, swap().links...) // every link in two shards
	doubled := batch(twice)
	if len(doubled) != len(once) {
		t.Fatalf("%d DimCounts from two shards, %d from one", len(doubled), len(once))
	}
	for i, d := range doubled {
		if o := once[i]; d.Key != o.Key || d.Value != o.Value || d.N != 2*o.N || d.Cum != 2*o.Cum {
			t.Errorf("from two shards %v, want twice %v", d, o)
		}
	}
}
