// Package cqlwire speaks the server side of the CQL native protocol v4, as
// much as gocql needs to connect and to prepare, execute and batch
// statements. The models of Cassandra that the tests of the analytics
// store and of the certificate storage run on (no Cassandra runs where the
// tests run) share it: each is a Handler that decides what its statements
// do, and may answer with the errors a cluster gives under duress, or never
// answer. Tests only.
package cqlwire

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// The CQL types of columns and bind markers.
const (
	TypeBlob      = 0x0003
	TypeBigint    = 0x0002
	TypeBoolean   = 0x0004
	TypeInt       = 0x0009
	TypeTimestamp = 0x000B
	TypeUUID      = 0x000C
	TypeVarchar   = 0x000D
	TypeInet      = 0x0010
	TypeList      = 0x0020 // followed by its element's type (Col.Elem)
	TypeMap       = 0x0021 // followed by its key's type (Col.Key) and its value's (Col.Elem)
	TypeSet       = 0x0022 // followed by its element's type (Col.Elem)
)

// Col is a column or a bind marker: its name and CQL type.
type Col struct {
	Name string
	Type uint16
	Elem uint16 // the element type of a TypeList or TypeSet, the value type of a TypeMap
	Key  uint16 // a TypeMap's key type
}

// option writes c's type: its id, and a list's element type.
func (b *wbuf) option(c Col) {
	b.short(c.Type)
	switch c.Type {
	case TypeList, TypeSet:
		b.short(c.Elem)
	case TypeMap:
		b.short(c.Key)
		b.short(c.Elem)
	}
}

// Stmt is a statement of an EXECUTE or a BATCH: its text (as prepared)
// and its bound values.
type Stmt struct {
	Q      string
	Values [][]byte

	st *statement // what the checks know of it
}

// Answer is a Handler's answer to a statement: a Void result (the zero
// value), Rows, an error, or none at all.
type Answer struct {
	Stall bool       // never answer, as a coordinator waiting for replicas that are gone
	Error []byte     // an ERROR body (ErrorBody, Unavailable, WriteTimeout); nil: a result
	Cols  []Col      // a Rows result's columns; nil: Void
	Rows  [][][]byte // its rows, a cell per column
}

// Handler is a model of Cassandra: what its statements do.
type Handler interface {
	// Shape returns the bind markers and result columns of a statement
	// to prepare; ok false refuses it (an unknown statement).
	Shape(q string) (binds, result []Col, ok bool)
	// Query answers a QUERY other than the connection's handshake (the
	// schema's CREATE statements).
	Query(q string) Answer
	// Execute answers an EXECUTE of a prepared statement.
	Execute(st Stmt, consistency uint16) Answer
	// Batch answers a BATCH of prepared statements.
	Batch(stmts []Stmt, consistency, serial uint16) Answer
}

// ErrorBody is an ERROR body with a code and a message.
func ErrorBody(code int32, msg string) []byte {
	var b wbuf
	b.int(code)
	b.string(msg)
	return b
}

// Unavailable is the ERROR of a consistency level that too few replicas
// alive cannot reach.
func Unavailable(consistency uint16, required, alive int32) []byte {
	b := wbuf(ErrorBody(0x1000, "Cannot achieve consistency level"))
	b.short(consistency)
	b.int(required)
	b.int(alive)
	return b
}

// WriteTimeout is the ERROR of a write that too few replicas acknowledged
// in time.
func WriteTimeout(consistency uint16, received, blockFor int32, writeType string) []byte {
	b := wbuf(ErrorBody(0x1100, "Operation timed out - received only "+itoa(received)+" responses."))
	b.short(consistency)
	b.int(received)
	b.int(blockFor)
	b.string(writeType)
	return b
}

// WriteFailure is the ERROR of a write that replicas failed, as an
// overloaded cluster answers when its replicas time out among themselves:
// msg is Cassandra's ("Operation failed - received 1 responses and 2
// failures: TIMEOUT from /10.0.0.2:7000, ...").
func WriteFailure(consistency uint16, received, blockFor, failures int32, writeType, msg string) []byte {
	b := wbuf(ErrorBody(0x1500, msg))
	b.short(consistency)
	b.int(received)
	b.int(blockFor)
	b.int(failures)
	b.string(writeType)
	return b
}

func itoa(n int32) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// Server accepts gocql's connections and answers them with its Handler.
type Server struct {
	t  testing.TB
	ln net.Listener
	h  Handler

	schema schema // learnt from the CREATE statements: what is refused

	mu       sync.Mutex
	prepared map[string]prepared // by id
}

// prepared is a statement prepared: its text and what the checks know of it.
type prepared struct {
	q  string
	st *statement
}

// Start serves h on addr ("127.0.0.1:0": a free port) until the end of t.
func Start(t testing.TB, addr string, h Handler) *Server {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, ln: ln, h: h, prepared: map[string]prepared{}}
	var wg sync.WaitGroup
	var cmu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			cmu.Lock()
			conns = append(conns, c)
			cmu.Unlock()
			wg.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		cmu.Lock()
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
		// A handler that blocks (a model of a hung node the test never
		// released) would hold its connection's goroutine for good.
		testkit.Await(t, wg.Wait, time.Minute, "the CQL server's connections ending")
	})
	return s
}

// Addr is the Server's host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Port is the Server's port.
func (s *Server) Port() int { return s.ln.Addr().(*net.TCPAddr).Port }

const (
	opError, opStartup, opReady, opOptions, opSupported = 0x00, 0x01, 0x02, 0x05, 0x06
	opQuery, opResult, opPrepare, opExecute, opRegister = 0x07, 0x08, 0x09, 0x0A, 0x0B
	opBatch                                             = 0x0D
)

func (s *Server) serve(c net.Conn) {
	r := bufio.NewReader(c)
	var wmu sync.Mutex
	write := func(stream uint16, op byte, body []byte) {
		h := []byte{0x84, 0, 0, 0, op}
		binary.BigEndian.PutUint16(h[2:], stream)
		h = binary.BigEndian.AppendUint32(h, uint32(len(body)))
		wmu.Lock()
		defer wmu.Unlock()
		c.Write(append(h, body...))
	}
	for {
		h := make([]byte, 9)
		if _, err := io.ReadFull(r, h); err != nil {
			return
		}
		body := make([]byte, int(binary.BigEndian.Uint32(h[5:])))
		if _, err := io.ReadFull(r, body); err != nil {
			return
		}
		if h[0]&0x7f != 4 {
			// Any other version: a protocol error in that version, as
			// Cassandra answers, so that gocql falls back to v4.
			e := ErrorBody(0x000A, "unsupported protocol version")
			hh := []byte{h[0]&0x7f | 0x80, 0, h[2], h[3], 0}
			c.Write(append(binary.BigEndian.AppendUint32(hh, uint32(len(e))), e...))
			continue
		}
		go s.handle(binary.BigEndian.Uint16(h[2:]), h[4], body, write)
	}
}

// handle answers one request.
func (s *Server) handle(stream uint16, op byte, body []byte, write func(uint16, byte, []byte)) {
	rd := &rbuf{b: body}
	var a Answer
	switch op {
	case opOptions:
		var b wbuf
		b.short(2)
		b.string("CQL_VERSION")
		b.short(1)
		b.string("3.4.5")
		b.string("COMPRESSION")
		b.short(0)
		write(stream, opSupported, b)
		return
	case opStartup, opRegister:
		write(stream, opReady, nil)
		return
	case opQuery:
		a = s.query(rd.longString())
	case opPrepare:
		var result []byte
		if result, a = s.prepare(rd.longString()); result != nil {
			write(stream, opResult, result)
			return
		}
	case opExecute:
		a = s.execute(rd)
	case opBatch:
		var ok bool
		if a, ok = s.batch(rd); !ok {
			return
		}
	default:
		a = Answer{Error: ErrorBody(0x000A, "cqlwire: unsupported opcode")}
	}
	switch {
	case a.Stall:
	case a.Error != nil:
		write(stream, opError, a.Error)
	case a.Cols == nil:
		var b wbuf
		b.int(1) // Void
		write(stream, opResult, b)
	default:
		write(stream, opResult, rowsResult(a.Cols, a.Rows))
	}
}

// query answers a QUERY: the system tables a driver reads on connecting
// (the node's address is the one it listens on), or the handler's answer.
func (s *Server) query(q string) Answer {
	switch {
	case strings.HasPrefix(q, "SELECT * FROM system.local"):
		return Answer{
			Cols: []Col{{Name: "key", Type: TypeVarchar}, {Name: "data_center", Type: TypeVarchar}, {Name: "rack", Type: TypeVarchar}, {Name: "release_version", Type: TypeVarchar},
				{Name: "partitioner", Type: TypeVarchar}, {Name: "rpc_address", Type: TypeInet}, {Name: "native_port", Type: TypeInt}},
			Rows: [][][]byte{{[]byte("local"), []byte("dc1"), []byte("rack1"), []byte("4.0.11"),
				[]byte("org.apache.cassandra.dht.Murmur3Partitioner"), s.ln.Addr().(*net.TCPAddr).IP.To4(), binary.BigEndian.AppendUint32(nil, uint32(s.Port()))}},
		}
	case strings.HasPrefix(q, "SELECT * FROM system.peers"):
		return Answer{Cols: []Col{{Name: "peer", Type: TypeVarchar}, {Name: "data_center", Type: TypeVarchar}}}
	default:
		s.schema.learn(q)
		return s.h.Query(q)
	}
}

// prepare answers a PREPARE: the PREPARED result, or the answer that
// refuses the statement.
func (s *Server) prepare(q string) (result []byte, refusal Answer) {
	st, refused := s.schema.parse(q)
	if refused != nil {
		return nil, refused.answer()
	}
	binds, cols, ok := s.h.Shape(q)
	if !ok {
		return nil, Answer{Error: ErrorBody(0x2200, "cqlwire: unknown statement "+q)}
	}
	// The id under the lock: statements prepared at once (a Write's
	// first statements of each kind) must not share one.
	s.mu.Lock()
	id := []byte{byte(len(s.prepared) + 1)}
	s.prepared[string(id)] = prepared{q, st}
	s.mu.Unlock()
	return preparedResult(id, binds, cols), Answer{}
}

// execute answers an EXECUTE.
func (s *Server) execute(rd *rbuf) Answer {
	p, ok := s.statement(rd.shortBytes())
	if !ok {
		return Answer{Error: ErrorBody(0x2500, "unprepared")}
	}
	consistency := rd.short()
	flags := rd.byte()
	var vs []value
	if flags&0x01 != 0 {
		for range rd.short() {
			vs = append(vs, rd.value())
		}
	}
	if refused := p.st.check(vs, time.Now()); refused != nil {
		return refused.answer()
	}
	return s.h.Execute(Stmt{Q: p.q, Values: bytesOf(vs), st: p.st}, consistency)
}

// batch answers a BATCH; not ok (and the test failed) when it holds a
// statement that is not prepared, which the gateway never sends.
func (s *Server) batch(rd *rbuf) (a Answer, ok bool) {
	rd.byte() // type
	var (
		stmts []Stmt
		sts   []*statement
		vals  [][]value
	)
	for range rd.short() {
		if rd.byte() != 1 {
			s.t.Error("cqlwire: a batch statement that is not prepared")
			return Answer{}, false
		}
		p, _ := s.statement(rd.shortBytes())
		var vs []value
		for range rd.short() {
			vs = append(vs, rd.value())
		}
		stmts = append(stmts, Stmt{Q: p.q, Values: bytesOf(vs), st: p.st})
		sts, vals = append(sts, p.st), append(vals, vs)
	}
	consistency := rd.short()
	var serial uint16
	if flags := rd.byte(); flags&0x10 != 0 {
		serial = rd.short()
	}
	if refused := checkBatch(sts, vals, time.Now()); refused != nil {
		return refused.answer(), true
	}
	return s.h.Batch(stmts, consistency, serial), true
}

// statement returns the statement prepared under id.
func (s *Server) statement(id []byte) (prepared, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.prepared[string(id)]
	if p.st == nil {
		p.st = &statement{}
	}
	return p, ok
}

// bytesOf is the values as a Handler sees them: unset ones as null.
func bytesOf(vs []value) [][]byte {
	out := make([][]byte, len(vs))
	for i, v := range vs {
		out[i] = v.b
	}
	return out
}

func preparedResult(id []byte, binds, result []Col) []byte {
	var b wbuf
	b.int(4) // Prepared
	b.shortBytes(id)
	b.int(1) // flags: global table spec
	b.int(int32(len(binds)))
	b.int(1) // pk count
	b.short(0)
	b.string("ks")
	b.string("t")
	for _, c := range binds {
		b.string(c.Name)
		b.option(c)
	}
	b.int(1)
	b.int(int32(len(result)))
	b.string("ks")
	b.string("t")
	for _, c := range result {
		b.string(c.Name)
		b.option(c)
	}
	return b
}

func rowsResult(cols []Col, rows [][][]byte) []byte {
	var b wbuf
	b.int(2) // Rows
	b.int(1) // flags: global table spec
	b.int(int32(len(cols)))
	b.string("ks")
	b.string("t")
	for _, c := range cols {
		b.string(c.Name)
		b.option(c)
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

// rbuf reads a request body.
type rbuf struct{ b []byte }

func (r *rbuf) take(n int) []byte {
	if n > len(r.b) {
		n = len(r.b)
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *rbuf) byte() byte {
	if v := r.take(1); len(v) == 1 {
		return v[0]
	}
	return 0
}

func (r *rbuf) short() uint16 {
	if v := r.take(2); len(v) == 2 {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *rbuf) int() int32 {
	if v := r.take(4); len(v) == 4 {
		return int32(binary.BigEndian.Uint32(v))
	}
	return 0
}

func (r *rbuf) longString() string { return string(r.take(int(r.int()))) }
func (r *rbuf) shortBytes() []byte { return r.take(int(r.short())) }

// value reads a bound value: a length of -1 is null, -2 unset.
func (r *rbuf) value() value {
	n := r.int()
	if n < 0 {
		return value{unset: n == -2}
	}
	return value{b: r.take(int(n))}
}

func (r *rbuf) bytes() []byte {
	n := r.int()
	if n < 0 {
		return nil
	}
	return r.take(int(n))
}
