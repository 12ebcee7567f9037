package rollup

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// WorkerOptions configure a Worker. The zero value of a field means its
// default.
type WorkerOptions struct {
	// Interval is the time between two runs. Default a minute.
	Interval time.Duration
	// MaxJobs bounds the work of one run: how many (key, period) jobs it
	// does at most, each one read of a finer tier and the writes of its
	// coarser buckets. Default 20,000 (a few seconds of work); Run starts
	// the next run sooner while work is left (see Run).
	MaxJobs int
	// Page is how many keys are listed, read and applied together.
	// Default 500.
	Page int
	// Parallel bounds the reads in flight at once. Default 8.
	Parallel int
	// LeaseTTL is how long a lease (see Leaser) lasts without renewal.
	// Default 3 × Interval.
	LeaseTTL time.Duration
	// Now is the clock deciding which periods are closed. Default time.Now.
	Now func() time.Time
	// Metrics receives every run's report and lags; nil records nothing.
	Metrics Metrics
	// Log receives failures and warnings; nil discards them.
	Log *slog.Logger
	// Tracer, when not nil, makes each run a span (rollup.run).
	Tracer trace.Tracer
}

// Report is what one run of a Worker did.
type Report struct {
	Standby bool // another gateway holds the lease: nothing was done
	Waiting bool // the store is not ready yet (Readier): nothing was done, nothing counted
	Jobs    int  // (key, period) jobs done
	Rows    int  // rolled values written
	Marks   int  // marks processed
	Periods int  // periods completed (progress advanced)
	More    bool // the run stopped at MaxJobs with closed periods left
}

// Worker rolls the coarser tiers of a Store from the finer ones, following
// a Plan. Each run:
//
//  1. takes the store's lease when it has one (Leaser), else does nothing;
//  2. processes the marks of every closed marks period: for each key
//     announced there, every marked bucket is rolled again from the tier
//     below, its coarser bucket marked in turn, up to the all-time tier, and
//     the marks deleted once the new values are stored;
//  3. rolls, tier by tier from the finest, every batch period that ended
//     Grace ago and whose source tier is rolled through its end: for each
//     key announced for the period, one read of the finer tier over the
//     period and one write per non-empty coarser bucket, plus the Active
//     entry that announces the key to the next tier. Then it advances the
//     tier's progress.
//
// A run does at most MaxJobs jobs and goes on where the last one stopped.
// Everything it writes is a deterministic function of the finer tier, and
// a store keeps the larger of two values for a bucket, so running a period
// twice, several workers at once, or a worker that stopped half-way, all
// leave the same values (see Store.Apply). A stalled worker shows in the
// lag it reports to Metrics: the lag of every queue grows without bound,
// and past half the source tier's retention it is logged too, since data
// not rolled when its finer tier expires is lost to the coarser tiers.
//
// A Worker is safe for concurrent use; runs are serialized. Use NewWorker.
type Worker struct {
	s Store
	p *Plan
	o WorkerOptions

	mu        sync.Mutex                       // serializes runs; guards what follows
	cursor    map[time.Duration]cursor         // where a period cut short by MaxJobs goes on
	announced map[time.Duration]*announcedKeys // Active entries stored, by tier step
}

// cursor is the last key done of a period not finished yet.
type cursor struct {
	period time.Time
	after  string
}

// announcedKeys are the keys already announced for one period of one tier:
// a key's batch period of a tier is rolled once per period of the finer
// tier, and only the first needs to store the entry.
type announcedKeys struct {
	period time.Time
	keys   map[string]struct{}
}

// NewWorker returns a Worker that rolls s according to p.
func NewWorker(s Store, p *Plan, o WorkerOptions) *Worker {
	if o.Interval <= 0 {
		o.Interval = time.Minute
	}
	if o.MaxJobs <= 0 {
		o.MaxJobs = 20_000
	}
	if o.Page <= 0 {
		o.Page = 500
	}
	if o.Parallel <= 0 {
		o.Parallel = 8
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 3 * o.Interval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Worker{s: s, p: p, o: o, cursor: map[time.Duration]cursor{}, announced: map[time.Duration]*announcedKeys{}}
}

// Run runs the worker every Interval until ctx is done; when a run stopped
// at MaxJobs with work left, the next one starts after a tenth of the
// interval instead, so a backlog is worked off at about ten runs an
// interval. Start it in a goroutine beside the flusher and cancel ctx to
// stop it; it returns once the run in progress has stopped. Failures are
// logged and tried again at the next run.
func (w *Worker) Run(ctx context.Context) {
	for {
		rep, err := w.RunOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			w.o.Log.Warn("rollup: run failed; trying again at the next", "err", err)
		}
		wait := w.o.Interval
		if rep.More {
			wait /= 10
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// RunOnce does one run now (see Worker) and reports what it did: nothing
// while the store is not ready (Readier), which is neither a run nor an
// error.
func (w *Worker) RunOnce(ctx context.Context) (Report, error) {
	if r, ok := w.s.(Readier); ok && r.Ready() != nil {
		return Report{Waiting: true}, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	began := time.Now()
	var span trace.Span
	if w.o.Tracer != nil {
		ctx, span = w.o.Tracer.Start(ctx, "rollup.run")
	}
	rep, err := w.run(ctx, w.o.Now())
	if span != nil {
		span.SetAttributes(attribute.Bool("linkgate.rollup.standby", rep.Standby), attribute.Int("linkgate.rollup.jobs", rep.Jobs),
			attribute.Int("linkgate.rollup.rows", rep.Rows), attribute.Int("linkgate.rollup.marks", rep.Marks),
			attribute.Int("linkgate.rollup.periods", rep.Periods), attribute.Bool("linkgate.rollup.more", rep.More))
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
	if w.o.Metrics != nil {
		w.o.Metrics.RollupRun(time.Since(began), rep, err)
	}
	return rep, err
}

// queues returns the steps of the queues in the order a run serves them:
// marks first (they make reads costlier while they wait), then the tiers
// from the finest, each of which needs the one before.
func (w *Worker) queues() []time.Duration {
	qs := []time.Duration{MarksQueue}
	for _, t := range w.p.tiers[1:] {
		qs = append(qs, t.Step)
	}
	return qs
}

// span returns the length of the periods of queue q.
func (w *Worker) span(q time.Duration) time.Duration {
	if q == MarksQueue {
		return w.p.MarkPeriod()
	}
	i, _ := w.p.Level(q)
	return w.p.batch[i]
}

// initial returns where queue q starts in a store that has no progress for
// it: where its data starts, so that nothing its source tier holds is left
// unrolled, and nothing before is walked through.
//
// The marks queue and the first coarse tier's are fed by the flushes,
// which announce every period they write in with an Active entry (a late
// count with a mark, itself announced in a marks period): the queue starts
// at the first period, within the source tier's retention, that has one.
// A fresh store has none, and the queue starts at the period holding now
// less the grace: a count flushed from then on is announced in it or
// later, or is late and marked. So a new install, or a new Cassandra
// keyspace, starts with the lag of a running one, instead of walking
// through the retention's empty periods (two days of hours for 5m,
// five years for 52w) and reporting itself far behind meanwhile.
//
// A coarser tier's queue is fed by the one below it: when that one starts
// now too, nothing has been rolled into its tier, and the queue starts
// where it does. When that one had run before (a tier added to the
// retention), its tier may hold rolled data as far back as its retention,
// and the queue starts there.
func (w *Worker) initial(ctx context.Context, q time.Duration, stored, prog Progress, now time.Time) (time.Time, error) {
	span := w.span(q)
	if q == MarksQueue || q == w.p.tiers[1].Step {
		latest := Align(now.Add(-w.p.grace), span)
		for p := Align(now.Add(-w.p.tiers[0].Retention), span); p.Before(latest); p = p.Add(span) {
			keys, err := w.s.Active(ctx, q, p, "", 1)
			if err != nil {
				return time.Time{}, fmt.Errorf("find where data starts: %w", err)
			}
			if len(keys) > 0 {
				return p, nil
			}
		}
		return latest, nil
	}
	i, _ := w.p.Level(q)
	src := w.p.tiers[i-1]
	if !stored.Done(src.Step).IsZero() {
		return Align(now.Add(-src.Retention), span), nil
	}
	return Align(prog[src.Step], span), nil
}

func (w *Worker) run(ctx context.Context, now time.Time) (rep Report, err error) {
	if l, ok := w.s.(Leaser); ok {
		held, err := l.Lease(ctx, w.o.LeaseTTL)
		if err != nil {
			return rep, fmt.Errorf("rollup: lease: %w", err)
		}
		if !held {
			rep.Standby = true
			if prog, err := w.s.Progress(ctx); err == nil {
				w.reportLag(prog, now)
			}
			return rep, nil
		}
	}
	stored, err := w.s.Progress(ctx)
	if err != nil {
		return rep, fmt.Errorf("rollup: progress: %w", err)
	}
	prog := Progress{}
	for _, q := range w.queues() {
		done := stored.Done(q)
		if done.IsZero() {
			if done, err = w.initial(ctx, q, stored, prog, now); err != nil {
				return rep, fmt.Errorf("rollup: start %s: %w", queueName(q), err)
			}
			if err := w.s.Advance(ctx, q, done); err != nil {
				return rep, fmt.Errorf("rollup: start %s: %w", queueName(q), err)
			}
		}
		prog[q] = done
	}
	defer func() { w.reportLag(prog, now) }()
	budget := w.o.MaxJobs
	for {
		q, from, ok := w.next(prog, now)
		if !ok {
			return rep, nil
		}
		if budget == 0 {
			rep.More = true
			return rep, nil
		}
		to := from.Add(w.span(q))
		n, finished, err := w.period(ctx, q, from, to, now, budget, &rep)
		budget -= n
		if err != nil {
			return rep, fmt.Errorf("rollup: %s period %s: %w", queueName(q), from.Format(time.RFC3339), err)
		}
		if !finished {
			rep.More = true
			return rep, nil
		}
		if err := w.s.Advance(ctx, q, to); err != nil {
			return rep, fmt.Errorf("rollup: advance %s to %s: %w", queueName(q), to.Format(time.RFC3339), err)
		}
		prog[q] = to
		rep.Periods++
		delete(w.cursor, q)
	}
}

// next returns the first queue, in the order of queues, whose next period
// is ready: ended Grace ago and, for a tier rolled from a coarse tier, with
// its source rolled through the period's end.
func (w *Worker) next(prog Progress, now time.Time) (time.Duration, time.Time, bool) {
	for _, q := range w.queues() {
		from := prog[q]
		to := from.Add(w.span(q))
		if to.Add(w.p.grace).After(now) {
			continue
		}
		if i, _ := w.p.Level(q); i >= 2 && prog[w.p.tiers[i-1].Step].Before(to) {
			continue
		}
		return q, from, true
	}
	return 0, time.Time{}, false
}

// period works through the keys announced for queue q's period [from, to),
// from where an earlier run stopped, until they are all done or budget
// jobs are. It returns the jobs done and whether the period is finished.
func (w *Worker) period(ctx context.Context, q time.Duration, from, to, now time.Time, budget int, rep *Report) (int, bool, error) {
	after := ""
	if c, ok := w.cursor[q]; ok && c.period.Equal(from) {
		after = c.after
	}
	jobs := 0
	for jobs < budget {
		limit := min(w.o.Page, budget-jobs)
		keys, err := w.s.Active(ctx, q, from, after, limit)
		if err != nil {
			return jobs, false, fmt.Errorf("list keys: %w", err)
		}
		if len(keys) == 0 {
			return jobs, true, nil
		}
		if q == MarksQueue {
			err = w.marks(ctx, keys, to, now, rep)
		} else {
			err = w.roll(ctx, q, keys, from, to, rep)
		}
		if err != nil {
			return jobs, false, err
		}
		jobs += len(keys)
		rep.Jobs += len(keys)
		after = keys[len(keys)-1]
		w.cursor[q] = cursor{period: from, after: after}
		if len(keys) < limit {
			return jobs, true, nil
		}
	}
	return jobs, false, nil
}

// each calls f for every index in [0, n), at most Parallel at a time, and
// returns the first error.
func (w *Worker) each(ctx context.Context, n int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		next  = make(chan int)
	)
	for range min(w.o.Parallel, n) {
		wg.Go(func() {
			for i := range next {
				if err := f(ctx, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
						cancel()
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// roll rolls the batch period [from, to) of the tier of step into it for
// keys: one read of the finer tier per key, one Apply for all of them.
func (w *Worker) roll(ctx context.Context, step time.Duration, keys []string, from, to time.Time, rep *Report) error {
	i, _ := w.p.Level(step)
	src := w.p.tiers[i-1].Step
	rows := make([][]Row, len(keys))
	err := w.each(ctx, len(keys), func(ctx context.Context, k int) error {
		pts, err := w.s.Points(ctx, keys[k], src, from, to)
		if err != nil {
			return fmt.Errorf("read %q: %w", keys[k], err)
		}
		rows[k] = sumInto(keys[k], step, pts)
		return nil
	})
	if err != nil {
		return err
	}
	var u Update
	var next *announcedKeys
	if i+1 < len(w.p.tiers) {
		up := w.p.tiers[i+1].Step
		period := w.p.Period(i+1, from)
		next = w.announced[up]
		if next == nil || !next.period.Equal(period) {
			next = &announcedKeys{period: period, keys: map[string]struct{}{}}
		}
		for k, rs := range rows {
			if _, ok := next.keys[keys[k]]; len(rs) > 0 && !ok {
				u.Active = append(u.Active, Active{Step: up, Period: period, Key: keys[k]})
			}
		}
	}
	for _, rs := range rows {
		u.Rows = append(u.Rows, rs...)
	}
	if len(u.Rows) == 0 && len(u.Active) == 0 {
		return nil
	}
	if err := w.s.Apply(ctx, u); err != nil {
		return fmt.Errorf("store %d rows: %w", len(u.Rows), err)
	}
	rep.Rows += len(u.Rows)
	if next != nil {
		for _, a := range u.Active {
			next.keys[a.Key] = struct{}{}
		}
		w.announced[w.p.tiers[i+1].Step] = next
	}
	return nil
}

// sumInto adds points of a finer tier, in time order, into the buckets of
// step, leaving out empty ones.
func sumInto(key string, step time.Duration, pts []Point) []Row {
	var rows []Row
	for _, pt := range pts {
		start := Align(pt.Start, step)
		if n := len(rows); n > 0 && rows[n-1].Start.Equal(start) {
			rows[n-1].Visits = rows[n-1].Visits.Add(pt.Visits)
			continue
		}
		rows = append(rows, Row{Key: key, Step: step, Start: start, Visits: pt.Visits})
	}
	return slices.DeleteFunc(rows, func(r Row) bool { return r.Visits == (Visits{}) })
}

// marks processes, for each of keys, its marks made before end (the end
// of the marks period being processed).
func (w *Worker) marks(ctx context.Context, keys []string, end, now time.Time, rep *Report) error {
	type result struct{ rows, marks int }
	res := make([]result, len(keys))
	err := w.each(ctx, len(keys), func(ctx context.Context, k int) error {
		rows, marks, err := w.remark(ctx, keys[k], end, now)
		res[k] = result{rows, marks}
		if err != nil {
			return fmt.Errorf("marks of %q: %w", keys[k], err)
		}
		return nil
	})
	for _, r := range res {
		rep.Rows += r.rows
		rep.Marks += r.marks
	}
	return err
}

// remark rolls again the buckets of key marked before end, tier by tier
// from the finest: each tier's new values are stored, with marks on their
// coarser buckets, before that tier's marks are deleted, and the coarser
// marks are processed next in the same way. So whatever point it stops at,
// every bucket that may be stale still has a mark, on itself or on a finer
// bucket inside it.
func (w *Worker) remark(ctx context.Context, key string, end, now time.Time) (rows, done int, err error) {
	ms, err := w.s.Marks(ctx, key)
	if err != nil {
		return 0, 0, err
	}
	todo := make([][]Mark, len(w.p.tiers))
	var stray []Mark
	for _, m := range ms {
		if !m.At.Before(end) {
			continue // made after this period: its data may still be on its way
		}
		if i, ok := w.p.Level(m.Step); ok && i > 0 {
			todo[i] = append(todo[i], m)
		} else {
			stray = append(stray, m) // of a tier no longer configured
		}
	}
	if len(stray) > 0 {
		if err := w.s.Apply(ctx, Update{Done: stray}); err != nil {
			return 0, 0, err
		}
		done += len(stray)
	}
	for i := 1; i < len(w.p.tiers); i++ {
		if len(todo[i]) == 0 {
			continue
		}
		step, src := w.p.tiers[i].Step, w.p.tiers[i-1].Step
		var starts []time.Time
		for _, m := range todo[i] {
			starts = append(starts, Align(m.Start, step))
		}
		slices.SortFunc(starts, time.Time.Compare)
		starts = slices.CompactFunc(starts, time.Time.Equal)
		var u Update
		// One read per run of adjacent buckets.
		for j := 0; j < len(starts); {
			k := j + 1
			for k < len(starts) && starts[k].Equal(starts[k-1].Add(step)) {
				k++
			}
			pts, err := w.s.Points(ctx, key, src, starts[j], starts[k-1].Add(step))
			if err != nil {
				return rows, done, err
			}
			u.Rows = append(u.Rows, sumInto(key, step, pts)...)
			j = k
		}
		if i+1 < len(w.p.tiers) {
			up := w.p.tiers[i+1].Step
			var parents []time.Time
			for _, s := range starts {
				if p := Align(s, up); len(parents) == 0 || !parents[len(parents)-1].Equal(p) {
					parents = append(parents, p)
				}
			}
			for _, p := range parents {
				u.Marks = append(u.Marks, Mark{Key: key, Step: up, Start: p, At: now, ID: rand.Uint64()})
			}
			// Announced for the marks period now is in, in case this run
			// stops before processing them below.
			u.Active = []Active{{Step: MarksQueue, Period: Align(now, w.p.MarkPeriod()), Key: key}}
			todo[i+1] = append(todo[i+1], u.Marks...)
		}
		u.Done = todo[i]
		if err := w.s.Apply(ctx, u); err != nil {
			return rows, done, err
		}
		rows += len(u.Rows)
		done += len(todo[i])
	}
	return rows, done, nil
}

// reportLag reports each queue's lag to Metrics and logs the queues whose
// lag passed half their source's retention.
func (w *Worker) reportLag(prog Progress, now time.Time) {
	for _, q := range w.queues() {
		done, ok := prog[q]
		if !ok {
			continue
		}
		lag := now.Sub(done)
		if w.o.Metrics != nil {
			w.o.Metrics.RollupLag(q, lag)
		}
		src := w.p.tiers[0]
		if i, _ := w.p.Level(q); q != MarksQueue {
			src = w.p.tiers[i-1]
		}
		if lag > src.Retention/2 {
			w.o.Log.Warn("rollup: far behind; finer data expires before it is rolled",
				"queue", queueName(q), "lag", lag.Round(time.Second), "source_retention", FormatDuration(src.Retention))
		}
	}
}

// queueName names a queue in logs and metrics: "marks", or the tier's step.
func queueName(q time.Duration) string {
	if q == MarksQueue {
		return "marks"
	}
	return FormatDuration(q)
}

// QueueName returns the name a queue has in logs and metrics: "marks" for
// MarksQueue, else the tier's step ("5m", "1h", …).
func QueueName(step time.Duration) string { return queueName(step) }
