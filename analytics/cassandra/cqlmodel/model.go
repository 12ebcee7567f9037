// Package cqlmodel is a model of a Cassandra node that speaks just enough of
// the CQL native protocol v4 for gocql to connect and for the analytics
// store to prepare and execute its statements, so that tests can inject the
// faults a real cluster produces only under duress: WriteTimeout and
// Unavailable errors, and requests that are never answered (a coordinator
// waiting for replicas that are gone). It is not a database: DDL and
// writes are acknowledged without effect and kept for the test to read,
// and a SELECT answers the rows the test gives it. Tests only.
package cqlmodel

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server speaks just enough of the CQL native protocol v4 for gocql to
// connect and for the Store to prepare and execute its statements, so that
// the tests can inject the faults a real cluster produces only under
// duress: WriteTimeout and Unavailable errors, and requests that are never
// answered. It is not a database: DDL and writes are acknowledged without
// effect, and a SELECT answers the rows the test gives it.
type Server struct {
	t  testing.TB
	ln net.Listener

	// Mu guards the fields below, which tests read and set.
	Mu          sync.Mutex
	prepared    map[string]string // id → statement
	Executes    map[string]int    // statement → EXECUTEs seen
	Bound       [][][]byte        // values of every EXECUTE of an INSERT
	Batches     []Batch
	Applied     []Stmt              // writes answered OK (EXECUTEs and the statements of BATCHes), in order
	DDL         []string            // CREATE statements received, in order
	Consistency map[string][]uint16 // statement → consistency of each EXECUTE
	// Reply picks the answer to an EXECUTE of stmt (a BATCH's is
	// "BATCH"): ReplyOK, or an error code, or ReplyStall to never answer.
	// Nil: always OK.
	Reply func(stmt string) int
	// Rows answers a SELECT; nil: no rows.
	Rows func(stmt string, values [][]byte) (cols []Col, rows [][][]byte)
	// CAS answers a conditional EXECUTE; nil: [applied] true.
	CAS func(stmt string, values [][]byte) (cols []Col, rows [][][]byte)
}

// Stmt is one statement of a BATCH: its text and bound values.
type Stmt struct {
	Q      string
	Values [][]byte
}

// Batch is a BATCH received.
type Batch struct {
	Stmts               []Stmt
	Consistency, Serial uint16
}

// Col is a result column: its name and CQL type (TypeBigint, ...).
type Col struct {
	Name string
	Type uint16
}

// Answers of Reply (ReplyOK, ReplyStall, or an error code), and the CQL
// types of result columns.
const (
	ReplyOK    = 0
	ReplyStall = -1

	ErrUnavailable  = 0x1000
	ErrWriteTimeout = 0x1100

	TypeBigint    = 0x0002
	TypeBoolean   = 0x0004
	TypeInt       = 0x0009
	TypeTimestamp = 0x000B
	TypeUUID      = 0x000C
	TypeInet      = 0x0010
	TypeVarchar   = 0x000D
)

// New starts a Server on a free loopback port; it stops at the end of t.
func New(t testing.TB) *Server { return NewAt(t, "127.0.0.1:0") }

// NewAt starts a Server on addr; it stops at the end of t.
func NewAt(t testing.TB, addr string) *Server {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, ln: ln, prepared: make(map[string]string), Executes: make(map[string]int), Consistency: make(map[string][]uint16)}
	var wg sync.WaitGroup
	var conns []net.Conn
	var cmu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			cmu.Lock()
			conns = append(conns, c)
			cmu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); s.serve(c) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		cmu.Lock()
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
		wg.Wait()
	})
	return s
}

// Addr is the Server's host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Port is the Server's port.
func (s *Server) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// NumBatches returns how many BATCH messages the server received.
func (s *Server) NumBatches() int {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return len(s.Batches)
}

// Count returns the EXECUTEs of the statements that start with prefix.
func (s *Server) Count(prefix string) int {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	n := 0
	for k, v := range s.Executes {
		if strings.HasPrefix(k, prefix) {
			n += v
		}
	}
	return n
}

// frame is a request or response: header fields and body.
type frame struct {
	stream int16
	op     byte
	body   []byte
}

func (s *Server) serve(c net.Conn) {
	r := bufio.NewReader(c)
	var wmu sync.Mutex
	write := func(stream int16, op byte, body []byte) {
		h := make([]byte, 9)
		h[0], h[1] = 0x84, 0
		binary.BigEndian.PutUint16(h[2:], uint16(stream))
		h[4] = op
		binary.BigEndian.PutUint32(h[5:], uint32(len(body)))
		wmu.Lock()
		defer wmu.Unlock()
		c.Write(append(h, body...))
	}
	for {
		h := make([]byte, 9)
		if _, err := io.ReadFull(r, h); err != nil {
			return
		}
		if h[0]&0x7f != 4 {
			// Any other version: answer a protocol error in that version,
			// as Cassandra does, so that gocql falls back to v4.
			body := make([]byte, int(binary.BigEndian.Uint32(h[5:])))
			io.ReadFull(r, body)
			e := wbuf{}
			e.int(0x000A)
			e.string("unsupported protocol version")
			hh := []byte{h[0]&0x7f | 0x80, 0, h[2], h[3], 0}
			hh = binary.BigEndian.AppendUint32(hh, uint32(len(e)))
			c.Write(append(hh, e...))
			continue
		}
		f := frame{stream: int16(binary.BigEndian.Uint16(h[2:])), op: h[4]}
		f.body = make([]byte, int(binary.BigEndian.Uint32(h[5:])))
		if _, err := io.ReadFull(r, f.body); err != nil {
			return
		}
		go s.handle(f, write)
	}
}

func (s *Server) handle(f frame, write func(int16, byte, []byte)) {
	const (
		opError, opStartup, opReady, opOptions, opSupported = 0x00, 0x01, 0x02, 0x05, 0x06
		opQuery, opResult, opPrepare, opExecute, opRegister = 0x07, 0x08, 0x09, 0x0A, 0x0B
		opBatch                                             = 0x0D
	)
	rd := &rbuf{b: f.body}
	switch f.op {
	case opOptions:
		var b wbuf
		b.short(2)
		b.string("CQL_VERSION")
		b.short(1)
		b.string("3.4.4")
		b.string("COMPRESSION")
		b.short(0)
		write(f.stream, opSupported, b)
	case opStartup, opRegister:
		write(f.stream, opReady, nil)
	case opQuery:
		q := rd.longString()
		switch {
		case strings.HasPrefix(q, "SELECT * FROM system.local"):
			write(f.stream, opResult, rowsResult("system", "local",
				[]Col{{"key", TypeVarchar}, {"data_center", TypeVarchar}, {"rack", TypeVarchar}, {"release_version", TypeVarchar},
					{"partitioner", TypeVarchar}, {"rpc_address", TypeInet}, {"native_port", TypeInt}},
				[][][]byte{{[]byte("local"), []byte("dc1"), []byte("rack1"), []byte("3.11.4"),
					[]byte("org.apache.cassandra.dht.Murmur3Partitioner"), []byte{127, 0, 0, 1}, binary.BigEndian.AppendUint32(nil, uint32(s.Port()))}}))
		case strings.HasPrefix(q, "SELECT * FROM system.peers"):
			write(f.stream, opResult, rowsResult("system", "peers", []Col{{"peer", TypeVarchar}, {"data_center", TypeVarchar}}, nil))
		case strings.HasPrefix(q, "CREATE"):
			s.Mu.Lock()
			s.DDL = append(s.DDL, q)
			s.Mu.Unlock()
			var b wbuf
			b.int(1) // Void: the DDL is acknowledged (no schema change event, no agreement wait)
			write(f.stream, opResult, b)
		default:
			var b wbuf
			b.int(0x2200)
			b.string("Server: unexpected query " + q)
			write(f.stream, opError, b)
		}
	case opPrepare:
		q := rd.longString()
		// The id under the lock: statements prepared at once (a Write's
		// first statements of each kind) must not share one.
		s.Mu.Lock()
		id := []byte{byte(len(s.prepared) + 1)}
		s.prepared[string(id)] = q
		s.Mu.Unlock()
		write(f.stream, opResult, preparedResult(id, q))
	case opExecute:
		id := rd.shortBytes()
		s.Mu.Lock()
		q := s.prepared[string(id)]
		s.Executes[q]++
		reply := s.Reply
		s.Mu.Unlock()
		cons := rd.short()
		s.Mu.Lock()
		s.Consistency[q] = append(s.Consistency[q], cons)
		s.Mu.Unlock()
		flags := rd.byte()
		var values [][]byte
		if flags&0x01 != 0 {
			n := rd.short()
			for range n {
				values = append(values, rd.bytes())
			}
		}
		code := ReplyOK
		if reply != nil {
			code = reply(q)
		}
		var b wbuf
		switch code {
		case ReplyStall:
			return
		case ErrUnavailable:
			b.int(ErrUnavailable)
			b.string("Cannot achieve consistency level LOCAL_QUORUM")
			b.short(6)
			b.int(2)
			b.int(1)
			write(f.stream, opError, b)
		case ErrWriteTimeout:
			b.int(ErrWriteTimeout)
			b.string("Operation timed out - received only 0 responses.")
			b.short(6)
			b.int(0)
			b.int(1)
			b.string("SIMPLE")
			write(f.stream, opError, b)
		default:
			if strings.HasPrefix(q, "SELECT") {
				cols, rows := SelectCols(q), [][][]byte(nil) // by default: no rows
				if s.Rows != nil {
					cols, rows = s.Rows(q, values)
				}
				write(f.stream, opResult, rowsResult("ks", "t", cols, rows))
				return
			}
			if strings.Contains(q, " IF ") {
				// A lightweight transaction: applied, unless cas says not.
				cols, rows := []Col{{"[applied]", TypeBoolean}}, [][][]byte{{{1}}}
				if s.CAS != nil {
					cols, rows = s.CAS(q, values)
				}
				s.Mu.Lock()
				s.Bound = append(s.Bound, values)
				s.Mu.Unlock()
				write(f.stream, opResult, rowsResult("ks", "t", cols, rows))
				return
			}
			s.Mu.Lock()
			s.Bound = append(s.Bound, values)
			s.Applied = append(s.Applied, Stmt{q, values})
			s.Mu.Unlock()
			b.int(1) // Void
			write(f.stream, opResult, b)
		}
	case opBatch:
		rd.byte() // type
		var stmts []Stmt
		for range rd.short() {
			if rd.byte() != 1 {
				s.t.Error("Server: a batch statement that is not prepared")
				return
			}
			id := rd.shortBytes()
			st := Stmt{}
			s.Mu.Lock()
			st.Q = s.prepared[string(id)]
			s.Mu.Unlock()
			for range rd.short() {
				st.Values = append(st.Values, rd.bytes())
			}
			stmts = append(stmts, st)
		}
		cons := rd.short()
		flags := rd.byte()
		var serial uint16
		if flags&0x10 != 0 {
			serial = rd.short()
		}
		s.Mu.Lock()
		s.Batches = append(s.Batches, Batch{stmts, cons, serial})
		reply := s.Reply
		s.Mu.Unlock()
		code := ReplyOK
		if reply != nil {
			code = reply("BATCH")
		}
		switch code {
		case ReplyStall:
			return
		case ErrWriteTimeout:
			var b wbuf
			b.int(ErrWriteTimeout)
			b.string("Operation timed out")
			b.short(uint16(serial))
			b.int(0)
			b.int(1)
			b.string("CAS")
			write(f.stream, opError, b)
			return
		}
		s.Mu.Lock()
		s.Applied = append(s.Applied, stmts...)
		s.Mu.Unlock()
		write(f.stream, opResult, rowsResult("ks", "totals", []Col{{"[applied]", TypeBoolean}}, [][][]byte{{{1}}}))
	default:
		var b wbuf
		b.int(0x000A)
		b.string("Server: unsupported opcode")
		write(f.stream, opError, b)
	}
}

// bindTypes returns the types of the bind markers of the Store's
// statements, by the column each marker is compared with or assigned to,
// or by the clause it fills (TTL, TIMESTAMP, LIMIT).
func bindTypes(q string) []Col {
	types := map[string]uint16{
		"short_key": TypeVarchar, "bucket": TypeTimestamp, "start": TypeTimestamp, "writer": TypeUUID,
		"human": TypeBigint, "bot": TypeBigint, "step": TypeInt, "period": TypeTimestamp, "shard": TypeInt,
		"id": TypeBigint, "at_us": TypeBigint, "done": TypeTimestamp, "holder": TypeUUID, "name": TypeVarchar,
		"dim": TypeInt, "day": TypeTimestamp, "value": TypeVarchar, "visits": TypeBigint, "reg": TypeInt, "rho": TypeInt,
	}
	var cols []Col
	rest := q
	if strings.HasPrefix(q, "INSERT") {
		names := strings.Split(q[strings.Index(q, "(")+1:strings.Index(q, ")")], ", ")
		v := q[strings.Index(q, "VALUES (")+len("VALUES ("):]
		values := strings.Split(v[:strings.Index(v, ")")], ", ")
		for i, n := range names {
			if values[i] == "?" {
				cols = append(cols, Col{n, types[n]})
			}
		}
		rest = v[strings.Index(v, ")"):]
	}
	fields := strings.Fields(rest)
	for i, f := range fields {
		if f != "?" && f != "?," {
			continue
		}
		switch fields[i-1] {
		case "TTL":
			cols = append(cols, Col{"[ttl]", TypeInt})
		case "TIMESTAMP":
			cols = append(cols, Col{"[timestamp]", TypeBigint})
		case "LIMIT":
			cols = append(cols, Col{"[limit]", TypeInt})
		default:
			cols = append(cols, Col{fields[i-2], types[fields[i-2]]})
		}
	}
	return cols
}

var resultTypes = map[string]uint16{
	"start": TypeTimestamp, "writer": TypeUUID, "human": TypeBigint, "bot": TypeBigint,
	"step": TypeInt, "id": TypeBigint, "at_us": TypeBigint, "done": TypeTimestamp, "short_key": TypeVarchar,
	"day": TypeTimestamp, "value": TypeVarchar, "visits": TypeBigint, "reg": TypeInt, "rho": TypeInt,
}

// SelectCols returns the columns a SELECT of the Store's returns.
func SelectCols(q string) []Col {
	var cols []Col
	if strings.HasPrefix(q, "SELECT ") {
		for _, n := range strings.Split(q[len("SELECT "):strings.Index(q, " FROM")], ", ") {
			cols = append(cols, Col{n, resultTypes[n]})
		}
	}
	return cols
}

func preparedResult(id []byte, q string) []byte {
	var b wbuf
	b.int(4) // Prepared
	b.shortBytes(id)
	cols := bindTypes(q)
	b.int(1) // flags: global table spec
	b.int(int32(len(cols)))
	b.int(1) // pk count
	b.short(0)
	b.string("ks")
	b.string("t")
	for _, c := range cols {
		b.string(c.Name)
		b.short(c.Type)
	}
	// Result metadata: the selected columns.
	res := SelectCols(q)
	b.int(1)
	b.int(int32(len(res)))
	b.string("ks")
	b.string("t")
	for _, c := range res {
		b.string(c.Name)
		b.short(c.Type)
	}
	return b
}

func rowsResult(ks, table string, cols []Col, rows [][][]byte) []byte {
	var b wbuf
	b.int(2) // Rows
	b.int(1) // flags: global table spec
	b.int(int32(len(cols)))
	b.string(ks)
	b.string(table)
	for _, c := range cols {
		b.string(c.Name)
		b.short(c.Type)
	}
	b.int(int32(len(rows)))
	for _, r := range rows {
		for _, v := range r {
			b.bytes(v)
		}
	}
	return b
}

type wbuf []byte

func (b *wbuf) int(v int32)    { *b = binary.BigEndian.AppendUint32(*b, uint32(v)) }
func (b *wbuf) short(v uint16) { *b = binary.BigEndian.AppendUint16(*b, v) }
func (b *wbuf) string(s string) {
	b.short(uint16(len(s)))
	*b = append(*b, s...)
}
func (b *wbuf) shortBytes(v []byte) {
	b.short(uint16(len(v)))
	*b = append(*b, v...)
}
func (b *wbuf) bytes(v []byte) {
	if v == nil {
		b.int(-1)
		return
	}
	b.int(int32(len(v)))
	*b = append(*b, v...)
}

type rbuf struct{ b []byte }

func (r *rbuf) take(n int) []byte {
	if n > len(r.b) {
		n = len(r.b)
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}
func (r *rbuf) byte() byte    { return r.take(1)[0] }
func (r *rbuf) short() uint16 { return binary.BigEndian.Uint16(r.take(2)) }
func (r *rbuf) int() int32    { return int32(binary.BigEndian.Uint32(r.take(4))) }
func (r *rbuf) longString() string {
	return string(r.take(int(r.int())))
}
func (r *rbuf) shortBytes() []byte { return r.take(int(r.short())) }
func (r *rbuf) bytes() []byte {
	n := r.int()
	if n < 0 {
		return nil
	}
	return r.take(int(n))
}

// BE64 is a bigint or timestamp cell.
func BE64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// BE32 is an int cell.
func BE32(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }

// TimeCell is a timestamp cell (ms).
func TimeCell(t time.Time) []byte { return BE64(t.UnixMilli()) }
