// Package cqlmodel is a model of Cassandra for the tests of the
// certificate storage (edge/cassandra): it speaks the CQL native protocol
// v4 to gocql and executes the storage's statements with Cassandra's
// semantics. It is imported by tests only.
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

// Model speaks enough of the CQL native protocol v4 for gocql to connect
// and for the Store to prepare and execute its statements, and executes
// them as Cassandra documents them: rows by primary key, a partition per
// certmagic_dir folder, DELETE of a missing row a no-op, and lightweight
// transactions (IF NOT EXISTS, IF owner = ?) that apply atomically and
// answer [applied] with the current row when they do not, on rows that
// expire with their TTL. No Cassandra runs where the tests run; the same
// suite runs on a real cluster when CASSANDRA_HOSTS is set. The framing is
// that of analytics/cassandra's wire test.
type Model struct {
	t  testing.TB
	ln net.Listener

	mu       sync.Mutex
	prepared map[string]string
	kv       map[string]kvRow
	dirs     map[string]map[string]bool // folder → name → file
	locks    map[string]lockRow
	lwt      int // lightweight transactions executed
	ddl      []string
}

type kvRow struct {
	value    []byte
	modified []byte // the timestamp cell as written
}

type lockRow struct {
	owner   string
	expires time.Time
}

// New starts a model on loopback until the test ends.
func New(t testing.TB) *Model {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &Model{t: t, ln: ln, prepared: map[string]string{}, kv: map[string]kvRow{}, dirs: map[string]map[string]bool{}, locks: map[string]lockRow{}}
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
			wg.Go(func() { m.serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		cmu.Lock()
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
		wg.Wait()
	})
	return m
}

// Addr is the model's host:port.
func (m *Model) Addr() string { return m.ln.Addr().String() }
func (m *Model) port() int    { return m.ln.Addr().(*net.TCPAddr).Port }

func (m *Model) serve(c net.Conn) {
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
			var e wbuf
			e.int(0x000A)
			e.string("unsupported protocol version")
			hh := []byte{h[0]&0x7f | 0x80, 0, h[2], h[3], 0}
			c.Write(append(binary.BigEndian.AppendUint32(hh, uint32(len(e))), e...))
			continue
		}
		go m.handle(binary.BigEndian.Uint16(h[2:]), h[4], body, write)
	}
}

const (
	tBlob      = 0x0003
	tBoolean   = 0x0004
	tInt       = 0x0009
	tTimestamp = 0x000B
	tVarchar   = 0x000D
	tInet      = 0x0010
)

type col struct {
	name string
	typ  uint16
}

// shape is a statement's bind markers and result columns.
type shape struct {
	binds, result []col
}

// unqualified drops the keyspace from a statement's table.
func unqualified(q string) string {
	for _, kw := range []string{"INTO ", "FROM ", "UPDATE "} {
		if i := strings.Index(q, kw); i >= 0 {
			rest := q[i+len(kw):]
			if j := strings.IndexByte(rest, '.'); j >= 0 && j < strings.IndexByte(rest, ' ') {
				q = q[:i+len(kw)] + rest[j+1:]
			}
		}
	}
	return q
}

var applied = col{"[applied]", tBoolean}

var shapes = map[string]shape{
	"INSERT INTO certmagic_kv (key, value, modified) VALUES (?, ?, ?)":                  {binds: []col{{"key", tVarchar}, {"value", tBlob}, {"modified", tTimestamp}}},
	"SELECT value, modified FROM certmagic_kv WHERE key = ?":                            {binds: []col{{"key", tVarchar}}, result: []col{{"value", tBlob}, {"modified", tTimestamp}}},
	"DELETE FROM certmagic_kv WHERE key = ?":                                            {binds: []col{{"key", tVarchar}}},
	"INSERT INTO certmagic_dir (dir, name, file) VALUES (?, ?, ?)":                      {binds: []col{{"dir", tVarchar}, {"name", tVarchar}, {"file", tBoolean}}},
	"SELECT name, file FROM certmagic_dir WHERE dir = ?":                                {binds: []col{{"dir", tVarchar}}, result: []col{{"name", tVarchar}, {"file", tBoolean}}},
	"DELETE FROM certmagic_dir WHERE dir = ? AND name = ?":                              {binds: []col{{"dir", tVarchar}, {"name", tVarchar}}},
	"INSERT INTO certmagic_locks (name, owner) VALUES (?, ?) IF NOT EXISTS USING TTL ?": {binds: []col{{"name", tVarchar}, {"owner", tVarchar}, {"[ttl]", tInt}}, result: []col{applied}},
	"UPDATE certmagic_locks USING TTL ? SET owner = ? WHERE name = ? IF owner = ?":      {binds: []col{{"[ttl]", tInt}, {"owner", tVarchar}, {"name", tVarchar}, {"owner", tVarchar}}, result: []col{applied}},
	"DELETE FROM certmagic_locks WHERE name = ? IF owner = ?":                           {binds: []col{{"name", tVarchar}, {"owner", tVarchar}}, result: []col{applied}},
}

func (m *Model) handle(stream uint16, op byte, body []byte, write func(uint16, byte, []byte)) {
	const (
		opError, opStartup, opReady, opOptions, opSupported = 0x00, 0x01, 0x02, 0x05, 0x06
		opQuery, opResult, opPrepare, opExecute, opRegister = 0x07, 0x08, 0x09, 0x0A, 0x0B
	)
	fail := func(code int32, msg string) {
		var b wbuf
		b.int(code)
		b.string(msg)
		write(stream, opError, b)
	}
	rd := &rbuf{b: body}
	switch op {
	case opOptions:
		var b wbuf
		b.short(2)
		b.string("CQL_VERSION")
		b.short(1)
		b.string("3.4.4")
		b.string("COMPRESSION")
		b.short(0)
		write(stream, opSupported, b)
	case opStartup, opRegister:
		write(stream, opReady, nil)
	case opQuery:
		q := rd.longString()
		switch {
		case strings.HasPrefix(q, "SELECT * FROM system.local"):
			write(stream, opResult, rows([]col{{"key", tVarchar}, {"data_center", tVarchar}, {"rack", tVarchar}, {"release_version", tVarchar},
				{"partitioner", tVarchar}, {"rpc_address", tInet}, {"native_port", tInt}},
				[][][]byte{{[]byte("local"), []byte("dc1"), []byte("rack1"), []byte("4.1.0"),
					[]byte("org.apache.cassandra.dht.Murmur3Partitioner"), {127, 0, 0, 1}, binary.BigEndian.AppendUint32(nil, uint32(m.port()))}}))
		case strings.HasPrefix(q, "SELECT * FROM system.peers"):
			write(stream, opResult, rows([]col{{"peer", tVarchar}, {"data_center", tVarchar}}, nil))
		case strings.HasPrefix(q, "CREATE"):
			m.mu.Lock()
			m.ddl = append(m.ddl, q)
			m.mu.Unlock()
			var b wbuf
			b.int(1)
			write(stream, opResult, b)
		default:
			fail(0x2200, "model: unexpected query "+q)
		}
	case opPrepare:
		q := rd.longString()
		sh, ok := shapes[unqualified(q)]
		if !ok {
			fail(0x2200, "model: unknown statement "+q)
			return
		}
		m.mu.Lock()
		id := []byte{byte(len(m.prepared) + 1)}
		m.prepared[string(id)] = unqualified(q)
		m.mu.Unlock()
		var b wbuf
		b.int(4)
		b.shortBytes(id)
		b.int(1)
		b.int(int32(len(sh.binds)))
		b.int(1)
		b.short(0)
		b.string("ks")
		b.string("t")
		for _, c := range sh.binds {
			b.string(c.name)
			b.short(c.typ)
		}
		b.int(1)
		b.int(int32(len(sh.result)))
		b.string("ks")
		b.string("t")
		for _, c := range sh.result {
			b.string(c.name)
			b.short(c.typ)
		}
		write(stream, opResult, b)
	case opExecute:
		id := rd.shortBytes()
		m.mu.Lock()
		q, ok := m.prepared[string(id)]
		m.mu.Unlock()
		if !ok {
			var b wbuf
			b.int(0x2500) // Unprepared
			b.string("unprepared")
			b.shortBytes(id)
			write(stream, opError, b)
			return
		}
		rd.short() // consistency
		flags := rd.byte()
		var v [][]byte
		if flags&0x01 != 0 {
			for range rd.short() {
				v = append(v, rd.bytes())
			}
		}
		cols, rs := m.exec(q, v)
		if cols == nil {
			var b wbuf
			b.int(1)
			write(stream, opResult, b)
			return
		}
		write(stream, opResult, rows(cols, rs))
	default:
		fail(0x000A, "model: unsupported opcode")
	}
}

// exec runs a statement; nil cols is a Void result.
func (m *Model) exec(q string, v [][]byte) ([]col, [][][]byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	str := func(i int) string { return string(v[i]) }
	applyResult := func(ok bool, owner string) ([]col, [][][]byte) {
		m.lwt++
		if ok {
			return []col{applied}, [][][]byte{{{1}}}
		}
		if owner == "" {
			return []col{applied}, [][][]byte{{{0}}}
		}
		return []col{applied, {"owner", tVarchar}}, [][][]byte{{{0}, []byte(owner)}}
	}
	lock := func(name string) (lockRow, bool) {
		l, ok := m.locks[name]
		if ok && !now.Before(l.expires) {
			delete(m.locks, name) // expired by its TTL
			return lockRow{}, false
		}
		return l, ok
	}
	switch {
	case strings.HasPrefix(q, "INSERT INTO certmagic_kv"):
		m.kv[str(0)] = kvRow{value: append([]byte{}, v[1]...), modified: v[2]}
	case strings.HasPrefix(q, "SELECT value, modified FROM certmagic_kv"):
		r, ok := m.kv[str(0)]
		if !ok {
			return shapes[q].result, nil
		}
		return shapes[q].result, [][][]byte{{r.value, r.modified}}
	case strings.HasPrefix(q, "DELETE FROM certmagic_kv"):
		delete(m.kv, str(0))
	case strings.HasPrefix(q, "INSERT INTO certmagic_dir"):
		d := m.dirs[str(0)]
		if d == nil {
			d = map[string]bool{}
			m.dirs[str(0)] = d
		}
		d[str(1)] = len(v[2]) == 1 && v[2][0] != 0
	case strings.HasPrefix(q, "SELECT name, file FROM certmagic_dir"):
		var rs [][][]byte
		for n, f := range m.dirs[str(0)] {
			b := byte(0)
			if f {
				b = 1
			}
			rs = append(rs, [][]byte{[]byte(n), {b}})
		}
		return shapes[q].result, rs
	case strings.HasPrefix(q, "DELETE FROM certmagic_dir"):
		delete(m.dirs[str(0)], str(1))
		if len(m.dirs[str(0)]) == 0 {
			delete(m.dirs, str(0))
		}
	case strings.HasPrefix(q, "INSERT INTO certmagic_locks"):
		if l, held := lock(str(0)); held {
			return applyResult(false, l.owner)
		}
		ttl := time.Duration(int32(binary.BigEndian.Uint32(v[2]))) * time.Second
		m.locks[str(0)] = lockRow{owner: str(1), expires: now.Add(ttl)}
		return applyResult(true, "")
	case strings.HasPrefix(q, "UPDATE certmagic_locks"):
		l, held := lock(str(2))
		if !held || l.owner != str(3) {
			return applyResult(false, l.owner)
		}
		ttl := time.Duration(int32(binary.BigEndian.Uint32(v[0]))) * time.Second
		m.locks[str(2)] = lockRow{owner: str(1), expires: now.Add(ttl)}
		return applyResult(true, "")
	case strings.HasPrefix(q, "DELETE FROM certmagic_locks"):
		l, held := lock(str(0))
		if !held || l.owner != str(1) {
			return applyResult(false, l.owner)
		}
		delete(m.locks, str(0))
		return applyResult(true, "")
	}
	return nil, nil
}

func rows(cols []col, rs [][][]byte) []byte {
	var b wbuf
	b.int(2)
	b.int(1)
	b.int(int32(len(cols)))
	b.string("ks")
	b.string("t")
	for _, c := range cols {
		b.string(c.name)
		b.short(c.typ)
	}
	b.int(int32(len(rs)))
	for _, r := range rs {
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
	n = min(n, len(r.b))
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}
func (r *rbuf) byte() byte         { return r.take(1)[0] }
func (r *rbuf) short() uint16      { return binary.BigEndian.Uint16(r.take(2)) }
func (r *rbuf) int() int32         { return int32(binary.BigEndian.Uint32(r.take(4))) }
func (r *rbuf) longString() string { return string(r.take(int(r.int()))) }
func (r *rbuf) shortBytes() []byte { return r.take(int(r.short())) }
func (r *rbuf) bytes() []byte {
	n := r.int()
	if n < 0 {
		return nil
	}
	return r.take(int(n))
}

// LWT returns how many lightweight transactions the model executed.
func (m *Model) LWT() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lwt
}

// DDL returns the CREATE statements the model received, in order.
func (m *Model) DDL() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.ddl...)
}

// Keys returns the keys of certmagic_kv.
func (m *Model) Keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for k := range m.kv {
		out = append(out, k)
	}
	return out
}
