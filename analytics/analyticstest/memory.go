package analyticstest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
)

// Memory is a Store in memory, written for plainness rather than speed:
// the suite runs against it to show that a correct store passes, and other
// packages' tests use it as a store and to count what a store is asked to
// write (Ops). It is safe for concurrent use. Use NewMemory.
type Memory struct {
	mu       sync.Mutex
	plan     *rollup.Plan
	series   map[memSeries]map[int64]*memCell // by start, unix seconds
	active   map[memQueue]*memKeys
	marks    map[string]map[rollup.Mark]struct{} // by key
	progress rollup.Progress
	applied  map[string]uint64 // the last Seq applied, by Batch.Writer
	dims     map[memDim]int64
	uniqs    map[memDim]*hll.Sketch // by key and day
	ops      Ops

	// DimRetention is how long breakdowns are kept (Expire); zero:
	// analytics.DefaultDimRetentionDays.
	DimRetention time.Duration

	// Fail, when set, is called before every write operation ("write",
	// "apply", "advance") and fails it, applying nothing, when it returns
	// an error.
	Fail func(op string) error
}

// Ops counts the entries a Memory was asked to store, as a store would
// write them: one per count, Active entry, mark, rolled row, deleted mark
// and progress update.
type Ops struct {
	Counts, Active, Marks, Rows, MarkDeletes, Advances int64
	Dims                                               int64 // (link, day, dimension, value) counts
}

// Writes returns the sum of o's counts.
func (o Ops) Writes() int64 {
	return o.Counts + o.Active + o.Marks + o.Rows + o.MarkDeletes + o.Advances + o.Dims
}

type memDim struct {
	key   string
	dim   visitor.Dim
	day   int64 // unix seconds
	value string
}

type memSeries struct {
	key  string
	step time.Duration
}

type memQueue struct {
	step   time.Duration
	period int64
}

// memKeys are the keys of one queue's period, sorted on demand.
type memKeys struct {
	keys   map[string]struct{}
	sorted []string // nil when keys changed since it was made
}

// memCell is a bucket: flushed counts added, and the rolled value.
type memCell struct {
	flushed, rolled analytics.Visits
}

var (
	_ Store                  = (*Memory)(nil)
	_ analytics.Store        = (*Memory)(nil)
	_ rollup.Store           = (*Memory)(nil)
	_ analytics.Writer       = (*Memory)(nil)
	_ interface{ Ops() Ops } = (*Memory)(nil)
)

// Close does nothing: a Memory has no background work.
func (m *Memory) Close() error { return nil }

// NewMemory returns an empty Memory for the tiers of plan.
func NewMemory(plan *rollup.Plan) *Memory {
	return &Memory{
		plan: plan, series: map[memSeries]map[int64]*memCell{}, active: map[memQueue]*memKeys{},
		marks: map[string]map[rollup.Mark]struct{}{}, progress: rollup.Progress{}, applied: map[string]uint64{},
		dims: map[memDim]int64{}, uniqs: map[memDim]*hll.Sketch{},
	}
}

// Ops returns what m was asked to store so far.
func (m *Memory) Ops() Ops {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ops
}

func (m *Memory) fail(op string) error {
	if m.Fail == nil {
		return nil
	}
	return m.Fail(op)
}

func (m *Memory) checkBucket(step time.Duration, start time.Time) error {
	if _, ok := m.plan.Level(step); !ok {
		return fmt.Errorf("memory: step %v is not a tier", step)
	}
	if !rollup.Align(start, step).Equal(start) {
		return fmt.Errorf("memory: %v is not the start of a %v bucket", start, step)
	}
	return nil
}

// Write implements analytics.Writer: a batch whose identity is not above
// its writer's last applied Seq changes nothing.
func (m *Memory) Write(ctx context.Context, b analytics.Batch) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: write: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.fail("write"); err != nil {
		return err
	}
	for _, c := range b.Counts {
		if err := m.checkBucket(c.Step, c.Start); err != nil {
			return err
		}
	}
	for _, d := range b.Dims {
		if err := checkDim(d); err != nil {
			return err
		}
	}
	if b.Writer != "" {
		if b.FirstSeq() <= m.applied[b.Writer] {
			return nil // applied already
		}
		m.applied[b.Writer] = b.Seq
	}
	for _, c := range b.Counts {
		cell := m.cell(c.Key, c.Step, c.Start)
		cell.flushed = cell.flushed.Add(c.Visits)
	}
	for _, d := range b.Dims {
		m.dims[memDim{d.Key, d.Dim, d.Day.Unix(), d.Value}] += d.N
	}
	for _, u := range b.Uniques {
		k := memDim{key: u.Key, day: u.Day.Unix()}
		if m.uniqs[k] == nil {
			m.uniqs[k] = new(hll.Sketch)
		}
		if err := m.uniqs[k].MergeBinary(u.Sketch); err != nil {
			return fmt.Errorf("memory: %q: %w", u.Key, err)
		}
	}
	m.announce(b.Active, b.Marks)
	m.ops.Counts += int64(len(b.Counts))
	m.ops.Dims += int64(len(b.Dims))
	return nil
}

// checkDim checks what every store checks of a DimCount: a dimension, a
// day's start, a value.
func checkDim(d analytics.DimCount) error {
	switch {
	case !analytics.ValidDim(d.Dim):
		return fmt.Errorf("memory: %q: no dimension %d", d.Key, d.Dim)
	case !rollup.Align(d.Day, rollup.Day).Equal(d.Day):
		return fmt.Errorf("memory: %q: %v is not the start of a UTC day", d.Key, d.Day)
	case d.Value == "":
		return fmt.Errorf("memory: %q: an empty value of %v", d.Key, d.Dim)
	}
	return nil
}

// Dims implements analytics.DimSource.
func (m *Memory) Dims(ctx context.Context, key string, dim visitor.Dim, from, to time.Time) ([]analytics.DimValue, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: dims: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	sums := map[string]int64{}
	for k, n := range m.dims {
		if k.key == key && k.dim == dim && k.day >= ceilDay(from) && k.day < ceilDay(to) {
			sums[k.value] += n
		}
	}
	var out []analytics.DimValue
	for v, n := range sums {
		if n != 0 {
			out = append(out, analytics.DimValue{Value: v, Count: n})
		}
	}
	return out, nil
}

// Uniques implements analytics.UniqueSource.
func (m *Memory) Uniques(ctx context.Context, key string, from, to time.Time) (*hll.Sketch, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: uniques: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	sk := new(hll.Sketch)
	for k, s := range m.uniqs {
		if k.key == key && k.day >= ceilDay(from) && k.day < ceilDay(to) {
			sk.Merge(s)
		}
	}
	return sk, nil
}

// Top implements analytics.TopSource, by brute force.
func (m *Memory) Top(ctx context.Context, from, to time.Time, n int) ([]analytics.TopLink, error) {
	vals, err := m.Dims(ctx, analytics.AllLinks, analytics.DimLink, from, to)
	if err != nil {
		return nil, err
	}
	analytics.SortDims(vals)
	out := make([]analytics.TopLink, 0, min(n, len(vals)))
	for _, v := range vals[:min(n, len(vals))] {
		out = append(out, analytics.TopLink{Key: v.Value, Visits: v.Count})
	}
	return out, nil
}

// TenantTop implements analytics.TopSource, by brute force.
func (m *Memory) TenantTop(ctx context.Context, tenant string, from, to time.Time, n int) ([]analytics.TopLink, error) {
	vals, err := m.Dims(ctx, analytics.AllLinks, analytics.DimLink, from, to)
	if err != nil {
		return nil, err
	}
	vals = slices.DeleteFunc(vals, func(v analytics.DimValue) bool {
		t, _ := analytics.SplitKey(v.Value)
		return t != tenant
	})
	analytics.SortDims(vals)
	out := make([]analytics.TopLink, 0, min(n, len(vals)))
	for _, v := range vals[:min(n, len(vals))] {
		out = append(out, analytics.TopLink{Key: v.Value, Visits: v.Count})
	}
	return out, nil
}

// TopCounts implements analytics.TopSource.
func (m *Memory) TopCounts(ctx context.Context, keys []string, from, to time.Time) (map[string]int64, error) {
	vals, err := m.Dims(ctx, analytics.AllLinks, analytics.DimLink, from, to)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(keys))
	for _, k := range keys {
		out[k] = 0
	}
	for _, v := range vals {
		if _, ok := out[v.Value]; ok {
			out[v.Value] = v.Count
		}
	}
	return out, nil
}

// ceilDay returns the first UTC day start at or after t, in unix seconds.
func ceilDay(t time.Time) int64 {
	d := rollup.AlignUp(t, rollup.Day)
	return d.Unix()
}

func (m *Memory) cell(key string, step time.Duration, start time.Time) *memCell {
	sr := m.series[memSeries{key, step}]
	if sr == nil {
		sr = map[int64]*memCell{}
		m.series[memSeries{key, step}] = sr
	}
	c := sr[start.Unix()]
	if c == nil {
		c = &memCell{}
		sr[start.Unix()] = c
	}
	return c
}

func (m *Memory) announce(as []rollup.Active, ms []rollup.Mark) {
	for _, a := range as {
		q := memQueue{a.Step, a.Period.Unix()}
		ks := m.active[q]
		if ks == nil {
			ks = &memKeys{keys: map[string]struct{}{}}
			m.active[q] = ks
		}
		if _, ok := ks.keys[a.Key]; !ok {
			ks.keys[a.Key] = struct{}{}
			ks.sorted = nil
		}
	}
	for _, mk := range ms {
		mk.Start, mk.At = mk.Start.UTC(), mk.At.UTC()
		if m.marks[mk.Key] == nil {
			m.marks[mk.Key] = map[rollup.Mark]struct{}{}
		}
		m.marks[mk.Key][mk] = struct{}{}
	}
	m.ops.Active += int64(len(as))
	m.ops.Marks += int64(len(ms))
}

// Points implements analytics.Source and rollup.Store.
func (m *Memory) Points(ctx context.Context, key string, step time.Duration, from, to time.Time) ([]analytics.Point, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: points: %w", err)
	}
	if _, ok := m.plan.Level(step); !ok {
		return nil, fmt.Errorf("memory: points: step %v is not a tier", step)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var ps []analytics.Point
	for start, c := range m.series[memSeries{key, step}] {
		t := time.Unix(start, 0).UTC()
		if !t.Before(from) && t.Before(to) {
			if v := c.flushed.Add(c.rolled); v != (analytics.Visits{}) {
				ps = append(ps, analytics.Point{Start: t, Visits: v})
			}
		}
	}
	slices.SortFunc(ps, func(a, b analytics.Point) int { return a.Start.Compare(b.Start) })
	return ps, nil
}

// Active implements rollup.Store, in key order.
func (m *Memory) Active(ctx context.Context, step time.Duration, period time.Time, after string, limit int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: active: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ks := m.active[memQueue{step, period.Unix()}]
	if ks == nil {
		return nil, nil
	}
	if ks.sorted == nil {
		for k := range ks.keys {
			ks.sorted = append(ks.sorted, k)
		}
		slices.Sort(ks.sorted)
	}
	i, found := slices.BinarySearch(ks.sorted, after)
	if found {
		i++
	}
	rest := ks.sorted[i:]
	return slices.Clone(rest[:min(limit, len(rest))]), nil
}

// Marks implements rollup.Store and analytics.Source.
func (m *Memory) Marks(ctx context.Context, key string) ([]rollup.Mark, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: marks: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var ms []rollup.Mark
	for mk := range m.marks[key] {
		ms = append(ms, mk)
	}
	return ms, nil
}

// Apply implements rollup.Store, atomically.
func (m *Memory) Apply(ctx context.Context, u rollup.Update) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: apply: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.fail("apply"); err != nil {
		return err
	}
	for _, r := range u.Rows {
		if err := m.checkBucket(r.Step, r.Start); err != nil {
			return err
		}
	}
	for _, r := range u.Rows {
		c := m.cell(r.Key, r.Step, r.Start)
		if c.rolled.Human+c.rolled.Bot <= r.Human+r.Bot {
			c.rolled = r.Visits
		}
	}
	m.announce(u.Active, u.Marks)
	for _, mk := range u.Done {
		mk.Start, mk.At = mk.Start.UTC(), mk.At.UTC()
		delete(m.marks[mk.Key], mk)
	}
	m.ops.Rows += int64(len(u.Rows))
	m.ops.MarkDeletes += int64(len(u.Done))
	return nil
}

// Progress implements rollup.Store and analytics.Source.
func (m *Memory) Progress(ctx context.Context) (rollup.Progress, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: progress: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	p := make(rollup.Progress, len(m.progress))
	for k, v := range m.progress {
		p[k] = v
	}
	return p, nil
}

// Advance implements rollup.Store.
func (m *Memory) Advance(ctx context.Context, step time.Duration, done time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memory: advance: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.fail("advance"); err != nil {
		return err
	}
	if done.After(m.progress[step]) {
		m.progress[step] = done.UTC()
	}
	m.ops.Advances++
	return nil
}

// Expire deletes the buckets that ended at least their tier's retention
// before now; the all-time tier is kept.
func (m *Memory) Expire(now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for sr, cells := range m.series {
		i, _ := m.plan.Level(sr.step)
		t := m.plan.Tiers()[i]
		for start := range cells {
			if t.Expires() && !time.Unix(start, 0).Add(t.Step+t.Retention).After(now) {
				delete(cells, start)
			}
		}
	}
	keep := m.DimRetention
	if keep == 0 {
		keep = analytics.DefaultDimRetentionDays * rollup.Day
	}
	for k := range m.dims {
		if !time.Unix(k.day, 0).Add(rollup.Day + keep).After(now) {
			delete(m.dims, k)
		}
	}
	for k := range m.uniqs {
		if !time.Unix(k.day, 0).Add(rollup.Day + keep).After(now) {
			delete(m.uniqs, k)
		}
	}
	return nil
}
