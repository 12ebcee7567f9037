package cassandra

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gocql/gocql"
)

// Link days
//
// A flush writes what it counted of a link's breakdowns and unique
// visitors on a UTC day as one row of link_days per writer generation,
//
//	PRIMARY KEY ((short_key, bucket), day, writer) → dims map<text, bigint>, regs set<int>
//
// with one UPDATE that adds the entries changed since the last flush:
// dims["3:mobile"] = the generation's cumulative count of device
// "mobile", regs += reg<<8 | rho for each sketch register set. Each map
// entry and set element is a cell of its own, written USING TIMESTAMP the
// batch's At and USING TTL the dimension retention after the day, so a
// map entry keeps the newest cumulative count of its generation whatever
// order copies land in (as the dims table's rows did), and a register's
// elements only ever add up: a reader takes each register's largest rho,
// which is a sketch's merge, across retries, replays and every gateway.
//
// It replaces the dims and uniques tables, which held one row per
// (dimension, value, writer) and per register: a flush of a link visited
// once with its eight dimensions and a new visitor was ten rows of two
// tables, each a statement of its own inside the batch that Cassandra
// parses, checks and applies; it is now one. Readers still read the old
// tables (nothing writes them any more; their rows expire by their TTL),
// keep the larger of the two counts a generation has of a value (a
// journal written before the change and replayed after it writes a
// generation's newer count to link_days), and merge the registers.

const (
	updateLinkDayCQL  = `UPDATE %s.link_days USING TTL ? AND TIMESTAMP ? SET dims = dims + ?, regs = regs + ? WHERE short_key = ? AND bucket = ? AND day = ? AND writer = ?`
	selectLinkDimsCQL = `SELECT day, writer, dims FROM %s.link_days WHERE short_key = ? AND bucket = ? AND day >= ? AND day < ?`
	selectLinkRegsCQL = `SELECT regs FROM %s.link_days WHERE short_key = ? AND bucket = ? AND day >= ? AND day < ?`
)

// regsWriter is the writer of the row that holds a day's registers when
// the batch has no breakdown value of the link's day to put them with:
// registers merge whatever row holds them. Version 0, as rollupWriter.
var regsWriter = gocql.UUID{'l', 'i', 'n', 'k', 'g', 'a', 't', 'e', 'u', 'n', 'i', 'q', 'u', 'e', 0, 0}

// linkDayRow is one UPDATE of link_days.
type linkDayRow struct {
	day    time.Time
	writer gocql.UUID
	dims   map[string]int64 // dimKey → the generation's cumulative count
	regs   []int            // reg<<8 | rho
	ttl    int
	ts     int64 // µs
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
// generation of its breakdown values, the day's registers with the
// first of them that has the same TTL (else in a row of regsWriter).
func (p *linkPart) rows() []linkDayRow {
	type id struct {
		day    int64
		writer gocql.UUID
		ttl    int
	}
	var rows []linkDayRow
	at := map[id]int{}
	row := func(k id, day time.Time, ts int64) *linkDayRow {
		i, ok := at[k]
		if !ok {
			i = len(rows)
			at[k] = i
			rows = append(rows, linkDayRow{day: day, writer: k.writer, dims: map[string]int64{}, regs: []int{}, ttl: k.ttl, ts: ts})
		}
		return &rows[i]
	}
	byDay := map[[2]int64]int{} // (day, ttl) → the row its registers go to
	for _, d := range p.dims {
		r := row(id{d.day.Unix(), d.writer, d.ttl}, d.day, d.ts)
		r.dims[dimKey(d.dim, d.value)] = d.count
		if _, ok := byDay[[2]int64{d.day.Unix(), int64(d.ttl)}]; !ok {
			byDay[[2]int64{d.day.Unix(), int64(d.ttl)}] = at[id{d.day.Unix(), d.writer, d.ttl}]
		}
	}
	for _, u := range p.regs {
		i, ok := byDay[[2]int64{u.day.Unix(), int64(u.ttl)}]
		if !ok {
			row(id{u.day.Unix(), regsWriter, u.ttl}, u.day, u.ts)
			i = at[id{u.day.Unix(), regsWriter, u.ttl}]
			byDay[[2]int64{u.day.Unix(), int64(u.ttl)}] = i
		}
		rows[i].regs = append(rows[i].regs, u.reg<<8|u.rho)
	}
	return rows
}

func (b *cqlBackend) writeLinks(ctx context.Context, parts []linkPart) error {
	var entries []gocql.BatchEntry
	for _, p := range parts {
		for _, r := range p.rows() {
			entries = append(entries, gocql.BatchEntry{Stmt: b.updateLinkDay, Idempotent: true,
				Args: []any{r.ttl, r.ts, r.dims, r.regs, p.key, p.bucket, r.day, r.writer}})
		}
	}
	if len(entries) == 1 {
		return b.query(ctx, entries[0].Stmt, entries[0].Args...).Exec()
	}
	// An unlogged batch: each partition key one mutation on each replica.
	batch := b.batch(ctx)
	batch.Entries = entries
	return b.s.ExecuteBatch(batch)
}

// readLinkDims returns the breakdown values of dim in one partition of
// link_days whose day is in [from, to).
func (b *cqlBackend) readLinkDims(ctx context.Context, key string, bucket time.Time, dim int, from, to time.Time) ([]dimReadRow, error) {
	it := b.query(ctx, b.selectLinkDims, key, bucket, from, to).Iter()
	var out []dimReadRow
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
	if err := it.Close(); err != nil {
		return nil, err
	}
	return out, nil
}

// readLinkRegs returns the registers of one partition of link_days whose
// day is in [from, to), several elements of a register as several.
func (b *cqlBackend) readLinkRegs(ctx context.Context, key string, bucket, from, to time.Time) ([]uniqRow, error) {
	it := b.query(ctx, b.selectLinkRegs, key, bucket, from, to).Iter()
	var out []uniqRow
	var regs []int
	for it.Scan(&regs) {
		for _, e := range regs {
			out = append(out, uniqRow{reg: e >> 8, rho: e & 0xff})
		}
		regs = nil
	}
	if err := it.Close(); err != nil {
		return nil, err
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
    PRIMARY KEY ((short_key, bucket), day, writer)
) WITH CLUSTERING ORDER BY (day ASC, writer ASC)
    AND compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': 'DAYS', 'compaction_window_size': 16}
    AND gc_grace_seconds = 10800
    AND comment = 'breakdowns and unique visitors of a link per UTC day and writer generation: dims maps dimension:value to the cumulative count of the generation (USING TIMESTAMP the batch time), regs holds the HyperLogLog registers as reg<<8|rho (a register is its largest rho); partition = 366 days; USING TTL'`, keyspace)
}
