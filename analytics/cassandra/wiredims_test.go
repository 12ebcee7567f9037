package cassandra

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/cassandra/cqlmodel"
	"github.com/linkgate/linkgate/analytics/hll"
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
)

// TestWireDims sends a flush's breakdowns through gocql to the protocol
// model: the values of one link's day and writer generation go as one
// UPDATE of link_days (here the two links' in one unlogged batch),
// binding the cumulative counts in a map by "dim:value", the
// generation's id, the flush time as timestamp and a TTL of the retention
// past the day's end; the statements counted are those sent.
func TestWireDims(t *testing.T) {
	srv := cqlmodel.New(t)
	s := openWire(t, srv)
	at := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	day := rollup.Align(at, rollup.Day)
	b := analytics.Batch{Writer: "w", Seq: 7, At: at}
	for i := range 3 {
		b.Dims = append(b.Dims, analytics.DimCount{Key: "a", Day: day, Dim: visitor.Referrer, Value: fmt.Sprintf("r%d.example", i), N: 1, Cum: int64(10 + i), Gen: 2})
	}
	b.Dims = append(b.Dims, analytics.DimCount{Key: "b", Day: day, Dim: visitor.Country, Value: "DE", N: 4, Cum: 4})
	before := s.Statements()
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	after := s.Statements()
	if n, rows, sent := after.Dims-before.Dims, after.LinkRows-before.LinkRows, after.LinkSent-before.LinkSent; n != 4 || rows != 2 || sent != 1 {
		t.Errorf("counted %d counts in %d rows and %d statements, want 4 in 2 and 1", n, rows, sent)
	}
	srv.Mu.Lock()
	defer srv.Mu.Unlock()
	got := map[string]map[string]int64{}
	for _, bt := range srv.Batches {
		for _, st := range bt.Stmts {
			if strings.HasPrefix(st.Q, "UPDATE ks.link_days_by_shard") {
				key := string(st.Values[6])
				got[key] = check(t, st.Values, key, map[string]uint64{"a": 2, "b": 0}[key])
			}
		}
	}
	want := map[string]map[string]int64{"a": {"0:r0.example": 10, "0:r1.example": 11, "0:r2.example": 12}, "b": {"2:DE": 4}}
	if len(srv.Batches) != 1 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%d batches writing %v, want one writing %v", len(srv.Batches), got, want)
	}
}

// check checks the values bound to an UPDATE of link_days_by_shard (ttl,
// timestamp, dims, regs, shard, bucket, short_key, day, writer) and
// returns its dims.
func check(t *testing.T, v [][]byte, key string, gen uint64) map[string]int64 {
	t.Helper()
	at := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	day := rollup.Align(at, rollup.Day)
	if string(v[6]) != key || int64(binary.BigEndian.Uint64(v[7])) != day.UnixMilli() {
		t.Errorf("bound key %q day %d, want %s %d", v[6], binary.BigEndian.Uint64(v[7]), key, day.UnixMilli())
	}
	if shard, bucket := int32(binary.BigEndian.Uint32(v[4])), int64(binary.BigEndian.Uint64(v[5])); shard != int32(linkShard(key)) || bucket != partitionOf(day, linkDaysShardSpan).UnixMilli() {
		t.Errorf("%s: bound shard %d bucket %d, want %d %d", key, shard, bucket, linkShard(key), partitionOf(day, linkDaysShardSpan).UnixMilli())
	}
	if w := dimWriter("w", gen); string(v[8]) != string(w[:]) {
		t.Errorf("%s: bound writer %x, want generation %d's %v", key, v[8], gen, w)
	}
	wantTTL := int32(day.Add(rollup.Day+analytics.DefaultDimRetentionDays*rollup.Day).Sub(at) / time.Second)
	if ttl := int32(binary.BigEndian.Uint32(v[0])); ttl != wantTTL {
		t.Errorf("%s: TTL %d, want %d", key, ttl, wantTTL)
	}
	if ts := int64(binary.BigEndian.Uint64(v[1])); ts != at.UnixMicro() {
		t.Errorf("%s: timestamp %d, want the batch time %d", key, ts, at.UnixMicro())
	}
	dims := map[string]int64{}
	for e := elements(v[2], 2); len(e) > 0; e = e[2:] {
		dims[string(e[0])] = int64(binary.BigEndian.Uint64(e[1]))
	}
	return dims
}

// elements returns the elements of a collection cell: a list's or a
// set's, or a map's keys and values in turn.
func elements(b []byte, perEntry int) [][]byte {
	var out [][]byte
	count := int(binary.BigEndian.Uint32(b))
	b = b[4:]
	for range count * perEntry {
		n := int(binary.BigEndian.Uint32(b))
		out = append(out, b[4:4+n])
		b = b[4+n:]
	}
	return out
}

// TestWireTopAndUniques sends a flush's top-list counts and a sketch
// through gocql to the protocol model: every statement is accepted with
// its values bound as the table's types (each link's visits in the visits
// of its link_days row, the links of a read of them as a list bound to
// short_key IN ?), the sketch's registers as elements of the regs set of
// link_days, and reads of both, and of a breakdown, parse the model's
// rows: link_days, link_days_by_shard and the tables they replaced, a
// writer generation's largest count kept, a row without visits (null)
// counting nothing.
func TestWireTopAndUniques(t *testing.T) {
	srv := cqlmodel.New(t)
	s := openWire(t, srv)
	at := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	day := rollup.Align(at, rollup.Day)
	var sk hll.Sketch
	for i := range 5 {
		sk.Add(uint64(i+1) * 0x9E3779B97F4A7C15)
	}
	b := analytics.Batch{Writer: "w", Seq: 1, At: at,
		Dims: []analytics.DimCount{
			{Key: analytics.AllLinks, Day: day, Dim: analytics.DimLink, Value: "go", N: 3, Cum: 3},
			{Key: analytics.AllLinks, Day: day, Dim: analytics.DimLink, Value: "gh", N: 1, Cum: 1},
		},
		Uniques: []analytics.UniqueSketch{{Key: "go", Day: day, Sketch: sk.AppendBinary(nil)}},
	}
	if err := s.Write(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	srv.Mu.Lock()
	var visits, leaders, regs int
	for _, st := range srv.Applied { // the EXECUTEs and the statements of BATCHes
		switch {
		case strings.HasPrefix(st.Q, "INSERT INTO ks.top_days"):
			t.Errorf("a top_days row written: %s", st.Q)
		case strings.HasPrefix(st.Q, "INSERT INTO ks.top_leaders"):
			leaders++
		case strings.HasPrefix(st.Q, "UPDATE ks.link_days"):
			if strings.Contains(st.Q, "visits = ?") {
				if n := int64(binary.BigEndian.Uint64(st.Values[4])); n != 3 && n != 1 {
					t.Errorf("a link's visits bound as %d, want 3 or 1", n)
				}
				visits++
			}
			for _, e := range elements(st.Values[3], 1) {
				if reg, rho := binary.BigEndian.Uint32(e)>>8, binary.BigEndian.Uint32(e)&0xff; reg >= hll.M || rho == 0 || rho > 64 {
					t.Errorf("register element %x: register %d, rho %d", e, reg, rho)
				}
				regs++
			}
		}
	}
	srv.Mu.Unlock()
	if visits != 2 || leaders != 2 || regs != 5 {
		t.Errorf("%d links' visits, %d top-list slots and %d registers seen, want 2, 2 and 5", visits, leaders, regs)
	}
	var inList [][]byte // the short_key IN ? values of the reads of visits
	srv.Mu.Lock()
	srv.Rows = func(q string, values [][]byte) ([]cqlmodel.Col, [][][]byte) {
		cols := cqlmodel.SelectCols(q)
		switch {
		case strings.Contains(q, "FROM ks.top_leaders"):
			w := dimWriter("w", 0)
			return cols, [][][]byte{{w[:], cqlmodel.BE32(0), []byte("go"), cqlmodel.BE64(3)}}
		case strings.Contains(q, "FROM ks.top_days"):
			if int32(binary.BigEndian.Uint32(values[1])) == int32(shardOf("go")) {
				srv.Mu.Lock() // Rows is called without it
				inList = append(inList, values[2])
				srv.Mu.Unlock()
				w := dimWriter("w", 0)
				return cols, [][][]byte{{[]byte("go"), w[:], cqlmodel.BE64(3)}}
			}
		case strings.Contains(q, "SELECT short_key, day, writer, visits FROM ks.link_days_by_shard"):
			// w's older count (4) and v's newer one (3) in the sharded
			// table: the links' shard, then its buckets, then the keys.
			srv.Mu.Lock()
			inList = append(inList, values[2])
			srv.Mu.Unlock()
			if shard := int32(binary.BigEndian.Uint32(values[0])); shard != int32(linkShard("go")) {
				t.Errorf("link_days_by_shard read in shard %d, want go's %d", shard, linkShard("go"))
			}
			w, w2 := dimWriter("w", 0), dimWriter("v", 0)
			return cols, [][][]byte{
				{[]byte("go"), cqlmodel.TimeCell(day), w[:], cqlmodel.BE64(4)},
				{[]byte("go"), cqlmodel.TimeCell(day), w2[:], cqlmodel.BE64(3)},
			}
		case strings.Contains(q, "SELECT short_key, day, writer, visits FROM ks.link_days"):
			srv.Mu.Lock()
			inList = append(inList, values[0])
			srv.Mu.Unlock()
			w, w2 := dimWriter("w", 0), dimWriter("v", 0)
			return cols, [][][]byte{
				{[]byte("go"), cqlmodel.TimeCell(day), w[:], cqlmodel.BE64(5)},
				{[]byte("go"), cqlmodel.TimeCell(day), w2[:], cqlmodel.BE64(2)},
				{[]byte("go"), cqlmodel.TimeCell(day), regsWriter[:], nil},
			}
		case strings.Contains(q, "FROM ks.dims"):
			w1, w2 := dimWriter("a", 0), dimWriter("b", 0)
			return cols, [][][]byte{
				{cqlmodel.TimeCell(day), []byte("news.example"), w1[:], cqlmodel.BE64(4)},
				{cqlmodel.TimeCell(day), []byte("news.example"), w2[:], cqlmodel.BE64(2)},
			}
		case strings.Contains(q, "SELECT day, writer, dims FROM ks.link_days"):
			w1, w3 := dimWriter("a", 0), dimWriter("c", 0)
			return cols, [][][]byte{
				{cqlmodel.TimeCell(day), w1[:], mapCell("0:news.example", 5, "2:DE", 9)},
				{cqlmodel.TimeCell(day), w3[:], mapCell("0:news.example", 1)},
			}
		case strings.Contains(q, "SELECT regs FROM ks.link_days"):
			return cols, [][][]byte{{setCell(7<<8 | 5)}, {setCell(11<<8|1, 7<<8|1)}}
		case strings.Contains(q, "FROM ks.uniques"):
			return cols, [][][]byte{{cqlmodel.BE32(7), cqlmodel.BE32(2)}, {cqlmodel.BE32(9), cqlmodel.BE32(1)}}
		}
		return cols, nil
	}
	srv.Mu.Unlock()
	s.now = func() time.Time { return at }
	top, err := s.Top(context.Background(), day, day.Add(rollup.Day), 5)
	if err != nil || len(top) != 1 || top[0] != (analytics.TopLink{Key: "go", Visits: 8}) {
		t.Errorf("Top = %v, %v; want go 8: w's larger count (link_days' 5, not top_days' 3 nor link_days_by_shard's 4) and v's (link_days_by_shard's 3, not link_days' 2)", top, err)
	}
	// A list<text> of one element: its count, then the element's length
	// and bytes.
	srv.Mu.Lock()
	if want := []byte{0, 0, 0, 1, 0, 0, 0, 2, 'g', 'o'}; len(inList) != 3 || string(inList[0]) != string(want) || string(inList[1]) != string(want) || string(inList[2]) != string(want) {
		t.Errorf("link_days, link_days_by_shard and top_days read with short_key IN %q, want %q each", inList, want)
	}
	srv.Mu.Unlock()
	vals, err := s.Dims(context.Background(), "go", visitor.Referrer, day, day.Add(rollup.Day))
	if err != nil || len(vals) != 1 || vals[0] != (analytics.DimValue{Value: "news.example", Count: 8}) {
		t.Errorf("Dims = %v, %v; want the three writers' counts added, the larger of a's two: news.example 8", vals, err)
	}
	got, err := s.Uniques(context.Background(), "go", day, day.Add(rollup.Day))
	var want hll.Sketch
	for _, r := range [][2]int{{7, 5}, {9, 1}, {11, 1}} {
		want.Set(uint16(r[0]), uint8(r[1]))
	}
	if err != nil || got.Len() != 3 || got.Estimate() != want.Estimate() {
		t.Errorf("Uniques = %v registers, %v; want the model's 3, register 7 at its largest, 5", got.Len(), err)
	}
}

// mapCell is a map<text, bigint> cell of keys and values in turn.
func mapCell(kv ...any) []byte {
	b := cqlmodel.BE32(int32(len(kv) / 2))
	for i := 0; i < len(kv); i += 2 {
		k := kv[i].(string)
		b = append(b, cqlmodel.BE32(int32(len(k)))...)
		b = append(b, k...)
		b = append(b, cqlmodel.BE32(8)...)
		b = append(b, cqlmodel.BE64(int64(kv[i+1].(int)))...)
	}
	return b
}

// setCell is a set<int> cell.
func setCell(es ...int) []byte {
	b := cqlmodel.BE32(int32(len(es)))
	for _, e := range es {
		b = append(b, cqlmodel.BE32(4)...)
		b = append(b, cqlmodel.BE32(int32(e))...)
	}
	return b
}
