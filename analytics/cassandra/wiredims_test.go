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
// model: the values of one link go as one unlogged batch of the dims
// insert (here the two links' partitions in one batch), binding the cumulative count,
// the writer generation's id, the flush time as timestamp and a TTL of the
// retention past the day's end; the statements counted are those sent.
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
	if n, sent := after.Dims-before.Dims, after.LinkSent-before.LinkSent; n != 4 || sent != 1 {
		t.Errorf("counted %d rows in %d statements, want 4 in 1", n, sent)
	}
	srv.Mu.Lock()
	defer srv.Mu.Unlock()
	rows := map[string]int{}
	for _, bt := range srv.Batches {
		for _, st := range bt.Stmts {
			if strings.HasPrefix(st.Q, "INSERT INTO ks.dims") {
				key := string(st.Values[0])
				rows[key]++
				check(t, st.Values, key, map[string]uint64{"a": 2, "b": 0}[key])
			}
		}
	}
	if len(srv.Batches) != 1 || rows["a"] != 3 || rows["b"] != 1 {
		t.Errorf("%d batches holding %v rows, want one of both links' 3 and 1", len(srv.Batches), rows)
	}
}

// check checks the values bound to a dims insert: short_key, bucket, dim,
// day, value, writer, visits, ttl, timestamp.
func check(t *testing.T, v [][]byte, key string, gen uint64) {
	t.Helper()
	at := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	day := rollup.Align(at, rollup.Day)
	if string(v[0]) != key || int64(binary.BigEndian.Uint64(v[3])) != day.UnixMilli() {
		t.Errorf("bound key %q day %d, want %s %d", v[0], binary.BigEndian.Uint64(v[3]), key, day.UnixMilli())
	}
	if w := dimWriter("w", gen); string(v[5]) != string(w[:]) {
		t.Errorf("%s: bound writer %x, want generation %d's %v", key, v[5], gen, w)
	}
	visits := int64(binary.BigEndian.Uint64(v[6]))
	if key == "a" && (visits < 10 || visits > 12) || key == "b" && visits != 4 {
		t.Errorf("%s: bound visits %d, want the cumulative count", key, visits)
	}
	wantTTL := int32(day.Add(rollup.Day+analytics.DefaultDimRetentionDays*rollup.Day).Sub(at) / time.Second)
	if ttl := int32(binary.BigEndian.Uint32(v[7])); ttl != wantTTL {
		t.Errorf("%s: TTL %d, want %d", key, ttl, wantTTL)
	}
	if ts := int64(binary.BigEndian.Uint64(v[8])); ts != at.UnixMicro() {
		t.Errorf("%s: timestamp %d, want the batch time %d", key, ts, at.UnixMicro())
	}
}

// TestWireTopAndUniques sends a flush's top-list counts and a sketch
// through gocql to the protocol model: every statement is accepted with
// its values bound as the table's types (the links of a top_days read as
// a list bound to short_key IN ?), the sketch's registers each written
// USING TIMESTAMP its value, and reads of both, and of a breakdown, parse
// the model's rows.
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
	var tops, leaders, regs int
	for _, st := range append(srv.Applied, func() (all []cqlmodel.Stmt) {
		for _, bt := range srv.Batches {
			all = append(all, bt.Stmts...)
		}
		return all
	}()...) {
		switch {
		case strings.HasPrefix(st.Q, "INSERT INTO ks.top_days"):
			tops++
		case strings.HasPrefix(st.Q, "INSERT INTO ks.top_leaders"):
			leaders++
		case strings.HasPrefix(st.Q, "INSERT INTO ks.uniques"):
			regs++
			rho := int64(binary.BigEndian.Uint32(st.Values[4]))
			if ts := int64(binary.BigEndian.Uint64(st.Values[6])); ts != rho {
				t.Errorf("register written with timestamp %d, want its value %d", ts, rho)
			}
		}
	}
	srv.Mu.Unlock()
	if tops < 2 || leaders < 2 || regs < 5 {
		t.Errorf("%d top rows, %d top-list slots and %d registers seen, want 2, 2 and 5", tops, leaders, regs)
	}
	var inList [][]byte // the short_key IN ? values of the top_days read
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
				return cols, [][][]byte{{[]byte("go"), cqlmodel.BE64(3)}}
			}
		case strings.Contains(q, "FROM ks.dims"):
			w1, w2 := dimWriter("a", 0), dimWriter("b", 0)
			return cols, [][][]byte{
				{cqlmodel.TimeCell(day), []byte("news.example"), w1[:], cqlmodel.BE64(4)},
				{cqlmodel.TimeCell(day), []byte("news.example"), w2[:], cqlmodel.BE64(2)},
			}
		case strings.Contains(q, "FROM ks.uniques"):
			return cols, [][][]byte{{cqlmodel.BE32(7), cqlmodel.BE32(2)}, {cqlmodel.BE32(9), cqlmodel.BE32(1)}}
		}
		return cols, nil
	}
	srv.Mu.Unlock()
	s.now = func() time.Time { return at }
	top, err := s.Top(context.Background(), day, day.Add(rollup.Day), 5)
	if err != nil || len(top) != 1 || top[0] != (analytics.TopLink{Key: "go", Visits: 3}) {
		t.Errorf("Top = %v, %v; want go 3", top, err)
	}
	// A list<text> of one element: its count, then the element's length
	// and bytes.
	srv.Mu.Lock()
	if want := []byte{0, 0, 0, 1, 0, 0, 0, 2, 'g', 'o'}; len(inList) != 1 || string(inList[0]) != string(want) {
		t.Errorf("top_days read with short_key IN %q, want %q", inList, want)
	}
	srv.Mu.Unlock()
	vals, err := s.Dims(context.Background(), "go", visitor.Referrer, day, day.Add(rollup.Day))
	if err != nil || len(vals) != 1 || vals[0] != (analytics.DimValue{Value: "news.example", Count: 6}) {
		t.Errorf("Dims = %v, %v; want the two writers' rows added: news.example 6", vals, err)
	}
	got, err := s.Uniques(context.Background(), "go", day, day.Add(rollup.Day))
	if err != nil || got.Len() != 2 {
		t.Errorf("Uniques = %v registers, %v; want the model's 2", got.Len(), err)
	}
}
