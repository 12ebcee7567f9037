package cassandra

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gocql/gocql"
	"github.com/google/go-cmp/cmp"

	"github.com/linkgate/linkgate/analytics"
	"github.com/linkgate/linkgate/rollup"
)

// openWire opens a Store through gocql on a wireServer and waits until it is
// connected.
func openWire(t *testing.T, srv *wireServer) *Store {
	t.Helper()
	cfg := analytics.Cassandra{Hosts: []string{srv.addr()}, Keyspace: "ks", Consistency: "LOCAL_QUORUM", ReplicationFactor: 1}
	s, err := Open(context.Background(), cfg, rollup.DefaultTiers(), nil)
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

// TestWireFaults drives the real gocql session: a WriteTimeout or
// Unavailable answer is retried by gocql's retry policy and then reported,
// nothing is committed, and the resend binds the cumulative count and the
// flush time; a request never answered ends with the context.
func TestWireFaults(t *testing.T) {
	srv := newWireServer(t)
	s := openWire(t, srv)
	at := time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC)
	total := func(at time.Time, h int64) analytics.Batch {
		return analytics.Batch{At: at, Totals: []analytics.Total{{Key: "k", Visits: analytics.Visits{Human: h}}}}
	}
	ctx := context.Background()
	const insert = "INSERT INTO ks.totals"

	for _, code := range []int{errWriteTimeout, errUnavailable} {
		before := srv.count(insert)
		srv.mu.Lock()
		srv.reply = func(q string) int { return code }
		srv.mu.Unlock()
		err := s.Write(ctx, total(at, 3))
		if err == nil {
			t.Fatalf("error %#x: Write succeeded", code)
		}
		var re gocql.RequestError
		if !errors.As(err, &re) || re.Code() != code {
			t.Errorf("error %#x: Write = %v, want that error from the server", code, err)
		}
		if n := srv.count(insert) - before; n != 4 {
			t.Errorf("error %#x: the statement was sent %d times, want 4 (gocql retries 3 times)", code, n)
		}
		at = at.Add(10 * time.Second)
	}

	// The flusher resends the 3 merged with 4 new visits: the row gets 7
	// (nothing was committed), stamped with the next sequence number (the
	// two failed Writes took 1 and 2).
	srv.mu.Lock()
	srv.reply = nil
	srv.bound = nil
	srv.mu.Unlock()
	if err := s.Write(ctx, total(at, 3+4)); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, total(at.Add(10*time.Second), 1)); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	bound := srv.bound
	srv.mu.Unlock()
	if len(bound) != 2 {
		t.Fatalf("%d INSERTs executed, want 2", len(bound))
	}
	for i, want := range []struct{ human, ts int64 }{{7, 3}, {8, 4}} {
		v := bound[i] // short_key, writer, human, bot, timestamp
		if string(v[0]) != "k" || int64(binary.BigEndian.Uint64(v[2])) != want.human || int64(binary.BigEndian.Uint64(v[4])) != want.ts {
			t.Errorf("INSERT %d bound key %q, human %d, timestamp %d; want k, %d, %d", i, v[0], binary.BigEndian.Uint64(v[2]), binary.BigEndian.Uint64(v[4]), want.human, want.ts)
		}
	}

	// A point write binds its TTL and partition.
	srv.mu.Lock()
	srv.bound = nil
	srv.mu.Unlock()
	start := rollup.Align(at, time.Hour)
	if err := s.Write(ctx, analytics.Batch{At: at.Add(20 * time.Second), Counts: []analytics.Count{{Key: "k", Step: time.Hour, Start: start, Visits: analytics.Visits{Bot: 2}}}}); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	v := srv.bound[0] // short_key, bucket, start, writer, human, bot, ttl, timestamp
	srv.mu.Unlock()
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
	srv.mu.Lock()
	srv.reply = func(string) int { return replyStall }
	srv.mu.Unlock()
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := s.Write(tctx, total(at.Add(time.Minute), 1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Write to a stalled server = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("Write to a stalled server took %v", d)
	}
}

// TestWireReads checks the scanning of rows through gocql: totals sum the
// base and every writer's row, points sum the writers of each bucket.
func TestWireReads(t *testing.T) {
	srv := newWireServer(t)
	now := time.Now().UTC()
	h0 := rollup.Align(now.Add(-3*time.Hour), time.Hour)
	w1, w2 := gocql.MustRandomUUID(), gocql.MustRandomUUID()
	srv.rows = func(q string, values [][]byte) ([]wireCol, [][][]byte) {
		if strings.Contains(q, "totals") {
			return []wireCol{{"writer", typeUUID}, {"human", typeBigint}, {"bot", typeBigint}, {"base_human", typeBigint}, {"base_bot", typeBigint}, {"base_version", typeBigint}},
				[][][]byte{{w1[:], be64(5), be64(1), be64(10), be64(2), be64(3)}, {w2[:], be64(7), be64(0), be64(10), be64(2), be64(3)}}
		}
		if string(values[0]) != "k" {
			return []wireCol{{"start", typeTimestamp}, {"human", typeBigint}, {"bot", typeBigint}}, nil
		}
		return []wireCol{{"start", typeTimestamp}, {"human", typeBigint}, {"bot", typeBigint}},
			[][][]byte{{timeCell(h0), be64(1), be64(0)}, {timeCell(h0), be64(2), be64(1)}, {timeCell(h0.Add(time.Hour)), be64(4), be64(0)}}
	}
	s := openWire(t, srv)
	v, err := s.Total(context.Background(), "k")
	if err != nil || v != (analytics.Visits{Human: 22, Bot: 3}) {
		t.Errorf("Total = %+v, %v; want {22 3}", v, err)
	}
	ps, err := s.Points(context.Background(), "k", time.Hour, h0, h0.Add(2*time.Hour))
	want := []analytics.Point{{Start: h0, Visits: analytics.Visits{Human: 3, Bot: 1}}, {Start: h0.Add(time.Hour), Visits: analytics.Visits{Human: 4}}}
	if err != nil || len(ps) != 2 || ps[0] != want[0] || ps[1] != want[1] {
		t.Errorf("Points = %v, %v; want %v", ps, err, want)
	}
	if ps, err := s.Points(context.Background(), "other", time.Hour, h0, h0.Add(2*time.Hour)); err != nil || len(ps) != 0 {
		t.Errorf("Points(other) = %v, %v; want none", ps, err)
	}
}

// TestWireFold closes a store: its totals row is folded
// by a conditional batch, read first at LOCAL_SERIAL, that moves it into the
// base, conditioned on the base version (null on the first fold) and on the
// row's value.
func TestWireFold(t *testing.T) {
	for _, version := range []int64{0, 3} {
		t.Run(fmt.Sprint("version", version), func(t *testing.T) {
			srv := newWireServer(t)
			var mu sync.Mutex
			var w gocql.UUID
			srv.rows = func(q string, values [][]byte) ([]wireCol, [][][]byte) {
				mu.Lock()
				defer mu.Unlock()
				ver := be64(version)
				if version == 0 {
					ver = nil
				}
				return []wireCol{{"writer", typeUUID}, {"human", typeBigint}, {"bot", typeBigint}, {"base_human", typeBigint}, {"base_bot", typeBigint}, {"base_version", typeBigint}},
					[][][]byte{{w[:], be64(5), be64(0), be64(10), be64(2), ver}}
			}
			s := openWire(t, srv)
			at := time.Now()
			if err := s.Write(context.Background(), analytics.Batch{At: at, Totals: []analytics.Total{{Key: "k", Visits: analytics.Visits{Human: 5}}}}); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			w = s.totals["k"].writer
			mu.Unlock()
			s.Close()

			srv.mu.Lock()
			defer srv.mu.Unlock()
			if len(srv.batches) != 1 {
				t.Fatalf("%d batches, want 1", len(srv.batches))
			}
			b := srv.batches[0]
			if b.serial != uint16(gocql.LocalSerial) || len(b.stmts) != 2 {
				t.Fatalf("batch of %d statements at serial consistency %#x, want 2 at LOCAL_SERIAL", len(b.stmts), b.serial)
			}
			up, del := b.stmts[0], b.stmts[1]
			wantUp := [][]byte{be64(15), be64(2), be64(version + 1), []byte("k")}
			if version != 0 {
				wantUp = append(wantUp, be64(version))
			}
			if !strings.HasPrefix(up.q, "UPDATE ks.totals") || !cmp.Equal(up.values, wantUp) {
				t.Errorf("first statement %q bound %v, want an UPDATE bound %v", up.q, up.values, wantUp)
			}
			if (version == 0) != strings.HasSuffix(up.q, "IF base_version = null") {
				t.Errorf("base version %d: condition of %q", version, up.q)
			}
			wantDel := [][]byte{[]byte("k"), w[:], be64(5), be64(0)}
			if !strings.HasPrefix(del.q, "DELETE FROM ks.totals") || !cmp.Equal(del.values, wantDel) {
				t.Errorf("second statement %q bound %v, want a DELETE bound %v", del.q, del.values, wantDel)
			}
			for q, cs := range srv.consistency {
				if strings.HasPrefix(q, "SELECT writer") && (len(cs) != 1 || cs[0] != uint16(gocql.LocalSerial)) {
					t.Errorf("totals read before the fold at consistencies %v, want one at LOCAL_SERIAL", cs)
				}
			}
		})
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
	s, err := Open(context.Background(), cfg, rollup.DefaultTiers(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Now()
	if err := s.Write(context.Background(), analytics.Batch{At: at, Totals: []analytics.Total{{Key: "k", Visits: analytics.Visits{Human: 1}}}}); !errors.Is(err, ErrNotConnected) {
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
	srv := newWireServerAt(t, addr)
	deadline := time.Now().Add(10 * time.Second)
	for s.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("not connected 10 s after the server came up: %v", s.Ready())
		}
		time.Sleep(20 * time.Millisecond) // the background connect's backoff, over loopback
	}
	if err := s.Write(context.Background(), analytics.Batch{At: at.Add(time.Second), Totals: []analytics.Total{{Key: "k", Visits: analytics.Visits{Human: 2}}}}); err != nil {
		t.Fatal(err)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if want := schema("ks", 3, rollup.DefaultTiers()); !cmp.Equal(srv.ddl, want) {
		t.Errorf("DDL received (-want +got):\n%s", cmp.Diff(want, srv.ddl))
	}
	if len(srv.bound) != 1 || int64(binary.BigEndian.Uint64(srv.bound[0][2])) != 2 {
		t.Errorf("INSERTs bound %v, want one of 2 visits (the write before connecting was refused, not kept)", srv.bound)
	}
}
