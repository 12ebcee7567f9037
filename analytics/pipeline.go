package analytics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/linkgate/linkgate/rollup"
)

// Pipeline is link analytics for the life of a process: the Recorder that
// counts visits in memory, the Flusher that moves them to the Store every
// flush_interval, the rollup worker that derives the coarser tiers and the
// totals from what the flushes wrote, the goroutines that run them, and the
// Store itself. It
// outlives config reloads, so counts in memory survive them; each config
// snapshot only builds its Middleware. A Pipeline is safe for concurrent
// use. Create it with NewPipeline and stop it with Close.
type Pipeline struct {
	rec    *Recorder
	fl     *Flusher
	store  Store
	reader *Reader
	tiers  []rollup.Tier

	stop      context.CancelFunc
	done      chan struct{} // closed when the flush loop and the worker have returned
	closeOnce sync.Once
	closeErr  error
}

// NewPipeline starts the analytics of plan over store: it takes ownership
// of store (Close closes it) and starts flushing every flush_interval,
// keeping what the store refuses in the journal (analytics.journal) until
// it takes it. It opens nothing itself: the flush loop opens the journal
// and writes what an earlier run left in it in the background. m and log
// may be nil.
func NewPipeline(plan *Plan, store Store, m *Metrics, log *slog.Logger) *Pipeline {
	return NewPipelineAfter(nil, plan, store, m, log, nil)
}

// NewPipelineAfter is NewPipeline for a process that takes over from
// another (a binary upgrade): it counts visits at once, but opens the
// journal and writes to the store only once after is closed (nil: at
// once), when the other process has closed them (FlusherOptions.After);
// meanwhile each interval's counts wait in memory. A store that one
// process at a time may open waits for after too (pebblestore.StartAfter).
// With tracer not nil, each batch's write and each rollup run is a span.
func NewPipelineAfter(after <-chan struct{}, plan *Plan, store Store, m *Metrics, log *slog.Logger, tracer trace.Tracer) *Pipeline {
	cfg := plan.Config()
	rec := NewRecorder(cfg.MaxKeys, m)
	rec.SetMaxBytes(cfg.MaxBufferBytes)
	rec.SetMaxValues(cfg.Dimensions.MaxValues)
	rec.SetLiveLinks(cfg.Live.MaxLinks)
	fl := NewFlusher(rec, store, plan.Rollup(), FlusherOptions{
		Interval:        cfg.FlushInterval,
		JournalPath:     DefaultJournalPath(cfg),
		JournalMaxBytes: cfg.Journal.MaxBytes,
		After:           after,
		Tracer:          tracer,
	}, m, log)
	roller := rollup.NewWorker(store, plan.Rollup(), rollup.WorkerOptions{Metrics: m, Log: log, Tracer: tracer})
	ctx, stop := context.WithCancel(context.Background())
	p := &Pipeline{
		rec: rec, fl: fl, store: store, reader: fl.Reader(store), tiers: plan.Rollup().Retention(),
		stop: stop, done: make(chan struct{}),
	}
	m.watch(func() string { return p.state().State })
	var wg sync.WaitGroup
	wg.Go(func() { fl.Run(ctx) })
	wg.Go(func() { roller.Run(ctx) })
	go func() { wg.Wait(); close(p.done) }()
	return p
}

// Middleware returns the middleware that records the visits plan defines
// (its match, count_status and bots) into the pipeline, each in the tenant
// of its host (nil: all in the default tenant): build one per config
// snapshot.
func (p *Pipeline) Middleware(plan *Plan, tenants Tenants) func(http.Handler) http.Handler {
	return NewTenantMiddleware(plan, p.rec, tenants)
}

// Apply takes the settings of a new config that the pipeline holds and a
// reload changes: max_keys, max_buffer_bytes, dimensions.max_values and
// live.max_links. Which analytics fields a reload applies and which wait
// for a restart is RestartOnly's to decide.
func (p *Pipeline) Apply(plan *Plan) {
	p.rec.SetMaxKeys(plan.Config().MaxKeys)
	p.rec.SetMaxBytes(plan.Config().MaxBufferBytes)
	p.rec.SetMaxValues(plan.Config().Dimensions.MaxValues)
	p.rec.SetLiveLinks(plan.Config().Live.MaxLinks)
}

// Live returns key's visits (AllLinks: all links together) in the last
// LiveWindow, per LiveStep, from this process's memory: see Recorder.Live.
func (p *Pipeline) Live(key string, now time.Time) ([]Point, bool) { return p.rec.Live(key, now) }

// LiveSince returns when the live view began counting: see Recorder.Since.
func (p *Pipeline) LiveSince() time.Time { return p.rec.Since() }

// RestartOnly returns the analytics section a reload from run to next runs
// with, eff, and the names of the fields that differ but change only on
// restart, as the config file names them ("analytics.store"). It is the one
// place that decides which is which:
//
//   - kept at run's values until a restart: enabled (whether there is a
//     pipeline at all), store, embedded, journal, cassandra, retention,
//     flush_interval and rollup_grace, which NewPipeline reads once, since
//     the pipeline lives as long as the process so that counts in memory
//     survive reloads;
//   - taken from next: match, count_status, bots, max_key_bytes, geoip and
//     dimensions.source_params, read by each snapshot's Middleware, and
//     max_keys, max_buffer_bytes, dimensions.max_values and
//     live.max_links, which Apply hands to the running pipeline.
//   - dimensions.retention_days is given to the store at start, so kept.
//
// next is not modified.
func RestartOnly(run, next Config) (eff Config, changed []string) {
	eff = next
	keep := func(name string, same bool, restore func()) {
		if !same {
			changed = append(changed, name)
			restore()
		}
	}
	keep("analytics.enabled", run.Enabled == next.Enabled, func() { eff.Enabled = run.Enabled })
	keep("analytics.store", run.Store == next.Store, func() { eff.Store = run.Store })
	keep("analytics.embedded.path", run.Embedded == next.Embedded, func() { eff.Embedded = run.Embedded })
	keep("analytics.journal", run.Journal == next.Journal, func() { eff.Journal = run.Journal })
	rc, nc := run.Cassandra, next.Cassandra
	keep("analytics.cassandra", rc.ReplicationFactor == nc.ReplicationFactor && rc.Keyspace == nc.Keyspace &&
		rc.Consistency == nc.Consistency && slices.Equal(rc.Hosts, nc.Hosts), func() { eff.Cassandra = run.Cassandra })
	keep("analytics.retention", slices.Equal(run.Retention, next.Retention), func() { eff.Retention = run.Retention })
	keep("analytics.flush_interval", run.FlushInterval == next.FlushInterval, func() { eff.FlushInterval = run.FlushInterval })
	keep("analytics.rollup_grace", run.RollupGrace == next.RollupGrace, func() { eff.RollupGrace = run.RollupGrace })
	keep("analytics.dimensions.retention_days", run.Dimensions.RetentionDays == next.Dimensions.RetentionDays,
		func() { eff.Dimensions.RetentionDays = run.Dimensions.RetentionDays })
	return eff, changed
}

// Reader returns the Reader the stats API uses: the store's counts plus
// those not written yet.
func (p *Pipeline) Reader() *Reader { return p.reader }

// Tiers returns the retention tiers the pipeline writes.
func (p *Pipeline) Tiers() []rollup.Tier { return p.tiers }

// Health returns the state of analytics now: whether the store can be
// used (from its State method, when it has one) and the last write to it
// succeeded, and what waits for it. It never waits for a write in
// progress, so it answers at once while the store hangs.
func (p *Pipeline) Health() Health {
	h := p.state()
	var oldest time.Time
	h.JournalBytes, oldest, h.DroppedVisits = p.fl.backlog()
	if !oldest.IsZero() {
		h.OldestUnsaved = &oldest
	}
	return h
}

// state is Health without what waits for the store, which costs a scan.
func (p *Pipeline) state() Health {
	var st StoreState
	if s, ok := p.store.(stater); ok {
		st = s.State()
	}
	return health(st, p.fl.writeProblem())
}

// Flush writes what is in memory now, without waiting for the next tick.
func (p *Pipeline) Flush(ctx context.Context) error { return p.fl.Flush(ctx) }

// Close stops the flush loop and the rollup worker, makes the final flush
// (journaling what the store refuses), and closes the store. Call it once
// the servers have stopped, so that no visit is recorded after the final
// flush. When counts could be neither written nor journaled, the error
// is (or wraps) a *LostError saying how many visits were lost. Later
// calls return the first call's result.
func (p *Pipeline) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.stop()
		<-p.done
		ferr := p.fl.Close(ctx)
		var serr error
		if err := p.store.Close(); err != nil {
			serr = fmt.Errorf("analytics: close store: %w", err)
		}
		p.closeErr = errors.Join(ferr, serr)
	})
	return p.closeErr
}
