package limit

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"
)

func mustLimits(t testing.TB, specs ...string) []Limit {
	t.Helper()
	var ls []Limit
	for _, s := range specs {
		l, err := ParseLimit(s)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	return ls
}

func TestPlanShape(t *testing.T) {
	now := time.Date(2026, 3, 28, 23, 30, 33, 0, time.UTC).Unix()
	p := newBucketPlan(mustLimits(t, "2/s", "5/m", "10/h", "100/d"), Bucketed)
	var rs readSet
	p.reads(now, &rs)
	if len(rs.buckets) != 144 {
		t.Errorf("bucketed 2/s,5/m,10/h,100/d reads %d buckets, want 144 (60 s + 60 m + 24 h)", len(rs.buckets))
	}
	if w := p.writes(now, nil); len(w) != 3 {
		t.Errorf("a hit writes %d buckets, want 3", len(w))
	}
	// At 23:30:33 the last day is 34 + 30 + 23 + 26 + 29 = 142 buckets
	// (the package doc's example).
	pe := newBucketPlan(mustLimits(t, "100/d"), Exact)
	pe.reads(now, &rs)
	if len(rs.buckets) != 142 {
		t.Errorf("exact 1d window at 23:30:33 reads %d buckets, want 142", len(rs.buckets))
	}
	var perLevel [NumLevels]int
	for _, b := range rs.buckets {
		perLevel[b.Level]++
	}
	if perLevel != [NumLevels]int{34 + 26, 30 + 29, 23} {
		t.Errorf("exact buckets per level = %v, want [60 59 23]", perLevel)
	}
	if first := rs.buckets[0]; first.Level != Second || first.Start != now-86400+1 {
		t.Errorf("oldest bucket = %+v, want yesterday's 23:30:34", first)
	}
	// Buckets are shared between the limits of a rule.
	pe = newBucketPlan(mustLimits(t, "2/s", "5/m", "10/h", "100/d"), Exact)
	pe.reads(now, &rs)
	if len(rs.buckets) > 142+60+60 {
		t.Errorf("exact 2/s,5/m,10/h,100/d reads %d buckets, want shared buckets", len(rs.buckets))
	}
	for l, ttl := range pe.ttl {
		if ttl < 24*time.Hour {
			t.Errorf("exact level %d TTL %v, want at least a day", l, ttl)
		}
	}
}

// model is a brute-force reference: every hit's time, and the buckets the
// plan wrote, counted in a map (a store with no TTL).
type model struct {
	p       *bucketPlan
	hits    []int64 // unix nanoseconds
	buckets map[Bucket]int64
}

func (m *model) hit(t int64) {
	m.hits = append(m.hits, t)
	for _, b := range m.p.writes(floorDiv(t, 1e9), nil) {
		b.TTL = 0
		m.buckets[b]++
	}
}

// count returns the hits with lo < t <= hi (nanoseconds).
func (m *model) count(lo, hi int64) int64 {
	var n int64
	for _, h := range m.hits {
		if h > lo && h <= hi {
			n++
		}
	}
	return n
}

func (m *model) load(now int64, rs *readSet) {
	m.p.reads(now, rs)
	for i, b := range rs.buckets {
		b.TTL = 0
		rs.counts[i] = m.buckets[b]
	}
}

// check compares every limit's sum at now (nanoseconds) with the reference.
func (m *model) check(t *testing.T, now int64) {
	t.Helper()
	sec := floorDiv(now, 1e9)
	var rs readSet
	m.load(sec, &rs)
	for i, pl := range m.p.lim {
		got := m.p.sum(&rs, i)
		size := sizeOf(pl.level) * 1e9
		var want, lo, hi int64
		if m.p.exact {
			// Exactly the hits whose second is in the last W seconds.
			want = m.count((sec-pl.window+1)*1e9-1, now)
			lo = m.count(now-(pl.window-1)*1e9, now)
			hi = m.count(now-pl.window*1e9, now)
		} else {
			// Exactly the hits of the last k buckets of the level.
			cur := floorDiv(now, size)
			want = m.count((cur-pl.k+1)*size-1, now)
			lo = m.count(now-(pl.k-1)*size, now)
			hi = m.count(now-pl.k*size, now)
		}
		if got != want {
			t.Fatalf("exact=%v %v at %d: sum %d, want %d", m.p.exact, m.p.limits[i], now, got, want)
		}
		if got < lo || got > hi {
			t.Fatalf("exact=%v %v at %d: sum %d outside the error bound [%d, %d]", m.p.exact, m.p.limits[i], now, got, lo, hi)
		}
		// freeAt: the count is at most target from that second on, and
		// (Bucketed: exactly) not a second before.
		target := m.p.limits[i].N - 1
		f := m.p.freeAt(&rs, i, target)
		if got <= target {
			if f != 0 {
				t.Fatalf("freeAt = %d for a limit not exceeded", f)
			}
			continue
		}
		if f <= sec {
			t.Fatalf("%v at %d: freeAt %d is not in the future", m.p.limits[i], sec, f)
		}
		var rs2 readSet
		m.load(f, &rs2)
		if n := m.p.sum(&rs2, i); n > target {
			t.Fatalf("exact=%v %v: at freeAt %d the count is %d > %d", m.p.exact, m.p.limits[i], f, n, target)
		}
		if !m.p.exact {
			m.load(f-1, &rs2)
			if n := m.p.sum(&rs2, i); n <= target {
				t.Fatalf("%v: a second before freeAt %d the count is already %d <= %d", m.p.limits[i], f, n, target)
			}
		}
	}
}

var planSpecs = [][]string{
	{"2/s", "5/m", "10/h", "100/d"},
	{"3/15s", "7/90s", "20/15m"},
	{"1/m", "4/2h", "9/7d"},
	{"5/m", "10/d"},
}

// runModel replays steps (nanosecond gaps between events; odd gaps are
// checks, even ones hits) against every plan in both precisions.
func runModel(t *testing.T, start int64, steps []int64) {
	for _, specs := range planSpecs {
		for _, prec := range []Precision{Bucketed, Exact} {
			m := &model{p: newBucketPlan(mustLimits(t, specs...), prec), buckets: map[Bucket]int64{}}
			now := start
			for _, s := range steps {
				now += s
				if s%2 == 0 {
					m.hit(now)
				} else {
					m.check(t, now)
				}
			}
			m.check(t, now)
		}
	}
}

func TestPlanAgainstReference(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 3, 28, 23, 58, 59, 0, time.UTC).UnixNano()
	r := rand.New(rand.NewPCG(1, 2))
	scales := []int64{1e6, 3e8, 1e9, 7e9, 61e9, 3600e9, 5 * 3600e9}
	for range 6 {
		steps := make([]int64, 200)
		for i := range steps {
			steps[i] = r.Int64N(scales[r.IntN(len(scales))])
			if r.IntN(4) == 0 {
				steps[i] = steps[i] / 1e9 * 1e9 // land on second edges
			}
		}
		runModel(t, start, steps)
	}
	// Bursts right at bucket edges: 23:59:59.999, 00:00:00.000.
	runModel(t, start, []int64{60e9 - 2e6, 2e6, 0, 2, 1, 1e6 - 1, 2, 0, 3, 3600e9, 1, 86400e9, 1})
}

func FuzzPlan(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Add([]byte{0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var steps []int64
		for len(data) >= 4 && len(steps) < 64 {
			v := int64(binary.LittleEndian.Uint32(data))
			data = data[4:]
			// Spread the 32 bits over milliseconds to days.
			steps = append(steps, (v&0xffffff)*int64([]int64{1e3, 1e6, 1e8, 1e10}[v>>30]))
		}
		runModel(t, time.Date(2026, 3, 28, 23, 59, 59, 0, time.UTC).UnixNano(), steps)
	})
}
