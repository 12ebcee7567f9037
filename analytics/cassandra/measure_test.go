package cassandra

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/cassandra/cqlmodel"
	"github.com/linkgate/linkgate/internal/testkit"
	"github.com/linkgate/linkgate/rollup"
)

// asked counts what the flusher and the worker ask a Store to write, to
// compare with the statements the Store counts having sent.
type asked struct {
	*Store
	mu                          sync.Mutex
	counts, active, marks, done int64
	rows                        map[time.Duration]int64
	activeBy                    map[time.Duration]int64
	jobs                        int
}

func (a *asked) Write(ctx context.Context, b analytics.Batch) error {
	a.mu.Lock()
	a.counts += int64(len(b.Counts))
	a.active += int64(len(b.Active))
	a.marks += int64(len(b.Marks))
	a.mu.Unlock()
	return a.Store.Write(ctx, b)
}

func (a *asked) Apply(ctx context.Context, u rollup.Update) error {
	a.mu.Lock()
	for _, r := range u.Rows {
		a.rows[r.Step]++
	}
	for _, x := range u.Active {
		a.activeBy[x.Step]++
	}
	a.active += int64(len(u.Active))
	a.marks += int64(len(u.Marks))
	a.done += int64(len(u.Done))
	a.mu.Unlock()
	return a.Store.Apply(ctx, u)
}

// TestStatementsPerVisit runs an hour of 2,000 visits/s over 100 links
// through the real Recorder, Flusher and rollup Worker on the Store over
// the model of the cluster, then on until every tier holding the hour is
// rolled, and reports the statements the Store counted: they are exactly
// one per count, Active entry, mark, rolled row and progress update asked
// for, so the store-agnostic figures of analytics' TestWritesPerVisitWith-
// Rollup are the Cassandra write statements at any number of links. The
// reads are reported per (key, period) job and per stats query. Under
// -race it records 400 visits/s rather than 2,000: every link is visited in
// every minute at either rate, so the statements are the same, and the
// figures per visit are those of 2,000/s.
func TestStatementsPerVisit(t *testing.T) {
	const nominal, interval, links = 2000, 10 * time.Second, 100
	rate := nominal
	if testkit.Race {
		rate = 400
	}
	clock := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC) // a Monday
	db := newFakeDB(clock)
	db.follow = func() time.Time { return clock }
	plan, err := rollup.NewPlan(rollup.DefaultTiers(), rollup.DefaultGrace)
	if err != nil {
		t.Fatal(err)
	}
	s := &asked{Store: onFake(t, db, &clock), rows: map[time.Duration]int64{}, activeBy: map[time.Duration]int64{}}
	now := func() time.Time { return clock }
	w := rollup.NewWorker(s, plan, rollup.WorkerOptions{Now: now, MaxJobs: 1 << 30})
	run := func() {
		rep, err := w.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		s.jobs += rep.Jobs
	}
	run()
	rec := analytics.NewRecorder(1000, nil)
	f := analytics.NewFlusher(rec, s, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: now}, nil, nil)
	rng := rand.New(rand.NewPCG(9, links))
	keys := make([]string, links)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
	}
	t0 := clock
	per := int(float64(rate) * interval.Seconds())
	for i := range int(time.Hour / interval) {
		start := t0.Add(time.Duration(i) * interval)
		for v := range per {
			rec.Record(keys[rng.IntN(links)], start.Add(time.Duration(v)*interval/time.Duration(per)), false)
		}
		clock = start.Add(interval)
		if err := f.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		if i%6 == 5 {
			run()
		}
	}
	flushed := s.Statements()
	flushCounts, flushActive := s.counts, s.active
	db.mu.Lock()
	rowsBefore := db.rowsRead
	db.mu.Unlock()
	if _, err := s.Points(context.Background(), keys[0], time.Minute, t0, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	db.mu.Lock()
	t.Logf("the hour of minutes of one link: %d rows read for 60 buckets", db.rowsRead-rowsBefore)
	rowsBefore = db.rowsRead
	db.mu.Unlock()
	// On, as a gateway's worker would run, to the end of each tier's
	// first batch period and the grace: before its source expires (the
	// model's TTLs follow the clock).
	for i := 1; i < len(plan.Tiers()); i++ {
		clock = rollup.Align(t0, plan.Batch(i)).Add(plan.Batch(i) + plan.Grace())
		run()
	}
	st := s.Statements()
	var rows int64
	for _, n := range s.rows {
		rows += n
	}
	if st.Points != s.counts || st.Active != s.active || st.Rolled != rows || st.Marks != s.marks || st.MarkDeletes != s.done {
		t.Errorf("statements %+v, but asked for %d counts, %d Active entries, %d rows, %d marks, %d mark deletes",
			st, s.counts, s.active, rows, s.marks, s.done)
	}
	if st.Leases == 0 || st.Progress == 0 {
		t.Errorf("%d lease and %d progress statements: the worker did not run", st.Leases, st.Progress)
	}
	if rows == 0 {
		t.Fatal("nothing was rolled")
	}
	visits := float64(nominal * time.Hour / time.Second) // per visit at the nominal rate
	perHour := func(step time.Duration, n int64) float64 {
		return float64(n) * float64(time.Hour) / float64(max(step, time.Hour))
	}
	rollupPerHour := 0.0
	for i, tr := range plan.Tiers()[1:] {
		rollupPerHour += perHour(tr.Step, s.rows[tr.Step]) + perHour(plan.Batch(i+1), s.activeBy[tr.Step])
	}
	flushWrites := float64(flushCounts + flushActive)
	if flushed.Points+flushed.Active != flushCounts+flushActive {
		t.Errorf("flushes wrote %d rows, asked for %d", flushed.Points+flushed.Active, flushCounts+flushActive)
	}
	t.Logf("%d links, an hour of 2,000 visits/s: flushes wrote %d rows (%d counts, %d Active) in %d statements, %.1f rows/s, %.4f per visit; the rollup %.0f rows per hour of steady traffic; all rows %.1f/s",
		links, flushed.Points+flushed.Active, flushCounts, flushActive, flushed.PointsSent+flushed.ActiveSent, flushWrites/3600, flushWrites/visits, rollupPerHour, (flushWrites+rollupPerHour)/3600)
	db.mu.Lock()
	rollupRows := db.rowsRead - rowsBefore
	db.mu.Unlock()
	t.Logf("rollup: %d jobs, %d rows; %d reads in all, empty periods' listings included (16 per queue and period), returning %d rows; %d leases, %d progress writes",
		s.jobs, rows, st.Reads, rollupRows, st.Leases, st.Progress)
	// A stats query reads the marks of its link, the progress (at most
	// once a second) and one range per tier it goes down to.
	r := rollup.NewReader(s, analyticstest.DefaultPlan)
	before := s.Statements().Reads
	if _, err := r.Points(context.Background(), keys[0], rollup.Day, clock.AddDate(-1, 0, 0), clock); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Total(context.Background(), keys[0]); err != nil {
		t.Fatal(err)
	}
	t.Logf("a year's daily curve and the total of one link, after the rollup: %d reads", s.Statements().Reads-before)

}

// TestWireFlushStatements sends the flushes of 100 and 100,000 links at
// 2,000 visits/s through gocql to the CQL protocol model and counts the
// EXECUTEs and BATCHes it receives: the same as the Store's counter (the
// counts packed by partition, pack.go and shards.go; a statement for up
// to 500 Active entries of a partition); the first flush of an hour
// announces every link, the next ones only those new to the hour. The
// 100,000-link case (60,000 visits recorded, about 540 statements a flush)
// is left out with -short and -race.
func TestWireFlushStatements(t *testing.T) {
	const rate, interval = 2000, 10 * time.Second
	for _, links := range []int{100, 100_000} {
		t.Run(fmt.Sprint(links, " links"), func(t *testing.T) {
			if links > 1000 && (testing.Short() || testkit.Race) {
				t.Skip("60,000 visits recorded: not with -short or -race (TestFirstFlushOfAnHour counts the statements on the model)")
			}
			srv := cqlmodel.New(t)
			s := openWire(t, srv)
			clock := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
			s.now = func() time.Time { return clock }
			rec := analytics.NewRecorder(1_000_000, nil)
			f := analytics.NewFlusher(rec, s, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: func() time.Time { return clock }}, nil, nil)
			rng := rand.New(rand.NewPCG(9, uint64(links)))
			per := int(rate * interval.Seconds())
			for i := range 3 {
				start := clock
				for v := range per {
					rec.Record(fmt.Sprintf("k%06d", rng.IntN(links)), start.Add(time.Duration(v)*interval/time.Duration(per)), false)
				}
				clock = start.Add(interval)
				written := func() int { return srv.Count("INSERT") + srv.Count("UPDATE ks.rollup_active") + srv.NumBatches() }
				before, sent := s.Statements(), written()
				began := time.Now()
				if err := f.Flush(context.Background()); err != nil {
					t.Fatal(err)
				}
				took := time.Since(began)
				st, got := s.Statements(), written()-sent
				counted := st.Writes() - before.Writes()
				if int64(got) != counted {
					t.Errorf("flush %d: the server executed %d INSERTs, Active UPDATEs and batches, the store counted %d", i, got, counted)
				}
				t.Logf("flush %d: %d statements (%d counts, %d Active entries in %d statements): %.1f/s, %.4f per visit; sent in %v over loopback",
					i, got, st.Points-before.Points, st.Active-before.Active, st.ActiveSent-before.ActiveSent, float64(got)/interval.Seconds(), float64(got)/float64(per), took.Round(time.Millisecond))
			}
		})
	}
}

// TestFirstFlushOfAnHour flushes 100,000 links, each visited in every
// interval, twice in one hour on the model of the cluster: the first flush
// announces every link to the rollup, the second none, and the first sends
// at most 1.25 times the statements of the second (it sent twice as many,
// a count and an announcement per link, and overran the interval on a
// real node; 1.2 times while the counts went 15 links to a statement). 20,000 links under -race, whose slowness adds nothing here.
// It counts statements, not time: a write may take a busy machine's time
// (the default write_timeout, 30 s, ended one at load 40 under -race).
func TestFirstFlushOfAnHour(t *testing.T) {
	links := 100_000
	if testkit.Race {
		links = 20_000
	}
	clock := time.Date(2026, 11, 23, 10, 0, 5, 0, time.UTC)
	db := newFakeDB(clock)
	db.follow = func() time.Time { return clock }
	s := onFake(t, db, &clock)
	rec := analytics.NewRecorder(1_000_000, nil)
	f := analytics.NewFlusher(rec, s, analyticstest.DefaultPlan, analytics.FlusherOptions{Now: func() time.Time { return clock }, WriteTimeout: testkit.Slack(time.Minute)}, nil, nil)
	keys := make([]string, links)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
	}
	var sent [2]Statements
	for i := range 2 {
		for _, k := range keys {
			rec.Record(k, clock, false)
		}
		clock = clock.Add(10 * time.Second)
		before := s.Statements()
		if err := f.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		after := s.Statements()
		sent[i] = Statements{Points: after.Points - before.Points, PointsSent: after.PointsSent - before.PointsSent,
			Active: after.Active - before.Active, ActiveSent: after.ActiveSent - before.ActiveSent}
		t.Logf("flush %d of the hour: %d statements: %d counts in %d, %d Active entries in %d",
			i+1, sent[i].Writes(), sent[i].Points, sent[i].PointsSent, sent[i].Active, sent[i].ActiveSent)
	}
	if sent[0].Active != int64(links)+1 || sent[1].Active != 0 {
		t.Errorf("Active entries: %d then %d, want %d then none", sent[0].Active, sent[1].Active, links+1)
	}
	if first, steady := float64(sent[0].Writes()), float64(sent[1].Writes()); first > 1.25*steady {
		t.Errorf("the first flush of the hour sent %v statements, %.2f times a steady flush's %v; want at most 1.25", first, first/steady, steady)
	}
}
