// Package cqlmodel is a model of Cassandra for the tests of the
// certificate storage (edge/cassandra): it speaks the CQL native protocol
// v4 to gocql and executes the storage's statements with Cassandra's
// semantics. It is imported by tests only.
package cqlmodel

import (
	"encoding/binary"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/cqlwire"
)

// Model speaks the CQL native protocol v4 to gocql (cqlwire does the
// protocol) and executes the Store's statements as Cassandra documents
// them: rows by primary key, a partition per certmagic_dir folder, DELETE
// of a missing row a no-op, and lightweight transactions (IF NOT EXISTS,
// IF owner = ?) that apply atomically and answer [applied] with the current
// row when they do not, on rows that expire with their TTL. No Cassandra
// runs where the tests run; the same suite runs on a real cluster when
// CASSANDRA_HOSTS is set.
type Model struct {
	*cqlwire.Server

	mu    sync.Mutex
	kv    map[string]kvRow
	dirs  map[string]map[string]bool // folder → name → file
	locks map[string]lockRow
	lwt   int // lightweight transactions executed
	ddl   []string

	unavailable bool // answer every statement Unavailable
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
func New(t testing.TB) *Model { return NewAt(t, "127.0.0.1:0") }

// NewAt starts a model listening on addr until the test ends: a cluster
// that comes up after the clients configured with addr started.
func NewAt(t testing.TB, addr string) *Model {
	m := &Model{kv: map[string]kvRow{}, dirs: map[string]map[string]bool{}, locks: map[string]lockRow{}}
	m.Server = cqlwire.Start(t, addr, m)
	return m
}

const (
	tBlob      = cqlwire.TypeBlob
	tBoolean   = cqlwire.TypeBoolean
	tInt       = cqlwire.TypeInt
	tTimestamp = cqlwire.TypeTimestamp
	tVarchar   = cqlwire.TypeVarchar
)

type col = cqlwire.Col

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

var applied = col{Name: "[applied]", Type: tBoolean}

var shapes = map[string]shape{
	"INSERT INTO certmagic_kv (key, value, modified) VALUES (?, ?, ?)":                  {binds: []col{{Name: "key", Type: tVarchar}, {Name: "value", Type: tBlob}, {Name: "modified", Type: tTimestamp}}},
	"SELECT value, modified FROM certmagic_kv WHERE key = ?":                            {binds: []col{{Name: "key", Type: tVarchar}}, result: []col{{Name: "value", Type: tBlob}, {Name: "modified", Type: tTimestamp}}},
	"DELETE FROM certmagic_kv WHERE key = ?":                                            {binds: []col{{Name: "key", Type: tVarchar}}},
	"INSERT INTO certmagic_dir (dir, name, file) VALUES (?, ?, ?)":                      {binds: []col{{Name: "dir", Type: tVarchar}, {Name: "name", Type: tVarchar}, {Name: "file", Type: tBoolean}}},
	"SELECT name, file FROM certmagic_dir WHERE dir = ?":                                {binds: []col{{Name: "dir", Type: tVarchar}}, result: []col{{Name: "name", Type: tVarchar}, {Name: "file", Type: tBoolean}}},
	"DELETE FROM certmagic_dir WHERE dir = ? AND name = ?":                              {binds: []col{{Name: "dir", Type: tVarchar}, {Name: "name", Type: tVarchar}}},
	"INSERT INTO certmagic_locks (name, owner) VALUES (?, ?) IF NOT EXISTS USING TTL ?": {binds: []col{{Name: "name", Type: tVarchar}, {Name: "owner", Type: tVarchar}, {Name: "[ttl]", Type: tInt}}, result: []col{applied}},
	"UPDATE certmagic_locks USING TTL ? SET owner = ? WHERE name = ? IF owner = ?":      {binds: []col{{Name: "[ttl]", Type: tInt}, {Name: "owner", Type: tVarchar}, {Name: "name", Type: tVarchar}, {Name: "owner", Type: tVarchar}}, result: []col{applied}},
	"DELETE FROM certmagic_locks WHERE name = ? IF owner = ?":                           {binds: []col{{Name: "name", Type: tVarchar}, {Name: "owner", Type: tVarchar}}, result: []col{applied}},
}

// Shape implements cqlwire.Handler: the Store's statements, nothing else.
func (m *Model) Shape(q string) (binds, result []col, ok bool) {
	sh, ok := shapes[unqualified(q)]
	return sh.binds, sh.result, ok
}

// Query implements cqlwire.Handler: the schema's statements.
func (m *Model) Query(q string) cqlwire.Answer {
	if !strings.HasPrefix(q, "CREATE") {
		return cqlwire.Answer{Error: cqlwire.ErrorBody(0x2200, "model: unexpected query "+q)}
	}
	m.mu.Lock()
	m.ddl = append(m.ddl, q)
	m.mu.Unlock()
	return cqlwire.Answer{}
}

// Execute implements cqlwire.Handler.
func (m *Model) Execute(st cqlwire.Stmt, consistency uint16) cqlwire.Answer {
	m.mu.Lock()
	down := m.unavailable
	m.mu.Unlock()
	if down {
		return cqlwire.Answer{Error: cqlwire.Unavailable(consistency, 2, 1)}
	}
	return m.exec(st)
}

// SetUnavailable makes the model answer every statement but the schema's
// with Unavailable, as a cluster answers when fewer replicas are alive
// than the consistency needs (a keyspace of replication_factor 3 on one
// node at QUORUM), or stops it.
func (m *Model) SetUnavailable(on bool) {
	m.mu.Lock()
	m.unavailable = on
	m.mu.Unlock()
}

// Batch implements cqlwire.Handler: the Store sends none, but the test
// that compares the model with a real node does. Plain statements are
// applied in order; a conditional batch (cqlwire refused those across
// partitions or tables) is not modelled.
func (m *Model) Batch(stmts []cqlwire.Stmt, _, _ uint16) cqlwire.Answer {
	for _, st := range stmts {
		if strings.Contains(st.Q, " IF ") {
			return cqlwire.Answer{Error: cqlwire.ErrorBody(0x000A, "model: no conditional batches")}
		}
	}
	for _, st := range stmts {
		m.exec(st)
	}
	return cqlwire.Answer{}
}

// exec runs a statement.
func (m *Model) exec(st cqlwire.Stmt) cqlwire.Answer {
	q, v := unqualified(st.Q), st.Values
	m.mu.Lock()
	defer m.mu.Unlock()
	str := func(i int) string { return string(v[i]) }
	switch {
	case strings.HasPrefix(q, "INSERT INTO certmagic_kv"):
		m.kv[str(0)] = kvRow{value: append([]byte{}, v[1]...), modified: v[2]}
	case strings.HasPrefix(q, "SELECT value, modified FROM certmagic_kv"):
		r, ok := m.kv[str(0)]
		if !ok {
			return rows(shapes[q].result, nil)
		}
		return rows(shapes[q].result, [][][]byte{{r.value, r.modified}})
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
		return rows(shapes[q].result, rs)
	case strings.HasPrefix(q, "DELETE FROM certmagic_dir"):
		delete(m.dirs[str(0)], str(1))
		if len(m.dirs[str(0)]) == 0 {
			delete(m.dirs, str(0))
		}
	default:
		return m.execLock(st, q, time.Now())
	}
	return cqlwire.Answer{}
}

func rows(cols []col, rs [][][]byte) cqlwire.Answer { return cqlwire.Answer{Cols: cols, Rows: rs} }

// execLock runs a lightweight transaction on certmagic_locks. The caller
// holds mu.
func (m *Model) execLock(st cqlwire.Stmt, q string, now time.Time) cqlwire.Answer {
	v := st.Values
	str := func(i int) string { return string(v[i]) }
	apply := func(f func()) cqlwire.Answer {
		if refused, ok := st.Applies(now); ok {
			return refused
		}
		m.lwt++
		f()
		return rows([]col{applied}, [][][]byte{{{1}}})
	}
	switch {
	case strings.HasPrefix(q, "INSERT INTO certmagic_locks"):
		if l, held := m.lock(str(0), now); held {
			return m.notApplied(str(0), l, true, true)
		}
		ttl := time.Duration(int32(binary.BigEndian.Uint32(v[2]))) * time.Second
		return apply(func() { m.locks[str(0)] = lockRow{owner: str(1), expires: now.Add(ttl)} })
	case strings.HasPrefix(q, "UPDATE certmagic_locks"):
		l, held := m.lock(str(2), now)
		if !held || l.owner != str(3) {
			return m.notApplied(str(2), l, held, false)
		}
		ttl := time.Duration(int32(binary.BigEndian.Uint32(v[0]))) * time.Second
		return apply(func() { m.locks[str(2)] = lockRow{owner: str(1), expires: now.Add(ttl)} })
	case strings.HasPrefix(q, "DELETE FROM certmagic_locks"):
		l, held := m.lock(str(0), now)
		if !held || l.owner != str(1) {
			return m.notApplied(str(0), l, held, false)
		}
		return apply(func() { delete(m.locks, str(0)) })
	}
	return cqlwire.Answer{}
}

// lock returns the lock row of name, if one is held at now.
func (m *Model) lock(name string, now time.Time) (lockRow, bool) {
	l, ok := m.locks[name]
	if ok && !now.Before(l.expires) {
		delete(m.locks, name) // expired by its TTL
		return lockRow{}, false
	}
	return l, ok
}

// notApplied is a lightweight transaction's answer when it did not apply:
// the row's columns it was conditioned on, all of them for IF NOT EXISTS,
// the owner for IF owner = ?; none without a row.
func (m *Model) notApplied(name string, l lockRow, held, all bool) cqlwire.Answer {
	m.lwt++
	switch {
	case !held:
		return rows([]col{applied}, [][][]byte{{{0}}})
	case all:
		return rows([]col{applied, {Name: "name", Type: tVarchar}, {Name: "owner", Type: tVarchar}}, [][][]byte{{{0}, []byte(name), []byte(l.owner)}})
	}
	return rows([]col{applied, {Name: "owner", Type: tVarchar}}, [][][]byte{{{0}, []byte(l.owner)}})
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
