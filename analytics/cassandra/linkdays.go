package cassandra

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gocql/gocql"
)

// Link days
//
// A flush writes what it counted of a link on a UTC day, beyond its
// minute counts, as one row of link_days per writer generation,
//
//	PRIMARY KEY ((short_key, bucket), day, writer) → dims map<text, bigint>, regs set<int>, visits bigint
//
// with one UPDATE that sets the entries changed since the last flush:
// dims["3:mobile"] = the generation's cumulative count of device
// "mobile", regs += reg<<8 | rho for each sketch register set, and
// visits = the generation's cumulative count of the link's human visits
// of the day (its analytics.DimLink count: what top lists add up). Each
// map entry, set element and the visits cell is a cell of its own,
// written USING TIMESTAMP the batch's At and USING TTL the dimension
// retention after the day, so a map entry and visits keep the newest
// cumulative count of their generation whatever order copies land in (as
// the dims and top_days tables' rows did), and a register's elements only
// ever add up: a reader takes each register's largest rho, which is a
// sketch's merge, across retries, replays and every gateway.
//
// It replaces the dims and uniques tables, which held one row per
// (dimension, value, writer) and per register, and top_days, which held
// a row per (link, day, writer) in partitions of (day, shard): a flush of
// a link visited once with its eight dimensions and a new visitor was
// eleven rows of three tables, each a statement of its own inside the
// batch that Cassandra parses, checks and applies; it is now one.
// Readers still read the old tables (nothing writes them any more; their
// rows expire by their TTL), keep the larger of the two counts a
// generation has of a value or of a link's day (a journal written before
// the change and replayed after it writes a generation's newer count to
// link_days), and merge the registers.

const (
	// The rows are written to link_days_by_shard (shards.go); link_days
	// is read until its rows expire.
	updateLinkDayCQL = `UPDATE %s.link_days_by_shard USING TTL ? AND TIMESTAMP ? SET dims = dims + ?, regs = regs + ? WHERE shard = ? AND bucket = ? AND short_key = ? AND day = ? AND writer = ?`
	// A row with the link's visits of the day: updateLinkDayCQL setting
	// visits too, which a row without them leaves out (no cell, no
	// tombstone).
	updateLinkVisitsCQL = `UPDATE %s.link_days_by_shard USING TTL ? AND TIMESTAMP ? SET dims = dims + ?, regs = regs + ?, visits = ? WHERE shard = ? AND bucket = ? AND short_key = ? AND day = ? AND writer = ?`
	// The visits of several links' days: short_key IN ?.
	selectLinkVisitsCQL = `SELECT short_key, day, writer, visits FROM %s.link_days WHERE short_key IN ? AND bucket = ? AND day >= ? AND day < ?`
	selectLinkDimsCQL   = `SELECT day, writer, dims FROM %s.link_days WHERE short_key = ? AND bucket = ? AND day >= ? AND day < ?`
	selectLinkRegsCQL   = `SELECT regs FROM %s.link_days WHERE short_key = ? AND bucket = ? AND day >= ? AND day < ?`
	// The same of link_days_by_shard: a shard's partitions in the range
	// (bucket IN ?).
	selectShardVisitsCQL = `SELECT short_key, day, writer, visits FROM %s.link_days_by_shard WHERE shard = ? AND bucket IN ? AND short_key IN ? AND day >= ? AND day < ?`
	selectShardDimsCQL   = `SELECT day, writer, dims FROM %s.link_days_by_shard WHERE shard = ? AND bucket IN ? AND short_key = ? AND day >= ? AND day < ?`
	selectShardRegsCQL   = `SELECT regs FROM %s.link_days_by_shard WHERE shard = ? AND bucket IN ? AND short_key = ? AND day >= ? AND day < ?`
)

// regsWriter is the writer of the row that holds a day's registers when
// the batch has no breakdown value of the link's day to put them with:
// registers merge whatever row holds them. Version 0, as rollupWriter.
var regsWriter = gocql.UUID{'l', 'i', 'n', 'k', 'g', 'a', 't', 'e', 'u', 'n', 'i', 'q', 'u', 'e', 0, 0}

// linkDayRow is one UPDATE of link_days.
type linkDayRow struct {
	day    time.Time
	writer gocql.UUID
	dims   dimCells // dimKey → the generation's cumulative count
	regs   regCells // reg<<8 | rho
	visits int64    // the generation's cumulative human visits of the link's day; 0: none
	ttl    int
	ts     int64 // µs
}

// dimCells are the entries of a link_days row's dims map, bound as a CQL
// map<text, bigint> with no Go map built (a flush of 100,000 links binds
// 100,000 of them).
type dimCells []dimRow

// MarshalCQL is the map's protocol form (v3 and later): the count, then
// each key ("dim:value") and value, each with its 4-byte length.
func (c dimCells) MarshalCQL(info gocql.TypeInfo) ([]byte, error) {
	n := 4
	for i := range c {
		n += 4 + 4 + len(c[i].value) + 4 + 8
	}
	b := make([]byte, 4, n)
	binary.BigEndian.PutUint32(b, uint32(len(c)))
	for i := range c {
		d := &c[i]
		at := len(b)
		b = append(b, 0, 0, 0, 0)
		b = strconv.AppendInt(b, int64(d.dim), 10)
		b = append(b, ':')
		b = append(b, d.value...)
		binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-4))
		b = binary.BigEndian.AppendUint32(b, 8)
		b = binary.BigEndian.AppendUint64(b, uint64(d.count))
	}
	return b, nil
}

// regCells are the elements of a link_days row's regs set, bound as a
// CQL set<int> (reg<<8 | rho each) with no []int built.
type regCells []uniqRow

// MarshalCQL is the set's protocol form (v3 and later): the count, then
// each element as a 4-byte length and a 4-byte int.
func (c regCells) MarshalCQL(info gocql.TypeInfo) ([]byte, error) {
	b := make([]byte, 4, 4+8*len(c))
	binary.BigEndian.PutUint32(b, uint32(len(c)))
	for i := range c {
		b = binary.BigEndian.AppendUint32(b, 4)
		b = binary.BigEndian.AppendUint32(b, uint32(int32(c[i].reg<<8|c[i].rho)))
	}
	return b, nil
}

// dimKey is the map key of a dimension's value: "3:mobile".
func dimKey(dim int, value string) string { return strconv.Itoa(dim) + ":" + value }

// parseDimKey reads a dimKey.
func parseDimKey(k string) (dim int, value string, ok bool) {
	i := strings.IndexByte(k, ':')
	if i < 0 {
		return 0, "", false
	}
	d, err := strconv.Atoi(k[:i])
	return d, k[i+1:], err == nil
}

// rows returns the UPDATEs that write p: one per day and writer
// generation of its breakdown values and visits, the day's registers with
// the first of them that has the same TTL (else in a row of regsWriter).
// A part holds a row or two (a link's day, a new generation): the rows
// are found by a look through them. Most parts are one row, which takes
// the part's breakdowns and registers as they are, not a copy.
func (p *linkPart) rows() []linkDayRow {
	rows := make([]linkDayRow, 0, 1)
	row := func(day time.Time, writer gocql.UUID, ttl int, ts int64) *linkDayRow {
		for i := range rows {
			if r := &rows[i]; r.writer == writer && r.ttl == ttl && r.day.Equal(day) {
				return r
			}
		}
		rows = append(rows, linkDayRow{day: day, writer: writer, ttl: ttl, ts: ts})
		return &rows[len(rows)-1]
	}
	if allSame(p.dims, func(a, b *dimRow) bool { return a.writer == b.writer && a.ttl == b.ttl && a.day.Equal(b.day) }) {
		d := &p.dims[0]
		row(d.day, d.writer, d.ttl, d.ts).dims = p.dims
	} else {
		for i := range p.dims {
			d := &p.dims[i]
			r := row(d.day, d.writer, d.ttl, d.ts)
			r.dims = append(r.dims, *d)
		}
	}
	for i := range p.visits {
		v := &p.visits[i]
		row(v.day, v.writer, v.ttl, v.ts).visits = v.count
	}
	// A day's registers go with the first row of the day with the same
	// TTL, else in one of their own.
	regsRow := func(u *uniqRow) *linkDayRow {
		for i := range rows {
			if r := &rows[i]; r.ttl == u.ttl && r.day.Equal(u.day) {
				return r
			}
		}
		return row(u.day, regsWriter, u.ttl, u.ts)
	}
	if allSame(p.regs, func(a, b *uniqRow) bool { return a.ttl == b.ttl && a.day.Equal(b.day) }) {
		regsRow(&p.regs[0]).regs = p.regs
	} else {
		for i := range p.regs {
			r := regsRow(&p.regs[i])
			r.regs = append(r.regs, p.regs[i])
		}
	}
	return rows
}

// allSame reports whether s has elements and all are the same as its
// first.
func allSame[T any](s []T, same func(a, b *T) bool) bool {
	for i := 1; i < len(s); i++ {
		if !same(&s[0], &s[i]) {
			return false
		}
	}
	return len(s) > 0
}

func (b *cqlBackend) writeLinks(ctx context.Context, parts []linkPart) (int, error) {
	entries := make([]gocql.BatchEntry, 0, len(parts))
	a := newBatchArgs(len(parts), 10)
	for _, p := range parts {
		shard := linkShard(p.key)
		for _, r := range p.rows() {
			e := gocql.BatchEntry{Stmt: b.updateLinkDay, Idempotent: true,
				Args: append(a.list(10), shared(a, 0, r.ttl), shared(a, 1, r.ts), r.dims, r.regs)}
			if r.visits != 0 {
				e.Stmt, e.Args = b.updateLinkVisits, append(e.Args, r.visits)
			}
			e.Args = append(e.Args, shared(a, 2, shard), shared(a, 3, partitionOf(r.day, linkDaysShardSpan)), p.key, shared(a, 4, r.day), shared(a, 5, r.writer))
			entries = append(entries, e)
		}
	}
	if len(entries) == 1 {
		return 1, b.query(ctx, entries[0].Stmt, entries[0].Args...).Exec()
	}
	// An unlogged batch: each partition key one mutation on each replica.
	batch := b.batch(ctx)
	batch.Entries = entries
	return len(entries), b.s.ExecuteBatch(batch)
}

// readLinkDims returns the breakdown values of dim in one partition of
// link_days whose day is in [from, to), and in link_days_by_shard's
// partitions inside it.
func (b *cqlBackend) readLinkDims(ctx context.Context, key string, bucket time.Time, dim int, from, to time.Time) ([]dimReadRow, error) {
	var out []dimReadRow
	read := func(q *gocql.Query) error {
		it := q.Iter()
		var (
			day    time.Time
			writer gocql.UUID
			dims   map[string]int64
		)
		for it.Scan(&day, &writer, &dims) {
			for k, n := range dims {
				if d, v, ok := parseDimKey(k); ok && d == dim {
					out = append(out, dimReadRow{day: day.UTC(), value: v, writer: writer, count: n})
				}
			}
			dims = nil
		}
		return it.Close()
	}
	if err := read(b.query(ctx, b.selectLinkDims, key, bucket, from, to)); err != nil {
		return nil, err
	}
	if err := read(b.query(ctx, b.selectShardDims, linkShard(key), shardBuckets(from, to, linkDaysShardSpan), key, from, to)); err != nil {
		return nil, err
	}
	return out, nil
}

// readLinkRegs returns the registers of one partition of link_days whose
// day is in [from, to), and of link_days_by_shard's partitions inside it,
// several elements of a register as several.
func (b *cqlBackend) readLinkRegs(ctx context.Context, key string, bucket, from, to time.Time) ([]uniqRow, error) {
	var out []uniqRow
	read := func(q *gocql.Query) error {
		it := q.Iter()
		var regs []int
		for it.Scan(&regs) {
			for _, e := range regs {
				out = append(out, uniqRow{reg: e >> 8, rho: e & 0xff})
			}
			regs = nil
		}
		return it.Close()
	}
	if err := read(b.query(ctx, b.selectLinkRegs, key, bucket, from, to)); err != nil {
		return nil, err
	}
	if err := read(b.query(ctx, b.selectShardRegs, linkShard(key), shardBuckets(from, to, linkDaysShardSpan), key, from, to)); err != nil {
		return nil, err
	}
	return out, nil
}

// readLinkVisits returns the visits of keys (at most maxTopKeys) in
// their partitions of bucket whose day is in [from, to), and in those of
// link_days_by_shard inside it: one row per link, day and writer
// generation that has them in each table.
func (b *cqlBackend) readLinkVisits(ctx context.Context, bucket time.Time, keys []string, from, to time.Time) ([]topRow, error) {
	var out []topRow
	read := func(q *gocql.Query) error {
		it := q.Iter()
		var r topRow
		var visits *int64
		for it.Scan(&r.key, &r.day, &r.writer, &visits) {
			if visits != nil {
				r.day, r.count = r.day.UTC(), *visits
				out = append(out, r)
			}
			visits = nil
		}
		return it.Close()
	}
	if err := read(b.query(ctx, b.selectLinkVisits, keys, bucket, from, to)); err != nil {
		return nil, err
	}
	// A statement per shard, with its links: a statement of several
	// shards would look every link up in every shard's partitions.
	byShard := map[int][]string{}
	for _, k := range keys {
		byShard[linkShard(k)] = append(byShard[linkShard(k)], k)
	}
	buckets := shardBuckets(from, to, linkDaysShardSpan)
	for shard, ks := range byShard {
		if err := read(b.query(ctx, b.selectShardVisits, shard, buckets, ks, from, to)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// linkDaysSchema returns the CQL that creates the link_days table.
func linkDaysSchema(keyspace string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.link_days (
    short_key text,
    bucket    timestamp,
    day       timestamp,
    writer    uuid,
    dims      map<text, bigint>,
    regs      set<int>,
    visits    bigint,
    PRIMARY KEY ((short_key, bucket), day, writer)
) WITH CLUSTERING ORDER BY (day ASC, writer ASC)
    AND compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': 'DAYS', 'compaction_window_size': 16}
    AND gc_grace_seconds = 10800
    AND comment = 'breakdowns and unique visitors of a link per UTC day and writer generation: dims maps dimension:value to the cumulative count of the generation (USING TIMESTAMP the batch time), regs holds the HyperLogLog registers as reg<<8|rho (a register is its largest rho), visits the cumulative human visits of the generation (USING TIMESTAMP the batch time), for top lists; partition = 366 days; USING TTL'`, keyspace)
}
