package cassandra

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
)

// Erasure (analytics.Eraser)
//
// Deleting a link's rows is not enough on a store that several gateways
// write with pinned timestamps: a tombstone at the erasure's time would
// lose to the rolled rows (written at their bucket's end plus their
// visits) and hide every later register of a sketch, and the breakdowns'
// and top lists' cumulative counts of a writer generation still hold the
// visits from before the erasure, which that writer's next batch writes
// again. So an erasure moves the link (or every link of the tenant, its
// all-links total among them) to a new epoch instead:
//
//   - The erasures table holds one row per erased link ("tenant/key",
//     or the key alone for the default tenant) or tenant ("tenant/"): the
//     epoch, a number that only grows (the erasure's time in µs, or one
//     more than the last epoch), and the time up to which its counts are
//     erased. It is written USING TIMESTAMP the epoch, so a later erasure
//     always wins, and every gateway reads it (one partition) before each
//     Write and, for its reads, at most erasureRefresh after its last read.
//   - A link's rows are stored under its key as it is while neither it
//     nor its tenant was ever erased (so the rows of installs without
//     erasures are those of before), and under "#T.L/" + key once one was,
//     T and L the tenant's and the link's epochs in base 36: in partitions
//     of their own in every table (points_*, link_days, rollup_marks), and
//     as their own links in the top lists. Reads use the current epoch
//     only, so what was stored before the erasure is never read again;
//     it expires by its TTL, and the link's partitions within the tiers'
//     retention and of the all-time tier are deleted at the erasure (best
//     effort: a tenant's links are not listed anywhere, so only the
//     tenant's all-links total is deleted with it).
//   - Write drops what the erasures cover (analytics.Unerased: a batch
//     placed before an erasure, from a queue or a journal replayed after
//     a restart, and buckets that ended by it) and stores the rest under
//     the current epoch.
//   - The rollup works on the keys of its Active entries, which are those
//     of the rows they announce, and Apply writes under the keys it is
//     given, never remapped: a rollup that read a link before its erasure
//     writes what it read back into the old epoch, where no read looks.
//     (Points and Marks of a key that names no epoch read the current
//     one, for the stats API; the rollup of an epoch-0 entry that reads
//     the new epoch so writes it to epoch 0, where nothing reads it
//     either.)
//   - A breakdown or top-list count of a writer generation in a new epoch
//     is the generation's cumulative count less what it had when its
//     first batch after the erasure came (that batch's Cum - N), kept in
//     memory by the Store that writes it; a writer the Store did not
//     follow from its first batch (a journal replayed by a new process)
//     writes none in a new epoch, rather than guess.
//
// A gateway that has not read an erasure yet (at most one Write: it reads
// the table before each) writes under the old epoch: such counts are lost,
// not brought back. What another gateway counted in the minute of the
// erasure and flushes after it is kept, as counted after it.

// erasureRefresh bounds how old the erasures a read uses may be: a link
// erased by another gateway reads empty here at most this much later.
const erasureRefresh = 10 * time.Second

// Epochs are the tenant's and the link's epochs of a stored key; zero for
// a key never erased.
type epochs struct{ tenant, link int64 }

// erasureRow is a row of the erasures table.
type erasureRow struct {
	name  string    // "tenant/key", "key" (the default tenant) or "tenant/"
	epoch int64     // the key's epoch now
	at    time.Time // counted at or before it is erased
}

// erasure returns the analytics.Erasure of r.
func (r erasureRow) erasure() analytics.Erasure {
	if t, ok := strings.CutSuffix(r.name, "/"); ok {
		return analytics.Erasure{Tenant: t, At: r.at}
	}
	t, k := analytics.SplitKey(r.name)
	return analytics.Erasure{Tenant: t, Key: k, At: r.at}
}

// storedKey returns the key under which the rows of key (as
// analytics.TenantKey makes it) are stored in epochs e.
func storedKey(key string, e epochs) string {
	if e == (epochs{}) {
		return key
	}
	return "#" + strconv.FormatInt(e.tenant, 36) + "." + strconv.FormatInt(e.link, 36) + "/" + key
}

// parseStored returns the key and epochs of a key that names its epoch
// ("#T.L/" + key); ok is false for any other key. No key as
// analytics.TenantKey makes it starts so: a short key holds no "/", and a
// tenant's name no "#".
func parseStored(s string) (key string, e epochs, ok bool) {
	if !strings.HasPrefix(s, "#") {
		return s, epochs{}, false
	}
	head, key, found := strings.Cut(s[1:], "/")
	t, l, dot := strings.Cut(head, ".")
	if !found || !dot {
		return s, epochs{}, false
	}
	tn, err1 := strconv.ParseInt(t, 36, 64)
	ln, err2 := strconv.ParseInt(l, 36, 64)
	if err1 != nil || err2 != nil || tn < 0 || ln < 0 {
		return s, epochs{}, false
	}
	return key, epochs{tn, ln}, true
}

// logicalKey returns the key (analytics.TenantKey) whose rows s names.
func logicalKey(s string) string {
	k, _, _ := parseStored(s)
	return k
}

// eraseState is what a Store knows of the erasures table, and the bases
// of the cumulative counts it writes in new epochs.
type eraseState struct {
	mu     sync.Mutex
	loaded time.Time // when the table was last read; zero: never
	rows   map[string]erasureRow
	set    analytics.Erased
	// followed tells, per batch writer, whether its first batch this
	// Store saw was its first (FirstSeq 1).
	followed map[string]bool
	base     map[baseKey]int64
}

// baseKey is a cumulative count of a writer generation in an epoch: a
// value of a link's dimension on a day (value is the stored key for
// DimLink).
type baseKey struct {
	writer string
	gen    uint64
	key    string
	day    int64
	dim    visitor.Dim
	value  string
}

// epochsOf returns the epochs of key now. Call it with st.mu held.
func (st *eraseState) epochsOf(key string) epochs {
	if len(st.rows) == 0 {
		return epochs{}
	}
	t, short := analytics.SplitKey(key)
	var e epochs
	if t != "" {
		e.tenant = st.rows[t+"/"].epoch
	}
	if short != "" {
		e.link = st.rows[key].epoch
	}
	return e
}

// setRows replaces st's rows with rows, read at at. Call it with st.mu
// held.
func (st *eraseState) setRows(rows []erasureRow, at time.Time) {
	st.rows = make(map[string]erasureRow, len(rows))
	es := make([]analytics.Erasure, 0, len(rows))
	for _, r := range rows {
		if old, ok := st.rows[r.name]; ok && old.epoch > r.epoch {
			continue
		}
		st.rows[r.name] = r
		es = append(es, r.erasure())
	}
	st.set = analytics.NewErased(es)
	st.loaded = at
}

// loadErasures reads the erasures table when what s knows of it is older
// than maxAge (always for 0) and, when it returns nil, holds s.erased.mu:
// the caller unlocks it. A read (maxAge > 0) that fails goes on with what
// s knew, when it knew anything.
func (s *Store) loadErasures(ctx context.Context, be backend, maxAge time.Duration) error {
	st := &s.erased
	st.mu.Lock()
	if !st.loaded.IsZero() && maxAge > 0 && time.Since(st.loaded) < maxAge {
		return nil
	}
	st.mu.Unlock()
	start := time.Now()
	rows, err := be.readErasures(ctx)
	st.mu.Lock()
	if err != nil {
		if !st.loaded.IsZero() && maxAge > 0 {
			return nil
		}
		st.mu.Unlock()
		return fmt.Errorf("erasures: %w", err)
	}
	if start.After(st.loaded) {
		st.setRows(rows, start)
	}
	return nil
}

// readKey returns the key whose rows a read of key reads: key's in its
// current epoch, or key itself when it names an epoch (the rollup's keys:
// Active).
func (s *Store) readKey(ctx context.Context, be backend, key string) (string, error) {
	if _, _, ok := parseStored(key); ok {
		return key, nil
	}
	if err := s.loadErasures(ctx, be, erasureRefresh); err != nil {
		return "", err
	}
	defer s.erased.mu.Unlock()
	return storedKey(key, s.erased.epochsOf(key)), nil
}

// readKeys returns the current stored key of each of keys (see readKey),
// and the keys by stored key.
func (s *Store) readKeys(ctx context.Context, be backend, keys []string) ([]string, map[string]string, error) {
	if err := s.loadErasures(ctx, be, erasureRefresh); err != nil {
		return nil, nil, err
	}
	defer s.erased.mu.Unlock()
	out := make([]string, len(keys))
	back := make(map[string]string, len(keys))
	for i, k := range keys {
		out[i] = storedKey(k, s.erased.epochsOf(k))
		back[out[i]] = k
	}
	return out, back, nil
}

// current reports whether the stored key sk is its key's current epoch,
// and returns the key. Call it after loadErasures, with s.erased.mu held.
func (s *Store) current(sk string) (string, bool) {
	k, e, _ := parseStored(sk)
	return k, s.erased.epochsOf(k) == e
}

// unerased returns b without what the erasures cover, its keys those of
// their current epochs and its cumulative counts in new epochs rebased
// (see "Erasure" above). It reads the erasures table first. Call it
// holding s.wmu, so that no Erase of this Store comes between.
func (s *Store) unerased(ctx context.Context, be backend, b analytics.Batch) (analytics.Batch, error) {
	if err := s.loadErasures(ctx, be, 0); err != nil {
		return b, err
	}
	st := &s.erased
	defer st.mu.Unlock()
	followed := false
	if b.Writer != "" {
		if st.followed == nil {
			st.followed = map[string]bool{}
		}
		f, seen := st.followed[b.Writer]
		if !seen {
			f = b.FirstSeq() == 1
			st.followed[b.Writer] = f
		}
		followed = f
	}
	if len(st.rows) == 0 {
		return b, nil
	}
	b = analytics.Unerased(b, st.set)
	key := func(k string) string { return storedKey(k, st.epochsOf(k)) }
	b.Active = mapped(b.Active, func(a *rollup.Active) { a.Key = key(a.Key) })
	b.Active = append(b.Active[:len(b.Active):len(b.Active)], s.announceEpochs(b, st)...)
	b.Counts = mapped(b.Counts, func(c *analytics.Count) { c.Key = key(c.Key) })
	b.Marks = mapped(b.Marks, func(m *rollup.Mark) { m.Key = key(m.Key) })
	b.Uniques = mapped(b.Uniques, func(u *analytics.UniqueSketch) { u.Key = key(u.Key) })
	today := b.At.UTC().Truncate(rollup.Day).Unix()
	for k := range st.base {
		if k.day < today-2*86400 { // the writer has started a new generation for it
			delete(st.base, k)
		}
	}
	dims := make([]analytics.DimCount, 0, len(b.Dims))
	for _, d := range b.Dims {
		link := d.Key
		if d.Dim == analytics.DimLink {
			link = d.Value
			d.Value = key(d.Value)
		}
		d.Key = key(d.Key)
		if b.Writer != "" && st.epochsOf(link) != (epochs{}) {
			if !followed {
				continue
			}
			bk := baseKey{b.Writer, d.Gen, d.Key, d.Day.Unix(), d.Dim, d.Value}
			base, ok := st.base[bk]
			if !ok {
				base = d.Cum - d.N
				if st.base == nil {
					st.base = map[baseKey]int64{}
				}
				st.base[bk] = base
			}
			d.Cum -= base
		}
		dims = append(dims, d)
	}
	b.Dims = dims
	return b, nil
}

// announceEpochs returns the Active entries of b's counts of keys in a
// new epoch (under their stored keys): the flusher announces a (link,
// period) once, and the entry it made before an erasure names the old
// epoch. Storing an entry again changes nothing. Call it with st.mu held.
func (s *Store) announceEpochs(b analytics.Batch, st *eraseState) []rollup.Active {
	var out []rollup.Active
	seen := map[rollup.Active]bool{}
	for _, c := range b.Counts {
		e := st.epochsOf(c.Key)
		if e == (epochs{}) {
			continue
		}
		i, ok := s.plan.Level(c.Step)
		if !ok {
			continue // refused by prepare
		}
		if a, ok := s.plan.Announce(storedKey(c.Key, e), i, c.Start, b.At); ok && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out
}

// mapped returns a copy of s with f applied to each element.
func mapped[T any](s []T, f func(*T)) []T {
	if len(s) == 0 {
		return s
	}
	out := make([]T, len(s))
	copy(out, s)
	for i := range out {
		f(&out[i])
	}
	return out
}

var _ analytics.Eraser = (*Store)(nil)

// Erase implements analytics.Eraser: the erasure's row, which moves what
// it covers to a new epoch, then the best-effort deletion of the rows of
// the old one.
func (s *Store) Erase(ctx context.Context, e analytics.Erasure) error {
	if err := e.Check(); err != nil {
		return fmt.Errorf("cassandra: erase: %w", err)
	}
	be, err := s.backend()
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if err := s.loadErasures(ctx, be, 0); err != nil {
		return fmt.Errorf("cassandra: erase: %w", err)
	}
	st := &s.erased
	name, _ := e.Prefix()
	old := st.rows[name]
	oldKey := storedKey(name, st.epochsOf(name))
	r := erasureRow{name: name, epoch: max(e.At.UnixMicro(), old.epoch+1), at: e.At.UTC()}
	if old.at.After(r.at) {
		r.at = old.at
	}
	st.mu.Unlock()
	if err := be.writeErasure(ctx, r); err != nil {
		return fmt.Errorf("cassandra: erase: %w", err)
	}
	st.mu.Lock()
	rows := make([]erasureRow, 0, len(st.rows)+1)
	for _, x := range st.rows {
		if x.name != name {
			rows = append(rows, x)
		}
	}
	st.setRows(append(rows, r), time.Now())
	st.mu.Unlock()
	if err := s.deleteRows(ctx, be, oldKey, e.At); err != nil {
		s.log.Warn("erased counts left to expire", "key", logicalKey(oldKey), "err", err)
	}
	return nil
}

// deleteRows deletes the partitions of the stored key sk that hold rows
// about times up to at: those of every tier within its retention, the
// all-time tier's, the breakdowns' and the marks'.
func (s *Store) deleteRows(ctx context.Context, be backend, sk string, at time.Time) error {
	var errs []error
	for _, t := range s.plan.Tiers() {
		if !t.Expires() {
			errs = append(errs, be.deletePartition(ctx, pointsTable(t), sk, allTime))
			continue
		}
		for _, p := range partitions(at.Add(-t.Retention-t.Step), at.Add(t.Step), t) {
			errs = append(errs, be.deletePartition(ctx, pointsTable(t), sk, p))
		}
	}
	keep := time.Duration(s.dimRetention.Load())
	for p := partitionOf(at.Add(-keep-2*rollup.Day), dimSpan); !p.After(at); p = p.Add(dimSpan) {
		errs = append(errs, be.deletePartition(ctx, "link_days", sk, p))
	}
	errs = append(errs, be.deletePartition(ctx, "rollup_marks", sk, time.Time{}))
	return errors.Join(errs...)
}

const (
	insertErasureCQL  = `INSERT INTO %s.erasures (part, name, epoch, erased_ns) VALUES (0, ?, ?, ?) USING TIMESTAMP ?`
	selectErasuresCQL = `SELECT name, epoch, erased_ns FROM %s.erasures WHERE part = 0`
)

// deletePartitionCQL returns the statements that delete a link's
// partition, by table: the points tables of tiers (a plan's, the
// all-time one included), link_days and rollup_marks; and its rows of
// the sharded tables' partitions (shards.go).
func deletePartitionCQL(ks string, tiers []rollup.Tier) map[string]string {
	m := map[string]string{
		"link_days":    fmt.Sprintf(`DELETE FROM %s.link_days WHERE short_key = ? AND bucket = ?`, ks),
		"rollup_marks": fmt.Sprintf(`DELETE FROM %s.rollup_marks WHERE short_key = ?`, ks),
	}
	for _, t := range tiers {
		m[pointsTable(t)] = fmt.Sprintf(`DELETE FROM %s.%s WHERE short_key = ? AND bucket = ?`, ks, pointsTable(t))
	}
	for _, table := range []string{shardedTable(pointsTable(tiers[0])), shardedTable("link_days")} {
		m[table] = fmt.Sprintf(`DELETE FROM %s.%s WHERE shard = ? AND bucket IN ? AND short_key = ?`, ks, table)
	}
	return m
}

// erasuresSchema returns the CQL that creates the erasures table.
func erasuresSchema(keyspace string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.erasures (
    part      int,
    name      text,
    epoch     bigint,
    erased_ns bigint,
    PRIMARY KEY (part, name)
) WITH comment = 'erased links (tenant/key, or key in the default tenant) and tenants (tenant/): the epoch their rows are stored in now (under #<tenant epoch>.<link epoch>/<key>, base 36) and the time (unix ns) up to which their counts are erased; part is 0; written USING TIMESTAMP epoch'`, keyspace)
}

func (b *cqlBackend) readErasures(ctx context.Context) ([]erasureRow, error) {
	it := b.query(ctx, b.selectErasures).Iter()
	var (
		out []erasureRow
		r   erasureRow
		ns  int64
	)
	for it.Scan(&r.name, &r.epoch, &ns) {
		r.at = time.Unix(0, ns).UTC()
		out = append(out, r)
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return out, nil
}

func (b *cqlBackend) writeErasure(ctx context.Context, r erasureRow) error {
	return b.query(ctx, b.insertErasure, r.name, r.epoch, r.at.UnixNano(), r.epoch).Exec()
}

func (b *cqlBackend) deletePartition(ctx context.Context, table, key string, bucket time.Time) error {
	stmt, ok := b.deletePartitions[table]
	if !ok {
		return fmt.Errorf("no table %s", table)
	}
	if table == "rollup_marks" {
		return b.query(ctx, stmt, key).Exec()
	}
	if err := b.query(ctx, stmt, key, bucket).Exec(); err != nil {
		return err
	}
	// The link's rows of the sharded table's partitions inside it.
	var span, whole time.Duration
	switch table {
	case b.finestTable:
		span, whole = shardSpan(b.finest.Step), tierSpan(b.finest)
	case "link_days":
		span, whole = linkDaysShardSpan, dimSpan
	default:
		return nil
	}
	return b.query(ctx, b.deletePartitions[shardedTable(table)], linkShard(key), shardBuckets(bucket, bucket.Add(whole), span), key).Exec()
}

func (b counted) readErasures(ctx context.Context) ([]erasureRow, error) {
	b.c.reads.Add(1)
	return b.be.readErasures(ctx)
}

func (b counted) writeErasure(ctx context.Context, r erasureRow) error {
	return b.be.writeErasure(ctx, r)
}

func (b counted) deletePartition(ctx context.Context, table, key string, bucket time.Time) error {
	return b.be.deletePartition(ctx, table, key, bucket)
}
