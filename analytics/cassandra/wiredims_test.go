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
	"github.com/linkgate/linkgate/rollup"
	"github.com/linkgate/linkgate/visitor"
)

// TestWireDims sends a flush's breakdowns through gocql to the protocol
// model: the values of one link go as one unlogged batch of the dims
// insert (a single value as one statement), binding the cumulative count,
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
	if n, sent := after.Dims-before.Dims, after.DimsSent-before.DimsSent; n != 4 || sent != 2 {
		t.Errorf("counted %d rows in %d statements, want 4 in 2", n, sent)
	}
	srv.Mu.Lock()
	defer srv.Mu.Unlock()
	var batched, single int
	for _, bt := range srv.Batches {
		for _, st := range bt.Stmts {
			if strings.HasPrefix(st.Q, "INSERT INTO ks.dims") {
				batched++
				check(t, st.Values, "a", 2)
			}
		}
	}
	for _, st := range srv.Applied {
		if strings.HasPrefix(st.Q, "INSERT INTO ks.dims") && string(st.Values[0]) == "b" {
			single++
			check(t, st.Values, "b", 0)
		}
	}
	if batched != 3 || single != 1 {
		t.Errorf("%d rows in batches and %d alone, want 3 and 1", batched, single)
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
