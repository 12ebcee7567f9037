package cassandra

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/go-cmp/cmp"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/analytics/analyticstest"
	"github.com/linkgate/linkgate/analytics/cassandra/cqlmodel"
	"github.com/linkgate/linkgate/rollup"
)

// openWire opens a Store through gocql on a wireServer and waits until it is
// connected.
func openWire(t *testing.T, srv *cqlmodel.Server) *Store {
	t.Helper()
	cfg := analytics.Cassandra{Hosts: []string{srv.Addr()}, Keyspace: "ks", Consistency: "LOCAL_QUORUM", ReplicationFactor: 1}
	s, err := Open(context.Background(), nil, cfg, analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	deadline := time.Now().Add(10 * time.Second)
	for s.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not connected to the wire server: %v", s.Ready())
		}
		time.Sleep(20 * time.Millisecond) // the background connect, over loopback
	}
	return s
}

// TestWireFaults drives the real gocql session: a WriteTimeout, a
// WriteFailure or an Unavailable answer is retried by gocql's retry policy
// and then reported, the first two as timeouts (analytics.ErrTimeout),
// the resend of the same batch binds the same row (the writer id derived
// from the batch's identity), its delta and its flush time, and the next
// batch gets a row of its own; a request never answered ends with the
// context.
func TestWireFaults(t *testing.T) {
	srv := cqlmodel.New(t)
	s := openWire(t, srv)
	at := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	minute := rollup.Align(at, time.Minute)
	count := func(at time.Time, h int64) analytics.Batch {
		return analytics.Batch{At: at, Counts: []analytics.Count{{Key: "k", Step: time.Minute, Start: minute, Visits: analytics.Visits{Human: h}}}}
	}
	first := count(at, 3)
	first.Writer, first.Seq = "w", 1
	ctx := context.Background()
	const insert = "INSERT INTO ks.points_1m"

	// A timeout, or replicas failing the write by timing out, is
	// analytics.ErrTimeout (the flusher writes smaller parts); Unavailable
	// is not (the flusher backs off).
	for _, code := range []int{cqlmodel.ErrWriteTimeout, cqlmodel.ErrWriteFailure, cqlmodel.ErrUnavailable} {
		before := srv.Count(insert)
		srv.Mu.Lock()
		srv.Reply = func(q string) int {
			if strings.HasPrefix(q, "SELECT") { // the erasures a Write reads first
				return cqlmodel.ReplyOK
			}
			return code
		}
		srv.Mu.Unlock()
		err := s.Write(ctx, first)
		if err == nil {
			t.Fatalf("error %#x: Write succeeded", code)
		}
		var re gocql.RequestError
		if !errors.As(err, &re) || re.Code() != code {
			t.Errorf("error %#x: Write = %v, want that error from the server", code, err)
		}
		if timeout := errors.Is(err, analytics.ErrTimeout); timeout != (code != cqlmodel.ErrUnavailable) {
			t.Errorf("error %#x: Write = %v, a timeout: %v", code, err, timeout)
		}
		if n := srv.Count(insert) - before; n != 4 {
			t.Errorf("error %#x: the statement was sent %d times, want 4 (gocql retries 3 times)", code, n)
		}
	}

	// The flusher resends the same batch: its row gets 3, stamped with
	// its flush time; the next batch, 4 visits, a row of its own.
	srv.Mu.Lock()
	srv.Reply = nil
	srv.Bound = nil
	srv.Mu.Unlock()
	if err := s.Write(ctx, first); err != nil {
		t.Fatal(err)
	}
	second := count(at.Add(10*time.Second), 4)
	second.Writer, second.Seq = "w", 2
	if err := s.Write(ctx, second); err != nil {
		t.Fatal(err)
	}
	srv.Mu.Lock()
	bound := srv.Bound
	srv.Mu.Unlock()
	if len(bound) != 2 {
		t.Fatalf("%d INSERTs executed, want 2", len(bound))
	}
	for i, want := range []struct {
		human, ts int64
		writer    gocql.UUID
	}{{3, at.UnixMicro(), batchWriter("w", 1, 1)}, {4, at.Add(10 * time.Second).UnixMicro(), batchWriter("w", 2, 2)}} {
		v := bound[i] // shard, bucket, short_key, start, writer, human, bot, ttl, timestamp: the sharded table's
		if string(v[2]) != "k" || int64(binary.BigEndian.Uint64(v[5])) != want.human || int64(binary.BigEndian.Uint64(v[8])) != want.ts {
			t.Errorf("INSERT %d bound key %q, human %d, timestamp %d; want k, %d, %d", i, v[2], binary.BigEndian.Uint64(v[5]), binary.BigEndian.Uint64(v[8]), want.human, want.ts)
		}
		if shard, bucket := int32(binary.BigEndian.Uint32(v[0])), int64(binary.BigEndian.Uint64(v[1])); shard != int32(linkShard("k")) || bucket != rollup.Align(at, time.Hour).UnixMilli() {
			t.Errorf("INSERT %d bound shard %d bucket %d, want %d and the hour's %d", i, shard, bucket, linkShard("k"), rollup.Align(at, time.Hour).UnixMilli())
		}
		if string(v[4]) != string(want.writer[:]) {
			t.Errorf("INSERT %d bound writer %x, want %v", i, v[4], want.writer)
		}
	}

	// A point write binds its TTL and partition.
	srv.Mu.Lock()
	srv.Bound = nil
	srv.Mu.Unlock()
	start := rollup.Align(at, time.Hour)
	if err := s.Write(ctx, analytics.Batch{At: at.Add(20 * time.Second), Counts: []analytics.Count{{Key: "k", Step: time.Hour, Start: start, Visits: analytics.Visits{Bot: 2}}}}); err != nil {
		t.Fatal(err)
	}
	srv.Mu.Lock()
	v := srv.Bound[0] // short_key, bucket, start, writer, human, bot, ttl, timestamp
	srv.Mu.Unlock()
	if got := int64(binary.BigEndian.Uint64(v[7])); got != at.Add(20*time.Second).UnixMicro() {
		t.Errorf("point write timestamp %d, want the flush time %d", got, at.Add(20*time.Second).UnixMicro())
	}
	wantTTL := int32((start.Add(time.Hour + 40*rollup.Day).Sub(at.Add(20 * time.Second))) / time.Second)
	if got := int64(binary.BigEndian.Uint64(v[1])); got != partitionOf(start, 30*rollup.Day).UnixMilli() {
		t.Errorf("bucket bound %d, want %d", got, partitionOf(start, 30*rollup.Day).UnixMilli())
	}
	if got := int32(binary.BigEndian.Uint32(v[6])); got != wantTTL || int64(binary.BigEndian.Uint64(v[5])) != 2 {
		t.Errorf("bound TTL %d and bot %d, want %d and 2", got, binary.BigEndian.Uint64(v[5]), wantTTL)
	}

	// Never answered: the context ends the Write.
	srv.Mu.Lock()
	srv.Reply = func(string) int { return cqlmodel.ReplyStall }
	srv.Mu.Unlock()
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := s.Write(tctx, count(at.Add(time.Minute), 1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Write to a stalled server = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("Write to a stalled server took %v", d)
	}
}

// TestWireRollupStatements runs every rollup statement through gocql and
// checks what it binds: Active entries with their shard and TTL, marks
// written and deleted with the mark's own timestamp, rolled rows under the
// rollup writer with the bucket's end plus its visits as timestamp and no
// TTL in the all-time tier, progress stamped with itself.
func TestWireRollupStatements(t *testing.T) {
	srv := cqlmodel.New(t)
	s := openWire(t, srv)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	s.now = func() time.Time { return now }
	period := rollup.Align(now, time.Hour)
	mark := rollup.Mark{Key: "k", Step: 5 * time.Minute, Start: rollup.Align(now, 5*time.Minute).Add(-time.Hour), At: now, ID: 1<<63 + 5}
	if err := s.Write(ctx, analytics.Batch{At: now, Active: []rollup.Active{{Step: 5 * time.Minute, Period: period, Key: "k"}}, Marks: []rollup.Mark{mark}}); err != nil {
		t.Fatal(err)
	}
	total, _ := rollup.TotalTier(rollup.DefaultTiers())
	ts := rollup.Align(now, total.Step)
	h := rollup.Align(now, time.Hour).Add(-time.Hour)
	if err := s.Apply(ctx, rollup.Update{
		Rows: []rollup.Row{{Key: "k", Step: time.Hour, Start: h, Visits: analytics.Visits{Human: 5, Bot: 2}},
			{Key: "k", Step: total.Step, Start: ts, Visits: analytics.Visits{Human: 9}}},
		Done: []rollup.Mark{mark},
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Advance(ctx, 5*time.Minute, period); err != nil {
		t.Fatal(err)
	}
	// The two rolled rows go in one batch (pack.go).
	if n := srv.Count("INSERT INTO ks.rollup_") + srv.Count("UPDATE ks.rollup_active") + srv.Count("DELETE") + srv.NumBatches(); n != 5 {
		t.Errorf("the server saw %d writes, the store counted 5", n)
	}
	srv.Mu.Lock()
	defer srv.Mu.Unlock()
	byStmt := map[string][][]byte{}
	// srv.Bound holds the values of EXECUTEs in execution order, the
	// batches the rest: match them by shape.
	bound := slices.Clone(srv.Bound)
	for _, b := range srv.Batches {
		for _, st := range b.Stmts {
			bound = append(bound, st.Values)
		}
	}
	for _, v := range bound {
		switch len(v) {
		case 5: // rollup_active: ttl, step, period, shard, short_key IN — or the mark delete
			if len(v[0]) == 4 {
				byStmt["active"] = v
			} else {
				byStmt["unmark"] = v
			}
		case 7:
			byStmt["mark"] = v
		case 8:
			if int64(binary.BigEndian.Uint64(v[4])) == 9 {
				byStmt["total"] = v
			} else {
				byStmt["rolled"] = v
			}
		case 3:
			byStmt["progress"] = v
		}
	}
	i32 := func(b []byte) int64 { return int64(int32(binary.BigEndian.Uint32(b))) }
	i64 := func(b []byte) int64 { return int64(binary.BigEndian.Uint64(b)) }
	oneKey := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 1), 1) // a list of one element of 1 byte…
	if v := byStmt["active"]; v == nil || i32(v[0]) <= 0 || i32(v[1]) != 300 || i64(v[2]) != period.UnixMilli() || int(i32(v[3])) != shardOf("k") || string(v[4]) != string(oneKey)+"k" {
		t.Errorf("Active entry bound %v", v)
	}
	if v := byStmt["mark"]; v == nil || string(v[0]) != "k" || i64(v[3]) != int64(mark.ID) || i64(v[4]) != now.UnixMicro() || i64(v[6]) != now.UnixMicro() {
		t.Errorf("mark bound %v, want key, id %d, at and timestamp %d", v, int64(mark.ID), now.UnixMicro())
	}
	if v := byStmt["unmark"]; v == nil || i64(v[0]) != now.UnixMicro() || string(v[1]) != "k" || i64(v[4]) != int64(mark.ID) {
		t.Errorf("mark delete bound %v, want timestamp %d first", v, now.UnixMicro())
	}
	if v := byStmt["rolled"]; v == nil || !slices.Equal(v[3], rollupWriter[:]) || i64(v[7]) != h.Add(time.Hour).UnixMicro()+7 || i32(v[6]) <= 0 {
		t.Errorf("rolled row bound %v, want the rollup writer and timestamp %d", v, h.Add(time.Hour).UnixMicro()+7)
	}
	if v := byStmt["total"]; v == nil || i32(v[6]) != 0 || i64(v[1]) != 0 {
		t.Errorf("all-time row bound %v, want TTL 0 and the one partition (bucket 1970)", v)
	}
	if v := byStmt["progress"]; v == nil || i32(v[0]) != 300 || i64(v[1]) != period.UnixMilli() || i64(v[2]) != period.UnixMicro() {
		t.Errorf("progress bound %v, want step 300, done and timestamp %v", v, period)
	}
	if st := s.Statements(); st.Active != 1 || st.Marks != 1 || st.MarkDeletes != 1 || st.Rolled != 2 || st.PointsSent != 1 || st.Progress != 1 || st.Points != 0 {
		t.Errorf("statements counted %+v", st)
	}
}

// TestWireReads checks the scanning of rows through gocql: points sum the
// writers of each bucket; marks, Active keys and progress come back whole.
func TestWireReads(t *testing.T) {
	srv := cqlmodel.New(t)
	now := time.Now().UTC()
	h0 := rollup.Align(now.Add(-3*time.Hour), time.Hour)
	atUS := now.Truncate(time.Microsecond).UnixMicro()
	srv.Rows = func(q string, values [][]byte) ([]cqlmodel.Col, [][][]byte) {
		cols := cqlmodel.SelectCols(q)
		switch {
		case strings.Contains(q, "rollup_marks"):
			return cols, [][][]byte{{cqlmodel.BE32(3600), cqlmodel.TimeCell(h0), cqlmodel.BE64(-3), cqlmodel.BE64(atUS)}}
		case strings.Contains(q, "rollup_active"): // step, period, shard, after, limit
			rows := [][][]byte{{[]byte("x")}, {[]byte("y")}}
			return cols, rows[:min(len(rows), int(binary.BigEndian.Uint32(values[4])))]
		case strings.Contains(q, "rollup_progress"):
			return cols, [][][]byte{{cqlmodel.BE32(300), cqlmodel.TimeCell(h0)}, {cqlmodel.BE32(0), cqlmodel.TimeCell(h0.Add(time.Hour))}}
		case strings.Contains(q, "erasures"):
			return cols, nil
		}
		if string(values[0]) != "k" {
			return cols, nil
		}
		// A row whose bots are split by class, then rows without the
		// class columns (null: all-human, or written before classes).
		w1, w2 := batchWriter("a", 1, 1), batchWriter("b", 1, 1)
		return cols, [][][]byte{
			{cqlmodel.TimeCell(h0), w1[:], cqlmodel.BE64(2), cqlmodel.BE64(4), cqlmodel.BE64(1), nil, cqlmodel.BE64(2), nil},
			{cqlmodel.TimeCell(h0), w2[:], cqlmodel.BE64(1), cqlmodel.BE64(1), nil, nil, nil, nil},
			{cqlmodel.TimeCell(h0.Add(time.Hour)), w1[:], cqlmodel.BE64(4), cqlmodel.BE64(0), nil, nil, nil, nil},
		}
	}
	s := openWire(t, srv)
	ctx := context.Background()
	ps, err := s.Points(ctx, "k", time.Hour, h0, h0.Add(2*time.Hour))
	want := []analytics.Point{{Start: h0, Visits: analytics.Visits{Human: 3, Bot: 5, Other: [rollup.NumOther]int64{1, 0, 2, 0}}}, {Start: h0.Add(time.Hour), Visits: analytics.Visits{Human: 4}}}
	if err != nil || len(ps) != 2 || ps[0] != want[0] || ps[1] != want[1] {
		t.Errorf("Points = %v, %v; want %v", ps, err, want)
	}
	if ps, err := s.Points(ctx, "other", time.Hour, h0, h0.Add(2*time.Hour)); err != nil || len(ps) != 0 {
		t.Errorf("Points(other) = %v, %v; want none", ps, err)
	}
	ms, err := s.Marks(ctx, "k")
	wantM := rollup.Mark{Key: "k", Step: time.Hour, Start: h0, ID: uint64(1<<64 - 3), At: time.UnixMicro(atUS).UTC()}
	if err != nil || len(ms) != 1 || ms[0] != wantM {
		t.Errorf("Marks = %+v, %v; want [%+v]", ms, err, wantM)
	}
	keys, err := s.Active(ctx, 5*time.Minute, h0, "", 3)
	if err != nil || !slices.Equal(keys, []string{"x", "y", "x"}) {
		// The model answers every shard alike: the store reads shards in
		// turn until the page is full.
		t.Errorf("Active = %q, %v; want x, y from the first shard and x from the next", keys, err)
	}
	p, err := s.Progress(ctx)
	if err != nil || !p.Done(5*time.Minute).Equal(h0) || !p.Done(rollup.MarksQueue).Equal(h0.Add(time.Hour)) {
		t.Errorf("Progress = %v, %v", p, err)
	}
}

// TestWireLease takes and renews the lease through gocql: lightweight
// transactions, renewed only by the holder, another holder's lease reported
// as not held.
func TestWireLease(t *testing.T) {
	srv := cqlmodel.New(t)
	var mu sync.Mutex
	var holder []byte // nil: nobody
	srv.CAS = func(q string, values [][]byte) ([]cqlmodel.Col, [][][]byte) {
		mu.Lock()
		defer mu.Unlock()
		cols := []cqlmodel.Col{{Name: "[applied]", Type: cqlmodel.TypeBoolean}, {Name: "holder", Type: cqlmodel.TypeUUID}}
		switch {
		case strings.HasPrefix(q, "INSERT"): // holder, ttl
			if holder == nil {
				holder = values[0]
				return cols[:1], [][][]byte{{{1}}}
			}
			return cols, [][][]byte{{{0}, holder}}
		default: // UPDATE: ttl, holder, holder
			if slices.Equal(holder, values[2]) {
				return cols[:1], [][][]byte{{{1}}}
			}
			return cols, [][][]byte{{{0}, holder}}
		}
	}
	a, b := openWire(t, srv), openWire(t, srv)
	ctx := context.Background()
	for i, want := range []struct {
		s    *Store
		held bool
	}{{a, true}, {b, false}, {a, true}} {
		held, err := want.s.Lease(ctx, time.Minute)
		if err != nil || held != want.held {
			t.Errorf("lease %d = %v, %v; want %v", i, held, err, want.held)
		}
	}
	if n := srv.Count("UPDATE ks.rollup_lease"); n != 1 {
		t.Errorf("%d renewals, want 1 (by the holder only)", n)
	}
}

// TestWireConnectsLate opens a store while nothing listens on the cluster's
// address, as when the gateway starts before Cassandra: calls fail with
// ErrNotConnected, and once the server is up the store connects by itself,
// creates the schema and writes.
func TestWireConnectsLate(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := analytics.Cassandra{Hosts: []string{addr}, Keyspace: "ks", Consistency: "ONE", ReplicationFactor: 3}
	s, err := Open(context.Background(), nil, cfg, analyticstest.DefaultPlan, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Now()
	one := func(at time.Time, h int64) analytics.Batch {
		return analytics.Batch{At: at, Counts: []analytics.Count{{Key: "k", Step: time.Minute, Start: rollup.Align(at, time.Minute), Visits: analytics.Visits{Human: h}}}}
	}
	if err := s.Write(context.Background(), one(at, 1)); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("Write before the cluster is up = %v, want ErrNotConnected", err)
	}
	// Let a first attempt fail, so that the store connects by retrying.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := s.Ready(); !strings.Contains(err.Error(), "connecting") {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("no connection attempt failed in 10 s: %v", err)
		}
	}
	srv := cqlmodel.NewAt(t, addr)
	deadline := time.Now().Add(10 * time.Second)
	for s.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not connected 10 s after the server came up: %v", s.Ready())
		}
		time.Sleep(20 * time.Millisecond) // the background connect's backoff, over loopback
	}
	if err := s.Write(context.Background(), one(at.Add(time.Second), 2)); err != nil {
		t.Fatal(err)
	}
	srv.Mu.Lock()
	defer srv.Mu.Unlock()
	if want := schema("ks", 3, rollup.DefaultTiers()); !cmp.Equal(srv.DDL, want) {
		t.Errorf("DDL received (-want +got):\n%s", cmp.Diff(want, srv.DDL))
	}
	if len(srv.Bound) != 1 || int64(binary.BigEndian.Uint64(srv.Bound[0][5])) != 2 { // shard, bucket, short_key, start, writer, human
		t.Errorf("INSERTs bound %v, want one of 2 visits (the write before connecting was refused, not kept)", srv.Bound)
	}
}
