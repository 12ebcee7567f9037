package cassandra

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/gocql/gocql"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
)

// Breakdowns
//
// A link's breakdowns are kept per UTC day, dimension and value, one count
// per writer generation (analytics.DimCount): the writer's cumulative
// count, written USING TIMESTAMP the batch's At, which grows with the
// batch's Seq, so that the newest cumulative count wins whatever order the
// copies land in: a retry, a resend, a journal replayed by another process
// after a crash, or an older batch arriving late write the same or an
// older value, never a sum. Readers add up the writers. A partition is a
// link's 366 days (as the day tier's), so a year's breakdown reads at most
// two; counts expire (USING TTL) the dimension retention after their day.
// They are entries of a map in link_days, with the link's sketch
// registers (linkdays.go): one row per link, day and generation, written
// by one UPDATE of the entries a flush changed, in one statement with
// those of other links (pack.go).

// dimSpan is the time a partition of link_days (and of the dims and
// uniques tables it replaced) covers.
const dimSpan = 366 * rollup.Day

type dimRow struct {
	key    string
	bucket time.Time
	dim    int
	day    time.Time
	value  string
	writer gocql.UUID
	count  int64
	ttl    int
	ts     int64 // µs
}

// dimReadRow is a row read back.
type dimReadRow struct {
	day    time.Time
	value  string
	writer gocql.UUID
	count  int64
}

// dimWriter returns the writer id of the rows of writer's generation gen:
// a version 5 UUID, the same in every process.
func dimWriter(writer string, gen uint64) gocql.UUID {
	h := sha1.New()
	h.Write(writerSpace[:])
	h.Write([]byte("dims"))
	h.Write(binary.AppendUvarint(nil, uint64(len(writer))))
	h.Write([]byte(writer))
	h.Write(binary.BigEndian.AppendUint64(nil, gen))
	var u gocql.UUID
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return u
}

// genWriters gives the dimWriter ids of a writer's generations, hashing
// once for a run of counts of one generation (a batch's counts are of one
// or two).
type genWriters struct {
	writer string
	gen    uint64
	id     gocql.UUID
	ok     bool
}

func (g *genWriters) of(gen uint64) gocql.UUID {
	if !g.ok || gen != g.gen {
		g.gen, g.id, g.ok = gen, dimWriter(g.writer, gen), true
	}
	return g.id
}

// SetDimRetention sets how long breakdowns are kept after their day
// (analytics.dimensions.retention_days): their rows' TTL.
func (s *Store) SetDimRetention(d time.Duration) {
	if d > 0 {
		s.dimRetention.Store(int64(d))
	}
}

// dimRows returns the rows of b's breakdowns, anon the writer of a batch
// without an identity (DimLink's are the links' visits: topRows).
func (s *Store) dimRows(b analytics.Batch, anon gocql.UUID) ([]dimRow, error) {
	keep := time.Duration(s.dimRetention.Load())
	ts := b.At.UnixMicro()
	rows := make([]dimRow, 0, len(b.Dims))
	gens := genWriters{writer: b.Writer}
	for _, d := range b.Dims {
		if d.Dim == analytics.DimLink {
			continue
		}
		switch {
		case !analytics.ValidDim(d.Dim):
			return nil, fmt.Errorf("cassandra: write: %q: no dimension %d", d.Key, d.Dim)
		case !rollup.Align(d.Day, rollup.Day).Equal(d.Day):
			return nil, fmt.Errorf("cassandra: write: %q: %v is not the start of a UTC day", d.Key, d.Day)
		case d.Value == "":
			return nil, fmt.Errorf("cassandra: write: %q: an empty value of %v", d.Key, d.Dim)
		}
		r := dimRow{key: d.Key, bucket: partitionOf(d.Day.UTC(), dimSpan), dim: int(d.Dim), day: d.Day.UTC(), value: d.Value,
			writer: anon, count: d.N, ts: ts, ttl: s.dayTTL(d.Key, ttlOf(d.Day.Add(rollup.Day+keep).Sub(b.At)), d.Day, b.At)}
		if b.Writer != "" {
			r.writer, r.count = gens.of(d.Gen), d.Cum
		}
		if r.ttl > 0 && r.count != 0 {
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// linkPart is what a batch writes of a link to one partition of
// link_days_by_shard (a shard and 61 days, inside the link's partition of
// link_days of 366 days, bucket): its breakdowns, registers and visits of
// a day.
type linkPart struct {
	key    string
	bucket time.Time
	dims   []dimRow
	regs   []uniqRow
	visits []topRow
}

// day is a day of p's rows: all are in the same partition of
// link_days_by_shard.
func (p *linkPart) day() time.Time {
	switch {
	case len(p.dims) > 0:
		return p.dims[0].day
	case len(p.regs) > 0:
		return p.regs[0].day
	case len(p.visits) > 0:
		return p.visits[0].day
	}
	return p.bucket
}

// size is p's data as Cassandra measures a batch (pack.go): its
// link_days rows (about one per day; a new writer generation adds one)
// and a cell per value and register.
func (p *linkPart) size() int {
	days := map[int64]bool{}
	n := len(p.regs) * uniqBytes
	for _, d := range p.dims {
		n += dimBytes + len(d.value)
		days[d.day.Unix()] = true
	}
	for _, u := range p.regs {
		days[u.day.Unix()] = true
	}
	for _, v := range p.visits {
		n += visitsBytes
		days[v.day.Unix()] = true
	}
	return n + len(days)*linkDayBytes
}

// prepareLinks returns the statements that write b's breakdowns,
// sketches and links' visits, each link partition's together, several
// links in a statement up to packBytes (a larger partition alone, in
// statements of up to maxPartitionRows rows), and its top-list slots
// (prepareLeaders).
func (s *Store) prepareLinks(ctx context.Context, be backend, b analytics.Batch) ([]op, error) {
	anon := gocql.MustRandomUUID() // the writer of a batch without an identity
	dims, err := s.dimRows(b, anon)
	if err != nil {
		return nil, err
	}
	visits := s.topRows(b, anon)
	regs, err := s.uniqRows(b)
	if err != nil {
		return nil, err
	}
	// A part is a link's rows of one partition of link_days_by_shard
	// (inside one of link_days, its bucket).
	type pk struct {
		key    string
		bucket int64
	}
	parts := make(map[pk]*linkPart, len(visits))
	order := make([]*linkPart, 0, len(visits))
	part := func(key string, day time.Time) *linkPart {
		k := pk{key, partitionOf(day, linkDaysShardSpan).Unix()}
		p := parts[k]
		if p == nil {
			p = &linkPart{key: key, bucket: partitionOf(day, dimSpan)}
			parts[k] = p
			order = append(order, p)
		}
		return p
	}
	// A link's breakdown rows come together (b.Dims is sorted by link):
	// a part takes a run of them as it is, rather than a copy.
	for i := 0; i < len(dims); {
		p := part(dims[i].key, dims[i].day)
		at := partitionOf(dims[i].day, linkDaysShardSpan)
		j := i + 1
		for j < len(dims) && dims[j].key == dims[i].key && partitionOf(dims[j].day, linkDaysShardSpan).Equal(at) {
			j++
		}
		if p.dims == nil {
			p.dims = dims[i:j:j]
		} else {
			p.dims = append(p.dims, dims[i:j]...)
		}
		i = j
	}
	for _, r := range regs {
		p := part(r.key, r.day)
		p.regs = append(p.regs, r)
	}
	for _, r := range visits {
		p := part(r.key, r.day)
		p.visits = append(p.visits, r)
	}
	pieces := make([]linkPart, 0, len(order))
	for _, p := range order {
		if p.size() <= packBytes {
			pieces = append(pieces, *p)
			continue
		}
		// A large part in pieces: its breakdown rows, then its registers,
		// maxPartitionRows a piece, its visits with the first.
		n := len(p.dims) + len(p.regs)
		for from := 0; from < n; from += maxPartitionRows {
			to := min(from+maxPartitionRows, n)
			c := linkPart{key: p.key, bucket: p.bucket}
			if from == 0 {
				c.visits = p.visits
			}
			c.dims = p.dims[min(from, len(p.dims)):min(to, len(p.dims))]
			c.regs = p.regs[max(from-len(p.dims), 0):max(to-len(p.dims), 0)]
			pieces = append(pieces, c)
		}
	}
	type shardPart struct{ shard, bucket int64 }
	var ops []op
	for _, g := range byPartition(pieces, func(p linkPart) shardPart {
		return shardPart{int64(linkShard(p.key)), partitionOf(p.day(), linkDaysShardSpan).Unix()}
	}, func(p linkPart) int { return p.size() }) {
		ops = append(ops, func(ctx context.Context, be backend) error {
			_, err := be.writeLinks(ctx, g)
			return err
		})
	}
	leaders, err := s.prepareLeaders(ctx, be, visits, b.Writer == "")
	if err != nil {
		return nil, err
	}
	return append(ops, leaders...), nil
}

// Dims implements analytics.DimSource: one read per partition of the
// range (at most two for a year), the writers' rows added up.
func (s *Store) Dims(ctx context.Context, key string, dim visitor.Dim, from, to time.Time) ([]analytics.DimValue, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cassandra: dims: %w", err)
	}
	be, err := s.backend()
	if err != nil {
		return nil, err
	}
	lo, hi := rollup.AlignUp(from.UTC(), rollup.Day), rollup.AlignUp(to.UTC(), rollup.Day)
	keep := time.Duration(s.dimRetention.Load())
	if now := s.now().UTC(); lo.Before(now.Add(-keep - 2*rollup.Day)) {
		lo = rollup.Align(now.Add(-keep-2*rollup.Day), rollup.Day) // nothing older is kept
	}
	if !lo.Before(hi) {
		return nil, nil
	}
	if key, err = s.readKey(ctx, be, key); err != nil {
		return nil, fmt.Errorf("cassandra: dims: %w", err)
	}
	// A generation's count of a value may be read twice (the dims table
	// and link_days): its cumulative counts only grow, so the larger is
	// the newer.
	type gen struct {
		day    int64
		value  string
		writer gocql.UUID
	}
	counts := map[gen]int64{}
	for p := partitionOf(lo, dimSpan); p.Before(hi); p = p.Add(dimSpan) {
		rows, err := be.readDims(ctx, key, p, int(dim), latest(lo, p), earliest(hi, p.Add(dimSpan)))
		if err != nil {
			return nil, fmt.Errorf("cassandra: dims: %w", err)
		}
		for _, r := range rows {
			g := gen{r.day.Unix(), r.value, r.writer}
			counts[g] = max(counts[g], r.count)
		}
	}
	sums := map[string]int64{}
	for g, n := range counts {
		sums[g.value] += n
	}
	out := make([]analytics.DimValue, 0, len(sums))
	for v, n := range sums {
		if n != 0 {
			out = append(out, analytics.DimValue{Value: v, Count: n})
		}
	}
	return out, nil
}

// selectDimsCQL reads the dims table, which link_days replaced: nothing
// writes it any more.
const selectDimsCQL = `SELECT day, value, writer, visits FROM %s.dims WHERE short_key = ? AND bucket = ? AND dim = ? AND day >= ? AND day < ?`

// readDims reads link_days and the dims table it replaced.
func (b *cqlBackend) readDims(ctx context.Context, key string, bucket time.Time, dim int, from, to time.Time) ([]dimReadRow, error) {
	out, err := b.readLinkDims(ctx, key, bucket, dim, from, to)
	if err != nil {
		return nil, err
	}
	it := b.query(ctx, b.selectDims, key, bucket, dim, from, to).Iter()
	var r dimReadRow
	for it.Scan(&r.day, &r.value, &r.writer, &r.count) {
		r.day = r.day.UTC()
		out = append(out, r)
	}
	if err := it.Close(); err != nil {
		return nil, err
	}
	return out, nil
}

func (b counted) writeLinks(ctx context.Context, parts []linkPart) (int, error) {
	for _, p := range parts {
		b.c.dims.Add(int64(len(p.dims)))
		b.c.uniques.Add(int64(len(p.regs)))
		b.c.top.Add(int64(len(p.visits)))
	}
	b.c.linkSent.Add(1)
	rows, err := b.be.writeLinks(ctx, parts)
	b.c.linkRows.Add(int64(rows))
	return rows, err
}

func (b counted) readDims(ctx context.Context, key string, bucket time.Time, dim int, from, to time.Time) ([]dimReadRow, error) {
	b.c.reads.Add(1)
	return b.be.readDims(ctx, key, bucket, dim, from, to)
}

// dimsSchema returns the CQL that creates the dims table, which link_days
// replaced: readers still read what it holds.
func dimsSchema(keyspace string) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.dims (
    short_key text,
    bucket    timestamp,
    dim       int,
    day       timestamp,
    value     text,
    writer    uuid,
    visits    bigint,
    PRIMARY KEY ((short_key, bucket), dim, day, value, writer)
) WITH CLUSTERING ORDER BY (dim ASC, day ASC, value ASC, writer ASC)
    AND compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': 'DAYS', 'compaction_window_size': 16}
    AND gc_grace_seconds = 10800
    AND comment = 'visits per link, UTC day, dimension (0 referrer, 1 source, 2 country, 3 device, 4 browser, 5 os, 7 medium, 8 campaign, 9 term, 10 content, 11 class, 12 reason, 13 destination) and value; one row per writer generation holding its cumulative count, written USING TIMESTAMP the batch time; partition = 366 days; USING TTL; replaced by link_days, read until its rows expire'`, keyspace)
}
