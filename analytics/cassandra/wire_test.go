package cassandra

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

// wireServer speaks just enough of the CQL native protocol v4 for gocql to
// connect and for the Store to prepare and execute its statements, so that
// the tests can inject the faults a real cluster produces only under
// duress: WriteTimeout and Unavailable errors, and requests that are never
// answered. It is not a database: DDL and writes are acknowledged without
// effect, and a SELECT answers the rows the test gives it.
type wireServer struct {
	t  *testing.T
	ln net.Listener

	mu          sync.Mutex
	prepared    map[string]string // id → statement
	executes    map[string]int    // statement prefix (up to the first " (" or " WHERE") → EXECUTEs seen
	bound       [][][]byte        // values of every EXECUTE of an INSERT
	batches     []wireBatch
	ddl         []string            // CREATE statements received, in order
	consistency map[string][]uint16 // statement → consistency of each EXECUTE
	// reply picks the answer to an EXECUTE of stmt: replyOK, or an error
	// code, or replyStall to never answer. Nil: always OK.
	reply func(stmt string) int
	rows  func(stmt string, values [][]byte) (cols []wireCol, rows [][][]byte)
	// cas answers a conditional EXECUTE; nil: [applied] true.
	cas func(stmt string, values [][]byte) (cols []wireCol, rows [][][]byte)
}

type wireStmt struct {
	q      string
	values [][]byte
}

type wireBatch struct {
	stmts               []wireStmt
	consistency, serial uint16
}

type wireCol struct {
	name string
	typ  uint16
}

const (
	replyOK    = 0
	replyStall = -1

	errUnavailable  = 0x1000
	errWriteTimeout = 0x1100

	typeBigint    = 0x0002
	typeBoolean   = 0x0004
	typeInt       = 0x0009
	typeTimestamp = 0x000B
	typeUUID      = 0x000C
	typeInet      = 0x0010
	typeVarchar   = 0x000D
)

func newWireServer(t *testing.T) *wireServer { return newWireServerAt(t, "127.0.0.1:0") }

func newWireServerAt(t *testing.T, addr string) *wireServer {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &wireServer{t: t, ln: ln, prepared: make(map[string]string), executes: make(map[string]int), consistency: make(map[string][]uint16)}
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

func (s *wireServer) addr() string { return s.ln.Addr().String() }

func (s *wireServer) port() int { return s.ln.Addr().(*net.TCPAddr).Port }

// numBatches returns how many BATCH messages the server received.
func (s *wireServer) numBatches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.batches)
}

func (s *wireServer) count(prefix string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, v := range s.executes {
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

func (s *wireServer) serve(c net.Conn) {
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

func (s *wireServer) handle(f frame, write func(int16, byte, []byte)) {
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
				[]wireCol{{"key", typeVarchar}, {"data_center", typeVarchar}, {"rack", typeVarchar}, {"release_version", typeVarchar},
					{"partitioner", typeVarchar}, {"rpc_address", typeInet}, {"native_port", typeInt}},
				[][][]byte{{[]byte("local"), []byte("dc1"), []byte("rack1"), []byte("3.11.4"),
					[]byte("org.apache.cassandra.dht.Murmur3Partitioner"), []byte{127, 0, 0, 1}, binary.BigEndian.AppendUint32(nil, uint32(s.port()))}}))
		case strings.HasPrefix(q, "SELECT * FROM system.peers"):
			write(f.stream, opResult, rowsResult("system", "peers", []wireCol{{"peer", typeVarchar}, {"data_center", typeVarchar}}, nil))
		case strings.HasPrefix(q, "CREATE"):
			s.mu.Lock()
			s.ddl = append(s.ddl, q)
			s.mu.Unlock()
			var b wbuf
			b.int(1) // Void: the DDL is acknowledged (no schema change event, no agreement wait)
			write(f.stream, opResult, b)
		default:
			var b wbuf
			b.int(0x2200)
			b.string("wireServer: unexpected query " + q)
			write(f.stream, opError, b)
		}
	case opPrepare:
		q := rd.longString()
		// The id under the lock: statements prepared at once (a Write's
		// first statements of each kind) must not share one.
		s.mu.Lock()
		id := []byte{byte(len(s.prepared) + 1)}
		s.prepared[string(id)] = q
		s.mu.Unlock()
		write(f.stream, opResult, preparedResult(id, q))
	case opExecute:
		id := rd.shortBytes()
		s.mu.Lock()
		q := s.prepared[string(id)]
		s.executes[q]++
		reply := s.reply
		s.mu.Unlock()
		cons := rd.short()
		s.mu.Lock()
		s.consistency[q] = append(s.consistency[q], cons)
		s.mu.Unlock()
		flags := rd.byte()
		var values [][]byte
		if flags&0x01 != 0 {
			n := rd.short()
			for range n {
				values = append(values, rd.bytes())
			}
		}
		code := replyOK
		if reply != nil {
			code = reply(q)
		}
		var b wbuf
		switch code {
		case replyStall:
			return
		case errUnavailable:
			b.int(errUnavailable)
			b.string("Cannot achieve consistency level LOCAL_QUORUM")
			b.short(6)
			b.int(2)
			b.int(1)
			write(f.stream, opError, b)
		case errWriteTimeout:
			b.int(errWriteTimeout)
			b.string("Operation timed out - received only 0 responses.")
			b.short(6)
			b.int(0)
			b.int(1)
			b.string("SIMPLE")
			write(f.stream, opError, b)
		default:
			if strings.HasPrefix(q, "SELECT") {
				cols, rows := selectCols(q), [][][]byte(nil) // by default: no rows
				if s.rows != nil {
					cols, rows = s.rows(q, values)
				}
				write(f.stream, opResult, rowsResult("ks", "t", cols, rows))
				return
			}
			if strings.Contains(q, " IF ") {
				// A lightweight transaction: applied, unless cas says not.
				cols, rows := []wireCol{{"[applied]", typeBoolean}}, [][][]byte{{{1}}}
				if s.cas != nil {
					cols, rows = s.cas(q, values)
				}
				s.mu.Lock()
				s.bound = append(s.bound, values)
				s.mu.Unlock()
				write(f.stream, opResult, rowsResult("ks", "t", cols, rows))
				return
			}
			s.mu.Lock()
			s.bound = append(s.bound, values)
			s.mu.Unlock()
			b.int(1) // Void
			write(f.stream, opResult, b)
		}
	case opBatch:
		rd.byte() // type
		var stmts []wireStmt
		for range rd.short() {
			if rd.byte() != 1 {
				s.t.Error("wireServer: a batch statement that is not prepared")
				return
			}
			id := rd.shortBytes()
			st := wireStmt{}
			s.mu.Lock()
			st.q = s.prepared[string(id)]
			s.mu.Unlock()
			for range rd.short() {
				st.values = append(st.values, rd.bytes())
			}
			stmts = append(stmts, st)
		}
		cons := rd.short()
		flags := rd.byte()
		var serial uint16
		if flags&0x10 != 0 {
			serial = rd.short()
		}
		s.mu.Lock()
		s.batches = append(s.batches, wireBatch{stmts, cons, serial})
		reply := s.reply
		s.mu.Unlock()
		code := replyOK
		if reply != nil {
			code = reply("BATCH")
		}
		switch code {
		case replyStall:
			return
		case errWriteTimeout:
			var b wbuf
			b.int(errWriteTimeout)
			b.string("Operation timed out")
			b.short(uint16(serial))
			b.int(0)
			b.int(1)
			b.string("CAS")
			write(f.stream, opError, b)
			return
		}
		write(f.stream, opResult, rowsResult("ks", "totals", []wireCol{{"[applied]", typeBoolean}}, [][][]byte{{{1}}}))
	default:
		var b wbuf
		b.int(0x000A)
		b.string("wireServer: unsupported opcode")
		write(f.stream, opError, b)
	}
}

// bindTypes returns the types of the bind markers of the Store's
// statements, by the column each marker is compared with or assigned to,
// or by the clause it fills (TTL, TIMESTAMP, LIMIT).
func bindTypes(q string) []wireCol {
	types := map[string]uint16{
		"short_key": typeVarchar, "bucket": typeTimestamp, "start": typeTimestamp, "writer": typeUUID,
		"human": typeBigint, "bot": typeBigint, "step": typeInt, "period": typeTimestamp, "shard": typeInt,
		"id": typeBigint, "at_us": typeBigint, "done": typeTimestamp, "holder": typeUUID, "name": typeVarchar,
	}
	var cols []wireCol
	rest := q
	if strings.HasPrefix(q, "INSERT") {
		names := strings.Split(q[strings.Index(q, "(")+1:strings.Index(q, ")")], ", ")
		v := q[strings.Index(q, "VALUES (")+len("VALUES ("):]
		values := strings.Split(v[:strings.Index(v, ")")], ", ")
		for i, n := range names {
			if values[i] == "?" {
				cols = append(cols, wireCol{n, types[n]})
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
			cols = append(cols, wireCol{"[ttl]", typeInt})
		case "TIMESTAMP":
			cols = append(cols, wireCol{"[timestamp]", typeBigint})
		case "LIMIT":
			cols = append(cols, wireCol{"[limit]", typeInt})
		default:
			cols = append(cols, wireCol{fields[i-2], types[fields[i-2]]})
		}
	}
	return cols
}

var resultTypes = map[string]uint16{
	"start": typeTimestamp, "writer": typeUUID, "human": typeBigint, "bot": typeBigint,
	"step": typeInt, "id": typeBigint, "at_us": typeBigint, "done": typeTimestamp, "short_key": typeVarchar,
}

// selectCols returns the columns a SELECT of the Store's returns.
func selectCols(q string) []wireCol {
	var cols []wireCol
	if strings.HasPrefix(q, "SELECT ") {
		for _, n := range strings.Split(q[len("SELECT "):strings.Index(q, " FROM")], ", ") {
			cols = append(cols, wireCol{n, resultTypes[n]})
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
		b.string(c.name)
		b.short(c.typ)
	}
	// Result metadata: the selected columns.
	res := selectCols(q)
	b.int(1)
	b.int(int32(len(res)))
	b.string("ks")
	b.string("t")
	for _, c := range res {
		b.string(c.name)
		b.short(c.typ)
	}
	return b
}

func rowsResult(ks, table string, cols []wireCol, rows [][][]byte) []byte {
	var b wbuf
	b.int(2) // Rows
	b.int(1) // flags: global table spec
	b.int(int32(len(cols)))
	b.string(ks)
	b.string(table)
	for _, c := range cols {
		b.string(c.name)
		b.short(c.typ)
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

func be64(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

func be32(v int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(v)) }

func timeCell(t time.Time) []byte { return be64(t.UnixMilli()) }
