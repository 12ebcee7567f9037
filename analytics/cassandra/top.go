package cassandra

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// Top links
//
// A flush's analytics.DimLink counts (each link's human visits per UTC
// day) are written twice, both as breakdowns are (USING TIMESTAMP the
// batch time, a TTL of the breakdowns' retention after the day):
//
//   - in the link's own link_days row of the day and writer generation,
//     its visits column holding the generation's cumulative count (in the
//     same UPDATE as the link's breakdowns and registers: linkdays.go):
//     every link's exact count of a day, read by key (TopCounts), a
//     hundred links a read (short_key IN ?). Until this release it was a
//     row of top_days, one partition per (day, shard) (the shard a hash
//     of the link, as for Active entries): a third row per link and
//     flush. Reads still add what top_days holds until it expires,
//     keeping the larger of the two counts a generation has of a link's
//     day.
//   - top_leaders, one partition per day, holding per writer generation
//     (the writer id of the breakdowns' rows) its topLeaders most visited
//     links of the day: topLeaders slots, each (link, cumulative count).
//
// A Store keeps in memory, per writer generation and day it writes, the
// links of its slots as a min-heap of their counts. A flush's links
// update it: a link already there gets its new count, one that is not
// enters when the list is not full or when its count exceeds the smallest
// (which it then replaces, in the same slot). Counts only grow within a
// generation, so the list is always exactly the generation's topLeaders
// most visited links of the day (a link out of it has at most the
// smallest count in it). The flush writes the slots of its links that are
// in the list: at most min(links, topLeaders) rows per (generation, day),
// in unlogged batches of one partition, and never a delete. A list the
// Store does not hold (a journal replayed by another process, a
// generation the Store dropped to bound its memory) is read back from
// top_leaders first: one read per (generation, day) and process.
//
// A tenant's link (analytics.TenantKey) is in the lists of top_leaders with
// every link, and in its tenant's lists too: tenant_leaders, one
// partition per (tenant, day), kept alike (a writer generation's
// topLeaders most visited links of the tenant on the day), so that a
// tenant's top list (TenantTop) reads its own lists, and the exact counts
// every link has.
//
// Retries and replays change nothing: a resent batch finds its links in
// the list already, in the same slots, and writes the same rows; an older
// batch replayed writes older counts with an older timestamp, which lose
// to what the slots hold (last write wins).
//
// Top reads the range's top_leaders partitions (one per day, at most
// topLeaders rows per writer generation of the day), and bounds each
// listed link's total: at least the counts listed, at most those plus, for
// every full list it is missing from, that list's smallest count. Links
// whose upper bound is below the n-th best lower bound cannot make the top
// n; the others' exact totals are read from link_days (one read per 366
// days and 100 links) and top_days (one read per day, shard and 100
// links). So its reads are bounded by the days, the writer
// generations and topLeaders, not by the links visited.
//
// The answer is exact when every link of the true top n is listed for at
// least one (day, writer generation) of the range, which holds whenever
// the n-th total reached is at least the sum of the smallest counts of
// the full lists (a link listed nowhere has at most that): always for a
// single day of a single writer generation (n ≤ 1,000 < topLeaders), and
// with several gateways sharing the traffic unless one link ranks below
// every gateway's 2,000th on every day of the range and still beats the
// n-th. It can miss a link in the true top n only in that case: a link
// that is never among any writer's 2,000 most visited of any day, yet
// whose visits over a long range add up past links that were. Such a
// link is then left out, and the list holds the next ones with their
// exact totals; a link listed is never given a wrong total.

// topLeaders is how many links a writer generation lists per day: twice
// the largest top=N the stats API asks for.
const topLeaders = 2000

// maxTopKeys bounds the links of one read of link_days or top_days
// (short_key IN ?).
const maxTopKeys = 100

const (
	// top_days, which link_days replaced: nothing writes it any more.
	selectTopKeysCQL = `SELECT short_key, writer, visits FROM %s.top_days WHERE day = ? AND shard = ? AND short_key IN ?`
	insertLeaderCQL  = `INSERT INTO %s.top_leaders (day, writer, slot, short_key, visits) VALUES (?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?`
	selectLeadersCQL = `SELECT writer, slot, short_key, visits FROM %s.top_leaders WHERE day = ?`
	selectLeaderCQL  = `SELECT writer, slot, short_key, visits FROM %s.top_leaders WHERE day = ? AND writer = ?`

	insertTenantLeaderCQL  = `INSERT INTO %s.tenant_leaders (tenant, day, writer, slot, short_key, visits) VALUES (?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?`
	selectTenantLeadersCQL = `SELECT writer, slot, short_key, visits FROM %s.tenant_leaders WHERE tenant = ? AND day = ?`
	selectTenantLeaderCQL  = `SELECT writer, slot, short_key, visits FROM %s.tenant_leaders WHERE tenant = ? AND day = ? AND writer = ?`
)

type topRow struct {
	day    time.Time
	shard  int
	key    string
	writer gocql.UUID
	count  int64
	ttl    int
	ts     int64
}

// leaderRow is a slot of a writer generation's list of a day: of every
// link (tenant ""), or of a tenant's links.
type leaderRow struct {
	tenant string
	day    time.Time
	writer gocql.UUID
	slot   int
	key    string
	count  int64
	ttl    int
	ts     int64
}

// topRows returns b's DimLink counts, each link's human visits of a day
// (its generation's cumulative count, or the batch's for a batch without
// an identity, whose writer is anon), as rows of the link's link_days
// (linkdays.go).
func (s *Store) topRows(b analytics.Batch, anon gocql.UUID) []topRow {
	keep := time.Duration(s.dimRetention.Load())
	n := 0
	for i := range b.Dims {
		if b.Dims[i].Dim == analytics.DimLink {
			n++
		}
	}
	rows := make([]topRow, 0, n)
	gens := genWriters{writer: b.Writer}
	for _, d := range b.Dims {
		if d.Dim != analytics.DimLink {
			continue
		}
		r := topRow{day: d.Day.UTC(), shard: shardOf(d.Value), key: d.Value, writer: anon, count: d.N, ts: b.At.UnixMicro(),
			ttl: s.dayTTL(d.Value, ttlOf(d.Day.Add(rollup.Day+keep).Sub(b.At)), d.Day, b.At)}
		if b.Writer != "" {
			r.writer, r.count = gens.of(d.Gen), d.Cum
		}
		if r.ttl <= 0 || r.count == 0 {
			continue
		}
		rows = append(rows, r)
	}
	return rows
}

// prepareLeaders returns the statements that write the slots of rows'
// links that are in their writer generation's list, in batches of one
// day (and tenant). anon says the rows are of a batch without an
// identity.
func (s *Store) prepareLeaders(ctx context.Context, be backend, rows []topRow, anon bool) ([]op, error) {
	leaders, err := s.leaders.update(ctx, be, rows, anon)
	if err != nil {
		return nil, fmt.Errorf("cassandra: write: top list: %w", err)
	}
	var ops []op
	for len(leaders) > 0 {
		n := 0
		for n < len(leaders) && n < maxPartitionRows && leaders[n].day.Equal(leaders[0].day) && leaders[n].tenant == leaders[0].tenant {
			n++
		}
		batch := leaders[:n:n]
		leaders = leaders[n:]
		ops = append(ops, func(ctx context.Context, be backend) error { return be.writeLeaders(ctx, batch) })
	}
	return ops, nil
}

// leaderSets are the lists a Store writes, by writer generation, day and
// tenant.
type leaderSets struct {
	mu   sync.Mutex
	sets map[leaderID]*leaderSet
	tick uint64 // counts updates, for dropping the least recently used set
}

// maxLeaderSets and maxLeadersHeld bound the lists a Store holds (each at
// most topLeaders links): beyond maxLeaderSets lists, the least recently
// used go while they hold more than maxLeadersHeld links together. A
// writer has one generation at a time, and writes today's and now and
// then yesterday's or an older day's visits, in a list of every link and
// one per tenant visited.
const (
	maxLeaderSets  = 16
	maxLeadersHeld = 8 * topLeaders
)

type leaderID struct {
	writer gocql.UUID
	day    int64
	tenant string
}

// leaderSet is a writer generation's list of a day: a min-heap by count
// (then by key, the greater first), each link in a slot of its own.
type leaderSet struct {
	items []*leader
	byKey map[string]*leader
	next  int   // the first slot never taken
	free  []int // slots below next not taken, the lowest last
	used  uint64
}

type leader struct {
	key   string
	count int64
	slot  int
	index int // in items
}

func (h *leaderSet) Len() int { return len(h.items) }
func (h *leaderSet) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	return a.count < b.count || a.count == b.count && a.key > b.key
}
func (h *leaderSet) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].index, h.items[j].index = i, j
}
func (h *leaderSet) Push(x any) {
	l := x.(*leader)
	l.index = len(h.items)
	h.items = append(h.items, l)
}
func (h *leaderSet) Pop() any {
	l := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return l
}

// add counts key's count into the list and reports whether key is in it.
func (h *leaderSet) add(key string, count int64) bool {
	if l, ok := h.byKey[key]; ok {
		if count > l.count { // an older batch replayed brings an older count
			l.count = count
			heap.Fix(h, l.index)
		}
		return true
	}
	if len(h.items) < topLeaders {
		l := &leader{key: key, count: count, slot: h.next}
		if n := len(h.free); n > 0 {
			l.slot, h.free = h.free[n-1], h.free[:n-1]
		} else {
			h.next++
		}
		h.byKey[key] = l
		heap.Push(h, l)
		return true
	}
	least := h.items[0]
	if count <= least.count {
		return false
	}
	delete(h.byKey, least.key)
	least.key, least.count = key, count // the same slot, now key's
	h.byKey[key] = least
	heap.Fix(h, 0)
	return true
}

// update counts rows (a batch's top_days rows) into their lists and
// returns the slots to write: those of the rows' links in their lists,
// with the rows' counts, TTLs and timestamps. A batch without an identity
// (anon) has a list of its own, not kept. A list not held is read back
// from the store first.
func (ls *leaderSets) update(ctx context.Context, be backend, rows []topRow, anon bool) ([]leaderRow, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.sets == nil {
		ls.sets = map[leaderID]*leaderSet{}
	}
	var out []leaderRow
	sets := map[leaderID]*leaderSet{}
	// A row is in the list of every link, and a tenant's link in its
	// tenant's list too (in ids, not a slice made per row).
	var ids [2]leaderID
	lists := func(r topRow) []leaderID {
		ids[0] = leaderID{r.writer, r.day.Unix(), ""}
		if t, _ := analytics.SplitKey(logicalKey(r.key)); t != "" {
			ids[1] = leaderID{r.writer, r.day.Unix(), t}
			return ids[:2]
		}
		return ids[:1]
	}
	for _, r := range rows {
		for _, id := range lists(r) {
			if _, ok := sets[id]; !ok {
				set, err := ls.get(ctx, be, id, anon)
				if err != nil {
					return nil, err
				}
				sets[id] = set
			}
			sets[id].add(r.key, r.count)
		}
	}
	// The slots once the whole batch is counted: a link that entered and
	// was pushed out again by the batch's next ones is not written.
	for _, r := range rows {
		for _, id := range lists(r) {
			if l, ok := sets[id].byKey[r.key]; ok {
				out = append(out, leaderRow{tenant: id.tenant, day: r.day, writer: r.writer, slot: l.slot, key: r.key, count: r.count, ttl: r.ttl, ts: r.ts})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b leaderRow) int {
		return cmp.Or(strings.Compare(a.tenant, b.tenant), a.day.Compare(b.day))
	})
	return out, nil
}

// get returns the list id, read back from the store when not held. The
// caller holds mu.
func (ls *leaderSets) get(ctx context.Context, be backend, id leaderID, anon bool) (*leaderSet, error) {
	ls.tick++
	if set, ok := ls.sets[id]; ok {
		set.used = ls.tick
		return set, nil
	}
	set := &leaderSet{byKey: map[string]*leader{}, used: ls.tick}
	if anon {
		return set, nil // a random writer id: nothing stored under it
	}
	stored, err := be.readLeader(ctx, id.tenant, time.Unix(id.day, 0).UTC(), id.writer)
	if err != nil {
		return nil, err
	}
	// The slots as stored; a batch of slots that failed for good leaves
	// a hole, which the next link to enter takes.
	used := map[int]bool{}
	for _, r := range stored {
		if r.slot < 0 || r.slot >= topLeaders || used[r.slot] || set.byKey[r.key] != nil {
			continue
		}
		used[r.slot] = true
		l := &leader{key: r.key, count: r.count, slot: r.slot, index: len(set.items)}
		set.byKey[r.key] = l
		set.items = append(set.items, l)
		set.next = max(set.next, r.slot+1)
	}
	for slot := set.next - 1; slot >= 0; slot-- {
		if !used[slot] {
			set.free = append(set.free, slot)
		}
	}
	heap.Init(set)
	for len(ls.sets) >= maxLeaderSets {
		var old leaderID
		oldest, held := ^uint64(0), 0
		for k, v := range ls.sets {
			held += len(v.items)
			if v.used < oldest {
				old, oldest = k, v.used
			}
		}
		if held <= maxLeadersHeld {
			break
		}
		delete(ls.sets, old)
	}
	ls.sets[id] = set
	return set, nil
}

// Top implements analytics.TopSource: see "Top links" above.
func (s *Store) Top(ctx context.Context, from, to time.Time, n int) ([]analytics.TopLink, error) {
	return s.top(ctx, "", from, to, n)
}

// TenantTop implements analytics.TopSource: Top over the tenant's lists.
func (s *Store) TenantTop(ctx context.Context, tenant string, from, to time.Time, n int) ([]analytics.TopLink, error) {
	if tenant == "" {
		return nil, fmt.Errorf("cassandra: top: no tenant")
	}
	return s.top(ctx, tenant, from, to, n)
}

// topList is one writer generation's top list of one day; topEntry is a
// link's count in one.
type topList struct {
	writer gocql.UUID
	day    int64
}

type topEntry struct {
	list  topList
	count int64
}

// top is Top over the lists of tenant's links ("": every link).
func (s *Store) top(ctx context.Context, tenant string, from, to time.Time, n int) ([]analytics.TopLink, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cassandra: top: %w", err)
	}
	be, err := s.backend()
	if err != nil {
		return nil, err
	}
	lo, hi := s.topDays(from, to)
	counts := map[topList][]int64{}
	links := map[string][]topEntry{}
	if err := s.loadErasures(ctx, be, erasureRefresh); err != nil {
		return nil, fmt.Errorf("cassandra: top: %w", err)
	}
	s.erased.mu.Unlock()
	for day := lo; day.Before(hi); day = day.Add(rollup.Day) {
		rows, err := be.readLeaders(ctx, tenant, day)
		if err != nil {
			return nil, fmt.Errorf("cassandra: top: %w", err)
		}
		s.erased.mu.Lock()
		for _, r := range rows {
			l := topList{r.writer, day.Unix()}
			counts[l] = append(counts[l], r.count)
			if _, ok := s.current(r.key); ok { // a slot of an erased epoch fills its list, nothing more
				links[r.key] = append(links[r.key], topEntry{l, r.count})
			}
		}
		s.erased.mu.Unlock()
	}
	totals, err := s.topCounts(ctx, be, topCandidates(counts, links, n), lo, hi)
	if err != nil {
		return nil, fmt.Errorf("cassandra: top: %w", err)
	}
	out := make([]analytics.TopLink, 0, len(totals))
	for k, v := range totals {
		if v > 0 {
			out = append(out, analytics.TopLink{Key: logicalKey(k), Visits: v})
		}
	}
	slices.SortFunc(out, analytics.CompareTop)
	return out[:min(n, len(out))], nil
}

// topCandidates returns the links whose total over the lists may be among
// the n best, given every list's counts and each link's entries: the
// links whose most possible total reaches the n-th best least one.
func topCandidates(counts map[topList][]int64, links map[string][]topEntry, n int) []string {
	// least is what a link missing from a list has at most there: the
	// list's smallest count when it is full, else nothing.
	least := make(map[topList]int64, len(counts))
	var missing int64 // a link listed nowhere has at most this
	for l, cs := range counts {
		if len(cs) >= topLeaders {
			least[l] = slices.Min(cs)
			missing += least[l]
		}
	}
	type bounds struct {
		key       string
		low, high int64
	}
	bs := make([]bounds, 0, len(links))
	for k, ls := range links {
		b := bounds{key: k, high: missing}
		for _, x := range ls {
			b.low += x.count
			b.high += x.count - least[x.list]
		}
		bs = append(bs, b)
	}
	var floor int64 // the n-th best lower bound: the n-th total is at least this
	if n > 0 && len(bs) >= n {
		slices.SortFunc(bs, func(a, b bounds) int { return cmp.Compare(b.low, a.low) })
		floor = bs[n-1].low
	}
	var keys []string
	for _, b := range bs {
		if b.high >= floor && b.high > 0 {
			keys = append(keys, b.key)
		}
	}
	return keys
}

// topDays returns the days [lo, hi) a top list of [from, to) reads: the
// days whose start lies in the range, clamped to what is kept.
func (s *Store) topDays(from, to time.Time) (lo, hi time.Time) {
	lo, hi = rollup.AlignUp(from.UTC(), rollup.Day), rollup.AlignUp(to.UTC(), rollup.Day)
	keep := time.Duration(s.dimRetention.Load())
	if now := s.now().UTC(); lo.Before(now.Add(-keep - 2*rollup.Day)) {
		lo = rollup.Align(now.Add(-keep-2*rollup.Day), rollup.Day)
	}
	return lo, hi
}

// TopCounts implements analytics.TopSource: a read per day, shard and
// maxTopKeys of keys.
func (s *Store) TopCounts(ctx context.Context, keys []string, from, to time.Time) (map[string]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cassandra: top counts: %w", err)
	}
	be, err := s.backend()
	if err != nil {
		return nil, err
	}
	lo, hi := s.topDays(from, to)
	stored, back, err := s.readKeys(ctx, be, keys)
	if err != nil {
		return nil, fmt.Errorf("cassandra: top counts: %w", err)
	}
	counts, err := s.topCounts(ctx, be, stored, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("cassandra: top counts: %w", err)
	}
	out := make(map[string]int64, len(counts))
	for k, n := range counts {
		out[back[k]] = n
	}
	return out, nil
}

// topCounts returns the totals of keys over the days [lo, hi): the
// visits of link_days, and of top_days, which it replaced, a
// generation's larger count of a link's day kept when both hold one (a
// journal written before the change and replayed after it writes a
// generation's newer count to link_days). It reads the partitions
// concurrently (at most parallel at a time).
func (s *Store) topCounts(ctx context.Context, be backend, keys []string, lo, hi time.Time) (map[string]int64, error) {
	out := make(map[string]int64, len(keys))
	var shards [activeShards][]string
	var all []string
	for _, k := range keys {
		if _, ok := out[k]; !ok {
			out[k] = 0
			shards[shardOf(k)] = append(shards[shardOf(k)], k)
			all = append(all, k)
		}
	}
	// A read of top_days (one day, a shard's keys) or, with links set, of
	// link_days (a partition's days, up to maxTopKeys links).
	type read struct {
		day   time.Time
		shard int
		keys  []string
		links bool
	}
	var reads []read
	for p := partitionOf(lo, dimSpan); p.Before(hi); p = p.Add(dimSpan) {
		for ks := all; len(ks) > 0; {
			n := min(len(ks), maxTopKeys)
			reads = append(reads, read{p, 0, ks[:n:n], true})
			ks = ks[n:]
		}
	}
	for day := lo; day.Before(hi); day = day.Add(rollup.Day) {
		for shard, ks := range shards {
			for len(ks) > 0 {
				n := min(len(ks), maxTopKeys)
				reads = append(reads, read{day, shard, ks[:n:n], false})
				ks = ks[n:]
			}
		}
	}
	type gen struct {
		key    string
		day    int64
		writer gocql.UUID
	}
	counts := map[gen]int64{}
	var mu sync.Mutex
	err := runAll(ctx, len(reads), func(ctx context.Context, i int) error {
		r := reads[i]
		var rows []topRow
		var err error
		if r.links {
			rows, err = be.readLinkVisits(ctx, r.day, r.keys, latest(lo, r.day), earliest(hi, r.day.Add(dimSpan)))
		} else {
			rows, err = be.readTopKeys(ctx, r.day, r.shard, r.keys)
			for j := range rows {
				rows[j].day = r.day
			}
		}
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, row := range rows {
			if _, ok := out[row.key]; ok {
				g := gen{row.key, row.day.Unix(), row.writer}
				counts[g] = max(counts[g], row.count)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for g, n := range counts {
		out[g.key] += n
	}
	return out, nil
}

// writeRows inserts n rows of one partition with stmt, args(i) giving the
// values of the i-th: one statement, or an unlogged batch (one mutation).
func (b *cqlBackend) writeRows(ctx context.Context, stmt string, n int, args func(i int) []any) error {
	if n == 1 {
		return b.query(ctx, stmt, args(0)...).Exec()
	}
	batch := b.batch(ctx)
	for i := range n {
		batch.Entries = append(batch.Entries, gocql.BatchEntry{Stmt: stmt, Args: args(i), Idempotent: true})
	}
	return b.s.ExecuteBatch(batch)
}

func (b *cqlBackend) readTopKeys(ctx context.Context, day time.Time, shard int, keys []string) ([]topRow, error) {
	it := b.query(ctx, b.selectTopKeys, day, shard, keys).Iter()
	var out []topRow
	var r topRow
	for it.Scan(&r.key, &r.writer, &r.count) {
		out = append(out, r)
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return out, nil
}

func (b *cqlBackend) writeLeaders(ctx context.Context, rows []leaderRow) error {
	if t := rows[0].tenant; t != "" {
		return b.writeRows(ctx, b.insertTenantLeader, len(rows), func(i int) []any {
			r := rows[i]
			return []any{t, r.day, r.writer, r.slot, r.key, r.count, r.ttl, r.ts}
		})
	}
	return b.writeRows(ctx, b.insertLeader, len(rows), func(i int) []any {
		r := rows[i]
		return []any{r.day, r.writer, r.slot, r.key, r.count, r.ttl, r.ts}
	})
}

func (b *cqlBackend) readLeaders(ctx context.Context, tenant string, day time.Time) ([]leaderRow, error) {
	if tenant != "" {
		return b.scanLeaders(b.query(ctx, b.selectTenantLeaders, tenant, day).Iter())
	}
	return b.scanLeaders(b.query(ctx, b.selectLeaders, day).Iter())
}

func (b *cqlBackend) readLeader(ctx context.Context, tenant string, day time.Time, writer gocql.UUID) ([]leaderRow, error) {
	if tenant != "" {
		return b.scanLeaders(b.query(ctx, b.selectTenantLeader, tenant, day, writer).Iter())
	}
	return b.scanLeaders(b.query(ctx, b.selectLeader, day, writer).Iter())
}

func (b *cqlBackend) scanLeaders(it *gocql.Iter) ([]leaderRow, error) {
	var out []leaderRow
	var r leaderRow
	for it.Scan(&r.writer, &r.slot, &r.key, &r.count) {
		out = append(out, r)
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return out, nil
}

func (b counted) readLinkVisits(ctx context.Context, bucket time.Time, keys []string, from, to time.Time) ([]topRow, error) {
	b.c.reads.Add(1)
	rows, err := b.be.readLinkVisits(ctx, bucket, keys, from, to)
	b.c.topRows.Add(int64(len(rows)))
	return rows, err
}

func (b counted) readTopKeys(ctx context.Context, day time.Time, shard int, keys []string) ([]topRow, error) {
	b.c.reads.Add(1)
	rows, err := b.be.readTopKeys(ctx, day, shard, keys)
	b.c.topRows.Add(int64(len(rows)))
	return rows, err
}

func (b counted) writeLeaders(ctx context.Context, rows []leaderRow) error {
	b.c.leaders.Add(int64(len(rows)))
	b.c.leadersSent.Add(1)
	return b.be.writeLeaders(ctx, rows)
}

func (b counted) readLeaders(ctx context.Context, tenant string, day time.Time) ([]leaderRow, error) {
	b.c.reads.Add(1)
	rows, err := b.be.readLeaders(ctx, tenant, day)
	b.c.topRows.Add(int64(len(rows)))
	return rows, err
}

func (b counted) readLeader(ctx context.Context, tenant string, day time.Time, writer gocql.UUID) ([]leaderRow, error) {
	b.c.reads.Add(1)
	rows, err := b.be.readLeader(ctx, tenant, day, writer)
	b.c.topRows.Add(int64(len(rows)))
	return rows, err
}

func topSchema(keyspace string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.top_days (
    day       timestamp,
    shard     int,
    short_key text,
    writer    uuid,
    visits    bigint,
    PRIMARY KEY ((day, shard), short_key, writer)
) WITH compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': 'DAYS', 'compaction_window_size': 16}
    AND gc_grace_seconds = 10800
    AND comment = 'human visits per link and UTC day, for top lists; one row per writer generation holding its cumulative count, USING TIMESTAMP the batch time; 16 shards per day; USING TTL; replaced by link_days (visits), read until its rows expire'`, keyspace)
}

func leadersSchema(keyspace string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.top_leaders (
    day       timestamp,
    writer    uuid,
    slot      int,
    short_key text,
    visits    bigint,
    PRIMARY KEY ((day), writer, slot)
) WITH compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': 'DAYS', 'compaction_window_size': 16}
    AND gc_grace_seconds = 10800
    AND comment = 'per UTC day and writer generation, its 2000 most visited links (human visits), in slots overwritten USING TIMESTAMP the batch time; for top lists; USING TTL'`, keyspace)
}

func tenantLeadersSchema(keyspace string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.tenant_leaders (
    tenant    text,
    day       timestamp,
    writer    uuid,
    slot      int,
    short_key text,
    visits    bigint,
    PRIMARY KEY ((tenant, day), writer, slot)
) WITH compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': 'DAYS', 'compaction_window_size': 16}
    AND gc_grace_seconds = 10800
    AND comment = 'per tenant, UTC day and writer generation, its 2000 most visited links of the tenant (human visits), in slots overwritten USING TIMESTAMP the batch time; for a tenant''s top lists; USING TTL'`, keyspace)
}
